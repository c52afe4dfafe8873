#pragma once
// The coordinator's side in the simulation: the real state machine, its actions performed over
// the virtual network, and the epoch it runs (a step every step_time while every rank trains and
// every pair of ranks can talk; each step kept by every rank, own shard and buddy copies).
#include "tests/membership_sim/world.hpp"

#include <algorithm>
#include <type_traits>

namespace accord::sim {

// members.hpp: what a member's agent (of that generation) hears from its coordinator.
template <class What>
void member_heard(world& w, int p, int generation, const What& what);
inline void epoch_plan_came(world& w, int p, int generation, const epoch_assignment& plan);
inline void epoch_request_failed(world& w, int p, int generation, const std::string& why);
inline void epoch_over(world& w, int p, std::uint64_t epoch);
inline void end_member(world& w, int p, const std::string& why);

inline membership_rules sim_rules(int world_size, int host, const sim_options& options) {
  membership_rules r;
  r.initial_world = world_size;
  r.elastic = true;
  r.sharded = true;
  r.total_rounds = 1'000'000'000;
  r.detector = heartbeat_detector_settings{};
  r.control = "p" + std::to_string(host);
  r.majority_wait = options.majority_wait;
  r.asks_standbys = true;
  return r;
}

inline void perform(world& w, int c);

// Feeds the machine of process c an event, if it still hosts that coordination.
template <class Event>
void feed(world& w, int c, int generation, const Event& event) {
  process& host = w.procs[c];
  if (!host.machine || host.machine_generation != generation) return;
  event(*host.machine);
  perform(w, c);
}

inline void step_epoch(world& w, int c, std::uint64_t epoch);

inline void end_epoch(world& w, int c, std::optional<std::string> failure) {
  process& host = w.procs[c];
  if (!host.epoch_active) return;
  host.epoch_active = false;
  const std::uint64_t epoch = host.epoch;
  const epoch_outcome outcome{host.steps->load(), false, host.steps->load()};
  if (!failure)
    for (const int p : host.ranks)  // the workers' wait ends with the coordinator's
      w.send(c, p, [&w, p, generation = w.procs[p].generation, epoch] {
        member_heard(w, p, generation, [&w, epoch](process& m) { epoch_over(w, m.index, epoch); });
      });
  const int generation = host.machine_generation;
  w.local(c, 1ms, [&w, c, generation, epoch, failure, outcome] {
    feed(w, c, generation, [&](membership_machine& m) { m.on_epoch_ended(epoch, failure, outcome, w.now()); });
  });
}

// One step of the running epoch: every rank trains it and every pair of ranks can talk.
inline void step_epoch(world& w, int c, std::uint64_t epoch) {
  process& host = w.procs[c];
  if (!host.epoch_active || host.epoch != epoch) return;
  bool all = true, change = false;
  for (const int p : host.ranks) {
    const process& m = w.procs[p];
    all = all && !m.killed && !m.stopped && m.running == epoch;
    change = change || m.change_epoch >= epoch;
  }
  if (all && !w.all_reachable())
    for (const int p : host.ranks)
      for (const int q : host.ranks) all = all && w.reachable(p, q);
  if (all) {
    const std::uint64_t steps = host.steps->load() + 1;
    host.steps->store(steps);
    const int world_size = static_cast<int>(host.ranks.size());
    for (int rank = 0; rank < world_size; ++rank) {
      auto& kept = w.procs[host.ranks[rank]].kept;
      const std::pair key{epoch, steps};
      auto at = kept.find(key);
      if (at == kept.end() && kept.size() >= 2 && key < kept.begin()->first) continue;  // older than both kept
      if (at == kept.end() && kept.size() >= 2) {  // the oldest generation's node and vectors are reused
        auto oldest = kept.extract(kept.begin());
        oldest.key() = key;
        at = kept.insert(std::move(oldest)).position;
      } else if (at == kept.end()) {
        at = kept.emplace(key, kept_summary{}).first;
      }
      kept_summary& k = at->second;
      if (k.rank != rank || k.world != world_size || k.copies.empty()) k.copies = w.copies_kept(rank, world_size);
      k.layout = epoch;
      k.steps = steps;
      k.rank = rank;
      k.world = world_size;
      k.copy_checksums.assign(k.copies.size(), 0);
      while (kept.size() > 2) kept.erase(kept.begin());
    }
    w.completed.emplace_back(epoch, steps);
    host.known_kept.add(epoch, steps);
    feed(w, c, host.machine_generation, [&](membership_machine& m) { m.on_kept(epoch, steps, steps); });
    if (change) return end_epoch(w, c, std::nullopt);  // the workers voted to stop after this step
  }
  w.local(c, step_time, [&w, c, epoch] { step_epoch(w, c, epoch); });
}

// A waiting side's round of questions to the lost members' standbys, one at a time, each
// answered as its standby stands when asked (2 ms), or unanswered after probe_timeout.
inline void probe_standbys(world& w, int c, int generation, std::vector<std::string> controls, std::size_t next) {
  if (next == controls.size()) {
    return feed(w, c, generation, [&](membership_machine& m) { m.on_standby_answer("", 0, false, w.now()); });
  }
  const int p = process_of(controls[next]);
  const process& there = w.procs[p];
  const bool answers = w.reachable(c, p) && !there.killed && !there.stopped;
  w.local(c, answers ? 2ms : probe_timeout,
          [&w, c, generation, controls, next, answers, epoch = there.replica->epoch, hosts = there.hosts()] {
            if (answers)
              feed(w, c, generation, [&](membership_machine& m) {
                m.on_standby_answer(controls[next], epoch, hosts, w.now());
              });
            probe_standbys(w, c, generation, controls, next + 1);
          });
}

inline void perform(world& w, int c, membership_action& action) {
  process& host = w.procs[c];
  const int generation = host.machine_generation;
  const auto to_member = [&](std::uint64_t member, auto what) {
    const auto found = host.member_process.find(member);
    if (found == host.member_process.end()) return;
    const auto [p, generation] = found->second;
    w.send(c, p, [&w, p, generation, what] { member_heard(w, p, generation, what); });
  };
  std::visit(
      [&](auto& a) {
        using A = std::decay_t<decltype(a)>;
        namespace act = membership_do;
        if constexpr (std::is_same_v<A, act::print>) {
          w.note(c, a.line);
        } else if constexpr (std::is_same_v<A, act::change>) {
          to_member(a.member, [epoch = a.epoch](process& m) { m.change_epoch = std::max(m.change_epoch, epoch); });
        } else if constexpr (std::is_same_v<A, act::abort>) {
          to_member(a.member, [&w, epoch = a.epoch](process& m) { epoch_over(w, m.index, epoch); });
        } else if constexpr (std::is_same_v<A, act::drop>) {
          // An agent that judged its coordinator lost already ignores it (member_agent.cpp, stop_relaying).
          to_member(a.member, [&w, why = a.why](process& m) {
            if (!m.master_lost) end_member(w, m.index, why);
          });
        } else if constexpr (std::is_same_v<A, act::heartbeat>) {
          to_member(a.member, [&w, sent = a.sent, echo = a.echo](process& m) {
            if (m.master_lost) return;
            if (!m.coordinator_heartbeats) m.coordinator_heartbeats.emplace(heartbeat_detector_settings{});
            m.coordinator_heartbeats->heard(0, w.now());
            m.contact.heard(sent, echo);
          });
        } else if constexpr (std::is_same_v<A, act::answer>) {
          const auto found = host.member_process.find(a.member);
          if (found == host.member_process.end()) return;
          const auto [p, generation] = found->second;
          w.send(c, p, [&w, p, generation, plan = a.plan] { epoch_plan_came(w, p, generation, plan); });
        } else if constexpr (std::is_same_v<A, act::refuse>) {
          const auto found = host.member_process.find(a.member);
          if (found == host.member_process.end()) return;
          const auto [p, generation] = found->second;
          w.send(c, p, [&w, p, generation, why = a.why] { epoch_request_failed(w, p, generation, why); });
        } else if constexpr (std::is_same_v<A, act::spawn_coordinator>) {
          host.epoch = a.spec.epoch;
          host.steps->store(a.spec.start_steps);
          host.ranks.clear();
          host.epoch_active = true;
          formed_epoch f;
          f.coordinator = c;
          f.epoch = a.spec.epoch;
          f.at = w.now();
          f.start_steps = a.spec.start_steps;
          w.formed.push_back(f);
          w.local(c, step_time, [&w, c, epoch = a.spec.epoch] { step_epoch(w, c, epoch); });
        } else if constexpr (std::is_same_v<A, act::fail_worker>) {
          end_epoch(w, c, a.why);
        } else if constexpr (std::is_same_v<A, act::replicate>) {
          // One copy shared by every member (a copy each would cost N² per kept step).
          const auto replica = std::make_shared<const coordination_replica>(std::move(a.replica));
          for (const std::uint64_t member : a.to)
            to_member(member, [replica](process& m) {
              if (m.master_lost || !newer(*replica, *m.replica)) return;
              m.replica = replica;
              // Oldest first: each adds at the end unless it is known already.
              for (auto k = replica->kept.rbegin(); k != replica->kept.rend(); ++k) m.known_kept.add(k->epoch, k->steps);
            });
        } else if constexpr (std::is_same_v<A, act::timer>) {
          w.local(c, a.after, [&w, c, generation, t = a] {
            feed(w, c, generation, [&](membership_machine& m) { m.on_timer(t.kind, t.epoch, w.now()); });
          });
        } else if constexpr (std::is_same_v<A, act::probe_death>) {
          const int p = process_of(a.control);
          // A killed process's port refuses at once; a live one accepts; a cut one never answers.
          const bool answers = w.reachable(c, p);
          const bool refused = answers && w.procs[p].killed;
          w.local(c, answers ? 1ms : probe_timeout, [&w, c, generation, member = a.member, refused] {
            feed(w, c, generation, [&](membership_machine& m) { m.on_death_probe(member, refused, w.now()); });
          });
        } else if constexpr (std::is_same_v<A, act::probe_standbys>) {
          probe_standbys(w, c, generation, a.controls, 0);
        }
      },
      action);
}

inline void perform(world& w, int c) {
  membership_actions actions = w.spare_actions();
  w.procs[c].machine->take_actions(actions);
  std::vector<int> released;  // leavers answered before their epoch's spawn
  for (membership_action& a : actions) {
    process& host = w.procs[c];
    if (const auto* answer = std::get_if<membership_do::answer>(&a)) {
      const auto found = host.member_process.find(answer->member);
      const int p = found == host.member_process.end() ? -1 : found->second.first;
      if (answer->plan.finished && p >= 0) released.push_back(p);
      if (!answer->plan.finished && answer->plan.rejoin.empty() && host.epoch == answer->plan.epoch && p >= 0) {
        if (host.ranks.size() <= static_cast<std::size_t>(answer->plan.rank)) host.ranks.resize(answer->plan.rank + 1, -1);
        host.ranks[answer->plan.rank] = p;
        w.formed.back().members = host.ranks;
      }
    }
    perform(w, c, a);
    if (std::holds_alternative<membership_do::spawn_coordinator>(a)) w.formed.back().released = std::move(released);
  }
  w.return_actions(std::move(actions));
}

// Process c starts a coordination: the job's first (from_replica empty) or a takeover.
inline void start_coordination(world& w, int c, int world_size, std::optional<coordination_replica> takeover,
                        const std::string& cause) {
  process& host = w.procs[c];
  membership_rules rules = sim_rules(world_size, c, w.options);
  rules.steps_done = host.steps;
  rules.takeover = std::move(takeover);
  rules.takeover_cause = cause;
  ++host.machine_generation;
  host.member_process.clear();
  if (rules.takeover)
    for (const replica_member& m : rules.takeover->members) host.member_process[m.id] = {process_of(m.control), -1};
  host.epoch_active = false;
  host.machine = std::make_unique<membership_machine>(std::move(rules), w.now());
  perform(w, c);
}

}  // namespace accord::sim
