#pragma once
// A process that stops making progress says where it stands before anyone kills it: when no
// step completes for a set time (job_config::watchdog_seconds, --watchdog), every thread's name
// and stack and what the job registered of its own state (the actors and their mailboxes) go to
// stderr, once per stall. No CAF: the actors' part comes as a function (actors/actor_census.hpp).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace accord {

// A step's work completed in this process (a worker's gradient): the watchdog's progress.
void note_progress() noexcept;
std::uint64_t progress_count() noexcept;

// The decision, a plain function of its inputs: whether to report now. The clock starts at the
// first progress after the judge was made (a job that has not started is the rendezvous's to
// judge, with its own timeout); it reports once `limit` passed without progress, once per stall
// (progress re-arms it). A limit of 0 never reports.
class stall_judge {
public:
  using time_point = std::chrono::steady_clock::time_point;
  stall_judge(std::chrono::milliseconds limit, std::uint64_t progress_at_start);
  bool report(std::uint64_t progress, time_point now);

private:
  std::chrono::milliseconds limit_;
  std::uint64_t last_;
  std::optional<time_point> since_;  // the last progress seen (none yet: not armed)
  bool reported_ = false;
};

// Every thread of this process: "thread TID (NAME)" and its stack (execinfo's backtrace, each
// thread interrupted in turn by a signal whose handler records its frames), written to `fd`.
void write_thread_stacks(int fd);

// Watches progress_count() from a thread of its own; on a stall writes the report to stderr:
// the stall, every thread's stack, then `state()` (the actors). A limit of 0: no thread at all.
class stall_watchdog {
public:
  stall_watchdog(std::chrono::duration<double> limit, std::function<std::string()> state);
  ~stall_watchdog();
  stall_watchdog(const stall_watchdog&) = delete;
  stall_watchdog& operator=(const stall_watchdog&) = delete;

private:
  void watch(std::chrono::milliseconds limit);

  std::function<std::string()> state_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace accord
