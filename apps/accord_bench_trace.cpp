// accord-bench-trace: what a timeline span costs (observe/trace.hpp) with --trace off (no
// recorder: a null check) and on (recorded into memory), per span, over --spans spans.
#include "observe/trace.hpp"
#include "apps/flags.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

using namespace accord;

int main(int argc, char** argv) {
  boost::program_options::options_description options("accord-bench-trace options");
  options.add_options()("help,h", "show this help")(
      "spans", number_flag<long>(1, 100'000'000, 200'000), "spans per measurement");
  try {
    const auto flags = parse_flags(argc, argv, options, "usage: accord-bench-trace [--spans N]");
    if (!flags) return 0;
    const long spans = (*flags)["spans"].as<long>();
    auto nanoseconds_per_span = [&] {
      const auto start = std::chrono::steady_clock::now();
      for (long i = 0; i < spans; ++i) const trace_span span("micro-batch", worker_track(0, trace_role::compute), i);
      return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
             static_cast<double>(spans);
    };
    const double off = nanoseconds_per_span();
    const std::string path = (std::filesystem::temp_directory_path() / "accord-bench-trace.json").string();
    double on = 0;
    {
      const trace_session session(path);
      on = nanoseconds_per_span();
    }
    std::filesystem::remove(path);
    std::printf("trace off: %.1f ns per span | trace on: %.1f ns per span (%ld spans, recorded in memory)\n", off, on,
                spans);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-bench-trace: %s\n", e.what());
    return 2;
  }
}
