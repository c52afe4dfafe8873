#include "topologies/overlap_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace accord {

std::uint64_t overlap_bound(std::uint64_t local_steps, std::uint64_t fragments) {
  return std::min(local_steps / fragments, local_steps - 1);
}

std::uint64_t overlap_for(const overlap_times& times, std::uint64_t bound) {
  if (bound == 0) return 0;
  const double steps = times.step_seconds > 0 ? overlap_margin * times.round_seconds / times.step_seconds
                                              : static_cast<double>(bound);
  // Compared as a double first: a round hundreds of steps long is simply the bound.
  if (!(steps < static_cast<double>(bound))) return bound;
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(steps)));
}

overlap_schedule overlap_schedule::fixed(std::uint64_t steps) { return {false, steps, steps}; }

overlap_schedule overlap_schedule::automatic(std::uint64_t bound) { return {true, bound, bound}; }

void overlap_schedule::step_took(double seconds) {
  step_seconds_sum_ += seconds;
  ++step_count_;
}

void overlap_schedule::round_took(double seconds) {
  longest_round_ = std::max(longest_round_, seconds);
  ++rounds_;
}

overlap_times overlap_schedule::to_send() const {
  overlap_times times = measured_;
  if (rounds_ > 0) times.round_seconds = longest_round_;
  if (step_count_ > 0) times.step_seconds = step_seconds_sum_ / static_cast<double>(step_count_);
  return times;
}

void overlap_schedule::sent() {
  measured_ = to_send();
  longest_round_ = step_seconds_sum_ = 0;
  rounds_ = step_count_ = 0;
}

void overlap_schedule::landed(const overlap_times& sums, int senders) {
  if (!automatic_ || senders < 1 || !(sums.round_seconds > 0) || !(sums.step_seconds > 0)) return;
  steps_ = overlap_for({sums.round_seconds / senders, sums.step_seconds / senders}, bound_);
}

}  // namespace accord
