// The CUDA GPT against the CPU GPT, and make_gpt_on. Tests that need a GPU print
// ACCORD_SKIPPED and return on machines without one; ctest reports them as skipped.
//
// Tolerances: both sides compute in fp32 (cuBLAS without TF32) and differ only in summation
// order, so the loss must agree to 1e-4 relative, and in every tensor of the layout the largest
// gradient difference must stay within 1e-3 of that tensor's largest CPU gradient.
//
// bf16 compute against its CPU reference (make_bf16_reference_gpt, the same rounding points):
// summation order now also moves a value across a bf16 rounding boundary now and then (one
// bf16 step, 2^-8 relative), so loss 2e-3 relative and gradients 2e-2 of the tensor's largest.
// Against fp32 compute the loss must stay within 1e-2 relative. Not run on a GPU yet; on the
// cpu, parameters one fp32 step apart move the reference's gradients by up to about 3e-3 of a
// tensor's largest and its loss by under 1e-4 relative (the nudge test below), so the
// tolerances leave 6x and 20x room for such rounding flips.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <accord/job.hpp>
#include <accord/update_rule.hpp>

#include "data/text.hpp"
#include "gpu/compute_precision.hpp"
#include "gpu/device.hpp"
#include "gpu/kernels.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "transport/wire_precision.hpp"

#if ACCORD_HAVE_CUDA
#include "gpu/cuda_gpt.hpp"
#include "gpu/cuda_kernels.hpp"

#include <cuda_runtime_api.h>
#endif

using namespace accord;

namespace {

constexpr double loss_tolerance = 1e-4;
constexpr float gradient_tolerance = 1e-3f;
constexpr double bf16_loss_tolerance = 2e-3;
constexpr float bf16_gradient_tolerance = 2e-2f;
constexpr double bf16_to_fp32_loss_margin = 1e-2;

bool skip_without_cuda() {
  if (cuda_available()) return false;
  MESSAGE("ACCORD_SKIPPED: no CUDA device on this machine");
  return true;
}

batch token_batch(std::size_t examples, std::size_t sequence, int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> id(0, vocab - 1);
  batch b;
  b.examples = examples;
  for (std::size_t i = 0; i < examples * sequence; ++i) {
    b.tokens.push_back(id(rng));
    b.targets.push_back(id(rng));
  }
  return b;
}

// Seeded initialisation plus noise, so LayerNorm gains and biases are not exactly 1 and 0 and
// every path carries gradient.
std::vector<float> perturbed_parameters(const model& m, std::uint64_t seed) {
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, seed);
  std::mt19937 rng{static_cast<unsigned>(seed)};
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (float& p : parameters) p += noise(rng);
  return parameters;
}

// Every tensor's largest difference within `tolerance` of its largest `expected` gradient.
void check_gradients_close(const parameter_layout& layout, const std::vector<float>& got,
                           const std::vector<float>& expected, float tolerance = gradient_tolerance) {
  REQUIRE(got.size() == expected.size());
  for (const parameter_tensor& t : layout.tensors()) {
    float largest = 0.0f, worst = 0.0f;
    for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
      largest = std::max(largest, std::fabs(expected[i]));
      worst = std::max(worst, std::fabs(got[i] - expected[i]));
    }
    CAPTURE(t.name);
    CHECK(largest > 0.0f);  // every tensor carries gradient
    CHECK(worst <= tolerance * largest);
  }
}

}  // namespace

TEST_CASE("make_gpt_on gives the CPU gpt, and the CUDA gpt only where a device exists") {
  const gpt_config config{.vocab = 32, .context = 8, .layers = 1, .heads = 2, .width = 16};
  auto cpu = make_gpt_on(device_kind::cpu, config);
  CHECK(dynamic_cast<gpt*>(cpu.get()) != nullptr);
  CHECK(cpu->signature() == gpt(config).signature());
  CHECK_THROWS_AS(make_gpt_on(device_kind::cpu, gpt_config{.heads = 3}), std::invalid_argument);
  if (!cuda_available()) {
    CHECK_THROWS_WITH_AS(make_gpt_on(device_kind::cuda, config),
                         doctest::Contains("--device cuda: no usable CUDA device"), std::runtime_error);
    return;
  }
#if ACCORD_HAVE_CUDA
  auto cuda = make_gpt_on(device_kind::cuda, config);
  CHECK(dynamic_cast<cuda_gpt*>(cuda.get()) != nullptr);
  CHECK(cuda->signature() == cpu->signature());
  CHECK(cuda->parameter_count() == cpu->parameter_count());
  CHECK_THROWS_AS(make_gpt_on(device_kind::cuda, gpt_config{.heads = 3}), std::invalid_argument);
#endif
}

