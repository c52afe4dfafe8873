// accord-bench-gpu: bandwidth of the training-loop kernels against the device's peak memory
// bandwidth, the NCCL all-reduce over the local GPUs, and GPT training steps per second.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "apps/flags.hpp"
#include "gpu/device.hpp"
#include "gpu/kernels.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "models/memory.hpp"
#include "transport/transport.hpp"
#if ACCORD_HAVE_CUDA
#include "gpu/nccl_transport.hpp"
#endif

namespace po = boost::program_options;
using namespace accord;

namespace {

using seconds = std::chrono::duration<double>;

// Mean seconds per call of `body` over `iterations` calls after one warm-up call.
template <class Body>
double time_per_call(kernels& k, int iterations, Body body) {
  body();
  k.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) body();
  k.synchronize();
  return seconds(std::chrono::steady_clock::now() - start).count() / iterations;
}

void report(const char* name, double bytes, double per_call, double peak) {
  const double bandwidth = bytes / per_call;
  if (peak > 0)
    std::printf("  %-22s %8.3f ms  %8.1f GB/s  %5.1f%% of peak\n", name, per_call * 1e3, bandwidth / 1e9,
                100 * bandwidth / peak);
  else
    std::printf("  %-22s %8.3f ms  %8.1f GB/s\n", name, per_call * 1e3, bandwidth / 1e9);
}

void bench_kernels(device_kind device, std::size_t n, int iterations) {
  const double peak = device == device_kind::cuda ? cuda_properties().memory_bandwidth : 0.0;
  if (peak > 0) std::printf("peak memory bandwidth %.1f GB/s (memory clock x bus width)\n", peak / 1e9);
  std::printf("kernels over %zu floats, %d iterations:\n", n, iterations);
  auto k = make_kernels(device);
  std::vector<float> host(n);
  std::mt19937 generator(1);
  std::normal_distribution<float> normal;
  for (float& x : host) x = normal(generator);
  device_array<float> p(device, std::span<const float>(host)), g(device, std::span<const float>(host)),
      m(device, n), v(device, n);
  m.copy_from(host);
  v.copy_from(host);
  const std::size_t words = packed_words(n), voters = 8;
  device_array<std::uint64_t> bits(device, words), vectors(device, voters * words);
  device_array<std::uint16_t> counts(device, n);
  const double f = sizeof(float);
  report("accumulate", 3 * f * n, time_per_call(*k, iterations, [&] { k->accumulate(p.span(), g.span(), 0.5f); }), peak);
  report("pack_signs", f * n + n / 8.0,
         time_per_call(*k, iterations, [&] { k->pack_signs(g.span(), 0, bits.span()); }), peak);
  report("count_votes (8)", voters * n / 8.0 + 2.0 * n,
         time_per_call(*k, iterations, [&] { k->count_votes(vectors.span(), voters, counts.span()); }), peak);
  report("majority", 2.0 * n + n / 8.0,
         time_per_call(*k, iterations, [&] { k->majority(counts.span(), voters, 0, 0, bits.span()); }), peak);
  std::uint64_t step = 0;
  report("adamw_step", 7 * f * n, time_per_call(*k, iterations, [&] {
           k->adamw_step(p.span(), g.span(), m.span(), v.span(), {1e-6f, 0.9f, 0.999f, 1e-8f, 0.0f, ++step});
         }), peak);
  report("lion_step", 5 * f * n,
         time_per_call(*k, iterations, [&] { k->lion_step(p.span(), g.span(), m.span(), {1e-6f, 0.9f, 0.99f, 0.0f}); }),
         peak);
}

void bench_nccl(std::size_t n, int iterations) {
#if ACCORD_HAVE_CUDA
  const int world = cuda_device_count();
  std::vector<int> devices(world);
  for (int d = 0; d < world; ++d) devices[d] = d;
  auto group = make_nccl_group(devices);
  if (world != 1) {
    std::printf("nccl: %d GPUs; the multi-rank timing needs one thread per rank (not measured here)\n", world);
    return;
  }
  device_array<float> data(device_kind::cuda, n);
  data.copy_from(std::vector<float>(n, 1.0f));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) group[0]->all_reduce_device(data.span());
  const double per_call = seconds(std::chrono::steady_clock::now() - start).count() / iterations;
  std::printf("nccl all_reduce_device, world 1 (NCCL forbids one GPU twice): %.3f ms for %zu floats\n",
              per_call * 1e3, n);
