// App-driven workers (include/accord/worker.hpp): the app computes every micro-batch on its own
// threads and accord runs the algorithm's rounds; the result must be run_job's.
#include <doctest/doctest.h>

#include <accord/worker.hpp>

#include "quadratic_model.hpp"
#include "test_job.hpp"

#include "optim/schedule.hpp"
#include "recovery/checkpoint.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>

using namespace accord;
using accord::testing::test_job;
using accord::testing::quadratic;
using accord::testing::quadratic_app;
using accord::testing::waves;

namespace {

constexpr std::size_t dim = 5;

// Fixed steps on both sides, so that run_job (growing by default) compares with app_job.
job_config small_job(const std::string& algorithm) {
  job_config job = test_job(algorithm, 3, 5).micro_batches_per_round(2).evaluate(2, 6);
  job.blas_threads = 1;
  job.accumulation_mode = "fixed";
  return job;
}

// The app's loop on each worker: the model's gradient of the micro-batch accord asks for.
void drive(worker& w, const waves& data) {
  quadratic net(dim);
  std::vector<float> gradient(dim);
  while (auto request = w.next()) {
    const batch input = data.examples(request->first_position, request->examples);
    const double loss = net.forward_backward(request->parameters, input, gradient);
    w.submit(gradient, static_cast<double>(input.items()), loss);
  }
}

// drive(), reporting the gradient final one value at a time from the last, as a backward
// would, before submitting it; the request's gradient_progress into `progress`.
void drive_reporting(worker& w, const waves& data, std::atomic<std::size_t>& progress) {
  quadratic net(dim);
  std::vector<float> gradient(dim);
  while (auto request = w.next()) {
    progress = request->gradient_progress;
    const batch input = data.examples(request->first_position, request->examples);
    const double loss = net.forward_backward(request->parameters, input, gradient);
    for (std::size_t begin = dim; begin-- > 0;) w.gradients_final_from(gradient, begin);
    w.submit(gradient, static_cast<double>(input.items()), loss);
  }
}

// The app's epoch loop on each worker: its `micro_batches` (its data set), then end().
void drive_epoch(worker& w, const waves& data, std::size_t micro_batches) {
  quadratic net(dim);
  std::vector<float> gradient(dim);
  for (std::size_t done = 0; done < micro_batches; ++done) {
    const auto request = w.next();
    REQUIRE(request);
    const batch input = data.examples(request->first_position, request->examples);
    w.submit(gradient, static_cast<double>(input.items()), net.forward_backward(request->parameters, input, gradient));
  }
  w.end();
  CHECK_FALSE(w.next());
}

// Worker 0 may have less data than the others (`first_worker` micro-batches).
job_result run_epoch_loop(const job_config& config, const waves& data, std::size_t micro_batches,
                          std::optional<std::size_t> first_worker = std::nullopt) {
  auto job = app_job::start(quadratic_app(dim, data), config);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < job->local_workers(); ++i)
    threads.emplace_back([&, i] {
      drive_epoch(job->local_worker(i), data, i == 0 && first_worker ? *first_worker : micro_batches);
    });
  for (auto& t : threads) t.join();
  return job->wait();
}

job_result run_app_job(app_model m, const job_config& config, const waves& data,
                       std::function<void(const step_metrics&)> on_step = {}) {
  auto job = app_job::start(std::move(m), config, std::move(on_step));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < job->local_workers(); ++i)
    threads.emplace_back([&, i] { drive(job->local_worker(i), data); });
  for (auto& t : threads) t.join();
  return job->wait();
}

}  // namespace