TEST_CASE("CUDA GPT matches the CPU GPT in loss and every gradient, micro-batch after micro-batch") {
  if (skip_without_cuda()) return;
#if ACCORD_HAVE_CUDA
  struct shape {
    std::size_t examples, sequence;
  };
  struct scenario {
    gpt_config config;
    std::vector<shape> micro_batches;  // run in this order on one instance: buffers grow and are reused
  };
  // The second config has a vocabulary above one block of threads and sequences above one warp,
  // and an odd head width.
  const std::vector<scenario> scenarios{
      {{.vocab = 64, .context = 16, .layers = 2, .heads = 4, .width = 32, .tied_head = true},
       {{3, 11}, {2, 16}, {3, 11}, {1, 1}}},
      {{.vocab = 300, .context = 40, .layers = 1, .heads = 2, .width = 42, .tied_head = false},
       {{2, 40}, {4, 7}, {2, 40}}},
  };
  std::mt19937 rng(5);
  for (const scenario& s : scenarios) {
    gpt cpu(s.config);
    cuda_gpt cuda(s.config);
    REQUIRE(cuda.signature() == cpu.signature());
    REQUIRE(cuda.parameter_count() == cpu.parameter_count());
    std::uint64_t seed = 1;
    for (const shape& b : s.micro_batches) {
      CAPTURE(cpu.signature());
      CAPTURE(b.examples);
      CAPTURE(b.sequence);
      const std::vector<float> parameters = perturbed_parameters(cpu, seed++);
      const batch input = token_batch(b.examples, b.sequence, s.config.vocab, rng);
      std::vector<float> cpu_gradients(parameters.size()), cuda_gradients(parameters.size(), 7.0f);
      const double cpu_loss = cpu.forward_backward(parameters, input, cpu_gradients);
      const double cuda_loss = cuda.forward_backward(parameters, input, cuda_gradients);
      CHECK(cuda_loss == doctest::Approx(cpu_loss).epsilon(loss_tolerance));
      check_gradients_close(cpu.layout(), cuda_gradients, cpu_gradients);

      // No atomics anywhere: the same batch gives bitwise the same results, and evaluate runs
      // the same forward pass.
      std::vector<float> again(parameters.size());
      CHECK(cuda.forward_backward(parameters, input, again) == cuda_loss);
      CHECK(again == cuda_gradients);
      CHECK(cuda.evaluate(parameters, input) == cuda_loss);
    }
  }
#endif
}

TEST_CASE("CUDA GPT clones agree, and bad batches and buffers are rejected") {
  if (skip_without_cuda()) return;
#if ACCORD_HAVE_CUDA
  const gpt_config config{.vocab = 20, .context = 8, .layers = 1, .heads = 2, .width = 16};
  cuda_gpt original(config);
  const std::vector<float> parameters = perturbed_parameters(original, 3);
  std::mt19937 rng(6);
  const batch input = token_batch(2, 8, config.vocab, rng);
  auto copy = original.clone();
  CHECK(dynamic_cast<cuda_gpt*>(copy.get()) != nullptr);
  CHECK(copy->evaluate(parameters, input) == original.evaluate(parameters, input));

  std::vector<float> gradients(parameters.size());
  batch bad_token = input;
  bad_token.tokens[3] = config.vocab;
  CHECK_THROWS_WITH_AS(original.forward_backward(parameters, bad_token, gradients),
                       "cuda_gpt: batch token 20 at index 3 is outside the vocabulary [0, 20)",
                       std::invalid_argument);
  batch too_long = token_batch(1, 9, config.vocab, rng);
  CHECK_THROWS_WITH_AS(original.evaluate(parameters, too_long),
                       "cuda_gpt: batch sequence length 9 exceeds the context 8", std::invalid_argument);
  std::vector<float> short_gradients(parameters.size() - 1);
  CHECK_THROWS_AS(original.forward_backward(parameters, input, short_gradients), std::invalid_argument);
  // A rejected call leaves the model usable.
  CHECK(std::isfinite(original.forward_backward(parameters, input, gradients)));
#endif
}

