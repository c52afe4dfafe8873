#pragma once
// A deterministic simulation of an elastic job's membership: N worker processes on a virtual
// clock and a virtual network, the coordinator's decisions made by the real state machine
// (membership/machine.hpp), the members' side (agent, standby, election, majority wait) modelled
// on actors/member_agent.cpp, actors/standby_actor.cpp and job/between_processes.cpp. Links
// behave as the TCP connections CAF uses: ordered, held while cut and delivered on heal; a killed
// process's peers see its connections close (an RST from its host), a stopped one holds
// everything until it resumes. Everything random comes from one seed.
#include "membership/machine.hpp"
#include "recovery/elastic_state.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace accord::sim {

using namespace std::chrono_literals;
using time_point = std::chrono::steady_clock::time_point;
using duration = std::chrono::steady_clock::duration;

constexpr auto heartbeat_interval = 100ms;  // the agents' (actors/member_agent.cpp)
constexpr auto step_time = 200ms;           // one training step, kept at every step
constexpr auto probe_timeout = 2000ms;      // an unanswered connection (a partition, a stopped process)
constexpr auto confirm_wait = 5000ms;       // takeover_confirm_wait (actors/standby_actor.hpp)
constexpr auto majority_retry = 500ms;      // between_processes.cpp's wait for a majority
constexpr auto majority_wait = 30s;
constexpr auto rejoin_timeout = 10s;       // membership_at's, for a side that gave way

struct formed_epoch {
  int coordinator = -1;  // process
  std::uint64_t epoch = 0;
  time_point at;
  std::uint64_t start_steps = 0;
  std::vector<int> members;   // processes, by rank
  std::vector<int> released;  // processes of the last epoch released at its forming (leavers)
  std::set<int> trained;      // members that got its plan and trained it
};

// One worker process: its member (main thread and agent), its standby, and the coordination it
// may host.
struct process {
  int index = 0;
  bool killed = false, stopped = false;
  bool killed_by_fault = false;  // a schedule's kill (not the process's own end)
  std::string ended;  // why its main thread ended ("" while it runs)
  std::vector<std::function<void()>> held;  // work that came while it was stopped
  int generation = 0;  // of its agent: a new one on every hello, old timers die with the old
  // Its member.
  std::uint64_t id = 0;
  bool joiner = false;
  bool rejoin = false;
  int coordinator = 0;  // the process whose coordination it follows
  bool admitted = false, master_lost = false, asking = false, leaving = false;
  std::uint64_t running = 0;  // the epoch it trains in (0: none)
  int rank = -1;
  std::uint64_t change_epoch = 0;
  std::optional<heartbeat_detector> coordinator_heartbeats;
  heartbeat_contact contact;
  std::map<std::pair<std::uint64_t, std::uint64_t>, kept_summary> kept;  // the two newest generations
  // Its standby.
  coordination_replica replica;
  std::optional<std::uint64_t> saw_lost;  // the coordinator (member id) its agent judged lost
  std::string lost_cause;
  std::vector<std::function<void(int)>> deferred;  // elections waiting for its own verdict
  // The coordination it hosts.
  std::unique_ptr<membership_machine> machine;
  int machine_generation = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> steps = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::map<std::uint64_t, std::pair<int, int>> member_process;  // member id → (process, agent generation)
  std::set<std::pair<std::uint64_t, std::uint64_t>> known_kept;  // kept steps it knows completed
  // Its running epoch (as coordinator).
  std::uint64_t epoch = 0;
  std::vector<int> ranks;  // processes by rank
  bool epoch_active = false;

  std::string control() const { return "p" + std::to_string(index); }
  bool hosts() const { return machine && machine->phase() != membership_phase::yielded; }
};

inline int process_of(const std::string& control) { return std::stoi(control.substr(1)); }

class world {
public:
  world(int members, std::uint64_t seed) : rng(seed), initial(members) {
    procs.reserve(4096);
  }

  // Faults, as a schedule applies them.
  void kill(int p);
  void stop(int p);
  void resume(int p);
  void cut(int a, int b, bool on);
  void slow(int a, int b, duration extra);
  void start_joiner();
  void ask_to_leave(int p);