#else
  (void)n;
  (void)iterations;
#endif
}

// forward_backward steps per second on one fixed batch, after one warm-up step.
double gpt_steps_per_second(model& m, const std::vector<float>& parameters, const batch& input, int steps) {
  std::vector<float> gradients(parameters.size());
  m.forward_backward(parameters, input, gradients);
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) m.forward_backward(parameters, input, gradients);
  return steps / seconds(std::chrono::steady_clock::now() - start).count();
}

// The GPT on the chosen device and, for cuda, the CPU reference beside it. Times include the
// host<->device copies of parameters and gradients that the model interface implies.
void bench_gpt(device_kind device, int steps) {
  gpt_config config{256, 64, 4, 4, 128, true};
  auto on_device = make_gpt_on(device, config);
  std::vector<float> parameters(on_device->parameter_count());
  on_device->initialize(parameters, 1);
  batch input;
  input.examples = 8;
  std::mt19937 generator(2);
  for (std::size_t i = 0; i < input.examples * config.context; ++i) {
    input.tokens.push_back(static_cast<std::int32_t>(generator() % config.vocab));
    input.targets.push_back(static_cast<std::int32_t>(generator() % config.vocab));
  }
  const double rate = gpt_steps_per_second(*on_device, parameters, input, steps);
  std::printf("gpt %s (%zu parameters, batch 8x64) on %s: %.1f steps/s, %.0f tokens/s\n",
              on_device->signature().c_str(), parameters.size(), std::string(to_string(device)).c_str(), rate,
              rate * input.items());
  if (device == device_kind::cpu) return;
  auto cpu = make_gpt_on(device_kind::cpu, config);
  const double cpu_rate = gpt_steps_per_second(*cpu, parameters, input, steps);
  std::printf("gpt same batch on cpu: %.1f steps/s, %.0f tokens/s; %s/cpu = %.1fx\n", cpu_rate,
              cpu_rate * input.items(), std::string(to_string(device)).c_str(), rate / cpu_rate);
}

}  // namespace

int main(int argc, char** argv) try {
  po::options_description options("accord-bench-gpu: kernel bandwidth vs peak, NCCL all-reduce, GPT steps/s");
  options.add_options()("help", "show this help")
      ("device", po::value<std::string>()->default_value("auto"), "cpu, cuda or auto")
      ("elements", number_flag<std::size_t>(1, std::size_t{1} << 36, std::size_t{1} << 26), "floats per kernel call")
      ("iterations", number_flag(1, 1'000'000, 20), "timed calls per kernel")
      ("gpt-steps", number_flag(0, 1'000'000, 5), "timed GPT steps (0: skip)");
  const auto parsed = parse_flags(argc, argv, options, "usage: accord-bench-gpu [options]");
  if (!parsed) return 0;  // --help
  const po::variables_map& vm = *parsed;
  const device_kind device = parse_device(vm["device"].as<std::string>());
  const std::size_t n = vm["elements"].as<std::size_t>();
  const int iterations = vm["iterations"].as<int>();
  // Host bytes per element: its float; on the cpu also the four float arrays, the packed signs
  // (one word set and eight voters' ones) and the 16-bit vote counts.
  const double bytes_per_element = device == device_kind::cpu ? 5 * sizeof(float) + 9.0 / 8 + 2 : sizeof(float);
  require_memory(static_cast<double>(n) * bytes_per_element, "--elements " + std::to_string(n));
  std::printf("device: %s\n", describe_device(device).c_str());
  bench_kernels(device, n, iterations);
  if (device == device_kind::cuda) bench_nccl(n, iterations);
  if (const int steps = vm["gpt-steps"].as<int>(); steps > 0) bench_gpt(device, steps);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "accord-bench-gpu: " << e.what() << "\n";
  return 2;
}