TEST_CASE("CUDA GPT on device memory equals its host forms and copies no tensor per micro-batch") {
  if (skip_without_cuda()) return;
#if ACCORD_HAVE_CUDA
  const gpt_config config{.vocab = 40, .context = 12, .layers = 2, .heads = 2, .width = 16};
  cuda_gpt model(config);
  CHECK(model.memory().space == memory_space::cuda);
  const std::vector<float> parameters = perturbed_parameters(model, 7);
  std::mt19937 rng(8);
  const std::vector<batch> micro_batches{token_batch(3, 12, config.vocab, rng), token_batch(2, 5, config.vocab, rng),
                                         token_batch(3, 12, config.vocab, rng)};

  // Host forms: a running sum over the micro-batches, staged through the device.
  std::vector<float> host_sum(parameters.size(), 0.0f);
  std::vector<double> host_losses;
  for (const batch& b : micro_batches) host_losses.push_back(model.accumulate_gradients(parameters, b, host_sum));

  // Device forms on the same values: the same kernels in the same order, so bitwise equal.
  const device_array<float> device_parameters(device_kind::cuda, std::span<const float>(parameters));
  device_array<float> device_sum(device_kind::cuda, std::span<const float>(std::vector<float>(parameters.size())));
  const device_span<const float> p{device_parameters.span(), model.memory()};
  const device_span<float> g{device_sum.span(), model.memory()};
  const std::uint64_t copies_before = tensor_copies_to_and_from_devices();
  std::vector<double> device_losses, device_evaluations;
  for (const batch& b : micro_batches) {
    device_losses.push_back(model.accumulate_gradients_at(p, b, g));
    device_evaluations.push_back(model.evaluate_at(p, b));
  }
  CHECK(tensor_copies_to_and_from_devices() == copies_before);
  CHECK(device_losses == host_losses);
  for (std::size_t k = 0; k < micro_batches.size(); ++k)
    CHECK(device_evaluations[k] == model.evaluate(parameters, micro_batches[k]));
  CHECK(device_sum.to_host() == host_sum);

  // Memory of another device, or host memory mixed with device memory, is named and refused.
  const memory_location elsewhere{memory_space::cuda, model.memory().device + 1};
  CHECK_THROWS_WITH_AS(model.accumulate_gradients_at({device_parameters.span(), elsewhere}, micro_batches[0], g),
                       ("cuda_gpt: parameters in cuda:" + std::to_string(elsewhere.device) +
                        ", but this model runs on cuda:" + std::to_string(model.memory().device))
                           .c_str(),
                       std::invalid_argument);
  CHECK_THROWS_AS(model.accumulate_gradients_at(std::span<const float>(parameters), micro_batches[0], g),
                  std::invalid_argument);
  CHECK(device_sum.to_host() == host_sum);  // refused calls wrote nothing
#endif
}

TEST_CASE("every algorithm trains on resident CUDA workers as on the CPU, copying no tensor per micro-batch") {
  if (skip_without_cuda()) return;
#if ACCORD_HAVE_CUDA
  const gpt_config config{.vocab = 256, .context = 16, .layers = 1, .heads = 2, .width = 32};
  const auto train = load_default_corpus(config.context, true, 1);
  const auto eval = load_default_corpus(config.context, false, 1);
  for (const auto& name : algorithm_names()) {
    CAPTURE(name);
    job_config job;
    job.algorithm = name;
    job.workers = 2;
    job.steps = 3;
    job.micro_batch = 4;
    job.accumulation = 4;
    job.max_accumulation = 4;  // fixed micro-batches per round: both runs see the same batches
    job.eval_interval = 0;
    job.eval_examples = 64;    // one evaluation at the end, of two chunks
    gpt cpu(config);
    const job_result host = run_job(cpu, train, eval, job);
    cuda_gpt cuda(config);
    const std::uint64_t copies_before = tensor_copies_to_and_from_devices();
    const job_result resident = run_job(cuda, train, eval, job);
    const std::uint64_t copies = tensor_copies_to_and_from_devices() - copies_before;

    REQUIRE(resident.steps.size() == host.steps.size());
    for (std::size_t i = 0; i < host.steps.size(); ++i)
      CHECK(resident.steps[i].train_loss == doctest::Approx(host.steps[i].train_loss).epsilon(1e-3));
    CHECK(resident.final_eval_loss == doctest::Approx(host.final_eval_loss).epsilon(1e-3));
    CHECK(resident.replicas_identical);
    // Per worker: the parameters once at the start; per round the new parameters up, the sum
    // up at its first micro-batch and back before the round. The evaluation: the parameters
    // once. A host-staged worker would copy three tensors per micro-batch instead.
    std::uint64_t rounds = 0, micro_batches = 0;
    for (const step_metrics& step : resident.steps) micro_batches += step.micro_batches;
    rounds = micro_batches / job.accumulation / static_cast<std::uint64_t>(job.workers);
    CHECK(copies <= static_cast<std::uint64_t>(job.workers) * (1 + 3 * rounds) + 1);
    CHECK(copies < 3 * micro_batches);
  }
#endif
}

