#pragma once
// The small jobs the tests run, built in one place: a test names its algorithm, workers and
// steps, then only what it changes. Every test job has micro-batches of 3 examples and a
// held-out set of 3 and exact (fp32) rounds; micro_batches_per_round fixes the count per round (or ACCO stage), which
// makes a job deterministic.
#include <accord/job.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace accord::testing {

class test_job {
public:
  test_job(const std::string& algorithm, int workers, std::uint64_t steps) {
    job_.algorithm = algorithm;
    job_.workers = workers;
    job_.steps = steps;
    job_.micro_batch = 3;
    job_.eval_examples = 3;
    job_.wire_precision = "fp32";  // exact rounds: what the tests compare against (auto has its own test)
  }
  // Exactly `n` micro-batches per round: no worker takes more while a round is in flight.
  test_job& micro_batches_per_round(std::size_t n) {
    job_.accumulation = n;
    job_.max_accumulation = n;
    return *this;
  }
  // Momentum unset: the optimizer's default.
  test_job& sgd(float learning_rate, std::optional<float> momentum = std::nullopt) {
    job_.optimizer = "sgd";
    job_.learning_rate = learning_rate;
    job_.beta1 = momentum;
    return *this;
  }
  test_job& adamw(float learning_rate) {
    job_.optimizer = "adamw";
    job_.learning_rate = learning_rate;
    return *this;
  }
  // The learning rate stays at its peak (no cosine decay).
  test_job& constant_rate() {
    job_.cosine = false;
    return *this;
  }
  // The held-out loss every `interval` steps (0: at the end only) over `examples` examples.
  test_job& evaluate(std::uint64_t interval, std::uint64_t examples) {
    job_.eval_interval = interval;
    job_.eval_examples = examples;
    return *this;
  }
  operator job_config() const { return job_; }

private:
  job_config job_;
};

}  // namespace accord::testing
