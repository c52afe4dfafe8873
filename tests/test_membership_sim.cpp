// The membership state machine in a deterministic simulation (tests/membership_sim/): N members
// on a virtual clock and network under seeded fault schedules, the invariants checked after
// every event. ACCORD_SIM_SCHEDULES=N runs N schedules per size instead of the quick default.
#include <doctest/doctest.h>

#include "tests/membership_sim/schedule.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace accord;
using namespace accord::sim;

namespace {

int schedules_per_size(int quick) {
  const char* asked = std::getenv("ACCORD_SIM_SCHEDULES");
  return asked ? std::max(1, std::atoi(asked)) : quick;
}

// Runs `count` schedules of `members`; a failing one is shrunk and printed with its seed.
void run_many(int members, int count, int faults, std::uint64_t first_seed) {
  const auto began = std::chrono::steady_clock::now();
  std::size_t events = 0;
  int shard_lost = 0;
  for (int i = 0; i < count; ++i) {
    const std::uint64_t seed = first_seed + static_cast<std::uint64_t>(i);
    std::mt19937_64 rng(seed);
    const std::vector<fault> schedule = random_schedule(rng, members, faults, 30s);
    const run_result result = run_schedule(members, seed, schedule);
    events += result.events;
    if (result.shard_lost) {  // a known liveness failure of the machine (schedule.hpp), counted
      ++shard_lost;
      continue;
    }
    if (!result.violation.empty()) {
      const std::vector<fault> shortest = shrink(members, seed, schedule, false);
      const run_result again = run_schedule(members, seed, shortest);
      FAIL_CHECK(members << " members, seed " << seed << ": " << again.violation << "\nshrunk from "
                         << schedule.size() << " to " << shortest.size() << " faults:\n"
                         << describe(shortest) << "epochs:\n" << again.epochs);
      return;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  std::printf("membership simulation: %d members, %d schedules of %d faults, %.0f schedules/s, %.0f events each; "
              "%d lost a shard to suspected holders\n",
              members, count, faults, count / std::max(seconds, 1e-9), static_cast<double>(events) / count, shard_lost);
}

}  // namespace

TEST_CASE("membership simulation: without faults the starting ranks form epoch 1 and train") {
  const run_result quiet = run_schedule(4, 1, {});
  CHECK(quiet.violation.empty());
  CHECK(quiet.epochs == "1@p0 from 0: p0 p1 p2 p3\n");
}

TEST_CASE("membership simulation: a killed coordinator is replaced by the next in line, from the kept step") {
  fault kill;
  kill.what = fault::kind::kill;
  kill.at = 1s;
  const run_result r = run_schedule(3, 7, {kill});
  CHECK(r.violation.empty());
  CHECK(r.epochs.find("2@p1 from ") != std::string::npos);
}

TEST_CASE("membership simulation: a recorded schedule replays to the same epochs") {
  for (std::uint64_t seed = 100; seed < 110; ++seed) {
    std::mt19937_64 rng(seed);
    const std::vector<fault> schedule = random_schedule(rng, 5, 6, 30s);
    CHECK(run_schedule(5, seed, schedule).epochs == run_schedule(5, seed, schedule).epochs);
  }
}

TEST_CASE("membership simulation: seeded fault schedules keep one coordinator per epoch, a majority in each, the "
          "newest whole kept step, and an epoch training once the faults stop") {
  for (const int members : {3, 4, 5, 7})
    run_many(members, schedules_per_size(40), 6, 1000 * static_cast<std::uint64_t>(members));
}

TEST_CASE("membership simulation: one seed (ACCORD_SIM_SEED, ACCORD_SIM_MEMBERS)" * doctest::skip()) {
  const std::uint64_t seed = std::strtoull(std::getenv("ACCORD_SIM_SEED") ? std::getenv("ACCORD_SIM_SEED") : "1", nullptr, 10);
  const int members = std::atoi(std::getenv("ACCORD_SIM_MEMBERS") ? std::getenv("ACCORD_SIM_MEMBERS") : "4");
  std::mt19937_64 rng(seed);
  const std::vector<fault> schedule = random_schedule(rng, members, 6, 30s);
  const run_result r = run_schedule(members, seed, schedule);
  MESSAGE(describe(schedule) << r.violation << "\n" << r.epochs);
}