  void run_until(time_point end, const std::function<void()>& check);
  time_point now() const { return now_; }
  time_point origin() const { return origin_; }
  std::size_t events() const { return events_; }

  std::vector<process> procs;
  std::vector<formed_epoch> formed;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> completed;  // (layout, steps) the coordinators saw kept
  std::vector<std::string> lines;  // what the coordinators printed, and the members' moves
  void note(int p, const std::string& what) {
    lines.push_back(std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now_ - origin_).count()) +
                    " ms p" + std::to_string(p) + ": " + what);
  }
  std::string violation;

private:
  friend struct member_side;
  friend struct coordinator_side;
  struct event {
    time_point at;
    std::uint64_t seq;
    std::function<void()> run;
    bool operator>(const event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct link {
    bool cut = false;
    duration extra{};
    time_point last{};  // ordered delivery
    std::deque<std::function<void()>> held;
  };

public:
  void after(duration d, std::function<void()> run);
  // Work on process p after d: dropped when p is killed, held while it is stopped.
  void local(int p, duration d, std::function<void()> run);
  // A message from a to b (ordered per link; held while the link is cut). `from_kernel`: sent
  // by a's host even when a is killed (a connection's close).
  void send(int a, int b, std::function<void()> run, bool from_kernel = false);
  bool reachable(int a, int b) const {
    const auto found = links_.find({a, b});
    return a == b || found == links_.end() || !found->second.cut;
  }
  std::mt19937_64 rng;
  int initial;  // the starting ranks

private:
  link& between(int a, int b) { return links_[{a, b}]; }
  std::vector<event> queue_;  // a heap, earliest first
  std::map<std::pair<int, int>, link> links_;
  time_point origin_ = time_point(std::chrono::hours(1));  // heartbeat time 0 means "none"
  time_point now_ = origin_;
  std::uint64_t seq_ = 0;
  std::size_t events_ = 0;
};

inline void world::after(duration d, std::function<void()> run) {
  queue_.push_back({now_ + d, seq_++, std::move(run)});
  std::push_heap(queue_.begin(), queue_.end(), std::greater<>());
}

inline void world::local(int p, duration d, std::function<void()> run) {
  after(d, [this, p, run = std::move(run)]() mutable {
    process& to = procs[p];
    if (to.killed) return;
    if (to.stopped)
      to.held.push_back(std::move(run));
    else
      run();
  });
}

inline void world::send(int a, int b, std::function<void()> run, bool from_kernel) {
  if (a == b) return local(b, 0ms, std::move(run));
  if ((procs[a].killed && !from_kernel) || procs[b].killed) return;
  link& l = between(a, b);
  if (l.cut) {
    l.held.push_back(std::move(run));
    return;
  }
  const duration delay = std::chrono::microseconds(200 + rng() % 800) + l.extra;
  l.last = std::max(now_ + delay, l.last);
  const duration d = l.last - now_;
  local(b, d, std::move(run));
}

inline void world::cut(int a, int b, bool on) {
  for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
    link& l = between(x, y);
    l.cut = on;
    if (on) continue;
    auto held = std::move(l.held);
    l.held.clear();
    for (auto& run : held) send(x, y, std::move(run), true);
  }
}

inline void world::slow(int a, int b, duration extra) {
  between(a, b).extra = between(b, a).extra = extra;
}

inline void world::stop(int p) {
  procs[p].stopped = !procs[p].killed;
  note(p, "stopped");
}

inline void world::resume(int p) {
  process& s = procs[p];
  if (!s.stopped) return;
  s.stopped = false;
  note(p, "resumed");
  auto held = std::move(s.held);
  s.held.clear();
  for (auto& run : held) local(p, 0ms, std::move(run));
}

inline void world::run_until(time_point end, const std::function<void()>& check) {
  while (!queue_.empty() && queue_.front().at <= end && violation.empty()) {
    std::pop_heap(queue_.begin(), queue_.end(), std::greater<>());
    event e = std::move(queue_.back());
    queue_.pop_back();
    now_ = e.at;
    ++events_;
    e.run();
    check();
  }
  now_ = std::max(now_, end);
}

}  // namespace accord::sim
