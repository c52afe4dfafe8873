#pragma once
// A deterministic simulation of an elastic job's membership: N worker processes on a virtual
// clock and a virtual network, the coordinator's decisions made by the real state machine
// (membership/machine.hpp), the members' side (agent, standby, election, majority wait) modelled
// on actors/member_agent.cpp, actors/standby_actor.cpp and job/between_processes.cpp. Links
// behave as the TCP connections CAF uses: ordered, held while cut and delivered on heal; a killed
// process's peers see its connections close (an RST from its host), a stopped one holds
// everything until it resumes. Everything random comes from one seed.
#include "membership/election.hpp"
#include "membership/machine.hpp"
#include "recovery/elastic_state.hpp"
#include "tests/membership_sim/task.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
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

inline const std::shared_ptr<const coordination_replica>& no_replica() {
  static const auto none = std::make_shared<const coordination_replica>();
  return none;
}

// One worker process: its member (main thread and agent), its standby, and the coordination it
// may host.
struct process {
  int index = 0;
  bool killed = false, stopped = false;
  bool killed_by_fault = false;  // a schedule's kill (not the process's own end)
  std::string ended;  // why its main thread ended ("" while it runs)
  std::vector<task> held;  // work that came while it was stopped
  int generation = 0;  // of its agent: a new one on every hello, old timers die with the old
  // Its member.
  std::uint64_t id = 0;
  bool joiner = false;
  bool rejoin = false;  // its hello in flight follows a coordinator's loss
  int coordinator = 0;  // the process whose coordination it follows
  bool admitted = false, master_lost = false, asking = false, leaving = false;
  std::uint64_t running = 0;  // the epoch it trains in (0: none)
  int rank = -1;
  std::uint64_t change_epoch = 0;
  std::optional<heartbeat_detector> coordinator_heartbeats;
  heartbeat_contact contact;
  std::map<std::pair<std::uint64_t, std::uint64_t>, kept_summary> kept;  // the two newest generations
  // Its standby.
  std::shared_ptr<const coordination_replica> replica = no_replica();  // the newest it holds, shared with the others
  std::optional<std::uint64_t> saw_lost;  // the coordinator (member id) its agent judged lost
  std::string lost_cause;
  std::vector<std::function<void(int)>> deferred;  // elections waiting for its own verdict
  // The election order of its replica, computed once per replica (an election asks one at a time).
  const std::vector<replica_member>& election_order() {
    if (order_of_ != replica) {
      order_ = election_candidates(*replica);
      order_of_ = replica;
    }
    return order_;
  }
  // The coordination it hosts.
  std::unique_ptr<membership_machine> machine;
  int machine_generation = 0;
  std::shared_ptr<std::atomic<std::uint64_t>> steps = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::map<std::uint64_t, std::pair<int, int>> member_process;  // member id → (process, agent generation)
  // Kept steps (layout, steps) it knows completed, sorted: they come nearly in order (a replica's
  // are the newest few), so a sorted vector searched from its end takes each in about constant
  // time where a set allocated a node per replica and step.
  struct kept_steps {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> sorted;
    void add(std::uint64_t layout, std::uint64_t steps) {
      const std::pair k{layout, steps};
      auto at = sorted.end();
      while (at != sorted.begin() && k < *(at - 1)) --at;
      if (at == sorted.begin() || *(at - 1) != k) sorted.insert(at, k);
    }
    bool has(std::uint64_t layout, std::uint64_t steps) const {
      return std::binary_search(sorted.begin(), sorted.end(), std::pair{layout, steps});
    }
    bool empty() const { return sorted.empty(); }
  } known_kept;
  // Its running epoch (as coordinator).
  std::uint64_t epoch = 0;
  std::vector<int> ranks;  // processes by rank
  bool epoch_active = false;

  std::string control() const {
    std::string name = "p";  // appended, not "p" + ...: GCC 12 warns falsely (-Wrestrict) on that inlined
    return name += std::to_string(index);
  }

private:
  std::shared_ptr<const coordination_replica> order_of_;
  std::vector<replica_member> order_;

public:
  bool hosts() const { return machine && machine->phase() != membership_phase::yielded; }
};

inline int process_of(const std::string& control) { return std::stoi(control.substr(1)); }

// What a run may change of the job's rules: the tests revert a fix with it to show that the
// simulation finds what the fix fixed.
struct sim_options {
  // --majority-wait: 0 is the rule before it existed (a side without a majority stops at once).
  std::chrono::milliseconds majority_wait = accord::sim::majority_wait;
};

class world {
public:
  // `joiners`: how many joiners may come (processes are never moved, so references to them hold).
  world(int members, std::uint64_t seed, sim_options options = {}, int joiners = 16)
      : rng(seed), initial(members), options(options), stride_(static_cast<std::size_t>(members + joiners)),
        links_(stride_ * stride_) {
    procs.reserve(stride_);
  }

