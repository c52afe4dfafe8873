#pragma once
// Public embedder API: what a job reports (<accord/metrics.hpp>) as data, as config_fields.hpp
// has the settings: fields_of<S>::list names every field of step_metrics, job_result and the
// structs they hold, in declaration order. The Python binding's StepMetrics, JobResult,
// WorkerSeconds, ThreadCpu and EdgeTraffic are made from these lists (python/bind_settings.cpp),
// so Python sees every field; tests/test_config_fields.cpp fails when a struct has a field its
// list lacks. No CAF.
#include <accord/config_fields.hpp>
#include <accord/metrics.hpp>

#include <tuple>

namespace accord {

#define ACCORD_METRIC(S, name) field<S, decltype(S::name)>{#name, &S::name}

template <>
struct fields_of<worker_seconds> {
  static constexpr auto list = std::tuple{ACCORD_METRIC(worker_seconds, compute),
                                          ACCORD_METRIC(worker_seconds, communication),
                                          ACCORD_METRIC(worker_seconds, wait)};
};

template <>
struct fields_of<thread_cpu> {
  static constexpr auto list = std::tuple{
      ACCORD_METRIC(thread_cpu, compute),   ACCORD_METRIC(thread_cpu, communicator), ACCORD_METRIC(thread_cpu, evaluator),
      ACCORD_METRIC(thread_cpu, actors),    ACCORD_METRIC(thread_cpu, transport),    ACCORD_METRIC(thread_cpu, other)};
};

template <>
struct fields_of<edge_traffic> {
  static constexpr auto list =
      std::tuple{ACCORD_METRIC(edge_traffic, from), ACCORD_METRIC(edge_traffic, to), ACCORD_METRIC(edge_traffic, bytes)};
};

template <>
struct fields_of<step_metrics> {
  static constexpr auto list = std::tuple{
      ACCORD_METRIC(step_metrics, step),
      ACCORD_METRIC(step_metrics, train_loss),
      ACCORD_METRIC(step_metrics, eval_loss),
      ACCORD_METRIC(step_metrics, seconds),
      ACCORD_METRIC(step_metrics, items),
      ACCORD_METRIC(step_metrics, items_per_second),
      ACCORD_METRIC(step_metrics, bits_per_parameter),
      ACCORD_METRIC(step_metrics, hidden_fraction),
      ACCORD_METRIC(step_metrics, micro_batches),
      ACCORD_METRIC(step_metrics, workers),
      ACCORD_METRIC(step_metrics, epoch),
      ACCORD_METRIC(step_metrics, learning_rate),
      ACCORD_METRIC(step_metrics, bytes_sent),
      ACCORD_METRIC(step_metrics, gradient_norm),
      ACCORD_METRIC(step_metrics, vote_agreement),
      ACCORD_METRIC(step_metrics, per_worker),
      ACCORD_METRIC(step_metrics, cpu),
      ACCORD_METRIC(step_metrics, consensus_distance),
      ACCORD_METRIC(step_metrics, staleness),
      ACCORD_METRIC(step_metrics, worker_gradients),
      ACCORD_METRIC(step_metrics, edge_bytes)};
};

template <>
struct fields_of<job_result> {
  static constexpr auto list = std::tuple{
      ACCORD_METRIC(job_result, parameters),
      ACCORD_METRIC(job_result, steps),
      ACCORD_METRIC(job_result, final_eval_loss),
      ACCORD_METRIC(job_result, seconds),
      ACCORD_METRIC(job_result, compute_seconds),
      ACCORD_METRIC(job_result, communication_seconds),
      ACCORD_METRIC(job_result, wait_seconds),
      ACCORD_METRIC(job_result, cpu),
      ACCORD_METRIC(job_result, bits_per_parameter_per_step),
      ACCORD_METRIC(job_result, hidden_fraction),
      ACCORD_METRIC(job_result, bytes_sent),
      ACCORD_METRIC(job_result, rounds),
      ACCORD_METRIC(job_result, replicas_identical),
      ACCORD_METRIC(job_result, data_ended),
      ACCORD_METRIC(job_result, gradient_buffers),
      ACCORD_METRIC(job_result, state_bytes_per_worker),
      ACCORD_METRIC(job_result, peak_bytes_per_worker),
      ACCORD_METRIC(job_result, minimum_bytes_per_worker),
      ACCORD_METRIC(job_result, kept_bytes_per_worker),
      ACCORD_METRIC(job_result, coordinated)};
};

#undef ACCORD_METRIC

}  // namespace accord
