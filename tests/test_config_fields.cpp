// The settings structs' field lists (include/accord/config_fields.hpp) against the structs
// themselves: a field added to job_config, membership_change, parameter_group or process_group
// but not to its list fails here (the Python binding and describe are made from the lists), and
// so does a list that names a field twice. Then describe and accord-train --show-config.
#include <accord/config_fields.hpp>
#include <accord/metrics_fields.hpp>
#include <accord/topology.hpp>

#include <doctest/doctest.h>

#include "program_run.hpp"

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

using namespace accord;

namespace {

// Converts to any field's type: S{any, any, ...} compiles with at most as many as S has fields.
struct any_field {
  template <class T>
  operator T() const;
};

template <class S, std::size_t... I>
constexpr bool initializable_with(std::index_sequence<I...>) {
  return requires { S{(void(I), any_field{})...}; };
}

// The number of fields of the aggregate S (its largest brace-initializer), counted by the compiler.
template <class S, std::size_t N = 0>
constexpr std::size_t aggregate_fields() {
  if constexpr (!initializable_with<S>(std::make_index_sequence<N + 1>{}))
    return N;
  else
    return aggregate_fields<S, N + 1>();
}

// Names are unique, and no member appears twice under two names.
template <class S>
void check_list_is_a_set(const char* what) {
  std::set<std::string> names;
  std::size_t duplicates = 0;
  for_each_field<S>([&](const auto& f) {
    if (!names.insert(std::string(f.name)).second) ++duplicates;
    for_each_field<S>([&](const auto& g) {
      if constexpr (std::is_same_v<decltype(f), decltype(g)>)
        if (f.name != g.name && f.member == g.member) ++duplicates;
    });
  });
  INFO(what);
  CHECK(duplicates == 0);
}

}  // namespace

static_assert(std::is_aggregate_v<job_config> && std::is_aggregate_v<process_group> &&
              std::is_aggregate_v<membership_change> &&
              std::is_aggregate_v<parameter_group>);

TEST_CASE("every field of the settings structs is in its field list, once") {
  // A failure here: a field was added to the struct but not to fields_of<...>::list in
  // include/accord/config_fields.hpp (or the other way round).
  CHECK_MESSAGE(aggregate_fields<job_config>() == field_count<job_config>, "job_config");
  CHECK_MESSAGE(aggregate_fields<membership_change>() == field_count<membership_change>, "membership_change");
  CHECK_MESSAGE(aggregate_fields<parameter_group>() == field_count<parameter_group>, "parameter_group");
  CHECK_MESSAGE(aggregate_fields<process_group>() == field_count<process_group>, "process_group");
  check_list_is_a_set<job_config>("job_config");
  check_list_is_a_set<membership_change>("membership_change");
  check_list_is_a_set<parameter_group>("parameter_group");
  check_list_is_a_set<process_group>("process_group");
}

TEST_CASE("every field of what a job reports is in its field list, once") {
  // A failure here: a field was added to a struct of <accord/metrics.hpp> but not to its list in
  // include/accord/metrics_fields.hpp (Python's StepMetrics and JobResult are made from them).
  CHECK_MESSAGE(aggregate_fields<step_metrics>() == field_count<step_metrics>, "step_metrics");
  CHECK_MESSAGE(aggregate_fields<job_result>() == field_count<job_result>, "job_result");
  CHECK_MESSAGE(aggregate_fields<worker_seconds>() == field_count<worker_seconds>, "worker_seconds");
  CHECK_MESSAGE(aggregate_fields<thread_cpu>() == field_count<thread_cpu>, "thread_cpu");
  CHECK_MESSAGE(aggregate_fields<edge_traffic>() == field_count<edge_traffic>, "edge_traffic");
  check_list_is_a_set<step_metrics>("step_metrics");
  check_list_is_a_set<job_result>("job_result");
  check_list_is_a_set<worker_seconds>("worker_seconds");
  check_list_is_a_set<thread_cpu>("thread_cpu");
  check_list_is_a_set<edge_traffic>("edge_traffic");
}

TEST_CASE("the field count sees a field whatever its type") {
  struct settings {
    std::string name = "x";
    topology_options nested;
    std::optional<float> unset;
    std::vector<membership_change> changes;
    std::chrono::milliseconds timeout{1};
    const std::atomic<bool>* flag = nullptr;
    std::function<void(const std::string&)> callback;
  };
  CHECK(aggregate_fields<settings>() == 7);
  CHECK(aggregate_fields<membership_change>() == 4);
}