TEST_CASE("app-driven DDP, DPU, ACCO and Distributed Lion equal run_job on the same model and data") {
  const waves data(dim);
  for (const char* algorithm : {"ddp", "dpu", "acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    const job_config job = small_job(algorithm);
    quadratic net(dim);
    const auto shared = std::make_shared<waves>(dim);
    const job_result reference = run_job(net, shared, shared, job);
    const job_result driven = run_app_job(quadratic_app(dim, data), job, data);
    REQUIRE(driven.parameters.size() == dim);
    for (std::size_t i = 0; i < dim; ++i)
      CHECK(driven.parameters[i] == doctest::Approx(reference.parameters[i]).epsilon(1e-6));
    REQUIRE(driven.steps.size() == reference.steps.size());
    for (std::size_t s = 0; s < job.steps; ++s) {
      CHECK(driven.steps[s].train_loss == doctest::Approx(reference.steps[s].train_loss).epsilon(1e-6));
      CHECK(driven.steps[s].items == reference.steps[s].items);
    }
    CHECK(driven.final_eval_loss == doctest::Approx(reference.final_eval_loss).epsilon(1e-6));
    CHECK(driven.replicas_identical);
  }
}

TEST_CASE("an app reporting its backward's progress feeds DDP's buckets: bit for bit the job without") {
  const waves data(dim);
  job_config job = small_job("ddp");
  job.bucket_cap_mb = 2 * sizeof(float) / (1024.0 * 1024.0);  // buckets of 2 values
  const job_result whole = run_app_job(quadratic_app(dim, data), job, data);
  auto running = app_job::start(quadratic_app(dim, data), job);
  std::vector<std::atomic<std::size_t>> progress(running->local_workers());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < running->local_workers(); ++i)
    threads.emplace_back([&, i] { drive_reporting(running->local_worker(i), data, progress[i]); });
  for (auto& t : threads) t.join();
  const job_result bucketed = running->wait();
  for (const auto& p : progress) CHECK(p == 2);
  CHECK(bucketed.replicas_identical);
  CHECK(bucketed.parameters == whole.parameters);
  REQUIRE(bucketed.steps.size() == whole.steps.size());
  for (std::size_t s = 0; s < whole.steps.size(); ++s) CHECK(bucketed.steps[s].train_loss == whole.steps[s].train_loss);

  job.algorithm = "acco";  // no buckets: reports are taken, the result as without them
  const job_result acco = run_app_job(quadratic_app(dim, data), job, data);
  running = app_job::start(quadratic_app(dim, data), job);
  threads.clear();
  for (std::size_t i = 0; i < running->local_workers(); ++i)
    threads.emplace_back([&, i] { drive_reporting(running->local_worker(i), data, progress[i]); });
  for (auto& t : threads) t.join();
  CHECK(running->wait().parameters == acco.parameters);
  for (const auto& p : progress) CHECK(p == 0);
}

TEST_CASE("an app's epoch of N micro-batches makes N / accumulation steps, every run, ending at the last full step") {
  const waves data(dim);
  const std::string scratch = std::filesystem::temp_directory_path() / "accord-test-epoch-loop";
  for (const char* algorithm : {"ddp", "acco", "dlion-mavo", "dpu"}) {
    job_config fixed = test_job(algorithm, 3, 1000).evaluate(0, 6).constant_rate();
    fixed.optimizer = std::string(algorithm) == "dlion-mavo" ? "" : "adamw";  // AdamW moves even on a zero gradient
    fixed.accumulation = 4;  // ACCO: 2 micro-batches at the estimate stage, 2 at the real stage
    fixed.blas_threads = 1;
    // 3 whole steps; then a step cut short in ACCO's real stage (2 more) and in its estimate stage (3 more).
    for (const std::size_t micro_batches : {12, 14, 15}) {
      CAPTURE(algorithm);
      CAPTURE(micro_batches);
      job_config ended = fixed;
      ended.checkpoint_path = scratch + "-ended";
      const job_result first = run_epoch_loop(ended, data, micro_batches);
      const job_result again = run_epoch_loop(ended, data, micro_batches);
      const checkpoint kept = read_checkpoint(ended.checkpoint_path);
      CHECK(first.steps.size() == 3);
      CHECK(again.steps.size() == 3);
      CHECK(first.parameters == again.parameters);
      CHECK(first.replicas_identical);
      // The same as a job of exactly those steps: no optimizer step on the partial or empty gradient.
      job_config exact = fixed;
      exact.steps = 3;
      exact.checkpoint_path = scratch + "-exact";
      const job_result reference = run_app_job(quadratic_app(dim, data), exact, data);
      const checkpoint expected = read_checkpoint(exact.checkpoint_path);
      CHECK(first.parameters == reference.parameters);
      CHECK(first.final_eval_loss == reference.final_eval_loss);
      CHECK(first.data_ended);
      CHECK_FALSE(reference.data_ended);
      CHECK(kept.steps == 3);
      CHECK(kept.parameters == expected.parameters);
      CHECK(kept.optimizer == expected.optimizer);
      CHECK(kept.momenta == expected.momenta);
      CHECK(kept.data_position == micro_batches * 3 * 3);  // what the app consumed: 3 workers' micro-batches of 3
      // Worker 0's data runs out after the 3rd step, the others' later: all end at step 3.
      const job_result uneven = run_epoch_loop(fixed, data, micro_batches, 12);
      CHECK(uneven.steps.size() == 3);
      CHECK(uneven.parameters == reference.parameters);
      CHECK(uneven.replicas_identical);
    }
  }
  std::filesystem::remove(scratch + "-ended");
  std::filesystem::remove(scratch + "-exact");
}

