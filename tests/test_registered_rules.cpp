// Registered aggregation rules (include/accord/update_rule.hpp): an app's rule runs as the
// built-in ones do, on any pipeline, and bad registrations are refused naming the problem.
#include <doctest/doctest.h>

#include <accord/job.hpp>
#include <accord/update_rule.hpp>

#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <algorithm>
#include <stdexcept>

using namespace accord;
using accord::testing::test_job;
using accord::testing::run_quadratic;

namespace {

// Plain SGD on the mean gradient, all-reduced: what the built-in rule does with sgd, beta1 0.
class mean_sgd final : public aggregation_rule {
public:
  explicit mean_sgd(const rule_setup& s) : parameters_(s.initial.begin(), s.initial.end()) {}
  void apply(round_peers& peers, std::span<float> buffer, const round_view& round) override {
    peers.all_reduce(buffer);
    for (std::size_t i = 0; i < buffer.size(); ++i)
      buffer[i] = parameters_[i] - round.learning_rate * static_cast<float>(buffer[i] / round.global_micro_batches);
    if (!round.estimate) parameters_.assign(buffer.begin(), buffer.end());
  }

private:
  std::vector<float> parameters_;
};

rule_factory make_mean_sgd() {
  return [](const rule_setup& s) { return std::make_unique<mean_sgd>(s); };
}

job_config sgd_job(const std::string& algorithm) {
  return test_job(algorithm, 3, 6).micro_batches_per_round(1).sgd(0.1f, 0.0f).constant_rate();
}

}  // namespace

TEST_CASE("a registered rule runs like the built-in one it imitates, on the synchronous and ACCO pipelines") {
  register_algorithm("test-mean-sgd", pipeline::synchronous, make_mean_sgd(), "sgd", "test");
  register_algorithm("test-acco-mean-sgd", pipeline::acco, make_mean_sgd(), "sgd", "test");
  const auto names = algorithm_names();
  CHECK(std::find(names.begin(), names.end(), "test-mean-sgd") != names.end());
  CHECK(names.front() == "ddp");  // built-ins first
  for (const auto& [builtin, registered] : {std::pair{"ddp", "test-mean-sgd"}, std::pair{"acco", "test-acco-mean-sgd"}}) {
    CAPTURE(registered);
    const job_result reference = run_quadratic(sgd_job(builtin));
    const job_result custom = run_quadratic(sgd_job(registered));
    REQUIRE(custom.parameters.size() == reference.parameters.size());
    for (std::size_t i = 0; i < reference.parameters.size(); ++i)
      CHECK(custom.parameters[i] == doctest::Approx(reference.parameters[i]).epsilon(1e-6));
    CHECK(custom.replicas_identical);
  }
}

TEST_CASE("bad registrations and unsupported uses of a registered rule are refused naming the problem") {
  CHECK_THROWS_WITH_AS(register_algorithm("", pipeline::synchronous, make_mean_sgd()),
                       doctest::Contains("name is empty"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(register_algorithm("ddp", pipeline::synchronous, make_mean_sgd()),
                       doctest::Contains("ddp is taken"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(register_algorithm("test-no-factory", pipeline::synchronous, {}),
                       doctest::Contains("no rule factory"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(register_algorithm("test-bad-optimizer", pipeline::synchronous, make_mean_sgd(), "rmsprop"),
                       doctest::Contains("'rmsprop'"), std::invalid_argument);
  register_algorithm("test-checkpointless", pipeline::synchronous, make_mean_sgd());
  job_config job = sgd_job("test-checkpointless");
  job.checkpoint_path = "registered_rule_checkpoint.bin";
  CHECK_THROWS_WITH_AS(run_quadratic(job), doctest::Contains("keeps no checkpointable state"), std::invalid_argument);
  register_algorithm("test-no-rule", pipeline::synchronous, [](const rule_setup&) { return nullptr; });
  CHECK_THROWS_WITH_AS(run_quadratic(sgd_job("test-no-rule")), doctest::Contains("returned no rule"),
                       std::exception);
}
