#pragma once
// Which members of a job have gone silent, judged by each one's own heartbeats rather than by a
// timeout the user has to guess. Every member sends a heartbeat at a short interval; the
// detector learns the gaps between its arrivals (the last `window` of them) and suspects it once
// its silence exceeds both the median gap plus `deviations` times the gaps' median absolute
// deviation (scaled to a standard deviation) and the absolute `floor`. The floor is what keeps a
// loaded machine (many processes on few cores) from being taken for a hung member: the
// statistics alone would suspect a member of a quiet machine after a few hundred milliseconds.
// `upper_bound` caps the wait however irregular the arrivals (the heartbeat timeout).
//
// The detector's own process may stall too (descheduled, swapping), and then the members'
// heartbeats may be waiting, unread, in its sockets: a check that comes late (over twice the
// check interval after the one before) only marks the silent members, and a member is suspected
// when it is still silent at the next check, once what arrived during the stall has been read.
// Nothing is subtracted from the silence, so a loaded detector that checks late all the time is
// late by one check spacing, not by its stalls added up. No CAF: the membership actor feeds it.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

namespace accord {

struct heartbeat_detector_settings {
  std::chrono::milliseconds floor{1500};
  std::chrono::milliseconds upper_bound{30'000};
  double deviations = 12;
  std::size_t window = 100;
  // Until a member's first `learned_after` gaps, its threshold is twice the floor.
  std::size_t learned_after = 10;
  // How often check() is meant to run; a pause of over twice this between two checks is this
  // process's own stall, after which verdicts wait for one more check.
  std::chrono::milliseconds check_interval{100};
};

class heartbeat_detector {
public:
  using clock = std::chrono::steady_clock;

  explicit heartbeat_detector(heartbeat_detector_settings settings = {});

  // A heartbeat (or the hello) of `member` arrived at `at`; the first one starts watching it.
  void heard(std::uint64_t member, clock::time_point at);
  // Stops watching `member` (it died, left or was suspected).
  void forget(std::uint64_t member);

  struct suspicion {
    std::uint64_t member = 0;
    clock::duration silent{};     // since its last heartbeat
    clock::duration threshold{};  // what its arrivals allowed
  };
  // The members silent past their threshold at `now`, each reported once (and then forgotten).
  std::vector<suspicion> check(clock::time_point now);

  // How long `member` may stay silent now (nullopt: not watched).
  std::optional<clock::duration> threshold(std::uint64_t member) const;

private:
  struct watched {
    clock::time_point last;       // its last heartbeat
    bool marked = false;          // silent past its threshold at a late check: judged at the next
    std::deque<clock::duration> gaps;
    // Of `gaps`, computed when a silence first needs it (a heartbeat makes it stale): most checks
    // find a member silent for less than any threshold can be.
    std::optional<clock::duration> threshold;
  };
  clock::duration threshold_of(const std::deque<clock::duration>& gaps) const;
  clock::duration threshold_of(watched& w) const;
  // No threshold is shorter than this: silences up to it need no statistics.
  clock::duration least_threshold() const;

  heartbeat_detector_settings settings_;
  std::map<std::uint64_t, watched> members_;
  std::optional<clock::time_point> last_check_;
};

}  // namespace accord