TEST_CASE("describe prints every field, one line each, nested structs field by field") {
  job_config config;
  config.algorithm = "ddp";
  config.beta1 = 0.5f;
  config.speed_factors = {1, 4};
  config.membership = {{10, 3, false, {0}}, {20, 2, true}};
  config.topology_settings.set("local_steps", 4);
  topology_names();  // the built-in topologies have declared their settings
  const std::string text = describe(config);
  for_each_field<job_config>([&](const auto& f) {
    const std::string name(f.name);
    INFO(name);
    const std::string line_start = name == "topology_settings" ? "topology_settings." : name + " = ";
    const bool printed = text.starts_with(line_start) || text.find("\n" + line_start) != std::string::npos;
    CHECK(printed);
  });
  // Every registered topology's declared settings, a line each: the given value or the default.
  CHECK(text.starts_with("algorithm = \"ddp\"\ntopology = \"ring\"\ntopology_settings.gossip_rate = 1\n"));
  for (const auto& [topology, settings] : declared_topology_settings())
    for (const setting_declaration& s : settings)
      CHECK_MESSAGE(text.find("\ntopology_settings." + s.name + " = ") != std::string::npos, s.name);
  for (const char* line : {"topology_settings.local_steps = 4", "topology_settings.outer_learning_rate = 0.5",
                           "topology_settings.gossip_lockstep = false", "topology_settings.inter_link = \"\"",
                           "speed_factors = [1, 4]", "beta1 = 0.5", "beta2 = unset", "estimate_precision = \"\"",
                           "membership = [{step = 10, workers = 3, crash = false, departing = [0]}, {step = 20, workers = 2, crash = true, "
                           "departing = []}]",
                           "stop_requested = unset", "on_checkpoint_written = unset", "epsilon = 1e-08"})
    CHECK_MESSAGE(text.find(std::string("\n") + line + "\n") != std::string::npos, line);

  process_group group;
  group.rank = 2;
  group.on_event = [](const std::string&) {};
  const std::string group_text = describe(group, "group.");
  CHECK(group_text.starts_with("group.rank = 2\ngroup.world_size = 1\n"));
  for (const char* line : {"group.connect_timeout = 60s", "group.heartbeat_timeout = 30s", "group.on_event = set",
                           "group.leave_requested = unset", "group.elastic = false"})
    CHECK_MESSAGE(group_text.find(std::string("\n") + line + "\n") != std::string::npos, line);
}

TEST_CASE("accord-train --show-config prints the settings its flags make, and exits") {
  const auto run = testing::run_program(ACCORD_TRAIN_BINARY, {"--show-config", "--algo", "ddp", "--workers", "3",
                                                              "--topology", "local-sgd", "--local-steps", "5",
                                                              "--eval-examples", "64"},
                                        {.environment_removed = {"RANK=", "WORLD_SIZE=", "SLURM_PROCID=",
                                                                 "ACCORD_JOIN="}});
  CHECK(run.exit_status == 0);
  for (const char* line : {"algorithm = \"ddp\"", "workers = 3", "topology = \"local-sgd\"",
                           "topology_settings.local_steps = 5", "eval_examples = 64"})
    CHECK_MESSAGE(run.out.find(std::string(line) + "\n") != std::string::npos, line);
  CHECK(run.out.find("group.") == std::string::npos);  // in one process: no process group
  CHECK(run.out.find("done:") == std::string::npos);   // nothing trained
}

TEST_CASE("a --config file's keys are the declared settings' flags, a topology's own too, each value checked") {
  const std::string path = std::filesystem::temp_directory_path() / "accord_test_config_fields.conf";
  const auto show = [&](const std::string& text) {
    std::ofstream(path) << text;
    return testing::run_program(ACCORD_TRAIN_BINARY, {"--show-config", "--config", path},
                                {.environment_removed = {"RANK=", "WORLD_SIZE=", "SLURM_PROCID=", "ACCORD_JOIN="}});
  };
  const auto run = show("topology = local-sgd\nlocal-steps = 6\nouter-lr = 0.5\nbucket-cap-mb = 1.5\nschedule = constant\n");
  CHECK(run.exit_status == 0);
  for (const char* line : {"topology_settings.local_steps = 6", "topology_settings.outer_learning_rate = 0.5",
                           "bucket_cap_mb = 1.5", "cosine = false"})
    CHECK_MESSAGE(run.out.find(std::string(line) + "\n") != std::string::npos, line);
  const auto bad = show("local-steps = 0\n");
  CHECK(bad.exit_status != 0);
  CHECK(bad.err.find("--config: " + path + ": ") != std::string::npos);
  CHECK(bad.err.find("is not a whole number in 1..1000000000") != std::string::npos);
  std::filesystem::remove(path);
}
