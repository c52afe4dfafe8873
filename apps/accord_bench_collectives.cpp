// accord-bench-collectives: bus bandwidth of the ring collectives over UCX between processes on
// this machine (one forked process per rank, as accord-launch runs a job), printed beside the
// raw UCX point-to-point bandwidth measured in the same run, so the ratio shows what the
// collective layer costs on top of the wire.
//
// Bus bandwidth follows NCCL's convention: bytes moved per rank per second on the busiest link,
// i.e. algorithm bandwidth (buffer bytes / time) times 2(N-1)/N for all-reduce and the sign
// vote (votes up, result down) and (N-1)/N for reduce-scatter. Raw baselines:
//   pair:      rank 0 streams frames of the size to rank 1 while the others idle;
//   ring:      every rank sends a frame of the size to its successor while receiving one from
//              its predecessor (send_recv), the link pattern of a ring step. Over shared memory
//              the receiver's CPU does the copy, so a ring keeps N cores busy where a pair keeps
//              one: on a machine with fewer idle cores than ranks (or when memory bandwidth is
//              shared), ring p2p is what the links of an all-reduce can do, and ar/ring the
//              collective layer's own efficiency;
//   bf16:      all_reduce with --wire-precision bf16 (accord-train's default), bus bandwidth of
//              the bytes on the wire (half the buffer's);
//   perftest:  ucx_perftest's tag bandwidth, where installed (its own server and client
//              processes, busy polling, no accord code involved), run after the others.
// All ranks share this machine's cores with each other (and with anything else running), so
// bus bandwidth on a busy or small machine shows the cores as much as the code. The column
// "ar/pair 1 core" is the ratio it would reach with an idle core per rank, derived from CPU
// time, which load barely changes: a pair transfer costs one copy of its bytes (the receiver's
// CPU, as UCX's shared memory and CMA copy on the receiving side) and an all-reduce costs
// 2(N-1) such copies of its buffer over all ranks plus the reduction, so with each rank on its
// own core the ratio is 2(N-1) * cpu(pair) / cpu(all_reduce).
// Every size runs a warm-up call of each kind, then --repetitions rounds, each timing every
// kind once in turn (interleaved, so load changes hit all alike) over a barrier; a
// measurement's time is the slowest rank's, and the table shows medians over the rounds. CPU
// seconds (user + system of every rank's process, medians) per byte of the buffer do not depend
// on how busy the machine is, unlike bandwidths.
//
// --feedback-kernels instead times, on one core of this process, the CPU side of int8, fp8, fp4, sign, sign2 and sign3
// real rounds with error feedback (transport/block_quantize.hpp) in ns per parameter: encoding
// fused with the residual update (quantize_with_feedback), the all-gather's encoding of a change
// (quantize_difference) and decoding fused with the accumulate (add_dequantized), at 1M and 16M
// parameters (the larger ones do not fit in any cache), with the kernels a run picks (AVX2 where
// the CPU has it) and then the baseline ones. Medians over --repetitions.
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/flags.hpp"
#include "models/memory.hpp"
#include "transport/block_quantize.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace po = boost::program_options;
using namespace accord;

namespace {

using steady = std::chrono::steady_clock;

enum measured { pair_p2p, ring_p2p, all_reduce, all_reduce_bf16, reduce_scatter, sign_majority, kinds };

// One rank's time and CPU time for the calls of one measurement.
struct sample {
  double seconds = 0;
  double cpu_seconds = 0;
};

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::vector<std::size_t> message_sizes(std::size_t min_bytes, std::size_t max_bytes) {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) sizes.push_back(bytes);
  return sizes;
}

int calls_per_measurement(double volume_mib, std::size_t bytes) {
  return std::max(1, static_cast<int>(volume_mib * (1 << 20) / static_cast<double>(bytes)));
}

struct plan {
  std::vector<std::size_t> sizes;
  int repetitions = 0;
  double volume_mib = 0;
};

