// accord-bench-gpu: bandwidth of the training-loop kernels against the device's peak memory
// bandwidth and its measured copy bandwidth, the NCCL all-reduce over the local GPUs, and GPT
// training throughput: host-staged, resident on the device, and resident while the NCCL
// communicator all-reduces a step's worth of gradients at the same time.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "apps/flags.hpp"
#include "gpu/device.hpp"
#include "gpu/kernels.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "models/memory.hpp"
#include "transport/transport.hpp"
#if ACCORD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.hpp"
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

// What the kernels are measured against: the device's peak memory bandwidth (from its memory
// clock and bus width) and what a plain device-to-device copy reaches (0: not known here).
struct bandwidth_references {
  double peak = 0;
  double copy = 0;
};

void report(const char* name, double bytes, double per_call, const bandwidth_references& reference) {
  const double bandwidth = bytes / per_call;
  std::printf("  %-22s %8.3f ms  %8.1f GB/s", name, per_call * 1e3, bandwidth / 1e9);
  if (reference.peak > 0) std::printf("  %5.1f%% of peak", 100 * bandwidth / reference.peak);
  if (reference.copy > 0) std::printf("  %5.1f%% of copy", 100 * bandwidth / reference.copy);
  std::printf("\n");
}

#if ACCORD_HAVE_CUDA
// Bytes per second of cudaMemcpy from `from` to `to` (each `bytes` long), counting the bytes
// read and written for a device-to-device copy as the kernels count theirs.
double copy_bandwidth(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, int iterations) {
  const auto copy = [&] { cuda_check(cudaMemcpyAsync(to, from, bytes, kind, nullptr), "cudaMemcpyAsync"); };
  copy();
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) copy();
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const double per_call = seconds(std::chrono::steady_clock::now() - start).count() / iterations;
  return (kind == cudaMemcpyDeviceToDevice ? 2.0 : 1.0) * double(bytes) / per_call;
}
#endif

// The device's copy bandwidth on `n` floats: device to device (the kernels' reference) and
// host to device (what a host-staged micro-batch pays per tensor).
bandwidth_references measure_copies(device_kind device, std::size_t n, int iterations) {
  bandwidth_references reference;
  if (device != device_kind::cuda) return reference;
  reference.peak = cuda_properties().memory_bandwidth;
  std::printf("peak memory bandwidth %.1f GB/s (memory clock x bus width)\n", reference.peak / 1e9);
#if ACCORD_HAVE_CUDA
  device_array<float> a(device, n), b(device, n);
  reference.copy = copy_bandwidth(b.span().data(), a.span().data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                  iterations);
  std::vector<float> host(n, 1.0f);
  const double upload = copy_bandwidth(b.span().data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                                       std::max(1, iterations / 4));
  std::printf("measured copy bandwidth: device to device %.1f GB/s (read + write, %.1f%% of peak); "
              "host to device %.1f GB/s (pageable)\n",
              reference.copy / 1e9, 100 * reference.copy / reference.peak, upload / 1e9);
#else
  (void)n;
  (void)iterations;
#endif
  return reference;
}