TEST_CASE("bf16 compute: refused on the cpu, and its cpu reference rounds every product's operands") {
  const gpt_config config{.vocab = 48, .context = 12, .layers = 2, .heads = 2, .width = 16, .tied_head = false};
  CHECK_THROWS_WITH_AS(make_gpt_on(device_kind::cpu, config, compute_precision::bf16),
                       doctest::Contains("--compute-precision bf16"), std::invalid_argument);
  CHECK(parse_compute_precision("bf16", "--compute-precision") == compute_precision::bf16);
  CHECK_THROWS_WITH_AS(parse_compute_precision("fp16", "--compute-precision"),
                       "--compute-precision: 'fp16' (expected fp32|bf16)", std::invalid_argument);

  gpt fp32(config);
  const auto reference = make_bf16_reference_gpt(config);
  CHECK(reference->signature() == fp32.signature());
  std::mt19937 rng(11);
  const std::vector<float> parameters = perturbed_parameters(fp32, 4);
  const batch input = token_batch(3, 12, config.vocab, rng);
  std::vector<float> fp32_gradients(parameters.size()), bf16_gradients(parameters.size());
  const double fp32_loss = fp32.forward_backward(parameters, input, fp32_gradients);
  const double bf16_loss = reference->forward_backward(parameters, input, bf16_gradients);
  // Rounded operands move the results, a little.
  CHECK(bf16_loss != fp32_loss);
  CHECK(bf16_loss == doctest::Approx(fp32_loss).epsilon(bf16_to_fp32_loss_margin));
  CHECK(bf16_gradients != fp32_gradients);
  check_gradients_close(fp32.layout(), bf16_gradients, fp32_gradients, 0.1f);

  // Parameters that are bf16 values already and a batch whose products then see bf16 inputs
  // only at the first layer: still not fp32, since activations are rounded too.
  std::vector<float> rounded = parameters;
  round_to_wire(wire_precision::bf16, rounded);
  CHECK(reference->evaluate(rounded, input) != fp32.evaluate(rounded, input));

  // A clone rounds as well; accumulate adds the same gradient.
  const auto copy = reference->clone();
  std::vector<float> sum(parameters.size(), 0.0f);
  CHECK(copy->accumulate_gradients(parameters, input, sum) == bf16_loss);
  CHECK(sum == bf16_gradients);
}

TEST_CASE("bf16 reference: fp32-sized differences stay within the bf16 tolerances of the GPU test") {
  // The CUDA GPT's bf16 results differ from the reference's by fp32 summation order, which
  // moves a value across a bf16 rounding boundary now and then. Parameters one fp32 step apart
  // do the same on the cpu: a check that the tolerances leave room for those flips.
  const std::vector<gpt_config> configs{
      {.vocab = 64, .context = 16, .layers = 2, .heads = 4, .width = 32, .tied_head = true},
      {.vocab = 300, .context = 40, .layers = 1, .heads = 2, .width = 42, .tied_head = false}};
  std::mt19937 rng(14);
  for (const gpt_config& config : configs) {
    const auto reference = make_bf16_reference_gpt(config);
    CAPTURE(reference->signature());
    const std::vector<float> parameters = perturbed_parameters(*reference, 21);
    std::vector<float> nudged = parameters;
    for (float& p : nudged) p = std::nextafter(p, rng() % 2 ? INFINITY : -INFINITY);
    const batch input = token_batch(2, std::size_t(config.context), config.vocab, rng);
    std::vector<float> gradients(parameters.size()), nudged_gradients(parameters.size());
    const double loss = reference->forward_backward(parameters, input, gradients);
    const double nudged_loss = reference->forward_backward(nudged, input, nudged_gradients);
    CHECK(nudged_gradients != gradients);  // some roundings moved
    CHECK(nudged_loss == doctest::Approx(loss).epsilon(bf16_loss_tolerance));
    check_gradients_close(gpt(config).layout(), nudged_gradients, gradients, bf16_gradient_tolerance);
  }
}

