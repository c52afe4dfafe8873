#include "observe/progress_line.hpp"

#include "observe/step_figures.hpp"

#include <accord/metrics_fields.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <utility>

namespace accord {
namespace {

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// "88.4 KiB", as the status page's tiles write bytes.
std::string format_bytes(double bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  for (; std::abs(bytes) >= 1024 && unit + 1 < std::size(units); ++unit) bytes /= 1024;
  return (unit == 0 ? fixed(bytes, 0) : fixed(bytes, 1)) + " " + units[unit];
}

// `value` as `column` writes it, "-" where it was never measured; padded to the column's width
// ("-" in the middle).
std::string column_value(const progress_column& column, double value, bool measured) {
  std::string text = "-";
  if (measured) switch (column.format) {
      case tile_format::plain: text = fixed(value, 0); break;
      case tile_format::fixed: text = fixed(value, column.digits); break;
      case tile_format::significant: {
        char digits[64];
        std::snprintf(digits, sizeof digits, "%.*g", column.digits, value);
        text = digits;
        break;
      }
      case tile_format::percent: text = fixed(100 * value, column.digits) + "%"; break;
      case tile_format::thousands: text = format_rate(value); break;
      case tile_format::bytes: text = format_bytes(value); break;
    }
  const std::size_t width = static_cast<std::size_t>(std::max(column.width, 0));
  if (text.size() >= width) return text;
  const std::size_t pad = width - text.size();
  return measured ? std::string(pad, ' ') + text : std::string((pad + 1) / 2, ' ') + text + std::string(pad / 2, ' ');
}

// `pattern` with `value` for "{}" and `unit` for "{unit}".
std::string filled(std::string_view pattern, const std::string& value, const std::string& unit) {
  std::string text(pattern);
  if (const auto at = text.find("{unit}"); at != std::string::npos) text.replace(at, 6, unit);
  if (const auto at = text.find("{}"); at != std::string::npos) text.replace(at, 2, value);
  return text;
}

}  // namespace

std::string format_rate(double per_second) {
  char text[32];
  if (per_second >= 1e6)
    std::snprintf(text, sizeof text, "%.2fM", per_second / 1e6);
  else if (per_second >= 1e3)
    std::snprintf(text, sizeof text, "%.1fk", per_second / 1e3);
  else
    std::snprintf(text, sizeof text, "%.0f", per_second);
  return text;
}

std::string format_duration(double seconds) {
  char text[32];
  const long long whole = std::llround(std::max(0.0, seconds));
  if (whole < 60)
    std::snprintf(text, sizeof text, "%llds", whole);
  else if (whole < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", whole / 60, whole % 60);
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", whole / 3600, whole / 60 % 60);
  return text;
}

progress_log::progress_log(std::uint64_t steps, std::uint64_t interval, std::string unit)
    : steps_(steps), interval_(interval), unit_(std::move(unit)) {}

std::string progress_log::on_step(const step_metrics& m) {
  if (!first_seen_) first_seen_ = m;
  latest_ = with_latest_measured(latest_, m);
  if (!interval_ || (m.step % interval_ != 0 && m.step != 1 && m.step != steps_)) return {};
  char step[64];
  std::snprintf(step, sizeof step, "step %5llu/%llu", static_cast<unsigned long long>(m.step),
                static_cast<unsigned long long>(steps_));
  std::string line = step;
  for_each_field<step_metrics>([&](const auto& f) {
    using value_type = typename std::remove_cvref_t<decltype(f)>::value_type;
    if constexpr (std::is_arithmetic_v<value_type>) {
      if (f.shown.progress.text.empty()) return;
      const double value = static_cast<double>(*latest_.*f.member);
      const bool measured = !(f.shown.absent_below_zero && value < 0);
      line += " | " + filled(f.shown.progress.text, column_value(f.shown.progress, value, measured), unit_);
    }
  });
  // The clock: the job's seconds, and the time left at the pace since the first step seen.
  char clock[32];
  std::snprintf(clock, sizeof clock, " | %.1fs", m.seconds);
  line += clock;
  if (const double steps_done = static_cast<double>(m.step - first_seen_->step); steps_done > 0)
    line += " | ETA " + format_duration((m.seconds - first_seen_->seconds) / steps_done *
                                        static_cast<double>(steps_ - std::min(m.step, steps_)));
  return line;
}

}  // namespace accord