void bench_kernels(device_kind device, std::size_t n, int iterations, const bandwidth_references& reference) {
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
  device_array<std::uint16_t> counts(device, n), wire(device, n);
  device_array<float> widened(device, n);
  const double f = sizeof(float);
  report("accumulate", 3 * f * n,
         time_per_call(*k, iterations, [&] { k->accumulate(p.span(), g.span(), 0.5f); }), reference);
  report("widen_bf16", (f + 2.0) * n,
         time_per_call(*k, iterations, [&] { k->widen_bf16(counts.span(), widened.span()); }), reference);
  report("pack_signs", f * n + n / 8.0,
         time_per_call(*k, iterations, [&] { k->pack_signs(g.span(), 0, bits.span()); }), reference);
  report("count_votes (8)", voters * n / 8.0 + 2.0 * n,
         time_per_call(*k, iterations, [&] { k->count_votes(vectors.span(), voters, counts.span()); }), reference);
  report("majority", 2.0 * n + n / 8.0,
         time_per_call(*k, iterations, [&] { k->majority(counts.span(), voters, 0, 0, bits.span()); }), reference);
  std::uint64_t step = 0;
  report("adamw_step", 7 * f * n, time_per_call(*k, iterations, [&] {
           k->adamw_step(p.span(), g.span(), m.span(), v.span(), {1e-6f, 0.9f, 0.999f, 1e-8f, 0.0f, ++step});
         }), reference);
  report("lion_step", 5 * f * n,
         time_per_call(*k, iterations, [&] { k->lion_step(p.span(), g.span(), m.span(), {1e-6f, 0.9f, 0.99f, 0.0f}); }),
         reference);
  // The device rounds' own kernels (update_rule::apply_on_device).
  report("to_wire bf16", (f + 2.0) * n,
         time_per_call(*k, iterations, [&] { k->to_wire(wire_precision::bf16, g.span(), wire.span()); }), reference);
  report("add_from_wire bf16", (2 * f + 2.0) * n, time_per_call(*k, iterations, [&] {
           k->add_from_wire(wire_precision::bf16, wire.span(), widened.span());
         }), reference);
  report("lion_signs", 3 * f * n + n / 8.0,
         time_per_call(*k, iterations, [&] { k->lion_signs(g.span(), m.span(), 0.9f, 0.99f, 0, bits.span()); }),
         reference);
  report("sign_update (majority)", 2 * f * n + n / 8.0,
         time_per_call(*k, iterations, [&] { k->sign_update(p.span(), bits.span(), 1e-9f, 0.0f); }), reference);
  report("sign_update (average)", (2 * f + 2.0) * n, time_per_call(*k, iterations, [&] {
           k->sign_update(p.span(), counts.span(), static_cast<int>(voters), 1e-9f, 0.0f);
         }), reference);
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

// Micro-batches per second of `step` (one accumulate_gradients call), after one warm-up call.
template <class Step>
double steps_per_second(int steps, Step step) {
  step();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step();
  return steps / seconds(std::chrono::steady_clock::now() - start).count();
}

void print_rate(const char* what, double rate, const batch& input) {
  std::printf("  %-52s %8.1f steps/s %10.0f tokens/s\n", what, rate, rate * input.items());
}

#if ACCORD_HAVE_CUDA
// One NCCL rank per local GPU, each on its own thread, all-reducing a gradient-sized device
// buffer back to back (a communicator moving a step's gradients, again and again) until
// stopped: rank 0 shares GPU 0 with the model. Ranks agree on when to stop through a second,
// one-value all-reduce, so that every rank runs the same collectives.
class busy_communicator {
public:
  explicit busy_communicator(std::size_t floats) {
    const int world = cuda_device_count();
    std::vector<int> devices(world);
    for (int d = 0; d < world; ++d) devices[d] = d;
    group_ = make_nccl_group(devices);
    for (auto& rank : group_)
      threads_.emplace_back([this, link = rank.get(), floats] {
        use_cuda_device(link->device());
        device_array<float> gradients(device_kind::cuda, floats);
        device_array<float> stop(device_kind::cuda, 1);
        std::vector<float> stop_host(1);
        for (;;) {
          link->all_reduce_device(gradients.span());
          stop_host[0] = link->rank() == 0 && stopping_.load() ? 1.0f : 0.0f;
          stop.copy_from(stop_host);
          link->all_reduce_device(stop.span());
          stop.copy_to(stop_host);
          if (stop_host[0] > 0) return;
          if (link->rank() == 0) ++collectives_;
        }
      });
  }
  ~busy_communicator() { stop(); }
  busy_communicator(const busy_communicator&) = delete;
  busy_communicator& operator=(const busy_communicator&) = delete;

  int world() const { return static_cast<int>(group_.size()); }
  std::uint64_t collectives() const { return collectives_.load(); }
  void stop() {
    stopping_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

private:
  std::vector<std::unique_ptr<nccl_transport>> group_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> collectives_{0};
};
#endif

// The GPT on the chosen device and, for cuda, three ways of feeding it beside the CPU
// reference: host spans (the parameters go up and the gradients come down each micro-batch),
// device memory (resident: nothing crosses), and device memory while the NCCL communicator
// all-reduces the gradients' size on the same GPU (the overlap's cost to compute); resident
// also with bf16 compute (--compute-precision bf16) against fp32.
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
  std::printf("gpt %s (%zu parameters, batch 8x64), accumulate_gradients per micro-batch:\n",
              on_device->signature().c_str(), parameters.size());
  std::vector<float> sum(parameters.size());
  const auto host_step = [&](model& m) { return [&] { m.accumulate_gradients(parameters, input, sum); }; };
  const double cpu_rate = steps_per_second(steps, host_step(*make_gpt_on(device_kind::cpu, config)));
  print_rate("cpu", cpu_rate, input);
  if (device == device_kind::cpu) return;
  const double staged = steps_per_second(steps, host_step(*on_device));
  print_rate("cuda, host spans (3 tensor copies per micro-batch)", staged, input);
  const memory_location where = on_device->memory();
  const device_array<float> resident_parameters(device, std::span<const float>(parameters));
  device_array<float> resident_sum(device, std::span<const float>(sum));
  const auto resident_step_of = [&](model& m) {
    return [&] { m.accumulate_gradients_at({resident_parameters.span(), where}, input, {resident_sum.span(), where}); };
  };
  const auto resident_step = resident_step_of(*on_device);
  const std::uint64_t copies = tensor_copies_to_and_from_devices();
  const double resident = steps_per_second(steps, resident_step);
  std::printf("  tensor copies during %d resident micro-batches: %llu\n", steps + 1,
              static_cast<unsigned long long>(tensor_copies_to_and_from_devices() - copies));
  print_rate("cuda, resident", resident, input);
  const auto bf16_model = make_gpt_on(device, config, compute_precision::bf16);
  const double bf16_resident = steps_per_second(steps, resident_step_of(*bf16_model));
  print_rate("cuda, resident, bf16 compute", bf16_resident, input);
  std::printf("  bf16 compute / fp32 compute, resident: %.2fx tokens/s\n", bf16_resident / resident);
#if ACCORD_HAVE_CUDA
  busy_communicator communicator(parameters.size());
  const double overlapped = steps_per_second(steps, resident_step);
  communicator.stop();
  char what[96];
  std::snprintf(what, sizeof what, "cuda, resident, NCCL all-reduce alongside (world %d)", communicator.world());
  print_rate(what, overlapped, input);
  std::printf("  overlap slowdown %.1f%% (%llu all-reduces of %zu floats meanwhile); cuda resident/cpu = %.1fx, "
              "resident/host spans = %.2fx\n",
              100 * (1 - overlapped / resident), static_cast<unsigned long long>(communicator.collectives()),
              parameters.size(), resident / cpu_rate, resident / staged);
#endif
}

}  // namespace

