#pragma once
// Public embedder API: the settings structs as data. fields_of<S>::list holds, in declaration
// order, every field of job_config, membership_change, parameter_group and process_group as a
// field<S, T>: its name and its pointer to member. What must cover every setting walks these
// lists instead of naming fields by hand: describe() below, accord-train --show-config (which
// prints it), and the Python binding, whose JobConfig, MembershipChange and ProcessGroup
// properties are made from them (python/bind_settings.cpp). job_config::topology_settings holds
// the topologies' declared settings (<accord/settings.hpp>), printed one line each.
// tests/test_config_fields.cpp fails when one of the structs has a field its list lacks: a new
// field goes into the struct and into its list here, in the same order. No CAF.
#include <accord/config.hpp>
#include <accord/process_group.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>

namespace accord {

// One field of the settings struct S: its name (as in C++ and Python) and its member.
template <class S, class T>
struct field {
  using settings_type = S;
  using value_type = T;
  std::string_view name;
  T S::*member;
};

template <class S>
struct fields_of;  // fields_of<S>::list: a std::tuple of field<S, ...>, one per member of S

// Calls f(field) for each field of S, in order.
template <class S, class F>
constexpr void for_each_field(F&& f) {
  std::apply([&](const auto&... each) { (f(each), ...); }, fields_of<S>::list);
}

template <class S>
inline constexpr std::size_t field_count = std::tuple_size_v<decltype(fields_of<S>::list)>;

#define ACCORD_FIELD(S, name) field<S, decltype(S::name)>{#name, &S::name}

template <>
struct fields_of<membership_change> {
  static constexpr auto list = std::tuple{
      ACCORD_FIELD(membership_change, step),
      ACCORD_FIELD(membership_change, workers),
      ACCORD_FIELD(membership_change, crash),
      ACCORD_FIELD(membership_change, departing),
  };
};

template <>
struct fields_of<parameter_group> {
  static constexpr auto list = std::tuple{
      ACCORD_FIELD(parameter_group, begin),
      ACCORD_FIELD(parameter_group, end),
      ACCORD_FIELD(parameter_group, learning_rate_scale),
      ACCORD_FIELD(parameter_group, weight_decay_scale),
      ACCORD_FIELD(parameter_group, role),
  };
};

template <>
struct fields_of<job_config> {
  static constexpr auto list = std::tuple{
      ACCORD_FIELD(job_config, algorithm),
      ACCORD_FIELD(job_config, topology),
      ACCORD_FIELD(job_config, topology_settings),
      ACCORD_FIELD(job_config, workers),
      ACCORD_FIELD(job_config, speed_factors),
      ACCORD_FIELD(job_config, resident_on_host),
      ACCORD_FIELD(job_config, device_rounds),
      ACCORD_FIELD(job_config, steps),
      ACCORD_FIELD(job_config, micro_batch),
      ACCORD_FIELD(job_config, accumulation),
      ACCORD_FIELD(job_config, max_accumulation),
      ACCORD_FIELD(job_config, estimate_accumulation),
      ACCORD_FIELD(job_config, accumulation_mode),
      ACCORD_FIELD(job_config, global_batch),
      ACCORD_FIELD(job_config, dpu_warmup),
      ACCORD_FIELD(job_config, seed),
      ACCORD_FIELD(job_config, optimizer),
      ACCORD_FIELD(job_config, learning_rate),
      ACCORD_FIELD(job_config, beta1),
      ACCORD_FIELD(job_config, beta2),
      ACCORD_FIELD(job_config, epsilon),
      ACCORD_FIELD(job_config, weight_decay),
      ACCORD_FIELD(job_config, warmup_steps),
      ACCORD_FIELD(job_config, min_lr_ratio),
      ACCORD_FIELD(job_config, cosine),
      ACCORD_FIELD(job_config, parameter_groups),
      ACCORD_FIELD(job_config, max_gradient_norm),
      ACCORD_FIELD(job_config, app_optimizer),
      ACCORD_FIELD(job_config, link),
      ACCORD_FIELD(job_config, wire_precision),
      ACCORD_FIELD(job_config, estimate_precision),
      ACCORD_FIELD(job_config, bucket_cap_mb),
      ACCORD_FIELD(job_config, compute_precision),
      ACCORD_FIELD(job_config, eval_interval),
      ACCORD_FIELD(job_config, eval_examples),
      ACCORD_FIELD(job_config, defer_evaluation),
      ACCORD_FIELD(job_config, replica_check_interval),
      ACCORD_FIELD(job_config, metrics_path),
      ACCORD_FIELD(job_config, trace_path),
      ACCORD_FIELD(job_config, checkpoint_path),
      ACCORD_FIELD(job_config, checkpoint_interval),
      ACCORD_FIELD(job_config, resume_path),
      ACCORD_FIELD(job_config, membership),
      ACCORD_FIELD(job_config, membership_log),
      ACCORD_FIELD(job_config, keep_interval),
      ACCORD_FIELD(job_config, blas_threads),
      ACCORD_FIELD(job_config, watchdog_seconds),
      ACCORD_FIELD(job_config, stop_requested),
      ACCORD_FIELD(job_config, on_checkpoint_written),
  };
};

template <>
struct fields_of<process_group> {
  static constexpr auto list = std::tuple{
      ACCORD_FIELD(process_group, rank),
      ACCORD_FIELD(process_group, world_size),
      ACCORD_FIELD(process_group, master_addr),
      ACCORD_FIELD(process_group, master_port),
      ACCORD_FIELD(process_group, master_bind),
      ACCORD_FIELD(process_group, host),
      ACCORD_FIELD(process_group, connect_timeout),
      ACCORD_FIELD(process_group, job_id),
      ACCORD_FIELD(process_group, rendezvous_timeout),
      ACCORD_FIELD(process_group, transport),
      ACCORD_FIELD(process_group, local_rank),
      ACCORD_FIELD(process_group, elastic),
      ACCORD_FIELD(process_group, join),
      ACCORD_FIELD(process_group, more_join_addresses),
      ACCORD_FIELD(process_group, leave_requested),
      ACCORD_FIELD(process_group, heartbeat_timeout),
      ACCORD_FIELD(process_group, adaptive_failure_detection),
      ACCORD_FIELD(process_group, majority_wait),
      ACCORD_FIELD(process_group, membership_replay),
      ACCORD_FIELD(process_group, on_event),
  };
};

#undef ACCORD_FIELD

// Every field, one "name = value" line each, in the lists' order: strings quoted, durations in
// seconds ("30s"), an unset optional "unset", a list in brackets, every registered topology's
// declared settings as "topology_settings.group_size = 0" lines, a callback or pointer "set" or "unset". `prefix`
// goes before every name.
std::string describe(const job_config& config, std::string_view prefix = {});
std::string describe(const process_group& group, std::string_view prefix = {});

}  // namespace accord
