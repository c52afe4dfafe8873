// The adaptive failure detector on synthetic heartbeat arrivals (cluster/heartbeat_detector.hpp).
#include <doctest/doctest.h>

#include "cluster/heartbeat_detector.hpp"

#include <random>

using namespace std::chrono_literals;
using accord::heartbeat_detector;
using accord::heartbeat_detector_settings;

namespace {

using time_point = heartbeat_detector::clock::time_point;

// Heartbeats of `member` every `interval` plus up to `jitter`, checked every 100 ms, from `start`
// for `length`; returns the time of the last heartbeat and every suspicion raised meanwhile.
struct feed_result {
  time_point last_heartbeat;
  std::size_t suspicions = 0;
};
feed_result feed(heartbeat_detector& detector, std::uint64_t member, time_point start, std::chrono::milliseconds length,
                 std::chrono::milliseconds interval, std::chrono::milliseconds jitter, std::mt19937& random) {
  std::uniform_int_distribution<long long> extra(0, jitter.count());
  feed_result out{start, 0};
  time_point next_heartbeat = start;
  for (time_point now = start; now < start + length; now += 100ms) {
    while (next_heartbeat <= now) {
      detector.heard(member, next_heartbeat);
      out.last_heartbeat = next_heartbeat;
      next_heartbeat += interval + std::chrono::milliseconds(extra(random));
    }
    out.suspicions += detector.check(now).size();
  }
  return out;
}

// The first check at or after `from` (every 100 ms) that suspects `member`, or nullopt within 60 s.
std::optional<std::chrono::milliseconds> silence_until_suspected(heartbeat_detector& detector, std::uint64_t member,
                                                                 time_point from) {
  for (time_point now = from; now < from + 60s; now += 100ms)
    for (const auto& s : detector.check(now))
      if (s.member == member) return std::chrono::duration_cast<std::chrono::milliseconds>(now - from);
  return std::nullopt;
}

}  // namespace

TEST_CASE("regular heartbeats are never suspected, silence past the floor is, once") {
  heartbeat_detector detector;  // floor 1.5 s
  std::mt19937 random(1);
  const time_point start{};
  const feed_result fed = feed(detector, 7, start, 600s, 100ms, 20ms, random);
  CHECK(fed.suspicions == 0);
  CHECK(*detector.threshold(7) == 1500ms);  // the statistics alone would allow far less
  const auto after = silence_until_suspected(detector, 7, fed.last_heartbeat + 100ms);
  REQUIRE(after);
  CHECK(*after >= 1400ms);  // 1.5 s from the last heartbeat
  CHECK(*after <= 1600ms);
  CHECK(!detector.threshold(7));  // reported once, then no longer watched
  CHECK(detector.check(fed.last_heartbeat + 10s).empty());
}

TEST_CASE("irregular heartbeats (a loaded machine) raise the threshold above the floor, without false suspicion") {
  heartbeat_detector detector;
  std::mt19937 random(2);
  const feed_result fed = feed(detector, 1, time_point{}, 1800s, 100ms, 900ms, random);
  CHECK(fed.suspicions == 0);
  CHECK(*detector.threshold(1) > 2000ms);
  const auto after = silence_until_suspected(detector, 1, fed.last_heartbeat);
  REQUIRE(after);
  CHECK(*after > 2000ms);
  CHECK(*after < 30s);
}

TEST_CASE("a member silent from the start is suspected after twice the floor, the upper bound caps the wait") {
  heartbeat_detector detector;
  detector.heard(3, time_point{});
  CHECK(*detector.threshold(3) == 3000ms);
  const auto after = silence_until_suspected(detector, 3, time_point{});
  REQUIRE(after);
  CHECK(*after > 3000ms);
  CHECK(*after <= 3100ms);

  heartbeat_detector_settings bounded;
  bounded.upper_bound = 2000ms;
  heartbeat_detector capped(bounded);
  std::mt19937 random(3);
  const feed_result fed = feed(capped, 4, time_point{}, 300s, 100ms, 5000ms, random);
  CHECK(capped.threshold(4).value_or(2000ms) == 2000ms);  // unwatched if just suspected
  CHECK(fed.suspicions > 0);  // gaps of up to 5 s exceed the bound: it wins over the statistics
}

TEST_CASE("after the detector's own stall, heartbeats read late clear a member, silence does not") {
  heartbeat_detector detector;
  std::mt19937 random(4);
  const feed_result fed = feed(detector, 5, time_point{}, 60s, 100ms, 10ms, random);
  feed(detector, 7, time_point{}, 60s, 100ms, 10ms, random);
  // This process stalls 10 s: no check, no heartbeat read. The first check after it judges nobody.
  const time_point resumed = fed.last_heartbeat + 10s;
  CHECK(detector.check(resumed).empty());
  // Then 5's heartbeats that waited in the socket are read; 7 sent none (it hung meanwhile).
  detector.heard(5, resumed + 10ms);
  const auto next = detector.check(resumed + 100ms);
  REQUIRE(next.size() == 1);
  CHECK(next[0].member == 7);
  // 5's silence counts from its last heartbeat again: suspected one threshold later.
  const auto after = silence_until_suspected(detector, 5, resumed + 200ms);
  REQUIRE(after);
  CHECK(*after <= 1500ms);
  CHECK(*after >= 1300ms);
}

TEST_CASE("forgotten members are not suspected, each member is judged by its own arrivals") {
  heartbeat_detector detector;
  std::mt19937 random(5);
  feed(detector, 1, time_point{}, 60s, 100ms, 10ms, random);
  detector.forget(1);
  CHECK(!detector.threshold(1));
  const feed_result fed = feed(detector, 2, time_point{} + 60s, 60s, 100ms, 1500ms, random);
  CHECK(fed.suspicions == 0);  // 1 fell silent at 60 s, but it is no longer watched
  CHECK(*detector.threshold(2) > 3000ms);
}

TEST_CASE("late checks (this process loaded) neither keep the detector from learning nor delay it by their lateness") {
  heartbeat_detector detector;
  // Heartbeats every 100 ms, checks every 300 ms: every check is late.
  time_point now{};
  for (int i = 0; i < 600; ++i, now += 100ms) {
    detector.heard(6, now);
    if (i % 3 == 0) CHECK(detector.check(now).empty());
  }
  CHECK(*detector.threshold(6) == 1500ms);  // learned: the floor, not the 3 s of the first gaps
  // 6 hangs: still found within its threshold plus two check spacings, late checks or not.
  const time_point hung = now - 100ms;
  std::optional<std::chrono::milliseconds> found;
  for (time_point check = now; !found && check < hung + 10s; check += 300ms)
    if (!detector.check(check).empty()) found = std::chrono::duration_cast<std::chrono::milliseconds>(check - hung);
  REQUIRE(found);
  CHECK(*found > 1500ms);
  CHECK(*found <= 2100ms);
}
