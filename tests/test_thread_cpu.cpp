// CPU time by thread role: named threads count for their worker and role, an ended thread keeps
// its time there, and a job reports its threads' CPU per step and in all.
#include <doctest/doctest.h>

#include "observe/thread_cpu.hpp"
#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

using namespace accord;

namespace {

double own_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Burns `seconds` of this thread's own CPU clock (not wall time: load cannot shorten it).
void spin(double seconds) {
  const double until = own_cpu_seconds() + seconds;
  volatile double sink = 0;
  while (own_cpu_seconds() < until)
    for (int i = 0; i < 1000; ++i) sink = sink + 1.0;
}

// thread_cpu_seconds reuses a scan of /proc for a few milliseconds.
thread_cpu sample(int rank, bool shared) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return thread_cpu_seconds(rank, shared);
}

}  // namespace

TEST_CASE("a named thread's CPU counts for its worker and role, and stays there after it ends") {
  const thread_cpu before = sample(7, false);
  const thread_cpu other_rank_before = sample(8, false);
  std::string name;
  std::thread worker([&] {
    name_thread(thread_role::communicator, 7);
    std::ifstream comm("/proc/self/task/" + std::to_string(gettid()) + "/comm");
    std::getline(comm, name);
    spin(0.05);
    const thread_cpu running = sample(7, false);
    CHECK(running.communicator - before.communicator >= 0.05);
    CHECK(running.compute == doctest::Approx(before.compute));
  });
  worker.join();
  CHECK(name == "comm.7");
  const thread_cpu after = sample(7, false);
  CHECK(after.communicator - before.communicator >= 0.05);
  const thread_cpu other_rank = sample(8, false);
  CHECK(other_rank.communicator == doctest::Approx(other_rank_before.communicator));
  // Without `shared`, no thread outside the workers' own is counted; with it, this test's
  // own thread (named by no role) is among the rest.
  CHECK(after.actors == 0);
  CHECK(after.other == 0);
  const thread_cpu with_shared = sample(7, true);
  spin(0.02);
  CHECK(sample(7, true).other - with_shared.other >= 0.02);
}

TEST_CASE("a thread that takes a role keeps what it spent before where it was counted") {
  const thread_cpu before = sample(-1, true);
  std::thread worker([&] {
    spin(0.03);   // unnamed: counted with the rest
    sample(-1, true);
    name_thread(thread_role::compute, 9);
    spin(0.03);
  });
  worker.join();
  const thread_cpu after = sample(-1, true);
  CHECK(after.other - before.other >= 0.03);
  CHECK(after.compute - before.compute >= 0.03);
  CHECK(total(after - before) >= 0.06);
}

TEST_CASE("a job reports its threads' CPU by role, per step and in all") {
  const job_result result = testing::run_quadratic(testing::test_job("acco", 2, 6).evaluate(3, 64), {}, 4096);
  REQUIRE(result.steps.size() == 6);
  CHECK(result.cpu.compute > 0);
  CHECK(result.cpu.communicator > 0);
  CHECK(result.cpu.actors > 0);
  thread_cpu summed;
  for (const step_metrics& m : result.steps) {
    CHECK(m.cpu.compute >= 0);
    CHECK(m.cpu.communicator >= 0);
    CHECK(m.cpu.actors >= 0);
    CHECK(m.cpu.other >= 0);
    summed += m.cpu;
  }
  // The run's totals are the steps' sums (the last report closes both).
  CHECK(summed.compute == doctest::Approx(result.cpu.compute));
  CHECK(summed.communicator == doctest::Approx(result.cpu.communicator));
}

TEST_CASE("the sums only grow while threads come and go") {
  thread_cpu previous = sample(-1, true);
  for (int round = 0; round < 30; ++round) {
    std::thread short_lived([] { spin(0.002); });
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(6));
    const thread_cpu now = thread_cpu_seconds(-1, true);
    short_lived.join();
    CHECK(now.other >= previous.other);
    CHECK(now.actors >= previous.actors);
    CHECK(total(now) >= total(previous));
    previous = now;
  }
}
