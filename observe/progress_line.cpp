#include "observe/progress_line.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace accord {

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
  if (m.eval_loss >= 0) last_eval_ = m.eval_loss;
  if (!interval_ || (m.step % interval_ != 0 && m.step != 1 && m.step != steps_)) return {};
  const double steps_done = static_cast<double>(m.step - first_seen_->step);
  const std::string eta =
      steps_done > 0 ? " | ETA " + format_duration((m.seconds - first_seen_->seconds) / steps_done *
                                                   static_cast<double>(steps_ - std::min(m.step, steps_)))
                     : "";
  char eval[16] = "   -  ";
  if (last_eval_ >= 0) std::snprintf(eval, sizeof eval, "%.4f", last_eval_);
  char line[256];
  std::snprintf(line, sizeof line, "step %5llu/%llu | loss %.4f | eval %s | %s %s/s | %.1f bits/param | hidden %3.0f%% | %.1fs%s",
                static_cast<unsigned long long>(m.step), static_cast<unsigned long long>(steps_), m.train_loss, eval,
                format_rate(m.items_per_second).c_str(), unit_.c_str(), m.bits_per_parameter, 100 * m.hidden_fraction,
                m.seconds, eta.c_str());
  return line;
}

}  // namespace accord
