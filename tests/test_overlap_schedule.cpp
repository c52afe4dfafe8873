// Streaming DiLoCo's τ chosen from measured times (topologies/overlap_schedule.hpp), driven
// with numbers: the bound, the rule, and what a worker sends and decides as rounds land.
#include <doctest/doctest.h>

#include "topologies/overlap_schedule.hpp"

using namespace accord;

TEST_CASE("overlap bound: the fragments' spacing, below H") {
  CHECK(overlap_bound(40, 1) == 39);
  CHECK(overlap_bound(40, 4) == 10);
  CHECK(overlap_bound(10, 3) == 3);  // fragments 3 or 4 steps apart: the nearest two
  CHECK(overlap_bound(1, 1) == 0);   // H = 1: nothing to overlap with
}

TEST_CASE("overlap for measured times: the round's steps with a margin, rounded up, in 1..bound") {
  // A round of 20 ms behind steps of 5 ms: 4 steps, 6 with the margin.
  CHECK(overlap_for({0.020, 0.005}, 10) == 6);
  CHECK(overlap_for({0.020, 0.005}, 5) == 5);     // bounded
  CHECK(overlap_for({0.0001, 0.005}, 10) == 1);   // a round shorter than a step still lands a step late
  CHECK(overlap_for({0.021, 0.005}, 10) == 7);    // 6.3 steps: rounded up
  CHECK(overlap_for({1e9, 1e-9}, 10) == 10);      // far past the bound
  CHECK(overlap_for({0.020, 0.0}, 10) == 10);     // no step time: the bound
  CHECK(overlap_for({0.020, 0.005}, 0) == 0);
}

TEST_CASE("overlap schedule: fixed τ never moves, automatic starts at the bound and follows the landed means") {
  overlap_schedule fixed = overlap_schedule::fixed(5);
  CHECK_FALSE(fixed.is_automatic());
  fixed.landed({0.04, 0.02}, 2);
  CHECK(fixed.steps() == 5);

  overlap_schedule schedule = overlap_schedule::automatic(10);
  CHECK(schedule.is_automatic());
  CHECK(schedule.steps() == 10);
  // Before any round landed, a worker sends no round time, and the first rounds' sums change nothing.
  schedule.step_took(0.004);
  schedule.step_took(0.006);
  CHECK(schedule.to_send().round_seconds == 0);
  CHECK(schedule.to_send().step_seconds == doctest::Approx(0.005));
  schedule.sent();
  schedule.landed({0.0, 0.01}, 2);
  CHECK(schedule.steps() == 10);
  // Rounds land: the longest since the last send goes with the next round; steps' mean too.
  schedule.round_took(0.012);
  schedule.round_took(0.018);
  schedule.step_took(0.003);
  CHECK(schedule.to_send().round_seconds == doctest::Approx(0.018));
  CHECK(schedule.to_send().step_seconds == doctest::Approx(0.003));
  schedule.sent();
  // Nothing new since: the same again, not zeros.
  CHECK(schedule.to_send().round_seconds == doctest::Approx(0.018));
  CHECK(schedule.to_send().step_seconds == doctest::Approx(0.003));
  // Two workers' sums: rounds of 12 ms, steps of 4 ms on average: 3 steps, 4.5 with the margin.
  schedule.landed({0.024, 0.008}, 2);
  CHECK(schedule.steps() == 5);
  // The link slows down: τ rises to the bound; it speeds up: τ comes down.
  schedule.landed({2.0, 0.008}, 2);
  CHECK(schedule.steps() == 10);
  schedule.landed({0.001, 0.008}, 2);
  CHECK(schedule.steps() == 1);
}

TEST_CASE("overlap schedule: every worker applying the same landed sums decides the same τ, whatever it measured") {
  overlap_schedule a = overlap_schedule::automatic(8), b = overlap_schedule::automatic(8);
  a.round_took(0.5);
  a.step_took(0.01);
  b.round_took(0.001);
  b.step_took(0.2);
  const overlap_times sums{a.to_send().round_seconds + b.to_send().round_seconds,
                           a.to_send().step_seconds + b.to_send().step_seconds};
  a.landed(sums, 2);
  b.landed(sums, 2);
  CHECK(a.steps() == b.steps());
  CHECK(a.steps() == 4);  // 0.2505 s rounds over 0.105 s steps: 2.4 steps, 3.6 with the margin
}