  // Faults, as a schedule applies them.
  void kill(int p);
  void stop(int p);
  void resume(int p);
  void cut(int a, int b, bool on);
  void slow(int a, int b, duration extra);
  void start_joiner();
  void ask_to_leave(int p);

  // Runs the events due by `end`, calling check() after each, until a violation is found.
  template <class Check>
  void run_until(time_point end, const Check& check);
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

  void after(duration d, task&& run) { schedule(-1, d, std::move(run)); }
  // Work on process p after d: dropped when p is killed, held while it is stopped.
  void local(int p, duration d, task&& run) { schedule(p, d, std::move(run)); }
  // A message from a to b (ordered per link; held while the link is cut). `from_kernel`: sent
  // by a's host even when a is killed (a connection's close).
  void send(int a, int b, task&& run, bool from_kernel = false);
  bool reachable(int a, int b) const { return cut_links_ == 0 || a == b || !links_[a * stride_ + b].cut; }
  // No link is cut: every process can reach every other (the common case, checked at every step).
  bool all_reachable() const { return cut_links_ == 0; }
  std::mt19937_64 rng;
  int initial;  // the starting ranks
  sim_options options;
  // Buffers for the machines' actions, reused (perform may feed a machine again before it is done).
  membership_actions spare_actions() {
    if (spare_actions_.empty()) return {};
    membership_actions spare = std::move(spare_actions_.back());
    spare_actions_.pop_back();
    return spare;
  }
  void return_actions(membership_actions&& used) {
    used.clear();
    spare_actions_.push_back(std::move(used));
  }
  // A process for a joiner (fails past the joiners the world was made for).
  process& add_process();
  // copies_kept_by(rank, world_size), from copy_holders once per world size: copies_kept_by asks
  // copy_holders of every shard, which for every rank at every step is N² per step.
  const std::vector<int>& copies_kept(int rank, int world_size) {
    if (copies_.size() <= static_cast<std::size_t>(world_size)) copies_.resize(world_size + 1);
    auto& by_rank = copies_[world_size];
    if (by_rank.empty()) {
      by_rank.resize(world_size);
      for (int shard = 0; shard < world_size; ++shard)
        for (const int holder : copy_holders(shard, world_size)) by_rank[holder].push_back(shard);
    }
    return by_rank[rank];
  }

private:
  struct event {
    time_point at;
    std::uint64_t seq;
    int process;  // whose work it is (-1: the world's, such as a fault)
    std::uint32_t slot;  // in tasks_
    bool operator>(const event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct link {
    bool cut = false;
    duration extra{};
    time_point last{};  // ordered delivery
    std::vector<task> held;
  };
  void schedule(int p, duration d, task&& run);
  link& between(int a, int b) { return links_[static_cast<std::size_t>(a) * stride_ + static_cast<std::size_t>(b)]; }

  std::size_t stride_;  // the most processes
  std::vector<link> links_;  // a → b at a * stride_ + b
  int cut_links_ = 0;
  std::vector<event> queue_;  // a heap, earliest first
  std::vector<task> tasks_;   // the events' work, by slot; freed slots are reused
  std::vector<std::uint32_t> free_slots_;
  std::vector<std::vector<std::vector<int>>> copies_;  // by world size, by rank
  std::vector<membership_actions> spare_actions_;
  time_point origin_ = time_point(std::chrono::hours(1));  // heartbeat time 0 means "none"
  time_point now_ = origin_;
  std::uint64_t seq_ = 0;
  std::size_t events_ = 0;
};

inline void world::schedule(int p, duration d, task&& run) {
  std::uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<std::uint32_t>(tasks_.size());
    tasks_.push_back(std::move(run));
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    tasks_[slot] = std::move(run);
  }
  queue_.push_back({now_ + d, seq_++, p, slot});
  std::push_heap(queue_.begin(), queue_.end(), std::greater<>());
}

inline process& world::add_process() {
  if (procs.size() == stride_) throw std::length_error("membership simulation: more joiners than the world was made for");
  procs.emplace_back();
  procs.back().index = static_cast<int>(procs.size()) - 1;
  return procs.back();
}

inline void world::send(int a, int b, task&& run, bool from_kernel) {
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
    cut_links_ += (on ? 1 : 0) - (l.cut ? 1 : 0);
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

template <class Check>
void world::run_until(time_point end, const Check& check) {
  while (!queue_.empty() && queue_.front().at <= end && violation.empty()) {
    std::pop_heap(queue_.begin(), queue_.end(), std::greater<>());
    const event e = queue_.back();
    queue_.pop_back();
    task run = std::move(tasks_[e.slot]);
    free_slots_.push_back(e.slot);
    now_ = e.at;
    ++events_;
    process* to = e.process >= 0 ? &procs[e.process] : nullptr;
    if (to && to->stopped && !to->killed)
      to->held.push_back(std::move(run));
    else if (!to || !to->killed)
      run();
    check();
  }
  now_ = std::max(now_, end);
}

}  // namespace accord::sim
