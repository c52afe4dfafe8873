#include "transport/link_model.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <span>
#include <sstream>
#include <stdexcept>

namespace accord {
namespace {

struct unit {
  std::string_view name;
  double factor;  // to bytes per second, or to seconds
};

// Bits per second; matched case-insensitively.
constexpr std::array bit_units{unit{"bit", 1.0 / 8}, unit{"kbit", 1e3 / 8}, unit{"mbit", 1e6 / 8},
                               unit{"gbit", 1e9 / 8}, unit{"tbit", 1e12 / 8}};
// Bytes per second; matched exactly.
constexpr std::array byte_units{unit{"B", 1},     unit{"KB", 1e3},  unit{"kB", 1e3},
                                unit{"MB", 1e6},  unit{"GB", 1e9},  unit{"TB", 1e12}};
constexpr std::array time_units{unit{"ns", 1e-9}, unit{"us", 1e-6}, unit{"ms", 1e-3}, unit{"s", 1}};

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

std::string lower(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

const unit* find_unit(std::span<const unit> units, std::string_view name, bool any_case) {
  const std::string wanted = any_case ? lower(name) : std::string(name);
  const auto found = std::find_if(units.begin(), units.end(), [&](const unit& u) { return u.name == wanted; });
  return found == units.end() ? nullptr : &*found;
}

std::string quoted(std::string_view text) {
  std::string result;
  result.reserve(text.size() + 2);
  result.append(1, '\'').append(text).append(1, '\'');
  return result;
}

[[noreturn]] void reject(std::string_view spec, const std::string& problem) {
  throw std::invalid_argument("link spec " + quoted(spec) + ": " + problem +
                              " (expected e.g. '1gbit,50us', '10gbit', '2GB,5us' or 'unlimited')");
}

}  // namespace

link_model link_model::parse(std::string_view spec) {
  link_model link;
  bool have_bandwidth = false, have_latency = false;
  std::string_view rest = spec;
  do {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) reject(spec, "trailing comma");
    if (item.empty()) reject(spec, "empty item");

    if (lower(item) == "unlimited") {
      if (have_bandwidth) reject(spec, "bandwidth given twice");
      have_bandwidth = true;
      continue;
    }
    double value = 0;
    const auto [number_end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (error != std::errc{} || !std::isfinite(value) || value < 0)
      reject(spec, quoted(item) + " does not start with a non-negative number");
    const std::string_view unit_name = trim(item.substr(number_end - item.data()));
    if (unit_name.empty()) reject(spec, quoted(item) + " has no unit");
    if (const unit* u = find_unit(time_units, unit_name, false)) {
      if (have_latency) reject(spec, "latency given twice");
      link.latency_seconds = value * u->factor;
      have_latency = true;
      continue;
    }
    const unit* u = find_unit(bit_units, unit_name, true);
    if (!u) u = find_unit(byte_units, unit_name, false);
    if (!u)
      reject(spec, "unknown unit " + quoted(unit_name) +
                       " (bandwidth: bit, kbit, mbit, gbit, tbit, B, KB, MB, GB, TB per second; "
                       "latency: ns, us, ms, s)");
    if (have_bandwidth) reject(spec, "bandwidth given twice");
    if (value == 0) reject(spec, "bandwidth must be positive (say 'unlimited' for no limit)");
    link.bandwidth_bytes_per_second = value * u->factor;
    have_bandwidth = true;
  } while (!rest.empty());
  return link;
}

std::chrono::nanoseconds link_model::wire_time(std::size_t bytes) const {
  if (bandwidth_bytes_per_second == 0) return std::chrono::nanoseconds::zero();
  return std::chrono::round<std::chrono::nanoseconds>(
      std::chrono::duration<double>(static_cast<double>(bytes) / bandwidth_bytes_per_second));
}

std::chrono::nanoseconds link_model::latency() const {
  return std::chrono::round<std::chrono::nanoseconds>(std::chrono::duration<double>(latency_seconds));
}

std::string link_model::to_string() const {
  std::ostringstream text;
  if (bandwidth_bytes_per_second == 0) {
    text << "unlimited";
  } else {
    const double bits = bandwidth_bytes_per_second * 8;
    const auto scale = std::find_if(bit_units.rbegin(), bit_units.rend(),
                                    [&](const unit& u) { return bits >= u.factor * 8; });
    const unit& shown = scale == bit_units.rend() ? bit_units.front() : *scale;
    text << bits / (shown.factor * 8) << ' ' << shown.name << "/s";
  }
  if (latency_seconds > 0) {
    const auto scale = std::find_if(time_units.rbegin(), time_units.rend(),
                                    [&](const unit& u) { return latency_seconds >= u.factor; });
    const unit& shown = scale == time_units.rend() ? time_units.front() : *scale;
    text << ", " << latency_seconds / shown.factor << ' ' << shown.name;
  }
  return text.str();
}

}  // namespace accord
