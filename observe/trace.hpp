#pragma once
// The job's timeline as Chrome / Perfetto trace events (JSON, "Trace Event Format"): one track
// (a thread row) per actor — each worker's compute, accumulator and communicator, the
// coordinator, the evaluator, the membership actor, and a worker's collectives in flight — holding spans: micro-batches, rounds and
// their phases (all-reduce of the totals, reduce-scatter, optimizer step, all-gather, vote),
// waits, steps, epochs. Timestamps are the wall clock (CLOCK_REALTIME) in microseconds; a process
// of a job between processes writes them on rank 0's clock (set_clock_offset, measured when it
// joins), so the files that the ranks write line up and merge by concatenation.
//
// A trace_session makes a recorder active for the process; with none, trace_span costs one
// null check. Recording takes a mutex per span (spans are milliseconds apart).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accord {

// channel: the worker's collectives in flight (round_peers::start_all_reduce), beside its rounds.
enum class trace_role : int { compute = 1, accumulator = 2, communicator = 3, channel = 4 };

// Track ids: job-wide actors first, then each worker's three.
inline constexpr int coordinator_track = 1;
inline constexpr int evaluator_track = 2;
inline constexpr int membership_track = 3;
inline int worker_track(int rank, trace_role role) { return 100 + 10 * rank + static_cast<int>(role); }

using trace_clock = std::chrono::system_clock;

class trace_recorder {
public:
  // `process` is the pid of every event (the rank between processes), `process_name` its label.
  trace_recorder(int process, std::string process_name);

  // `index` (>= 0) numbers the span: the round, step, epoch or micro-batch.
  void span(int track, const char* name, trace_clock::time_point begin, trace_clock::time_point end,
            std::int64_t index = -1);
  // The trace as JSON ({"traceEvents": [...]}) into `path`; throws std::runtime_error naming it.
  void write(const std::string& path) const;

  void clear();  // drops the events recorded so far

  // Added to every timestamp written: rank 0's wall clock minus this process's.
  void set_clock_offset(std::chrono::microseconds offset) { clock_offset_us_ = offset.count(); }

  // The process's active recorder, nullptr when no trace is being taken (inline: when off,
  // this load and its null check are all a span costs).
  static trace_recorder* active() { return active_.load(std::memory_order_acquire); }

private:
  friend class trace_session;
  static inline std::atomic<trace_recorder*> active_{nullptr};

  struct event {
    int track;
    const char* name;  // a literal
    std::int64_t begin_us, duration_us, index;
  };
  int process_;
  std::string process_name_;
  std::atomic<std::int64_t> clock_offset_us_{0};
  mutable std::mutex mutex_;
  std::vector<event> events_;
};

// Records while it lives: the process's active recorder, written to `path` when it ends (a
// write failure is reported on stderr; the job's own result stands). An empty path does nothing.
// A path that cannot be written is refused at the start (std::invalid_argument).
class trace_session {
public:
  // A job in one process: every worker's tracks in one file.
  explicit trace_session(const std::string& path);
  // One process of a job between processes: "trace.json" becomes "trace.rank2.json" (a joiner,
  // whose rank comes later: "trace.join<pid>.json"), its events under pid = the rank.
  trace_session(const std::string& path, int rank, bool joiner);
  ~trace_session();
  trace_session(const trace_session&) = delete;
  trace_session& operator=(const trace_session&) = delete;

private:
  trace_session(std::string path, int process, std::string process_name);

  std::string path_;
  std::unique_ptr<trace_recorder> recorder_;
};

// A span from construction to destruction on `track` (default: the one this thread was given
// by set_thread_track, for code that runs on an actor's own thread, as update rules do).
class trace_span {
public:
  explicit trace_span(const char* name, int track = -1, std::int64_t index = -1)
      : recorder_(trace_recorder::active()) {
    if (!recorder_) return;
    name_ = name;
    track_ = track;
    index_ = index;
    begin_ = trace_clock::now();
  }
  ~trace_span() {
    if (recorder_) record();
  }
  trace_span(const trace_span&) = delete;
  trace_span& operator=(const trace_span&) = delete;

private:
  void record();

  trace_recorder* recorder_;
  const char* name_ = nullptr;
  int track_ = -1;
  std::int64_t index_ = -1;
  trace_clock::time_point begin_;
};

// The track of spans made on this thread without one (an actor running on its own thread).
void set_thread_track(int track);

}  // namespace accord
