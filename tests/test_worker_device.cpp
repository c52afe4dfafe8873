// App-driven workers on device memory (include/accord/worker.hpp, app_model::memory): the
// worker keeps its parameters and gradient sum where the app computes and takes device
// gradients. Without a GPU the same data path runs on host memory (job_config::resident_on_host)
// and the refusals are checked; the tests that need a GPU print ACCORD_SKIPPED and return
// (scripts/gpu-check.sh runs them on one).
#include <doctest/doctest.h>

#include <accord/worker.hpp>

#include "gpu/device.hpp"
#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace accord;
using accord::testing::quadratic;
using accord::testing::quadratic_app;
using accord::testing::test_job;
using accord::testing::waves;

// Host apps pass what they passed before: vectors and spans convert to a host device_span.
static_assert(std::is_convertible_v<std::vector<float>&, device_span<const float>>);
static_assert(std::is_convertible_v<const std::vector<float>&, device_span<const float>>);
static_assert(std::is_convertible_v<std::span<float>, device_span<const float>>);
static_assert(std::is_convertible_v<std::array<float, 3>&, device_span<const float>>);
static_assert(std::is_convertible_v<device_span<float>, device_span<const float>>);
static_assert(!std::is_convertible_v<device_span<const float>, device_span<float>>);

namespace {

constexpr std::size_t dim = 5;

job_config small_job(const std::string& algorithm) {
  job_config job = test_job(algorithm, 2, 4).micro_batches_per_round(2).evaluate(2, 6);
  job.blas_threads = 1;
  return job;
}

// The app's loop, its model computing on the host: a device model's parameters come down and
// its gradient goes up through the app's own copies, as a CUDA app's kernels would read and
// write them in place.
void drive(worker& w, const waves& data, const memory_location& memory) {
  quadratic net(dim);
  std::vector<float> parameters(dim), gradient(dim);
  std::optional<device_array<float>> on_device;
  if (!memory.on_host()) {
    use_cuda_device(memory.device);
    on_device.emplace(device_kind::cuda, dim);
  }
  while (auto request = w.next()) {
    CHECK(request->parameters_at.where == memory);  // CHECK: REQUIRE may not throw on this thread
    CHECK(request->parameters.size() == (memory.on_host() ? dim : 0));
    copy_values(request->parameters_at, parameters);
    const batch input = data.examples(request->first_position, request->examples);
    const double loss = net.forward_backward(parameters, input, gradient);
    if (on_device) {
      copy_values(gradient, {on_device->span(), memory});
      w.submit({on_device->span(), memory}, static_cast<double>(input.items()), loss);
    } else {
      w.submit(gradient, static_cast<double>(input.items()), loss);
    }
  }
}

job_result run_app_job(app_model m, const job_config& config, const waves& data) {
  const memory_location memory = m.memory;
  auto job = app_job::start(std::move(m), config);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < job->local_workers(); ++i)
    threads.emplace_back([&, i] { drive(job->local_worker(i), data, memory); });
  for (auto& t : threads) t.join();
  return job->wait();
}

void require_same_training(const job_result& a, const job_result& b) {
  CHECK(a.parameters == b.parameters);
  REQUIRE(a.steps.size() == b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    CHECK(a.steps[i].train_loss == b.steps[i].train_loss);
    CHECK(a.steps[i].micro_batches == b.steps[i].micro_batches);
  }
  CHECK(a.final_eval_loss == b.final_eval_loss);
  CHECK(a.replicas_identical);
}

bool skip_without_cuda() {
  if (cuda_available()) return false;
  MESSAGE("ACCORD_SKIPPED: no CUDA device on this machine");
  return true;
}

}  // namespace

