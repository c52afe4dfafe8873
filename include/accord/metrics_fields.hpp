#pragma once
// Public embedder API: what a job reports (<accord/metrics.hpp>) as data, as config_fields.hpp
// has the settings: fields_of<S>::list names every field of step_metrics, job_result and the
// structs they hold. The Python binding's StepMetrics, JobResult, WorkerSeconds, ThreadCpu and
// EdgeTraffic are made from these lists (python/bind_settings.cpp), so Python sees every field;
// tests/test_config_fields.cpp fails when a struct has a field its list lacks.
//
// A field of step_metrics is declared once, with where it shows: its key in the metrics file
// (JSON lines and CSV) and /status.json, its Prometheus metric, its tile on the status page and
// its line in docs/observability.md's table (observe/step_figures.hpp writes them all from these
// declarations; tests/test_settings.cpp fails when the docs drift). No CAF.
#include <accord/config_fields.hpp>
#include <accord/metrics.hpp>

#include <string_view>
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

// How a field of step_metrics shows in /metrics (Prometheus' text format): not at all; a gauge of
// the latest value (an optional one: the latest measured); a counter of the latest value (a
// count or clock that only grows); a counter summing the steps this process saw (for a field by
// rank, role or index: a sample each, labelled).
enum class prometheus_kind { none, gauge, latest_counter, summed_counter };

// How the status page writes a figure in its tile: as it is; to `digits` decimals; to `digits`
// significant digits; as a percentage to `digits` decimals; in thousands (147k); in bytes (88.4 KiB).
enum class tile_format { plain, fixed, significant, percent, thousands, bytes };

// A field's column on the progress line (observe/progress_line.cpp), between the step and the
// clock, in declaration order: `text` with the value for "{}" and the unit of step_metrics::items
// ("tok", "img") for "{unit}"; the value written as `format` and `digits` say (thousands: 24.9k,
// 1.25M), right-aligned in `width` characters at least. An optional field not measured at the
// step shows the latest measured, "-" before any.
struct progress_column {
  std::string_view text = {};  // empty: not on the progress line
  tile_format format = tile_format::plain;
  int digits = 0;
  int width = 0;
};

// Where a field of step_metrics shows outside: the metrics file, /status.json, /metrics, the
// status page's tiles, the progress line and the docs' table of fields (all made from the
// declarations below).
struct metric_shown {
  // The metrics file's JSON key (and CSV column, for a number) and /status.json's. A field of
  // parts (per worker, by role) names each part's key by putting the part's name for "{}"
  // ("worker_{}_seconds"), or keeps its parts in one JSON object under the key ("cpu_seconds").
  std::string_view key;
  std::string_view help;  // one line, with the unit
  // A number below 0 means "not measured at this step": no JSON key and an empty CSV cell there,
  // and /metrics and the status page show the latest one measured.
  bool absent_below_zero = false;
  // A field of parts: its CSV columns, "{}" standing for each part's name (empty: no CSV column).
  std::string_view csv = {};
  std::string_view prometheus = {};  // the metric's name after "accord_" (empty: not in /metrics)
  prometheus_kind kind = prometheus_kind::none;
  std::string_view prometheus_help = {};
  double scale = 1;               // /metrics shows the field times this (bits to bytes: 1/8)
  std::string_view label = {};    // a field of parts: the label that names the part (role, activity)
  std::string_view tile = {};     // the status page's tile for it (empty: none)
  tile_format format = tile_format::plain;
  int digits = 0;
  std::string_view suffix = {};   // after the tile's value (" items/s")
  progress_column progress = {};
};

// A declared field of step_metrics: a field<S, T> (its name and member) and where it shows.
template <class S, class T>
struct metric_field : field<S, T> {
  metric_shown shown;
};

