#include "cluster/heartbeat_detector.hpp"

#include <algorithm>

namespace accord {
namespace {

using duration = heartbeat_detector::clock::duration;

duration median_of(std::vector<duration> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace

heartbeat_detector::heartbeat_detector(heartbeat_detector_settings settings) : settings_(settings) {}

duration heartbeat_detector::threshold_of(const std::deque<duration>& gaps) const {
  const duration floor = settings_.floor;
  if (gaps.size() < settings_.learned_after) return std::min<duration>(2 * floor, settings_.upper_bound);
  const duration median = median_of({gaps.begin(), gaps.end()});
  std::vector<duration> deviations;
  deviations.reserve(gaps.size());
  for (const duration gap : gaps) deviations.push_back(gap > median ? gap - median : median - gap);
  // 1.4826 × MAD estimates the standard deviation of normally distributed gaps.
  const auto spread = std::chrono::duration_cast<duration>(median_of(std::move(deviations)) * 1.4826 *
                                                            settings_.deviations);
  return std::min<duration>(std::max<duration>(median + spread, floor), settings_.upper_bound);
}

heartbeat_detector::clock::duration heartbeat_detector::threshold_of(watched& w) const {
  if (!w.threshold) w.threshold = threshold_of(w.gaps);
  return *w.threshold;
}

heartbeat_detector::clock::duration heartbeat_detector::least_threshold() const {
  return std::min<duration>(settings_.floor, settings_.upper_bound);
}

void heartbeat_detector::heard(std::uint64_t member, clock::time_point at) {
  auto [entry, first] = members_.try_emplace(member);
  watched& w = entry->second;
  if (!first && at <= w.last) return;
  if (!first) {
    w.gaps.push_back(at - w.last);
    if (w.gaps.size() > settings_.window) w.gaps.pop_front();
  }
  w.last = at;
  w.marked = false;
  w.threshold.reset();
}

void heartbeat_detector::forget(std::uint64_t member) { members_.erase(member); }

std::vector<heartbeat_detector::suspicion> heartbeat_detector::check(clock::time_point now) {
  // After a pause of this process, heartbeats may still be unread: mark, judge at the next check.
  const bool late = last_check_ && now - *last_check_ > 2 * settings_.check_interval;
  last_check_ = now;
  std::vector<suspicion> silent;
  for (auto it = members_.begin(); it != members_.end();) {
    watched& w = it->second;
    const duration silence = now - w.last;
    const bool past = silence > least_threshold() && silence > threshold_of(w);
    if (past && (w.marked || !late)) {
      silent.push_back({it->first, silence, threshold_of(w)});
      it = members_.erase(it);
      continue;
    }
    w.marked = past;
    ++it;
  }
  return silent;
}

std::optional<heartbeat_detector::clock::duration> heartbeat_detector::threshold(std::uint64_t member) const {
  const auto found = members_.find(member);
  if (found == members_.end()) return std::nullopt;
  return found->second.threshold ? *found->second.threshold : threshold_of(found->second.gaps);
}

}  // namespace accord
