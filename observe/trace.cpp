#include "observe/trace.hpp"
#include "observe/trace_files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <unistd.h>

namespace accord {
namespace {

thread_local int thread_track = -1;

std::int64_t microseconds(trace_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::string track_name(int track) {
  switch (track) {
    case coordinator_track: return "coordinator";
    case evaluator_track: return "evaluator";
    case membership_track: return "membership";
    default: break;
  }
  const int rank = (track - 100) / 10;
  const char* roles[] = {"", "compute", "accumulator", "communicator", "channel"};
  const int role = (track - 100) % 10;
  return "worker " + std::to_string(rank) + " " + (role >= 1 && role <= 4 ? roles[role] : "?");
}

}  // namespace

trace_recorder::trace_recorder(int process, std::string process_name)
    : process_(process), process_name_(std::move(process_name)) {}

void trace_recorder::span(int track, const char* name, trace_clock::time_point begin, trace_clock::time_point end,
                          std::int64_t index) {
  const std::int64_t start = microseconds(begin);
  const event e{track, name, start, std::max<std::int64_t>(0, microseconds(end) - start), index};
  const std::lock_guard lock(mutex_);
  events_.push_back(e);
}

void trace_recorder::write(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  const std::int64_t offset = clock_offset_us_;
  events.push_back({{"ph", "M"}, {"pid", process_}, {"name", "process_name"},
                    {"args", {{"name", process_name_}, {"clock_offset_us", offset}}}});
  events.push_back({{"ph", "M"}, {"pid", process_}, {"name", "process_sort_index"}, {"args", {{"sort_index", process_}}}});
  const std::lock_guard lock(mutex_);
  std::vector<int> tracks;
  for (const event& e : events_) {
    if (std::find(tracks.begin(), tracks.end(), e.track) == tracks.end()) tracks.push_back(e.track);
    nlohmann::json span = {{"ph", "X"}, {"pid", process_}, {"tid", e.track}, {"name", e.name},
                           {"ts", e.begin_us + offset},  {"dur", e.duration_us}};
    if (e.index >= 0) span["args"] = {{"index", e.index}};
    events.push_back(std::move(span));
  }
  for (int track : tracks) {
    events.push_back({{"ph", "M"}, {"pid", process_}, {"tid", track}, {"name", "thread_name"},
                      {"args", {{"name", track_name(track)}}}});
    events.push_back({{"ph", "M"}, {"pid", process_}, {"tid", track}, {"name", "thread_sort_index"},
                      {"args", {{"sort_index", track}}}});
  }
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump() << '\n';
  if (!out) throw std::runtime_error("cannot write trace file " + path);
}

void trace_recorder::clear() {
  const std::lock_guard lock(mutex_);
  events_ = {};
}

trace_session::trace_session(const std::string& path) : trace_session(path, 0, std::string("accord job (one process)")) {}

trace_session::trace_session(const std::string& path, int rank, bool joiner)
    : trace_session(path.empty() ? ""
                    : joiner     ? trace_part_path(path, "join" + std::to_string(::getpid()))
                                 : trace_part_path(path, "rank" + std::to_string(rank)),
                    joiner ? static_cast<int>(::getpid()) : rank,
                    joiner ? "joiner " + std::to_string(::getpid()) : "rank " + std::to_string(rank)) {}

trace_session::trace_session(std::string path, int process, std::string process_name) : path_(std::move(path)) {
  if (path_.empty()) return;
  // Fail before training, not after it, when the file cannot be written.
  if (!std::ofstream(path_)) throw std::invalid_argument("trace: cannot write " + path_);
  recorder_ = std::make_unique<trace_recorder>(process, std::move(process_name));
  trace_recorder::active_.store(recorder_.get(), std::memory_order_release);
}

trace_session::~trace_session() {
  if (!recorder_) return;
  trace_recorder::active_.store(nullptr, std::memory_order_release);
  try {
    recorder_->write(path_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord: %s\n", e.what());
  }
  // A span still open on an abandoned actor thread (a failed job between processes) records
  // into this recorder when it closes: it stays alive, emptied, for the rest of the process.
  static std::mutex retired_mutex;
  static std::vector<std::unique_ptr<trace_recorder>> retired;
  recorder_->clear();
  const std::lock_guard lock(retired_mutex);
  retired.push_back(std::move(recorder_));
}

void trace_span::record() {
  recorder_->span(track_ >= 0 ? track_ : thread_track, name_, begin_, trace_clock::now(), index_);
}

void set_thread_track(int track) { thread_track = track; }


}  // namespace accord
