// accord-bench-models: CPU compute speed of the built-in models and of the BLAS path under
// them, printed as tables so later work (threading, kernels, GPU) can be compared against it.
#include "apps/flags.hpp"
#include "models/gpt.hpp"
#include "models/memory.hpp"
#include "models/mlp.hpp"

#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

namespace po = boost::program_options;
using namespace accord;

namespace {

struct timing {
  double seconds_per_call;
  int calls;
};

// Calls `work` once to warm up, then repeatedly until `budget` seconds have passed.
timing time_calls(const std::function<void()>& work, double budget) {
  using clock = std::chrono::steady_clock;
  work();
  const auto start = clock::now();
  int calls = 0;
  double elapsed = 0.0;
  do {
    work();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < budget);
  return {elapsed / calls, calls};
}

void bench_gpt(const gpt_config& config, std::size_t examples, double budget) {
  gpt m(config);
  std::vector<float> parameters(m.parameter_count()), gradients(parameters.size());
  m.initialize(parameters, 1);
  std::mt19937 rng(2);
  std::uniform_int_distribution<std::int32_t> byte(0, config.vocab - 1);
  batch input;
  input.examples = examples;
  input.tokens.resize(examples * config.context);
  input.targets.resize(input.tokens.size());
  for (auto& t : input.tokens) t = byte(rng);
  for (auto& t : input.targets) t = byte(rng);
  const timing t = time_calls([&] { m.forward_backward(parameters, input, gradients); }, budget);
  std::printf("%6d %6d %6d %8d %9zu %6zu %10.0f %9.2f\n", config.layers, config.width,
              config.heads, config.context, m.parameter_count(), examples,
              double(input.items()) / t.seconds_per_call, t.seconds_per_call * 1e3);
}

void bench_sgemm(int m, int n, int k, double budget) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> a(std::size_t(m) * k), b(std::size_t(k) * n), c(std::size_t(m) * n);
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  const timing t = time_calls(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k,
                    b.data(), n, 0.0f, c.data(), n);
      },
      budget);
  std::printf("%6d %6d %6d %10.2f %9.3f\n", m, n, k,
              2.0 * m * n * k / t.seconds_per_call / 1e9, t.seconds_per_call * 1e3);
}

void bench_mlp(const mlp_config& config, std::size_t examples, double budget) {
  mlp m(config);
  std::vector<float> parameters(m.parameter_count()), gradients(parameters.size());
  m.initialize(parameters, 1);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<std::int32_t> label(0, config.classes - 1);
  batch input;
  input.examples = examples;
  input.features.resize(examples * config.inputs);
  input.targets.resize(examples);
  for (float& v : input.features) v = pixel(rng);
  for (auto& v : input.targets) v = label(rng);
  const timing t = time_calls([&] { m.forward_backward(parameters, input, gradients); }, budget);
  std::printf("%-44s %6zu %10.0f %9.2f\n", m.signature().c_str(), examples,
              double(examples) / t.seconds_per_call, t.seconds_per_call * 1e3);
}

// The GPT rows of the table.
const gpt_config gpt_sizes[] = {
    {.context = 64, .layers = 2, .heads = 4, .width = 64},
    {.context = 64, .layers = 2, .heads = 4, .width = 128},
    {.context = 64, .layers = 2, .heads = 4, .width = 256},
    {.context = 64, .layers = 4, .heads = 4, .width = 128},
    {.context = 128, .layers = 2, .heads = 4, .width = 128},
    {.context = 128, .layers = 4, .heads = 8, .width = 256},
};

}  // namespace

int main(int argc, char** argv) {
  po::options_description options(
      "accord-bench-models: forward+backward throughput of the built-in models on the CPU and\n"
      "GFLOP/s of the sgemm path beneath them (figures, not tests)\n\nOptions");
  options.add_options()("help,h", "print this help")(
      "threads", number_flag(1, 1024, 1), "OpenBLAS threads for the matrix products")(
      "seconds", number_flag(number_range<double>{0, 3600, true}, 0.5), "time spent measuring each row, after one warm-up call")(
      "examples", number_flag<std::size_t>(1, 1'000'000, 8), "GPT sequences per forward+backward step");
  int threads = 0;
  double budget = 0;
  std::size_t examples = 0;
  try {
    const auto parsed = parse_flags(argc, argv, options, "usage: accord-bench-models [options]");
    if (!parsed) return 0;  // --help
    const po::variables_map& flags = *parsed;
    threads = flags["threads"].as<int>();
    budget = flags["seconds"].as<double>();
    examples = flags["examples"].as<std::size_t>();
    // Every GPT row must fit: its activations for --examples, its parameters and gradients.
    for (const gpt_config& config : gpt_sizes)
      require_memory(gpt_activation_bytes(config, static_cast<double>(examples)) +
                         2 * sizeof(float) * gpt_parameter_estimate(config),
                     "--examples " + std::to_string(examples));
  } catch (const std::exception& e) {
    std::cerr << "accord-bench-models: " << e.what() << "\n";
    return 2;
  }
  openblas_set_num_threads(threads);
  std::printf("OpenBLAS threads: %d, %.2f s per row\n\n", threads, budget);

  std::printf("GPT forward+backward (byte-level, vocab 256, tied head)\n");
  std::printf("%6s %6s %6s %8s %9s %6s %10s %9s\n", "layers", "width", "heads", "context",
              "params", "batch", "tokens/s", "ms/step");
  for (const gpt_config& config : gpt_sizes) bench_gpt(config, examples, budget);

  std::printf("\nsgemm C[m,n] = A[m,k] B[k,n]\n%6s %6s %6s %10s %9s\n", "m", "n", "k", "GFLOP/s",
              "ms/call");
  // The GPT's own shapes (rows x 3C x C for width 128, rows x 4C x C for width 256), then a
  // large square product for the BLAS ceiling.
  bench_sgemm(512, 384, 128, budget);
  bench_sgemm(512, 1024, 256, budget);
  bench_sgemm(1024, 1024, 1024, budget);

  std::printf("\nMLP forward+backward\n%-44s %6s %10s %9s\n", "model", "batch", "images/s",
              "ms/step");
  bench_mlp(mlp_config{}, 128, budget);
  return 0;
}
