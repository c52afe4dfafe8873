// accord-bench-collectives: bus bandwidth of the ring collectives over UCX on loopback (ranks
// as threads of this process), printed beside the raw UCX point-to-point bandwidth measured in
// the same run, so the ratio shows what the collective layer costs on top of the wire.
//
// Bus bandwidth follows NCCL's convention: bytes moved per rank per second on the busiest link,
// i.e. algorithm bandwidth (buffer bytes / time) times 2(N-1)/N for all-reduce and the sign
// vote (votes up, result down) and (N-1)/N for reduce-scatter. Two raw baselines:
//   pair:  rank 0 streams frames of the size to rank 1 while the others idle;
//   ring:  every rank sends a frame of the size to its successor while receiving one from its
//          predecessor (send_recv), the exact link pattern of a ring step.
// Where ucx_perftest is installed, its tag bandwidth at the largest size is printed too (a
// separate server and client process, busy-polling, no accord code involved).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
#include "transport/ucx/ucx_transport.hpp"

namespace po = boost::program_options;
using namespace accord;

namespace {

using steady = std::chrono::steady_clock;

// Runs body(rank's transport) on one thread per rank; returns the slowest rank's seconds per
// call after one warm-up call. Every rank makes the same calls, so they stay in lockstep.
double time_on_all_ranks(std::vector<std::unique_ptr<transport>>& group, int calls,
                         const std::function<void(transport&)>& body) {
  std::vector<double> seconds(group.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      transport& t = *group[r];
      body(t);
      std::vector<float> barrier(1);
      t.all_reduce(barrier);
      const auto start = steady::now();
      for (int i = 0; i < calls; ++i) body(t);
      seconds[r] = std::chrono::duration<double>(steady::now() - start).count() / calls;
    });
  for (auto& thread : threads) thread.join();
  return *std::ranges::max_element(seconds);
}

double gigabytes_per_second(double bytes, double seconds) { return bytes / seconds / 1e9; }