int main(int argc, char** argv) try {
  po::options_description options(
      "accord-bench-gpu: kernel bandwidth vs peak and copy, NCCL all-reduce, GPT tokens/s with and without a "
      "communicator");
  options.add_options()("help", "show this help")
      ("device", po::value<std::string>()->default_value("auto"), "cpu, cuda, cuda:N (GPU N) or auto")
      ("elements", number_flag<std::size_t>(1, std::size_t{1} << 36, std::size_t{1} << 26), "floats per kernel call")
      ("iterations", number_flag(1, 1'000'000, 20), "timed calls per kernel")
      ("gpt-steps", number_flag(0, 1'000'000, 5), "timed GPT steps (0: skip)");
  const auto parsed = parse_flags(argc, argv, options, "usage: accord-bench-gpu [options]");
  if (!parsed) return 0;  // --help
  const po::variables_map& vm = *parsed;
  const std::string device_name = vm["device"].as<std::string>();
  const device_kind device = parse_device(device_name);
  if (const std::optional<int> gpu = cuda_index(device_name)) use_cuda_device(*gpu);
  const std::size_t n = vm["elements"].as<std::size_t>();
  const int iterations = vm["iterations"].as<int>();
  // Host bytes per element: its float; on the cpu also the five float arrays, the packed signs
  // (one word set and eight voters' ones) and the 16-bit vote counts.
  const double bytes_per_element = device == device_kind::cpu ? 6 * sizeof(float) + 9.0 / 8 + 2 : sizeof(float);
  require_memory(static_cast<double>(n) * bytes_per_element, "--elements " + std::to_string(n));
  std::printf("device: %s\n", describe_device(device).c_str());
  bench_kernels(device, n, iterations, measure_copies(device, n, iterations));
  if (device == device_kind::cuda) bench_nccl(n, iterations);
  if (const int steps = vm["gpt-steps"].as<int>(); steps > 0) bench_gpt(device, steps);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "accord-bench-gpu: " << e.what() << "\n";
  return 2;
}
