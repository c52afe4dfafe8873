// What the training programs build from their flags (apps/training_options): the data a seed
// selects, which every benchmark repetition with another seed must train on; the settings the
// flags set, and the flags a mode or the job's place leaves unread.
#include <doctest/doctest.h>

#include "apps/training_options.hpp"

#include <accord/config_fields.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

using namespace accord;

namespace {

boost::program_options::variables_map flags_of(std::vector<std::string> args) {
  boost::program_options::options_description options("options");
  add_training_options(options, job_config{});
  args.insert(args.begin(), "test");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return *parse_flags(static_cast<int>(argv.size()), argv.data(), options, "usage");
}

training_setup setup_from(std::vector<std::string> args) { return make_training_setup(flags_of(std::move(args))); }

bool ignored(const std::vector<std::pair<std::string, std::string>>& flags, const std::string& flag,
             const std::string& why) {
  return std::find(flags.begin(), flags.end(), std::pair{flag, why}) != flags.end();
}

bool same_examples(const dataset& a, const dataset& b) {
  const batch x = a.examples(0, 8), y = b.examples(0, 8);
  return x.tokens == y.tokens && x.features == y.features && x.targets == y.targets;
}

}  // namespace

TEST_CASE("load_data(S) gives the data sets that --seed S gives, for either model") {
  for (const std::string model : {"gpt", "mlp"}) {
    CAPTURE(model);
    const training_setup first = setup_from({"--model", model, "--seed", "1"});
    const training_setup second = setup_from({"--model", model, "--seed", "2"});
    const seeded_data reloaded = first.load_data(2);
    CHECK(same_examples(*reloaded.train, *second.train));
    CHECK(same_examples(*reloaded.eval, *second.eval));
    // The seed does order the data: otherwise this test could not fail.
    CHECK_FALSE(same_examples(*first.train, *second.train));
    CHECK(same_examples(*first.load_data(1).train, *first.train));
    CHECK(data_for_seed(first, 1).train == first.train);  // the loaded sets, not a second load
    CHECK(same_examples(*data_for_seed(first, 2).train, *second.train));
  }
}

TEST_CASE("the flags a mode leaves unread come from the declarations' owners") {
  // job_config{}: gpt, ring, the cosine schedule; its algorithm is not dpu.
  const auto defaults = training_flags_ignored(flags_of({}));
  CHECK(ignored(defaults, "hidden", "without --model mlp"));
  CHECK(ignored(defaults, "dpu-warmup", "without --algo dpu"));
  CHECK(ignored(defaults, "local-steps", "without --topology local-sgd"));
  CHECK(ignored(defaults, "gossip-rate", "without --topology gossip"));
  for (const char* read : {"width", "eval-data", "min-lr-ratio", "steps", "link", "seed"})
    CHECK_MESSAGE(std::none_of(defaults.begin(), defaults.end(), [&](const auto& f) { return f.first == read; }), read);

  const auto others =
      training_flags_ignored(flags_of({"--model", "mlp", "--algo", "dpu", "--schedule", "constant", "--topology", "gossip"}));
  CHECK(ignored(others, "width", "without --model gpt"));
  CHECK(ignored(others, "eval-data", "without --model gpt"));
  CHECK(ignored(others, "min-lr-ratio", "without --schedule cosine"));
  CHECK(ignored(others, "local-steps", "without --topology local-sgd"));
  for (const char* read : {"hidden", "dpu-warmup", "gossip-rate"})
    CHECK_MESSAGE(std::none_of(others.begin(), others.end(), [&](const auto& f) { return f.first == read; }), read);
}