TEST_CASE("an app-driven worker resident on host memory trains bitwise as the default one") {
  // A device model's data path on host buffers: the parameters handed out from the resident
  // copy, the gradient added on the compute actor's thread by the kernels, the sum fetched once
  // per round (device_rounds false) or the round run on the resident buffers.
  const waves data(dim);
  for (const char* algorithm : {"ddp", "dpu", "acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    job_config job = small_job(algorithm);
    const job_result host = run_app_job(quadratic_app(dim, data), job, data);
    job.resident_on_host = true;
    for (const bool device_rounds : {false, true}) {
      CAPTURE(device_rounds);
      job.device_rounds = device_rounds;
      require_same_training(run_app_job(quadratic_app(dim, data), job, data), host);
    }
  }
}

TEST_CASE("app-driven device memory is refused with one line where it cannot work") {
  const waves data(dim);
  const job_config job = small_job("ddp");
  SUBCASE("a CUDA device this build or machine lacks") {
    // One beyond the devices present: absent on every machine, for its own reason.
    const int absent = cuda_device_count();
    const std::string line = "app_model: memory cuda:" + std::to_string(absent) + ": " +
                             (absent == 0 ? std::string("no usable CUDA device: ")
                                          : "cuda:" + std::to_string(absent) + " does not exist: this machine has ");
    CHECK_THROWS_WITH_AS(app_job::start(quadratic_app(dim, data, {memory_space::cuda, absent}), job),
                         doctest::Contains(line.c_str()), std::invalid_argument);
    CHECK_THROWS_WITH_AS(app_job::start(quadratic_app(dim, data, {memory_space::cuda, -1}), job),
                         doctest::Contains("app_model: memory cuda:-1: "), std::invalid_argument);
  }
  SUBCASE("a gradient in other memory than the model's") {
    job_config one = job;
    one.workers = 1;
    auto running = app_job::start(quadratic_app(dim, data), one);
    worker& w = running->local_worker(0);
    std::vector<float> gradient(dim);
    REQUIRE(w.next());
    // Named as a device's, never read: refused before anything touches it.
    const device_span<const float> elsewhere{gradient, {memory_space::cuda, 0}};
    CHECK_THROWS_WITH_AS(w.submit(elsewhere, 1, 0),
                         "worker 0: submit(): a gradient in cuda:0 memory, the model's parameters are in host "
                         "memory (app_model::memory)",
                         std::invalid_argument);
    // The job goes on: the same request takes a host gradient.
    w.submit(gradient, 1, 0);
    running->cancel();
    while (w.next()) w.submit(gradient, 1, 0);
    running->wait();
  }
}

TEST_CASE("an app-driven worker on a CUDA device trains as the host one, bit for bit") {
  if (skip_without_cuda()) return;
  // In one process the rounds run on the host: only where the parameters and the sum live
  // changes, and adding fp32 gradients on the GPU rounds as on the CPU.
  const waves data(dim);
  const memory_location gpu{memory_space::cuda, 0};
  for (const char* algorithm : {"ddp", "acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    const job_config job = small_job(algorithm);
    require_same_training(run_app_job(quadratic_app(dim, data, gpu), job, data),
                          run_app_job(quadratic_app(dim, data), job, data));
  }
}

TEST_CASE("a CUDA worker refuses host gradients and the host-only parameter callback") {
  if (skip_without_cuda()) return;
  const waves data(dim);
  job_config job = small_job("ddp");
  job.workers = 1;
  auto running = app_job::start(quadratic_app(dim, data, {memory_space::cuda, 0}), job);
  worker& w = running->local_worker(0);
  CHECK_THROWS_WITH_AS(w.on_parameters([](std::span<const float>, std::uint64_t) {}),
                       doctest::Contains("this model's are in cuda:0"), std::invalid_argument);
  const std::vector<float> host(dim);
  device_array<float> gradient(device_kind::cuda, host);
  REQUIRE(w.next());
  CHECK_THROWS_WITH_AS(w.submit(host, 1, 0), doctest::Contains("a gradient in host memory"), std::invalid_argument);
  running->cancel();
  do w.submit({gradient.span(), {memory_space::cuda, 0}}, 1, 0);
  while (w.next());
  running->wait();
}
