#include "observe/stall_watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <execinfo.h>
#include <fstream>
#include <string_view>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace accord {
namespace {

std::atomic<std::uint64_t> progress{0};

// One thread's frames at a time: the dumping thread signals a thread and waits for its handler.
constexpr int most_frames = 64;
void* frames[most_frames];
std::atomic<int> frame_count{-1};

void record_frames(int) {
  const int saved_errno = errno;
  frame_count.store(backtrace(frames, most_frames), std::memory_order_release);
  errno = saved_errno;
}

// A real-time signal nothing else in accord uses; its handler only records the frames.
int dump_signal() { return SIGRTMIN + 7; }

void install_handler_once() {
  static const bool installed = [] {
    void* warm[1];
    backtrace(warm, 1);  // loads libgcc's unwinder now, not inside a signal handler
    struct sigaction action {};
    action.sa_handler = record_frames;
    action.sa_flags = SA_RESTART;  // a thread in a futex wait goes back to it
    sigemptyset(&action.sa_mask);
    sigaction(dump_signal(), &action, nullptr);
    return true;
  }();
  (void)installed;
}

std::vector<long> thread_ids() {
  std::vector<long> ids;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(tasks))
      if (entry->d_name[0] != '.') ids.push_back(std::strtol(entry->d_name, nullptr, 10));
    closedir(tasks);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string thread_name(long id) {
  std::ifstream comm("/proc/self/task/" + std::to_string(id) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "?" : name;
}

void write_text(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t wrote = ::write(fd, text.data(), text.size());
    if (wrote <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(wrote));
  }
}

}  // namespace

void note_progress() noexcept { progress.fetch_add(1, std::memory_order_relaxed); }
std::uint64_t progress_count() noexcept { return progress.load(std::memory_order_relaxed); }

stall_judge::stall_judge(std::chrono::milliseconds limit, std::uint64_t progress_at_start)
    : limit_(limit), last_(progress_at_start) {}

bool stall_judge::report(std::uint64_t now_progress, time_point now) {
  if (limit_.count() <= 0) return false;
  if (now_progress != last_) {
    last_ = now_progress;
    since_ = now;
    reported_ = false;
    return false;
  }
  if (!since_ || reported_ || now - *since_ < limit_) return false;
  reported_ = true;
  return true;
}

void write_thread_stacks(int fd) {
  install_handler_once();
  const long self = syscall(SYS_gettid);
  for (const long id : thread_ids()) {
    write_text(fd, "thread " + std::to_string(id) + " (" + thread_name(id) + ")" +
                       (id == self ? ", the watchdog's own" : "") + ":\n");
    int count = -1;
    if (id == self) {
      count = backtrace(frames, most_frames);
    } else {
      frame_count.store(-1, std::memory_order_release);
      if (syscall(SYS_tgkill, getpid(), id, dump_signal()) != 0) continue;  // it ended meanwhile
      // A thread that blocks the signal never answers; a second is plenty for one that does.
      for (int waited = 0; waited < 1000 && (count = frame_count.load(std::memory_order_acquire)) < 0; ++waited)
        usleep(1000);
      if (count < 0) {
        write_text(fd, "  (no answer: it blocks the signal)\n");
        continue;
      }
    }
    backtrace_symbols_fd(frames, count, fd);
  }
}

stall_watchdog::stall_watchdog(std::chrono::duration<double> limit, std::function<std::string()> state)
    : state_(std::move(state)) {
  const auto milliseconds = std::chrono::duration_cast<std::chrono::milliseconds>(limit);
  if (milliseconds.count() > 0) thread_ = std::thread([this, milliseconds] { watch(milliseconds); });
}

stall_watchdog::~stall_watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void stall_watchdog::watch(std::chrono::milliseconds limit) {
  const auto poll = std::clamp(limit / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  stall_judge judge(limit, progress_count());
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, poll, [this] { return stopping_; })) {
    if (!judge.report(progress_count(), std::chrono::steady_clock::now())) continue;
    char head[160];
    std::snprintf(head, sizeof head,
                  "accord: watchdog: no step completed in this process for %.1f s (--watchdog); every thread's stack "
                  "and the actors follow, once\n",
                  std::chrono::duration<double>(limit).count());
    write_text(STDERR_FILENO, head);
    write_thread_stacks(STDERR_FILENO);
    if (state_) write_text(STDERR_FILENO, state_());
    write_text(STDERR_FILENO, "accord: watchdog: end of the report\n");
  }
}

}  // namespace accord
