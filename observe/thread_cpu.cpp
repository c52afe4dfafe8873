#include "observe/thread_cpu.hpp"

#include <accord/metrics_fields.hpp>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace accord {
namespace {

// Where a thread's time goes: the three named roles, then the threads no worker owns.
enum class slot { compute, communicator, evaluator, actors, transport, other };

struct tracked {
  slot where = slot::other;
  int rank = -1;              // the worker a named thread serves; -1: shared
  std::uint64_t base_ns = 0;  // its time before it took this role (counted where it was)
  std::uint64_t last_ns = 0;  // its time at the last scan
};

struct registry {
  std::mutex mutex;
  std::unordered_map<pid_t, tracked> threads;
  std::map<std::pair<slot, int>, std::uint64_t> ended_ns;  // time of ended threads, by slot and rank
  std::chrono::steady_clock::time_point scanned{};
};

// Never destroyed: detached actors' threads may end after static destruction began.
registry& threads_by_role() {
  static registry* r = new registry;
  return *r;
}

std::string task_file(pid_t tid, const char* name) {
  return "/proc/self/task/" + std::to_string(tid) + "/" + name;
}

// Nanoseconds on a CPU (the first field of schedstat); 0 once the thread is gone.
std::uint64_t cpu_ns(pid_t tid) {
  std::ifstream in(task_file(tid, "schedstat"));
  std::uint64_t ns = 0;
  in >> ns;
  return ns;
}

// CAF names its scheduler, clock and detached-actor threads "caf.*", UCX its progress thread
// "async"; the rest (main, OpenBLAS's pool) keep the program's name.
slot shared_slot(pid_t tid) {
  std::ifstream in(task_file(tid, "comm"));
  std::string name;
  std::getline(in, name);
  if (name.rfind("caf.", 0) == 0) return slot::actors;
  if (name == "async") return slot::transport;
  return slot::other;
}

void retire(registry& r, const tracked& t) { r.ended_ns[{t.where, t.rank}] += t.last_ns - t.base_ns; }

void scan(registry& r) {
  std::unordered_map<pid_t, tracked> seen;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", error)) {
    const pid_t tid = static_cast<pid_t>(std::stol(entry.path().filename().string()));
    const std::uint64_t ns = cpu_ns(tid);
    auto known = r.threads.find(tid);
    tracked t;
    if (known != r.threads.end() && ns >= known->second.last_ns) {
      t = known->second;
      r.threads.erase(known);
    } else {
      if (known != r.threads.end()) {  // the id was reused: the thread it named ended
        retire(r, known->second);
        r.threads.erase(known);
      }
      t.where = shared_slot(tid);
    }
    t.last_ns = ns;
    seen.emplace(tid, t);
  }
  for (const auto& [tid, t] : r.threads) retire(r, t);  // not listed any more: ended
  r.threads = std::move(seen);
  r.scanned = std::chrono::steady_clock::now();
}

// A named thread's last moments: at its exit it retires itself with its final time, which the
// last scan of /proc may not have seen.
struct retire_at_exit {
  bool armed = false;
  ~retire_at_exit() {
    if (!armed) return;
    timespec own{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own);
    const auto ns = static_cast<std::uint64_t>(own.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(own.tv_nsec);
    registry& r = threads_by_role();
    std::lock_guard lock(r.mutex);
    const auto known = r.threads.find(gettid());
    if (known == r.threads.end()) return;
    known->second.last_ns = std::max(known->second.last_ns, ns);
    retire(r, known->second);
    r.threads.erase(known);
  }
};

}  // namespace

void name_thread(thread_role role, int rank) {
  static constexpr const char* prefixes[] = {"compute.", "comm.", "eval."};
  const std::string name = prefixes[static_cast<int>(role)] + std::to_string(rank);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());  // Linux allows 15 characters
  registry& r = threads_by_role();
  const pid_t tid = gettid();
  std::uint64_t now = cpu_ns(tid);
  std::lock_guard lock(r.mutex);
  auto known = r.threads.find(tid);
  if (known != r.threads.end()) {  // what it spent before counts where it was counted
    // A thread's own schedstat can read below what a scan from another thread saw a moment
    // earlier (seen with a freshly started thread): never count back.
    now = std::max(now, known->second.last_ns);
    known->second.last_ns = now;
    retire(r, known->second);
  }
  r.threads[tid] = tracked{static_cast<slot>(role), rank, now, now};
  static thread_local retire_at_exit at_exit;
  at_exit.armed = true;
}

thread_cpu thread_cpu_seconds(int rank, bool shared) {
  registry& r = threads_by_role();
  std::lock_guard lock(r.mutex);
  if (std::chrono::steady_clock::now() - r.scanned > std::chrono::milliseconds(5)) scan(r);
  // Summed in whole nanoseconds and converted once: a double sum's rounding depends on the order
  // of its terms, which changes as threads come and go, and could read a few ulps below the last.
  std::array<std::uint64_t, 6> ns_by_slot{};
  const auto counts = [&](slot where, int owner) {
    return where <= slot::communicator ? rank < 0 || owner == rank : shared;  // one evaluator a job
  };
  for (const auto& [tid, t] : r.threads)
    if (counts(t.where, t.rank)) ns_by_slot[static_cast<std::size_t>(t.where)] += t.last_ns - t.base_ns;
  for (const auto& [key, ns] : r.ended_ns)
    if (counts(key.first, key.second)) ns_by_slot[static_cast<std::size_t>(key.first)] += ns;
  const auto seconds = [&](slot where) { return 1e-9 * static_cast<double>(ns_by_slot[static_cast<std::size_t>(where)]); };
  return {seconds(slot::compute),  seconds(slot::communicator), seconds(slot::evaluator),
          seconds(slot::actors),   seconds(slot::transport),    seconds(slot::other)};
}

// Role by role, over thread_cpu's field list.
thread_cpu operator-(const thread_cpu& a, const thread_cpu& b) {
  thread_cpu difference = a;
  for_each_field<thread_cpu>([&](const auto& role) { difference.*role.member -= b.*role.member; });
  return difference;
}

thread_cpu& operator+=(thread_cpu& a, const thread_cpu& b) {
  for_each_field<thread_cpu>([&](const auto& role) { a.*role.member += b.*role.member; });
  return a;
}

double total(const thread_cpu& cpu) {
  double sum = 0;
  for_each_field<thread_cpu>([&](const auto& role) { sum += cpu.*role.member; });
  return sum;
}

}  // namespace accord
