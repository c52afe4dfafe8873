#pragma once
// Streaming DiLoCo's τ (--overlap-steps): the inner steps between an outer round's start and
// the step that merges its result. Fixed, or chosen from measured times (--overlap-steps auto):
// each worker measures how long its outer rounds take and how long its inner steps take, sends
// that with the next outer round it starts (two more values beside the round's squared norms),
// and every worker applies the same rule to the same sums where that round lands, so every
// replica merges at the same inner step; the new τ holds for the outer rounds started after it.
// The decision is here, apart from the topology's threads and clocks, so tests drive it with
// numbers (topologies/local_sgd.cpp feeds it).
#include <cstdint>

namespace accord {

// What the workers measure for the choice: an outer round's time from its start to its landing
// (as the worker saw it), and an inner step's time (its waits for outer rounds left out).
struct overlap_times {
  double round_seconds = 0;
  double step_seconds = 0;
};

// The most steps τ may be: the fragments' spacing ⌊H/P⌋ (a fragment's round merges before the
// next fragment's starts, so one is on the link at a time and merges stay in their starting
// order) and below H (a round merges before its fragment's next one starts).
std::uint64_t overlap_bound(std::uint64_t local_steps, std::uint64_t fragments);

// The τ that hides an outer round of `round_seconds` behind inner steps of `step_seconds`: the
// round's length in steps times overlap_margin, rounded up, at least 1, at most `bound`.
std::uint64_t overlap_for(const overlap_times& times, std::uint64_t bound);
inline constexpr double overlap_margin = 1.5;  // room for rounds and steps slower than measured

class overlap_schedule {
public:
  // A fixed τ of `steps`.
  static overlap_schedule fixed(std::uint64_t steps);
  // τ chosen from the times, at most `bound`: `bound` until a measured round has landed, so
  // that no step waits before there is anything to go by.
  static overlap_schedule automatic(std::uint64_t bound);

  bool is_automatic() const { return automatic_; }
  // τ for an outer round starting now.
  std::uint64_t steps() const { return steps_; }

  // This worker's measurements: an inner step, and an outer round as it lands.
  void step_took(double seconds);
  void round_took(double seconds);
  // What this worker sends with an outer round it starts now: the longest round landed and its
  // steps' mean time since the last one it sent (the last ones again where none since; zeros
  // before any).
  overlap_times to_send() const;
  // The outer round starting now took to_send()'s values: the next ones start afresh.
  void sent();
  // An outer round landed with `sums`, the sum of what its `senders` workers sent with it (the
  // same bits on every worker): automatic, τ follows their means from the next round on. Sums
  // without a measured round in them (the first rounds') change nothing.
  void landed(const overlap_times& sums, int senders);

private:
  overlap_schedule(bool automatic, std::uint64_t steps, std::uint64_t bound)
      : automatic_(automatic), steps_(steps), bound_(bound) {}

  bool automatic_;
  std::uint64_t steps_, bound_;
  overlap_times measured_;  // sent with the next outer round
  double longest_round_ = 0, step_seconds_sum_ = 0;
  std::uint64_t rounds_ = 0, step_count_ = 0;  // since the last one sent
};

}  // namespace accord
