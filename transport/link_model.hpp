#pragma once
// An emulated network link for the in-process transport, so that overlap of computation and
// communication is visible and measurable inside one process: each rank's outgoing link
// carries one message at a time at `bandwidth_bytes_per_second` and delivers it
// `latency_seconds` after its last byte left.
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace accord {

struct link_model {
  double bandwidth_bytes_per_second = 0;  // 0 = unlimited
  double latency_seconds = 0;

  // Parses "unlimited", "10gbit", "1gbit,50us", "100mbit,1ms", "2GB,5us", "unlimited,20us",
  // "50us": a bandwidth, a latency, or both separated by a comma (either order). Bandwidth
  // units count bits or bytes per second, in powers of 1000: bit, kbit, mbit, gbit, tbit (any
  // case, so "Gbit" works too) or B, KB (or kB), MB, GB, TB (upper-case B, so "mb" is no
  // accidental megabyte). Latency units: ns, us, ms, s. A bad spec is an std::invalid_argument
  // naming it.
  static link_model parse(std::string_view spec);

  bool unlimited() const { return bandwidth_bytes_per_second == 0 && latency_seconds == 0; }
  // How long `bytes` occupy the sender's link (zero at unlimited bandwidth).
  std::chrono::nanoseconds wire_time(std::size_t bytes) const;
  std::chrono::nanoseconds latency() const;
  // "1 gbit/s, 50 us", "unlimited": for progress lines and summaries.
  std::string to_string() const;
};

}  // namespace accord