TEST_CASE("growing accumulation, asked for, counts the learning-rate schedule in examples") {
  const waves data(dim);
  job_config job = test_job("acco", 2, 12).adamw(0.01f).evaluate(0, 6);
  job.accumulation_mode = "growing";  // at least 1 micro-batch per stage, more while a round is on the slow link
  job.max_accumulation = 4;
  job.link = "100mbit,2ms";
  job.blas_threads = 1;
  const job_result result = run_app_job(quadratic_app(dim, data), job, data);
  REQUIRE(result.steps.size() == job.steps);
  schedule_config schedule;
  schedule.kind = "cosine";
  schedule.peak_learning_rate = job.learning_rate;
  schedule.total_steps = job.steps;
  schedule.final_fraction = job.min_lr_ratio;
  const std::uint64_t nominal = 2 * 2;  // a step of 1 + 1 micro-batches on each of 2 workers
  std::uint64_t applied = 0;
  for (const step_metrics& m : result.steps) {
    CAPTURE(m.step);
    CHECK(m.micro_batches >= nominal);
    CHECK(m.micro_batches <= 2 * 2 * 4);
    CHECK(m.learning_rate == learning_rate_at(schedule, applied / nominal));
    applied += m.micro_batches;
  }
  CHECK(result.replicas_identical);
}

TEST_CASE("an app that ends before its first step keeps the initial parameters") {
  const waves data(dim);
  job_config job = small_job("acco");
  job.steps = 100;
  const job_result result = run_epoch_loop(job, data, 1);
  CHECK(result.steps.empty());
  CHECK(result.parameters == quadratic_app(dim, data).initial_parameters);
}

TEST_CASE("new parameters reach the app between two micro-batches, by version and by callback") {
  const waves data(dim);
  job_config job = small_job("ddp");
  job.workers = 1;
  auto running = app_job::start(quadratic_app(dim, data), job);
  worker& w = running->local_worker(0);
  std::vector<std::uint64_t> heard;
  w.on_parameters([&](std::span<const float> p, std::uint64_t version) {
    CHECK(p.size() == dim);
    heard.push_back(version);
  });
  std::uint64_t micro_batches = 0, last_version = 0;
  quadratic net(dim);
  std::vector<float> gradient(dim);
  while (auto request = w.next()) {
    CHECK(request->index == micro_batches++);
    CHECK(request->parameters_version >= last_version);
    last_version = request->parameters_version;
    const batch input = data.examples(request->first_position, request->examples);
    w.submit(gradient, 1, net.forward_backward(request->parameters, input, gradient));
  }
  const job_result result = running->wait();
  CHECK(micro_batches == job.steps * job.accumulation);
  CHECK(heard.size() == job.steps - 1);  // the last step's parameters are the result's
  CHECK(result.steps.size() == job.steps);
}

TEST_CASE("an app-driven job is cancelled from the app, every worker stops after the same step") {
  const waves data(dim);
  job_config job = small_job("acco");
  job.steps = 100000;
  job.eval_interval = 0;
  std::unique_ptr<app_job> running;
  running = app_job::start(quadratic_app(dim, data), job, [&running](const step_metrics& m) {
    if (m.step == 3) running->cancel();
  });
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < running->local_workers(); ++i)
    threads.emplace_back([&, i] { drive(running->local_worker(i), data); });
  for (auto& t : threads) t.join();
  const job_result result = running->wait();
  CHECK(result.steps.size() >= 3);
  CHECK(result.steps.size() < 100);
  CHECK(result.replicas_identical);
}

