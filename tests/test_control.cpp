// Control and observation from the app: what on_step carries, the checkpoint-written callback,
// and cancelling a running job.
#include <doctest/doctest.h>

#include <accord/job.hpp>

#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <atomic>
#include <filesystem>

using namespace accord;
using accord::testing::test_job;
using accord::testing::run_quadratic;

namespace {

job_config small_job() {
  job_config job = test_job("acco", 3, 6).micro_batches_per_round(1).evaluate(50, 6);
  job.learning_rate = 0.01f;
  return job;
}

}  // namespace

TEST_CASE("on_step carries the learning rate, the bytes sent and every worker's compute, communication and wait") {
  job_config job = small_job();
  job.warmup_steps = 2;
  std::vector<step_metrics> seen;
  const job_result result = run_quadratic(job, [&](const step_metrics& m) { seen.push_back(m); });
  REQUIRE(seen.size() == job.steps);
  CHECK(seen[0].learning_rate < seen[1].learning_rate);             // warm-up
  CHECK(seen[1].learning_rate == doctest::Approx(0.01));            // the peak
  CHECK(seen.back().learning_rate < seen[2].learning_rate);         // cosine decay
  std::uint64_t bytes = 0;
  double communication = 0, compute = 0, wait = 0;
  for (const auto& m : seen) {
    bytes += m.bytes_sent;
    CHECK(m.bytes_sent > 0);
    REQUIRE(m.per_worker.size() == 3);
    for (const auto& w : m.per_worker) {
      CHECK(w.compute >= 0);
      CHECK(w.communication >= 0);
      CHECK(w.wait >= 0);
      compute += w.compute, communication += w.communication, wait += w.wait;
    }
  }
  CHECK(bytes == result.bytes_sent);
  CHECK(communication / 3 == doctest::Approx(result.communication_seconds));
  CHECK(compute / 3 <= result.compute_seconds + 1e-9);  // the last micro-batches may belong to no step
  CHECK(wait / 3 == doctest::Approx(result.wait_seconds));
}

TEST_CASE("the app hears of every checkpoint written, with its path and step") {
  const std::string path = "control_checkpoint.bin";
  job_config job = small_job();
  job.checkpoint_path = path;
  job.checkpoint_interval = 2;
  std::vector<std::uint64_t> steps;
  job.on_checkpoint_written = [&](const std::string& written, std::uint64_t step) {
    CHECK(written == path);
    CHECK(std::filesystem::exists(written));
    steps.push_back(step);
  };
  run_quadratic(job);
  CHECK(steps == std::vector<std::uint64_t>{2, 4, 6});
  std::filesystem::remove(path);
}

TEST_CASE("the app cancels a running job: every worker stops after the same step") {
  job_config job = small_job();
  job.steps = 100000;
  job.eval_interval = 0;
  std::atomic<bool> cancel{false};
  job.stop_requested = &cancel;
  const job_result result = run_quadratic(job, [&](const step_metrics& m) {
    if (m.step == 3) cancel = true;
  });
  CHECK(result.steps.size() >= 3);
  CHECK(result.steps.size() < 100);
  CHECK(result.replicas_identical);
}

TEST_CASE("a job whose worker set changes keeps the job's learning-rate schedule across its epochs") {
  // Each epoch used to plan its own cosine to its own last step: the rate fell to its floor at
  // a change and rose again after it.
  job_config job = test_job("ddp", 3, 10).micro_batches_per_round(1).evaluate(0, 3);
  job.learning_rate = 0.01f;
  job.warmup_steps = 2;
  std::vector<double> unchanged, changed;
  run_quadratic(job, [&](const step_metrics& m) { unchanged.push_back(m.learning_rate); });
  job.membership = {{4, 2, false}, {7, 3, false}};
  run_quadratic(job, [&](const step_metrics& m) { changed.push_back(m.learning_rate); });
  REQUIRE(changed.size() == job.steps);
  CHECK(changed == unchanged);
}
