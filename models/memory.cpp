#include "models/memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace accord {

double available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string name;
    double kilobytes = 0;
    if (fields >> name >> kilobytes && name == "MemAvailable:") return kilobytes * 1024;
  }
  return static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  std::size_t unit = 0;
  while (bytes >= 1000 && unit + 1 < std::size(units)) {
    bytes /= 1000;
    ++unit;
  }
  char text[48];
  if (bytes >= 1000)  // beyond exabytes: the exponent says more than the digits
    std::snprintf(text, sizeof text, "%.1e %s", bytes, units[unit]);
  else
    std::snprintf(text, sizeof text, unit ? "%.1f %s" : "%.0f %s", bytes, units[unit]);
  return text;
}

double worker_buffer_bytes(double parameters, double workers) {
  return (4 * workers + 1) * sizeof(float) * parameters;
}

void require_memory(double needed_bytes, const std::string& what) {
  const double available = available_memory_bytes();
  if (needed_bytes > available)
    throw std::invalid_argument(what + ": needs about " + format_bytes(needed_bytes) + " of memory, " +
                                format_bytes(available) + " available");
}

}  // namespace accord