#define ACCORD_STEP_METRIC(name, ...)                                                                     \
  metric_field<step_metrics, decltype(step_metrics::name)>{{#name, &step_metrics::name}, {__VA_ARGS__}}

// Every field of step_metrics, declared once, in the metrics file's CSV column order.
template <>
struct fields_of<step_metrics> {
  using enum prometheus_kind;
  using enum tile_format;
  static constexpr auto list = std::tuple{
      ACCORD_STEP_METRIC(step, .key = "step", .help = "the optimizer step", .prometheus = "steps_total",
                         .kind = latest_counter, .prometheus_help = "optimizer steps done", .tile = "step"),
      ACCORD_STEP_METRIC(train_loss, .key = "train_loss", .help = "mean micro-batch loss of the step, over all workers",
                         .prometheus = "train_loss", .kind = gauge, .prometheus_help = "mean training loss of the last step",
                         .tile = "train loss", .format = fixed, .digits = 4,
                         .progress = {.text = "loss {}", .format = fixed, .digits = 4}),
      ACCORD_STEP_METRIC(eval_loss, .key = "eval_loss", .help = "held-out loss, when the step was evaluated",
                         .absent_below_zero = true, .prometheus = "eval_loss", .kind = gauge,
                         .prometheus_help = "latest held-out loss", .tile = "held-out loss", .format = fixed,
                         .digits = 4, .progress = {.text = "eval {}", .format = fixed, .digits = 4, .width = 6}),
      ACCORD_STEP_METRIC(seconds, .key = "seconds",
                         .help = "wall time since the job started (a resumed job goes on from the checkpoint's clock)",
                         .prometheus = "elapsed_seconds_total", .kind = latest_counter,
                         .prometheus_help = "seconds since the job started, at the last step"),
      ACCORD_STEP_METRIC(items, .key = "items", .help = "tokens (language model) or examples of the step, all workers",
                         .prometheus = "items_total", .kind = summed_counter,
                         .prometheus_help = "tokens (language model) or examples trained on by all workers"),
      ACCORD_STEP_METRIC(items_per_second, .key = "items_per_second", .help = "throughput, items per second",
                         .tile = "throughput", .format = thousands, .suffix = " items/s",
                         .progress = {.text = "{} {unit}/s", .format = thousands}),
      ACCORD_STEP_METRIC(bits_per_parameter, .key = "bits_per_parameter",
                         .help = "bits sent per parameter and worker for this step, averaged over workers",
                         .prometheus = "sent_bytes_per_parameter", .kind = gauge,
                         .prometheus_help = "bytes sent per parameter and worker in the last step", .scale = 1.0 / 8,
                         .tile = "bits/param", .format = fixed, .digits = 1,
                         .progress = {.text = "{} bits/param", .format = fixed, .digits = 1}),
      ACCORD_STEP_METRIC(hidden_fraction, .key = "hidden_fraction",
                         .help = "of communication time, the fraction that compute kept busy (DDP's gradient buckets "
                                 "count as communication, mostly hidden behind backward; so do local-sgd's outer "
                                 "all-reduces in flight, hidden where no step waited for them)",
                         .prometheus = "communication_hidden_ratio", .kind = gauge,
                         .prometheus_help = "fraction of the last step's communication time hidden behind compute",
                         .tile = "hidden", .format = percent, .digits = 1,
                         .progress = {.text = "hidden {}", .format = percent, .digits = 0, .width = 4}),
      ACCORD_STEP_METRIC(micro_batches, .key = "micro_batches", .help = "micro-batches of the step, summed over workers"),
      ACCORD_STEP_METRIC(workers, .key = "workers", .help = "the worker count of the step", .prometheus = "workers",
                         .kind = gauge, .prometheus_help = "workers in the job", .tile = "workers"),
      ACCORD_STEP_METRIC(epoch, .key = "epoch",
                         .help = "the membership epoch (it grows with each change of the workers)",
                         .prometheus = "membership_epoch", .kind = gauge,
                         .prometheus_help = "membership epoch (it grows with each change of the workers)",
                         .tile = "epoch"),
      ACCORD_STEP_METRIC(learning_rate, .key = "learning_rate", .help = "of the step's update, after warm-up and schedule",
                         .prometheus = "learning_rate", .kind = gauge, .prometheus_help = "learning rate of the last step",
                         .tile = "learning rate", .format = significant, .digits = 3),
      ACCORD_STEP_METRIC(gradient_norm, .key = "gradient_norm",
                         .help = "of the mean gradient the step applied; for sign votes, where no summed gradient "
                                 "exists, the root mean square of the workers' own mean gradients' norms",
                         .prometheus = "gradient_norm", .kind = gauge,
                         .prometheus_help = "norm of the last step's mean gradient", .tile = "gradient norm",
                         .format = significant, .digits = 3),
      ACCORD_STEP_METRIC(vote_agreement, .key = "vote_agreement",
                         .help = "sign votes only: the fraction of a worker's signs that the outcome took, averaged "
                                 "over workers (with N voters at least ⌈N/2⌉/N for a majority; 1 when all agree)",
                         .absent_below_zero = true, .prometheus = "vote_agreement_ratio", .kind = gauge,
                         .prometheus_help = "sign votes: fraction of the workers' signs the latest vote took",
                         .tile = "vote agreement", .format = fixed, .digits = 3),
      ACCORD_STEP_METRIC(per_worker, .key = "worker_{}_seconds",
                         .help = "lists by rank: where each worker's time went during the step, in seconds (CSV: "
                                 "averaged over the workers)",
                         .csv = "{}_seconds", .prometheus = "worker_seconds_total", .kind = summed_counter,
                         .prometheus_help = "seconds each worker spent on each activity, summed over the steps",
                         .label = "activity"),
      ACCORD_STEP_METRIC(bytes_sent, .key = "bytes", .help = "bytes sent by all workers in the step",
                         .prometheus = "sent_bytes_total", .kind = summed_counter,
                         .prometheus_help = "bytes sent by all workers", .tile = "bytes sent (step)", .format = bytes),
      ACCORD_STEP_METRIC(consensus_distance, .key = "consensus_distance",
                         .help = "where a topology measured it: sqrt(mean_i ‖θ_i − θ̄‖²) of the workers' copies",
                         .absent_below_zero = true, .prometheus = "consensus_distance", .kind = gauge,
                         .prometheus_help = "latest measured distance of the workers' copies from their mean",
                         .tile = "consensus distance", .format = fixed, .digits = 4),
      ACCORD_STEP_METRIC(edge_bytes, .key = "edge_bytes",
                         .help = "asynchronous gossip and the parameter server: [[from, to, bytes], ...], what worker "
                                 "`from` sent worker `to` in the step, each edge that carried any (CSV: the most and "
                                 "the mean over those edges)",
                         .csv = "edge_bytes_{}"),
      ACCORD_STEP_METRIC(cpu, .key = "cpu_seconds",
                         .help = "the step's CPU seconds by thread role, all processes: `compute`, `communicator`, "
                                 "`evaluator`, `actors` (CAF's scheduler: accumulators, coordinator, membership), "
                                 "`transport` (UCX's async thread), `other` (main threads, OpenBLAS's pool, the status "
                                 "server)",
                         .csv = "cpu_{}_seconds", .prometheus = "cpu_seconds_total", .kind = summed_counter,
                         .prometheus_help = "CPU seconds of the job's threads by role, all processes", .label = "role"),
      ACCORD_STEP_METRIC(staleness, .key = "staleness",
                         .help = "parameter server: of the gradients the step applied, how many were k updates stale "
                                 "(index k)",
                         .prometheus = "applied_gradients_total", .kind = summed_counter,
                         .prometheus_help = "gradients applied k updates stale (label staleness), summed over the steps",
                         .label = "staleness"),
      ACCORD_STEP_METRIC(worker_gradients, .key = "worker_gradients",
                         .help = "asynchronous topologies: how many of the step's gradients each worker computed (index: "
                                 "rank)",
                         .prometheus = "worker_gradients_total", .kind = summed_counter,
                         .prometheus_help = "gradients each worker computed, summed over the steps", .label = "rank")};
};

#undef ACCORD_STEP_METRIC

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