// One rank's whole run: samples in order size, repetition, kind.
std::vector<sample> measure_rank(transport& t, const plan& p) {
  const int rank = t.rank(), world = t.size();
  std::vector<sample> samples;
  std::vector<float> barrier(1);
  for (const std::size_t bytes : p.sizes) {
    const int calls = calls_per_measurement(p.volume_mib, bytes);
    std::vector<std::byte> out(bytes, std::byte{1}), in(bytes);
    std::vector<float> floats(bytes / sizeof(float), 1.0f);
    const std::size_t signs = bytes * 8;
    std::vector<std::uint64_t> votes(packed_words(signs), 0x5a5a5a5aull ^ static_cast<std::uint64_t>(rank));
    std::vector<std::uint64_t> majority(packed_words(signs));
    const std::array<std::function<void()>, kinds> bodies = {
        [&] {
          if (rank == 0) t.send(1, 1, out);
          if (rank == 1) t.recv(0, 1, in);
        },
        [&] { t.send_recv((rank + 1) % world, out, (rank + world - 1) % world, in, 2); },
        [&] { t.all_reduce(floats); },
        [&] { t.all_reduce(floats, wire_precision::bf16); },
        [&] { t.reduce_scatter(floats); },
        [&] { t.sign_majority(votes, signs, 0, majority); },
    };
    for (const auto& body : bodies) body();  // warm-up: buffers faulted in, connections busy
    for (int repetition = 0; repetition < p.repetitions; ++repetition)
      for (const auto& body : bodies) {
        t.all_reduce(barrier);
        const double cpu = cpu_seconds();
        const auto start = steady::now();
        for (int i = 0; i < calls; ++i) body();
        samples.push_back({std::chrono::duration<double>(steady::now() - start).count(), cpu_seconds() - cpu});
      }
  }
  return samples;
}

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port() {
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  bind(probe, reinterpret_cast<sockaddr*>(&address), length);
  getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
  close(probe);
  return ntohs(address.sin_port);
}

bool write_all(int fd, const void* data, std::size_t bytes) {
  const char* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = write(fd, at, bytes);
    if (written <= 0) return false;
    at += written;
    bytes -= static_cast<std::size_t>(written);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t bytes) {
  char* at = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = read(fd, at, bytes);
    if (got <= 0) return false;
    at += got;
    bytes -= static_cast<std::size_t>(got);
  }
  return true;
}

// Forks one process per rank; each connects over UCX and runs the plan, then hands its samples
// to the parent through a pipe. Returns samples[rank]; throws if a rank failed (its own error
// went to stderr) after stopping the others.
std::vector<std::vector<sample>> run_ranks(int world, const ucx_options& options, const plan& p) {
  std::vector<std::string> addresses;
  for (int r = 0; r < world; ++r) addresses.push_back("127.0.0.1:" + std::to_string(free_port()));
  const std::size_t expected = p.sizes.size() * static_cast<std::size_t>(p.repetitions) * kinds;
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("cannot create a pipe for rank " + std::to_string(r));
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child < 0) throw std::runtime_error("cannot fork rank " + std::to_string(r));
    if (child == 0) {
      close(fds[0]);
      int status = 0;
      try {
        const auto t = connect_ucx_rank(r, addresses, options);
        const std::vector<sample> samples = measure_rank(*t, p);
        status = write_all(fds[1], samples.data(), samples.size() * sizeof(sample)) ? 0 : 1;
      } catch (const std::exception& e) {
        // One write per line: the ranks fail at once, and std::cerr's pieces would interleave.
        const std::string line = "accord-bench-collectives: rank " + std::to_string(r) + ": " + e.what() + "\n";
        [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, line.data(), line.size());
        status = 1;
      }
      _exit(status);
    }
    close(fds[1]);
    children.push_back(child);
    pipes.push_back(fds[0]);
  }
  std::vector<std::vector<sample>> samples(world, std::vector<sample>(expected));
  std::vector<bool> done(world, false);
  std::string failed;
  for (int finished = 0; finished < world && failed.empty();) {
    std::vector<pollfd> waiting;
    for (int r = 0; r < world; ++r)
      if (!done[r]) waiting.push_back({pipes[r], POLLIN, 0});
    poll(waiting.data(), waiting.size(), -1);
    for (const pollfd& w : waiting) {
      if (w.revents == 0) continue;
      const int r = static_cast<int>(std::ranges::find(pipes, w.fd) - pipes.begin());
      done[r] = true;
      ++finished;
      if (!read_all(w.fd, samples[r].data(), expected * sizeof(sample))) failed = "rank " + std::to_string(r) + " failed";
    }
  }
  for (int r = 0; r < world; ++r) {
    if (!failed.empty()) kill(children[r], SIGTERM);
    waitpid(children[r], nullptr, 0);
    close(pipes[r]);
  }
  if (!failed.empty()) throw std::runtime_error(failed);
  return samples;
}