TEST_CASE("wait_ready: false while the round waits for the other workers, true once next() answers at once") {
  const waves data(dim);
  const job_config job = small_job("ddp");
  auto running = app_job::start(quadratic_app(dim, data), job);
  worker& first = running->local_worker(0);
  quadratic net(dim);
  std::vector<float> gradient(dim);
  // Alone, worker 0 answers its round's micro-batches, then waits for the others' gradients.
  auto request = first.next();
  int answered = 0;
  for (; request; request = first.wait_ready(std::chrono::milliseconds(300)) ? first.next() : std::nullopt) {
    const batch input = data.examples(request->first_position, request->examples);
    const double loss = net.forward_backward(request->parameters, input, gradient);
    first.submit(gradient, static_cast<double>(input.items()), loss);
    REQUIRE(++answered < 100);
  }
  CHECK(answered >= 1);
  std::vector<std::thread> others;
  for (std::size_t i = 1; i < running->local_workers(); ++i)
    others.emplace_back([&, i] { drive(running->local_worker(i), data); });
  drive(first, data);
  for (auto& t : others) t.join();
  CHECK(running->wait().steps.size() == job.steps);
  CHECK(first.wait_ready(std::chrono::milliseconds(0)));  // over: next() answers nullopt at once
  CHECK(!first.next());
}

TEST_CASE("app-driven jobs refuse bad input with one line naming it") {
  const waves data(dim);
  app_model m = quadratic_app(dim, data);
  job_config job = small_job("ddp");
  SUBCASE("configuration") {
    job.algorithm = "nope";
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("nope"), std::invalid_argument);
  }
  SUBCASE("model") {
    m.initial_parameters.clear();
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("no initial parameters"), std::invalid_argument);
    m = quadratic_app(dim, data);
    m.initial_parameters[1] = NAN;
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("not all finite"), std::invalid_argument);
  }
  SUBCASE("fixed steps") {
    job.algorithm = "acco";
    job.accumulation = 1;
    job.max_accumulation = 0;
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("accumulation must be at least 2 (got 1)"),
                         std::invalid_argument);
    job.accumulation = 2;
    job.max_accumulation = 3;
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("max_accumulation (3) caps a growing one"),
                         std::invalid_argument);
    job.max_accumulation = 0;
    job.estimate_accumulation = 2;
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("must leave the real stage a micro-batch"),
                         std::invalid_argument);
    job.estimate_accumulation = 0;
    job.accumulation_mode = "steady";
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("'steady' is not one of fixed, growing"),
                         std::invalid_argument);
    job.accumulation_mode = "";
    job.accumulation = 4;
    job.steps = 7;
    CHECK(app_job::start(m, job)->step_counting() ==
          "accord: a step is 4 micro-batches of 3 examples per worker (acco: 2 at the estimate stage, 2 at the real "
          "stage), so N micro-batches make N / 4 steps; 7 steps");
  }
  SUBCASE("stop_requested") {
    std::atomic<bool> stop{false};
    job.stop_requested = &stop;
    CHECK_THROWS_WITH_AS(app_job::start(m, job), doctest::Contains("cancel()"), std::invalid_argument);
  }
  SUBCASE("submits, and a worker whose computation fails") {
    job.workers = 1;
    auto running = app_job::start(m, job);
    worker& w = running->local_worker(0);
    const std::vector<float> gradient(dim), wrong(dim + 1);
    CHECK_THROWS_WITH_AS(w.submit(gradient, 1, 0), doctest::Contains("without a request"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(w.gradients_final_from(gradient, 0), doctest::Contains("gradients_final_from() without a request"),
                         std::invalid_argument);
    REQUIRE(w.next());
    CHECK_THROWS_WITH_AS(w.submit(wrong, 1, 0), doctest::Contains("gradient of 6 values"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(w.submit(gradient, -1, 0), doctest::Contains("items"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(w.gradients_final_from(wrong, 0), doctest::Contains("gradients_final_from(): a gradient of 6"),
                         std::invalid_argument);
    w.gradients_final_from(gradient, dim + 3);  // past the end: no progress, ignored
    CHECK_THROWS_AS(running->local_worker(1), std::out_of_range);
    w.fail("device lost");
    CHECK_FALSE(w.next());
    CHECK_THROWS_WITH_AS(running->wait(), doctest::Contains("worker 0: device lost"), std::runtime_error);
  }
  SUBCASE("a job destroyed while running ends instead of waiting for the app") {
    auto running = app_job::start(m, job);
    running.reset();
  }
}