TEST_CASE("--seed, --topology and --keep-interval are made from their declarations") {
  const training_setup setup = setup_from({"--seed", "9223372036854775807", "--topology", "local-sgd", "--local-steps",
                                           "3", "--keep-interval", "7", "--steps", "2"});
  CHECK(setup.job.seed == 9223372036854775807ull);
  CHECK(setup.job.topology == "local-sgd");
  CHECK(setup.job.topology_settings.whole("local_steps") == 3);
  CHECK(setup.job.keep_interval == 7);
  CHECK_THROWS_WITH_AS(flags_of({"--topology", "star"}),
                       doctest::Contains("--topology: 'star' (expected gossip|hierarchical|local-sgd|"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(flags_of({"--model", "cnn"}), "--model: 'cnn' (expected gpt|mlp)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(flags_of({"--keep-interval", "0"}), "--keep-interval: '0' is not a whole number in 1..1000000000",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(flags_of({"--context", "0"}), "--context: '0' is not a whole number in 1..1048576",
                       std::invalid_argument);
}

namespace {

// accord-train's flags: the training options and the place's.
boost::program_options::variables_map train_flags_of(std::vector<std::string> args) {
  flag_sections sections;
  add_training_options(sections, job_config{});
  add_process_options(sections);
  boost::program_options::options_description options("options");
  sections.add_to(options);
  args.insert(args.begin(), "test");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return *parse_flags(static_cast<int>(argv.size()), argv.data(), options, "usage");
}

}  // namespace

TEST_CASE("the place's flags are made from their declarations and set the process_group") {
  process_group place;
  read_process_options(train_flags_of({"--transport", "nccl", "--heartbeat-timeout", "2.5", "--failure-detector",
                                       "timeout", "--rendezvous-timeout", "9", "--master-bind", "0.0.0.0",
                                       "--majority-wait", "0", "--elastic"}),
                       place);
  CHECK(place.transport == "nccl");
  CHECK(place.heartbeat_timeout == std::chrono::milliseconds(2500));
  CHECK_FALSE(place.adaptive_failure_detection);
  CHECK(place.rendezvous_timeout == std::chrono::seconds(9));
  CHECK(place.master_bind == "0.0.0.0");
  CHECK(place.majority_wait == std::chrono::milliseconds(0));
  CHECK(place.elastic);
  // Not given: process_group{}'s values, which are the flags' defaults; ACCORD_ELASTIC's elastic stays.
  process_group environment;
  environment.elastic = true;
  process_group defaults = environment;
  read_process_options(train_flags_of({}), defaults);
  CHECK(describe(defaults) == describe(environment));

  CHECK_THROWS_WITH_AS(train_flags_of({"--transport", "nope"}), "--transport: 'nope' (expected ucx|nccl)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(train_flags_of({"--heartbeat-timeout", "0"}),
                       "--heartbeat-timeout: '0' is not a number in [0.1, 86400]", std::invalid_argument);
  CHECK_THROWS_WITH_AS(train_flags_of({"--failure-detector", "sometimes"}),
                       "--failure-detector: 'sometimes' (expected adaptive|timeout)", std::invalid_argument);
}

TEST_CASE("--device takes cpu, cuda, cuda:N or auto, refused in one line naming the value") {
  for (const char* device : {"cpu", "cuda", "cuda:1", "auto"}) CHECK_NOTHROW(train_flags_of({"--device", device}));
  for (const char* device : {"tpu", "cuda:", "cuda:one", "gpu:0"})
    CHECK_THROWS_WITH_AS(train_flags_of({"--device", device}),
                         ("--device: '" + std::string(device) + "' is not cpu, cuda, cuda:N or auto").c_str(),
                         std::invalid_argument);
  CHECK_THROWS_WITH_AS(setup_from({"--model", "mlp", "--device", "cuda:0"}),
                       "--device cuda:0: --model mlp runs on the cpu only", std::invalid_argument);
}

TEST_CASE("where the job runs decides which of the place's flags are read, as their owners say") {
  const auto flags = train_flags_of({"--transport", "ucx", "--elastic", "--keep-interval", "2", "--majority-wait", "1",
                                     "--failure-detector", "timeout", "--link", "unlimited", "--join", "h:1"});
  const std::string one_process = "in one process (it applies between processes)";
  const auto alone = training_flags_ignored(flags, job_place{.between_processes = false});
  for (const char* flag : {"transport", "elastic", "keep-interval", "majority-wait", "failure-detector"})
    CHECK_MESSAGE(ignored(alone, flag, one_process), flag);
  for (const char* read : {"link", "join"})
    CHECK_MESSAGE(std::none_of(alone.begin(), alone.end(), [&](const auto& f) { return f.first == read; }), read);

  const auto not_elastic = training_flags_ignored(flags, job_place{.between_processes = true, .elastic = false});
  CHECK(ignored(not_elastic, "link", "between processes (it applies in one process)"));
  for (const char* flag : {"keep-interval", "majority-wait", "failure-detector"})
    CHECK_MESSAGE(ignored(not_elastic, flag, "without --elastic"), flag);
  CHECK(std::none_of(not_elastic.begin(), not_elastic.end(), [](const auto& f) { return f.first == "transport"; }));

  const auto elastic = training_flags_ignored(flags, job_place{.between_processes = true, .elastic = true});
  CHECK(ignored(elastic, "link", "between processes (it applies in one process)"));
  for (const char* read : {"transport", "elastic", "keep-interval", "majority-wait", "failure-detector", "join"})
    CHECK_MESSAGE(std::none_of(elastic.begin(), elastic.end(), [&](const auto& f) { return f.first == read; }), read);
}