namespace {

// Edge values (signed zeros, a halfway case, overflow, a subnormal, inf, NaN) and normal ones.
std::vector<float> values_to_round() {
  std::vector<float> values{0.0f, -0.0f, 1.0f, 1.00390625f /* halfway: to even */, 1.01171875f, -3.14159f,
                            3.0e38f, 1.0e-40f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 1000; ++i) values.push_back(normal(rng));
  return values;
}

std::vector<std::uint16_t> host_bf16(const std::vector<float>& values) {
  std::vector<std::uint16_t> rounded(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) rounded[i] = to_bf16(values[i]);
  return rounded;
}

}  // namespace

TEST_CASE("bf16 compute's rounding: the cpu kernels equal the host rounding") {
  const std::vector<float> values = values_to_round();
  std::vector<std::uint16_t> got(values.size());
  make_kernels(device_kind::cpu)->to_wire(wire_precision::bf16, values, got);
  CHECK(got == host_bf16(values));
}

TEST_CASE("bf16 compute's rounding kernel on a model's own stream equals the host rounding") {
  if (skip_without_cuda()) return;
  const std::vector<float> values = values_to_round();
  const std::vector<std::uint16_t> expected = host_bf16(values);
#if ACCORD_HAVE_CUDA
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    const device_array<float> d_values(device_kind::cuda, std::span<const float>(values));
    device_array<std::uint16_t> d_rounded(device_kind::cuda, values.size());
    const auto rounding = make_cuda_kernels(stream);
    rounding->to_wire(wire_precision::bf16, d_values.span(), d_rounded.span());
    rounding->synchronize();
    CHECK(d_rounded.to_host() == expected);
  }
  cudaStreamDestroy(stream);
#endif
}

TEST_CASE("bf16 CUDA GPT matches its cpu reference, stays near fp32, and sees parameters changed in place") {
  if (skip_without_cuda()) return;
#if ACCORD_HAVE_CUDA
  const std::vector<gpt_config> configs{
      {.vocab = 64, .context = 16, .layers = 2, .heads = 4, .width = 32, .tied_head = true},
      {.vocab = 300, .context = 40, .layers = 1, .heads = 2, .width = 42, .tied_head = false}};
  std::mt19937 rng(13);
  for (const gpt_config& config : configs) {
    cuda_gpt bf16(config, compute_precision::bf16), fp32(config);
    const auto reference = make_bf16_reference_gpt(config);
    CAPTURE(bf16.signature());
    CHECK(bf16.precision() == compute_precision::bf16);
    const std::vector<float> parameters = perturbed_parameters(bf16, 21);
    const batch input = token_batch(2, std::size_t(config.context), config.vocab, rng);
    std::vector<float> gpu_gradients(parameters.size()), cpu_gradients(parameters.size()),
        fp32_gradients(parameters.size());
    const double gpu_loss = bf16.forward_backward(parameters, input, gpu_gradients);
    const double cpu_loss = reference->forward_backward(parameters, input, cpu_gradients);
    const double fp32_loss = fp32.forward_backward(parameters, input, fp32_gradients);
    CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(bf16_loss_tolerance));
    check_gradients_close(bf16.layout(), gpu_gradients, cpu_gradients, bf16_gradient_tolerance);
    CHECK(gpu_loss == doctest::Approx(fp32_loss).epsilon(bf16_to_fp32_loss_margin));
    // Reproducible, and the bf16 copy (2 bytes a parameter) shows in the memory report.
    std::vector<float> again(parameters.size());
    CHECK(bf16.forward_backward(parameters, input, again) == gpu_loss);
    CHECK(again == gpu_gradients);
    CHECK(bf16.device_bytes() >= fp32.device_bytes() + 2 * parameters.size());

    // Device memory updated in place between calls (as a worker's optimizer does): the next
    // call rounds the new values.
    device_array<float> device_parameters(device_kind::cuda, std::span<const float>(parameters));
    const device_span<const float> p{device_parameters.span(), bf16.memory()};
    CHECK(bf16.evaluate_at(p, input) == gpu_loss);
    const std::vector<float> moved = perturbed_parameters(bf16, 22);
    device_parameters.copy_from(moved);
    CHECK(bf16.evaluate_at(p, input) == cuda_gpt(config, compute_precision::bf16).evaluate(moved, input));
  }
#endif
}