double median(std::vector<double> values) {
  std::ranges::sort(values);
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// "1.23", or "-" for no value.
std::string two_decimals(std::optional<double> value) {
  if (!value) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", *value);
  return text;
}

std::string human_bytes(std::size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// ucx_perftest's tag_bw bandwidth (GB/s) between a server and a client process on loopback.
std::optional<double> perftest_bandwidth(std::size_t bytes, int iterations, const std::string& net_devices) {
  if (std::system("command -v ucx_perftest > /dev/null 2>&1") != 0) return std::nullopt;
  const std::string prefix = "UCX_NET_DEVICES=" + net_devices + " timeout 300 ucx_perftest ";
  const std::string port = " -p " + std::to_string(free_port());
  std::FILE* server = popen((prefix + port + " 2>&1").c_str(), "r");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::FILE* client = popen((prefix + "127.0.0.1" + port + " -t tag_bw -s " + std::to_string(bytes) + " -n " +
                             std::to_string(iterations) + " 2>&1")
                                .c_str(),
                            "r");
  std::optional<double> result;
  char line[512];
  while (std::fgets(line, sizeof line, client)) {
    long done = 0;
    double median_us, average_us, overall_us, average_mb_per_s;
    if (std::sscanf(line, " Final: %ld %lf %lf %lf %lf", &done, &median_us, &average_us, &overall_us,
                    &average_mb_per_s) == 5)
      result = average_mb_per_s * (1 << 20) / 1e9;  // ucx_perftest's MB is 2^20 bytes
  }
  pclose(client);
  pclose(server);
  return result;
}

// --feedback-kernels: ns per parameter of the error-feedback kernels on one core.
template <class Block>
void time_feedback_kernels(const char* code, const char* target, std::size_t parameters, int repetitions) {
  std::vector<float> gradient(parameters), residual(parameters, 0.f), sums(parameters, 0.f), base(parameters);
  for (std::size_t i = 0; i < parameters; ++i) {
    gradient[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.f;
    base[i] = 0.5f * gradient[(i * 7) % parameters];
  }
  std::vector<Block> blocks(quantized_blocks(parameters));
  // Enough passes per measurement that it lasts a while even at 1M parameters.
  const int passes = std::max<int>(1, static_cast<int>((std::size_t{64} << 20) / parameters));
  // This thread's CPU time, which a busy machine's other processes do not add to (wall time is
  // printed beside it: on an idle core the two agree).
  const auto thread_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
  };
  struct timing {
    double cpu, wall;  // ns per parameter
  };
  const auto ns_per_parameter = [&](const std::function<void()>& body) {
    body();  // warm-up: pages faulted in
    std::vector<double> cpu, wall;
    for (int r = 0; r < repetitions; ++r) {
      const double cpu_start = thread_seconds();
      const auto start = steady::now();
      for (int i = 0; i < passes; ++i) body();
      const double per = 1e9 / passes / static_cast<double>(parameters);
      wall.push_back(std::chrono::duration<double>(steady::now() - start).count() * per);
      cpu.push_back((thread_seconds() - cpu_start) * per);
    }
    return timing{median(cpu), median(wall)};
  };
  const timing encode =
      ns_per_parameter([&] { quantize_with_feedback(gradient, 0.25f, residual, std::span<Block>(blocks)); });
  const timing difference = ns_per_parameter([&] { quantize_difference(gradient, base, std::span<Block>(blocks)); });
  const timing decode = ns_per_parameter([&] { add_dequantized(std::span<const Block>(blocks), sums, sums); });
  std::printf("%5s %5zuM %8s | %6.3f (%6.3f) %6.3f (%6.3f) %6.3f (%6.3f) | %5.1f %5.1f %5.1f\n", code, parameters >> 20,
              target,
              encode.cpu, encode.wall, difference.cpu, difference.wall, decode.cpu, decode.wall, 12 / encode.cpu,
              8 / difference.cpu, 8 / decode.cpu);
  std::fflush(stdout);
}

int run_feedback_kernels(int repetitions) {
  std::printf("error-feedback kernels on one core (%u hardware threads here), medians of %d; ns per parameter of this "
              "thread's CPU time (wall time in brackets), and GB/s of fp32 streams per CPU second (encode+residual "
              "reads x and e and writes e: 12 B/param; the others 8)\n",
              std::thread::hardware_concurrency(), repetitions);
  std::printf("%5s %6s %8s | %15s %15s %15s | %5s %5s %5s\n", "code", "params", "kernels", "encode+resid",
              "encode change", "decode+add", "GB/s", "GB/s", "GB/s");
  // The kernels a run picks (AVX2 where the CPU has it), then the baseline ones (SSE2 on x86-64).
  const bool avx2 = force_baseline_kernels(false);
  for (const bool baseline : {false, true}) {
    if (baseline && !avx2) break;
    force_baseline_kernels(baseline);
    const char* target = baseline || !avx2 ? "baseline" : "avx2";
    for (const std::size_t parameters : {std::size_t{1} << 20, std::size_t{16} << 20}) {
      time_feedback_kernels<int8_block>("int8", target, parameters, repetitions);
      time_feedback_kernels<fp8_block>("fp8", target, parameters, repetitions);
      time_feedback_kernels<fp4_block>("fp4", target, parameters, repetitions);
      time_feedback_kernels<sign_block>("sign", target, parameters, repetitions);
      time_feedback_kernels<sign2_block>("sign2", target, parameters, repetitions);
      time_feedback_kernels<sign3_block>("sign3", target, parameters, repetitions);
    }
  }
  force_baseline_kernels(false);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ucx_options options;
  po::options_description flags(
      "accord-bench-collectives: bus bandwidth of all_reduce / reduce_scatter / sign_majority over UCX\n"
      "between processes on this machine, beside raw UCX point-to-point bandwidth from the same run.\nOptions");
  flags.add_options()("help,h", "print this help")
      ("ranks,n", number_flag(2, 64, 2), "number of ranks (processes), 2..64")
      ("min-bytes", number_flag<std::size_t>(8, std::size_t{1} << 34, 1 << 20), "smallest message size in bytes")
      ("max-bytes", number_flag<std::size_t>(8, std::size_t{1} << 34, 64 << 20),
       "largest message size in bytes (sizes step x4)")
      ("volume-mib", number_flag(number_range<double>{0, 1e6, true}, 64.0),
       "bytes per measurement and size, in MiB (sets the calls per measurement; at least 1)")
      ("repetitions", number_flag(1, 1000, 5), "interleaved measurements per size and kind (medians are shown)")
      ("detect-peer-failure", po::bool_switch(&options.detect_peer_failure),
       "UCX error mode PEER: tcp only, no shared memory (see transport/ucx/ucx_transport.hpp)")
      ("net-devices", po::value(&options.net_devices)->default_value(""),
       "UCX_NET_DEVICES for the ranks (default: lo, or the environment's)")
      ("feedback-kernels", "instead: ns/param of the error-feedback kernels (int8, fp8, sign) on one core, "
       "at 1M and 16M parameters");
  int ranks = 0;
  plan p;
  try {
    const auto parsed = parse_flags(argc, argv, flags, "usage: accord-bench-collectives [options]");
    if (!parsed) return 0;  // --help
    const po::variables_map& args = *parsed;
    if (args.count("feedback-kernels")) {
      require_memory(16.0 * (16 << 20) * sizeof(float) / 4 * 5, "--feedback-kernels");
      return run_feedback_kernels(args["repetitions"].as<int>());
    }
    ranks = args["ranks"].as<int>();
    const auto min_bytes = args["min-bytes"].as<std::size_t>();
    const auto max_bytes = args["max-bytes"].as<std::size_t>();
    p.volume_mib = args["volume-mib"].as<double>();
    p.repetitions = args["repetitions"].as<int>();
    if (options.net_devices.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:,.-") != std::string::npos)
      throw std::invalid_argument("--net-devices '" + options.net_devices + "' is not a device list");
    if (max_bytes < min_bytes)
      throw std::invalid_argument("--max-bytes " + std::to_string(max_bytes) + " is below --min-bytes " +
                                  std::to_string(min_bytes));
    // Per rank at the largest size: the byte buffers out and in, the floats, the votes and the majority.
    require_memory(double(ranks) * 5 * double(max_bytes), "--max-bytes " + std::to_string(max_bytes));
    p.sizes = message_sizes(min_bytes, max_bytes);
  } catch (const std::exception& e) {
    std::cerr << "accord-bench-collectives: " << e.what() << "\n";
    return 2;
  }
  const char* environment_devices = std::getenv("UCX_NET_DEVICES");
  if (options.net_devices.empty()) options.net_devices = environment_devices ? environment_devices : "lo";
  // A rank that dies leaves its peers waiting; the parent then stops them, but not for minutes.
  options.operation_timeout = std::chrono::seconds(120);

  try {
    const auto samples = run_ranks(ranks, options, p);
    const double ring_factor = 2.0 * (ranks - 1) / ranks, scatter_factor = double(ranks - 1) / ranks;
    // bf16 counts the bytes on the wire, half the buffer's.
    const double factors[kinds] = {1, 1, ring_factor, ring_factor / 2, scatter_factor, ring_factor};
    std::printf("UCX between %d processes on this machine (%u hardware threads), error mode %s, %d interleaved "
                "repetitions, medians\n",
                ranks, std::thread::hardware_concurrency(),
                options.detect_peer_failure ? "PEER (tcp)" : "NONE (shm+cma)", p.repetitions);
    std::printf("GB/s = 1e9 bytes/s, bus bandwidth per NCCL's convention; ar/pair, ar/ring and ar/perf = all_reduce "
                "bus bandwidth / pair p2p, / ring p2p (every rank sending and receiving at once, as in the all-reduce) "
                "and / ucx_perftest;\ncpu ns/B = CPU seconds of all ranks per byte of the buffer\n");
    std::printf("%8s %6s | %8s %8s %8s %10s %8s %10s %10s | %7s %7s %7s | %8s %8s %8s %8s | %14s\n", "size", "calls",
                "perftest", "pair", "ring", "all_reduce", "ar bf16", "red_scat", "sign_vote", "ar/pair", "ar/ring",
                "ar/perf", "cpu pair", "cpu ar", "cpu bf16", "cpu vote", "ar/pair 1 core");
    std::size_t index = 0;
    for (const std::size_t bytes : p.sizes) {
      const int calls = calls_per_measurement(p.volume_mib, bytes);
      double bandwidth[kinds], cpu[kinds];
      for (int k = 0; k < kinds; ++k) {
        std::vector<double> seconds, cpu_seconds;
        for (int repetition = 0; repetition < p.repetitions; ++repetition) {
          const std::size_t at = index + static_cast<std::size_t>(repetition) * kinds + k;
          double slowest = 0, total_cpu = 0;
          for (const auto& rank_samples : samples) {
            slowest = std::max(slowest, rank_samples[at].seconds);
            total_cpu += rank_samples[at].cpu_seconds;
          }
          seconds.push_back(slowest / calls);
          cpu_seconds.push_back(total_cpu / calls);
        }
        bandwidth[k] = double(bytes) / median(seconds) / 1e9 * factors[k];
        cpu[k] = median(cpu_seconds) / double(bytes) * 1e9;
      }
      index += static_cast<std::size_t>(p.repetitions) * kinds;
      const auto perftest = perftest_bandwidth(bytes, calls * p.repetitions, options.net_devices);
      std::printf("%8s %6d | %8s %8.2f %8.2f %10.2f %8.2f %10.2f %10.2f | %7.2f %7.2f %7s | %8.3f %8.3f %8.3f %8.3f | %14.2f\n",
                  human_bytes(bytes).c_str(), calls, two_decimals(perftest).c_str(), bandwidth[pair_p2p],
                  bandwidth[ring_p2p], bandwidth[all_reduce], bandwidth[all_reduce_bf16], bandwidth[reduce_scatter],
                  bandwidth[sign_majority],
                  bandwidth[all_reduce] / bandwidth[pair_p2p], bandwidth[all_reduce] / bandwidth[ring_p2p],
                  two_decimals(perftest ? std::optional(bandwidth[all_reduce] / *perftest) : std::nullopt).c_str(),
                  cpu[pair_p2p], cpu[all_reduce], cpu[all_reduce_bf16], cpu[sign_majority],
                  2.0 * (ranks - 1) * cpu[pair_p2p] / cpu[all_reduce]);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::cerr << "accord-bench-collectives: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
