// The CUDA GPT against the CPU GPT, and make_gpt_on. Tests that need a GPU print
// ACCORD_SKIPPED and return on machines without one; ctest reports them as skipped.
//
// Tolerances: both sides compute in fp32 (cuBLAS without TF32) and differ only in summation
// order, so the loss must agree to 1e-4 relative, and in every tensor of the layout the largest
// gradient difference must stay within 1e-3 of that tensor's largest CPU gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/device.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"

#if ACCORD_HAVE_CUDA
#include "gpu/cuda_gpt.hpp"
#endif

using namespace accord;

namespace {

constexpr double loss_tolerance = 1e-4;
constexpr float gradient_tolerance = 1e-3f;

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

#if ACCORD_HAVE_CUDA
void check_gradients_close(const parameter_layout& layout, const std::vector<float>& gpu,
                           const std::vector<float>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (const parameter_tensor& t : layout.tensors()) {
    float largest = 0.0f, worst = 0.0f;
    for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
      largest = std::max(largest, std::fabs(cpu[i]));
      worst = std::max(worst, std::fabs(gpu[i] - cpu[i]));
    }
    CAPTURE(t.name);
    CHECK(largest > 0.0f);  // every tensor carries gradient
    CHECK(worst <= gradient_tolerance * largest);
  }
}
#endif

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