std::string human_bytes(std::size_t bytes) {
  if (bytes >= (1u << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
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

}  // namespace

int main(int argc, char** argv) {
  ucx_options options;
  po::options_description flags(
      "accord-bench-collectives: bus bandwidth of all_reduce / reduce_scatter / sign_majority over UCX on\n"
      "loopback (ranks as threads), beside raw UCX point-to-point bandwidth from the same run.\nOptions");
  flags.add_options()("help,h", "print this help")
      ("ranks,n", number_flag(2, 64, 2), "number of ranks (threads), 2..64")
      ("min-bytes", number_flag<std::size_t>(8, std::size_t{1} << 34, 1 << 12), "smallest message size in bytes")
      ("max-bytes", number_flag<std::size_t>(8, std::size_t{1} << 34, 64 << 20),
       "largest message size in bytes (sizes step x4)")
      ("volume-mib", number_flag(number_range<double>{0, 1e6, true}, 512.0),
       "bytes per measurement and size, in MiB (sets the repetitions; at least 3)")
      ("detect-peer-failure", po::bool_switch(&options.detect_peer_failure),
       "UCX error mode PEER: tcp only, no shared memory (see transport/ucx/ucx_transport.hpp)")
      ("net-devices", po::value(&options.net_devices)->default_value(""),
       "UCX_NET_DEVICES for the ranks (default: lo, or the environment's)");
  int ranks = 0;
  std::size_t min_bytes = 0, max_bytes = 0;
  double volume_mib = 0;
  try {
    const auto parsed = parse_flags(argc, argv, flags, "usage: accord-bench-collectives [options]");
    if (!parsed) return 0;  // --help
    const po::variables_map& args = *parsed;
    ranks = args["ranks"].as<int>();
    min_bytes = args["min-bytes"].as<std::size_t>();
    max_bytes = args["max-bytes"].as<std::size_t>();
    volume_mib = args["volume-mib"].as<double>();
    if (options.net_devices.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:,.-") != std::string::npos)
      throw std::invalid_argument("--net-devices '" + options.net_devices + "' is not a device list");
    if (max_bytes < min_bytes)
      throw std::invalid_argument("--max-bytes " + std::to_string(max_bytes) + " is below --min-bytes " +
                                  std::to_string(min_bytes));
    // Per rank at the largest size: the byte buffers out and in, the floats, the votes and the majority.
    require_memory(double(ranks) * 5 * double(max_bytes), "--max-bytes " + std::to_string(max_bytes));
  } catch (const std::exception& e) {
    std::cerr << "accord-bench-collectives: " << e.what() << "\n";
    return 2;
  }

  try {
    auto group = make_ucx_loopback_group(ranks, options);
    const double ring_factor = 2.0 * (ranks - 1) / ranks, scatter_factor = double(ranks - 1) / ranks;
    std::printf("UCX loopback, %d ranks as threads, %u hardware threads, error mode %s\n", ranks,
                std::thread::hardware_concurrency(), options.detect_peer_failure ? "PEER (tcp)" : "NONE (shm+cma)");
    std::printf("GB/s = 1e9 bytes/s; bus bandwidth per NCCL's convention; ratio = all_reduce bus / ring p2p\n");
    std::printf("%10s %10s %10s %12s %12s %12s %7s\n", "size", "pair p2p", "ring p2p", "all_reduce", "red_scatter",
                "sign_major", "ratio");
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const int calls = std::max(3, static_cast<int>(volume_mib * (1 << 20) / static_cast<double>(bytes)));
      const double size = static_cast<double>(bytes);

      std::vector<std::vector<std::byte>> out(ranks, std::vector<std::byte>(bytes, std::byte{1}));
      std::vector<std::vector<std::byte>> in(ranks, std::vector<std::byte>(bytes));
      const double pair = time_on_all_ranks(group, calls, [&](transport& t) {
        if (t.rank() == 0) t.send(1, 1, out[0]);
        if (t.rank() == 1) t.recv(0, 1, in[1]);
      });
      const double ring = time_on_all_ranks(group, calls, [&](transport& t) {
        const int r = t.rank();
        t.send_recv((r + 1) % ranks, out[r], (r + ranks - 1) % ranks, in[r], 2);
      });
      std::vector<std::vector<float>> floats(ranks, std::vector<float>(bytes / sizeof(float), 1.0f));
      const double all_reduce = time_on_all_ranks(group, calls, [&](transport& t) { t.all_reduce(floats[t.rank()]); });
      const double reduce_scatter =
          time_on_all_ranks(group, calls, [&](transport& t) { t.reduce_scatter(floats[t.rank()]); });
      const std::size_t signs = bytes * 8;
      std::vector<std::vector<std::uint64_t>> votes(ranks, std::vector<std::uint64_t>(packed_words(signs), 0x5a5a5a5aull));
      std::vector<std::vector<std::uint64_t>> majority(ranks, std::vector<std::uint64_t>(packed_words(signs)));
      const double vote = time_on_all_ranks(
          group, calls, [&](transport& t) { t.sign_majority(votes[t.rank()], signs, 0, majority[t.rank()]); });

      const double ring_bandwidth = gigabytes_per_second(size, ring);
      const double all_reduce_bus = gigabytes_per_second(size, all_reduce) * ring_factor;
      std::printf("%10s %10.2f %10.2f %12.2f %12.2f %12.2f %7.2f\n", human_bytes(bytes).c_str(),
                  gigabytes_per_second(size, pair), ring_bandwidth, all_reduce_bus,
                  gigabytes_per_second(size, reduce_scatter) * scatter_factor,
                  gigabytes_per_second(size, vote) * ring_factor, all_reduce_bus / ring_bandwidth);
      std::fflush(stdout);
    }
    std::size_t largest = min_bytes;
    while (largest * 4 <= max_bytes) largest *= 4;
    const char* environment_devices = std::getenv("UCX_NET_DEVICES");
    const std::string devices = !options.net_devices.empty() ? options.net_devices
                                : environment_devices        ? environment_devices
                                                             : "lo";
    const int calls = std::max(3, static_cast<int>(volume_mib * (1 << 20) / static_cast<double>(largest)));
    if (const auto perftest = perftest_bandwidth(largest, calls, devices))
      std::printf("ucx_perftest -t tag_bw -s %zu (two processes, busy polling): %.2f GB/s\n", largest, *perftest);
    else
      std::printf("ucx_perftest: not installed or no result\n");
  } catch (const std::exception& e) {
    std::cerr << "accord-bench-collectives: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
