#pragma once
// The members' side in the simulation, after job/between_processes.cpp: a main thread that says
// hello, asks for epochs and trains them; an agent that sends heartbeats, judges the
// coordinator's and names it lost; a standby that holds the replica and takes over when its own
// process judged the coordinator lost; the election in succession order, and the wait for a
// majority when nobody takes over.
#include "membership/election.hpp"
#include "tests/membership_sim/coordination.hpp"

namespace accord::sim {

inline void say_hello(world& w, int p, int c, bool rejoin);
inline void begin_election(world& w, int p, const std::string& cause);
inline void coordinator_gone(world& w, int p, const std::string& cause);
inline void coordination_gone(world& w, int c);

template <class What>
void member_heard(world& w, int p, int generation, const What& what) {
  process& m = w.procs[p];
  if (m.generation != generation || !m.ended.empty()) return;
  what(m);
}

// A hello whose coordinator's process is gone fails. A first hello ends the member's process
// (job/between_processes.cpp, admit: the request to a dead actor fails); a member saying hello
// again after a coordinator's loss, to the one it elected or found, takes that one for lost
// too and elects again (between_processes.cpp, follow_next).
inline void hello_failed(world& w, int p, int generation, int c) {
  member_heard(w, p, generation, [&w, c](process& m) {
    const std::string why = "its hello to p" + std::to_string(c) + " failed: that process is gone";
    if (m.rejoin) return coordinator_gone(w, m.index, why);
    end_member(w, m.index, why);
  });
}

// The process exits: its ports refuse, its connections close.
inline void world::kill(int p) {
  process& k = procs[p];
  if (k.killed) return;
  k.killed = true;
  k.held.clear();
  note(p, "killed");
  for (process& q : procs) {
    if (q.index == p || q.killed) continue;
    // Its agent's connection to its coordinator: the coordinator sees the member's close.
    if (k.admitted && k.coordinator == q.index && q.machine)
      for (const auto& [id, at] : q.member_process)
        if (at.first == p && at.second == k.generation) {
          const int c = q.index, generation = q.machine_generation;
          const std::uint64_t member = id;
          send(p, c, [this, c, generation, member] {
            feed(*this, c, generation, [&](membership_machine& m) { m.on_connection_closed(member, now()); });
          }, true);
        }
    // A member whose hello it had not answered yet sees that hello fail.
    if (!q.admitted && q.coordinator == p && q.ended.empty()) {
      const int member = q.index, generation = q.generation;
      send(p, member, [this, member, generation, p] { hello_failed(*this, member, generation, p); }, true);
    }
  }
  coordination_gone(*this, p);
}

// The coordination process c hosted is gone (its process killed, or it gave way): the agents of
// the members that followed it see the membership actor they monitor go down.
inline void coordination_gone(world& w, int c) {
  for (process& q : w.procs) {
    if (q.index == c || q.killed || !q.admitted || q.coordinator != c) continue;
    const int member = q.index, generation = q.generation;
    w.send(c, member, [&w, member, generation] {
      member_heard(w, member, generation, [&w](process& m) {
        coordinator_gone(w, m.index, closed_cause(heartbeat_detector_settings{}, m.contact, w.now()));
      });
    }, true);
  }
}

// The agent judged its coordinator lost (hung): its standby may take over from now on.
inline void coordinator_gone(world& w, int p, const std::string& cause) {
  process& m = w.procs[p];
  if (m.master_lost || !m.ended.empty()) return;
  m.master_lost = true;
  m.saw_lost = m.replica->coordinator;
  m.lost_cause = cause;
  w.note(p, "judged its coordinator p" + std::to_string(m.coordinator) + " lost: " + cause);
  m.running = 0;
  if (m.replica->epoch != 0) {
    auto deferred = std::move(m.deferred);
    m.deferred.clear();
    for (auto& answer : deferred) answer(p);
  }
  begin_election(w, p, cause);
}

inline void end_member(world& w, int p, const std::string& why) {
  process& m = w.procs[p];
  if (!m.ended.empty()) return;
  m.ended = why;
  w.note(p, "ends: " + why);
  w.kill(p);
}

inline void request_epoch(world& w, int p) {
  process& m = w.procs[p];
  if (m.master_lost || m.asking || !m.ended.empty()) return;
  m.asking = true;
  epoch_request request{m.id, m.control(), {}};
  for (const auto& [key, k] : m.kept) request.kept.push_back(k);
  const int c = m.coordinator, generation = w.procs[c].machine_generation;
  w.send(p, c, [&w, c, generation, request] {
    feed(w, c, generation, [&](membership_machine& machine) { machine.on_epoch_request(request, w.now()); });
  });
}

inline void epoch_over(world& w, int p, std::uint64_t epoch) {
  process& m = w.procs[p];
  if (m.running != epoch) return;
  m.running = 0;
  request_epoch(w, p);
}

inline void agent_tick(world& w, int p, int generation) {
  process& m = w.procs[p];
  if (m.generation != generation || m.master_lost || !m.ended.empty()) return;
  const int c = m.coordinator, machine_generation = w.procs[c].machine_generation;
  w.send(p, c, [&w, c, machine_generation, id = m.id, sent = heartbeat_time(w.now()), echo = m.contact.heard_sent] {
    feed(w, c, machine_generation, [&](membership_machine& machine) { machine.on_heartbeat(id, sent, echo, w.now()); });
  });
  if (m.coordinator_heartbeats)
    for (const auto& silent : m.coordinator_heartbeats->check(w.now())) return coordinator_gone(w, p, hung_cause(silent));
  w.local(p, heartbeat_interval, [&w, p, generation] { agent_tick(w, p, generation); });
}

// membership_at: the coordinator reached through the standby of process `there`, tried until
// `deadline` (a flapping link may let it through); then this member says hello there again.
inline void find_and_follow(world& w, int p, int there, const std::string& control, time_point deadline) {
  const process& t = w.procs[there];
  const int target = t.hosts() || t.replica->coordinator_control.empty() ? there : process_of(t.replica->coordinator_control);
  if (w.reachable(p, there) && !t.killed && !t.stopped && w.reachable(p, target) && w.procs[target].hosts())
    return say_hello(w, p, target, true);
  // Gone: this member elects again, as after any coordinator's loss (between_processes.cpp).
  if (w.now() >= deadline || t.killed)
    return coordinator_gone(w, p, "this side gave way to the coordinator at " + control + ", which does not answer");
  w.local(p, 200ms, [&w, p, there, control, deadline] { find_and_follow(w, p, there, control, deadline); });
}

// A plan or refusal that comes after the agent judged its coordinator lost is dropped: the agent
// answered the main thread's request with the loss already (actors/member_agent.cpp, relay).
inline void epoch_plan_came(world& w, int p, int generation, const epoch_assignment& plan) {
  process& m = w.procs[p];
  if (m.generation != generation || !m.ended.empty() || m.master_lost) return;
  m.asking = false;
  if (plan.finished) return end_member(w, p, "finished");
  if (!plan.rejoin.empty()) {
    // This side gave way: a coordination hosted here ends, and the member follows the other.
    // Its agent goes first (between_processes.cpp): no verdict on the old coordinator meanwhile.
    ++m.generation;
    m.coordinator_heartbeats.reset();
    if (m.machine) {
      m.machine.reset();
      ++m.machine_generation;
      m.epoch_active = false;
      coordination_gone(w, p);
    }
    m.saw_lost.reset();  // the standby's follow_atom: its verdict is spent
    return find_and_follow(w, p, process_of(plan.rejoin), plan.rejoin, w.now() + rejoin_timeout);
  }
  m.running = plan.epoch;
  m.rank = plan.rank;
  for (formed_epoch& f : w.formed)
    if (f.epoch == plan.epoch && f.coordinator == m.coordinator) f.trained.insert(p);
  w.note(p, "trains epoch " + std::to_string(plan.epoch) + " of p" + std::to_string(m.coordinator) + " as rank " + std::to_string(plan.rank));
}

inline void epoch_request_failed(world& w, int p, int generation, const std::string& why) {
  process& m = w.procs[p];
  if (m.generation != generation || !m.ended.empty() || m.master_lost) return;
  m.asking = false;
  end_member(w, p, why);
}

// After a coordinator's loss the agent is replaced: the old coordinator sees the old one go.
// Following a member elected elsewhere, the standby forgets its verdict on the lost coordinator:
// it must not take over from it too for a later asker (job/coordinator_finding.cpp, elect_coordinator).
inline void follow(world& w, int p, int c) {
  process& m = w.procs[p];
  if (c != p) m.saw_lost.reset();
  const int old = m.coordinator;
  if (m.admitted && !w.procs[old].killed)
    w.send(p, old, [&w, old, generation = w.procs[old].machine_generation, id = m.id] {
      feed(w, old, generation, [&](membership_machine& machine) { machine.on_connection_closed(id, w.now()); });
    });
  say_hello(w, p, c, true);
}

// After the coordinator's loss a member follows the coordination its own process hosts, if its
// standby took over meanwhile for members that asked it (they follow it; a coordination without
// its own process's member fails the job), else the one elected or found
// (job/between_processes.cpp, own_coordination).
inline void follow_elected(world& w, int p, int elected) {
  follow(w, p, w.procs[p].hosts() ? p : elected);
}

inline void say_hello(world& w, int p, int c, bool rejoin) {
  process& m = w.procs[p];
  w.note(p, std::string(rejoin ? "says hello again to p" : "says hello to p") + std::to_string(c) + " (replica of epoch " + std::to_string(m.replica->epoch) + ")");
  ++m.generation;
  m.coordinator = c;
  m.rejoin = rejoin;
  m.admitted = m.master_lost = m.asking = false;
  m.running = 0;
  m.coordinator_heartbeats.reset();
  m.contact = {};
  member_hello hello;
  hello.rank = m.joiner ? -1 : p;
  hello.world = w.initial;
  hello.host = m.control();
  hello.control = m.control();
  hello.rejoin = rejoin;
  hello.member = m.id;
  if (rejoin) hello.replica = *m.replica;
  const int generation = m.generation;
  if (w.procs[c].killed)  // its port refuses at once
    return w.local(p, 1ms, [&w, p, generation, c] { hello_failed(w, p, generation, c); });
  // The hello goes to the coordination c hosts now (the actor the member was handed): when that
  // one has ended by its arrival, the hello fails as to a dead actor.
  w.send(p, c, [&w, p, c, generation, hello, coordination = w.procs[c].machine_generation] {
    process& host = w.procs[c];
    const bool there = host.machine && host.machine_generation == coordination;
    std::variant<std::uint64_t, std::string> admitted = std::string();
    if (there) {
      admitted = host.machine->on_hello(hello, p != c, w.now());
      if (const auto* id = std::get_if<std::uint64_t>(&admitted)) host.member_process[*id] = {p, generation};
      perform(w, c);
    }
    w.send(c, p, [&w, p, c, generation, admitted, there] {
      process& m = w.procs[p];
      if (m.generation != generation || !m.ended.empty()) return;
      if (!there) return hello_failed(w, p, generation, c);
      if (const auto* why = std::get_if<std::string>(&admitted)) {
        // A coordination that gave way meanwhile is gone for this member, as a dead one.
        if (m.rejoin && refused_as_gone(*why)) return coordinator_gone(w, p, *why);
        return end_member(w, p, *why);
      }
      m.id = std::get<std::uint64_t>(admitted);
      m.admitted = true;
      agent_tick(w, p, generation);
      request_epoch(w, p);
    });
  });
}

// The standby of process q asked to take over by a member whose replica is of `epoch`; `reply`
// gets the elected process, or -1 (still_heard: the coordinator lives; left_behind: a later
// epoch formed without the asker).
struct election_result {
  int elected = -1;
  bool still_heard = false, left_behind = false;
  std::shared_ptr<const coordination_replica> later = nullptr;  // left_behind: the refusing standby's replica
};

inline void standby_elect(world& w, int q, std::uint64_t epoch, std::function<void(election_result)> reply) {
  process& s = w.procs[q];
  const auto take_over_once = [&w, q] {
    process& s = w.procs[q];
    if (!s.hosts()) {
      w.note(q, "takes over from the replica of epoch " + std::to_string(s.replica->epoch));
      start_coordination(w, q, w.initial, *s.replica, s.lost_cause);
    }
    election_result elected;
    elected.elected = q;
    return elected;
  };
  switch (answer_election({*s.replica, s.hosts(), s.saw_lost}, epoch)) {
    case election_answer::coordinates: return reply({.elected = q});
    case election_answer::no_copy_yet: return reply({});
    case election_answer::take_over: return reply(take_over_once());
    case election_answer::formed_without_asker: return reply({-1, true, true, s.replica});
    case election_answer::wait_for_own_verdict: break;
  }
  auto answered = std::make_shared<bool>(false);
  s.deferred.push_back([reply, answered, take_over_once](int) {
    if (!std::exchange(*answered, true)) reply(take_over_once());
  });
  w.local(q, confirm_wait, [reply, answered] {
    if (!std::exchange(*answered, true)) reply({.elected = -1, .still_heard = true});
  });
}

// The members of the last replicated epoch asked in succession order, until one takes over.
inline void elect(world& w, int p, std::size_t next, std::function<void(election_result)> done) {
  process& m = w.procs[p];
  const std::vector<replica_member>& order = m.election_order();
  if (next >= order.size()) return done({});
  const int q = process_of(order[next].control);
  const std::uint64_t epoch = m.replica->epoch;
  const auto answered = [&w, p, next, done](election_result a) {
    process& m = w.procs[p];
    if (!m.ended.empty()) return;
    // A later epoch that counted this member (a cut held its plan and copies): it takes that
    // replica and elects from it (coordinator_finding.cpp, elect_coordinator; election.hpp, counted_in).
    if (a.left_behind && newer(*a.later, *m.replica) && counted_in(*a.later, m.id)) {
      m.replica = a.later;
      for (auto k = m.replica->kept.rbegin(); k != m.replica->kept.rend(); ++k) m.known_kept.add(k->epoch, k->steps);
      return elect(w, p, 0, done);
    }
    if (a.elected >= 0 || a.still_heard) return done(a);
    elect(w, p, next + 1, done);
  };
  if (q == p) return standby_elect(w, p, epoch, answered);
  if (!w.reachable(p, q) || w.procs[q].stopped || w.procs[q].killed) {
    const bool refused = w.procs[q].killed && w.reachable(p, q);
    return w.local(p, refused ? 1ms : probe_timeout, [answered] { answered({}); });
  }
  auto once = std::make_shared<bool>(false);
  w.send(p, q, [&w, p, q, epoch, answered, once] {
    standby_elect(w, q, epoch, [&w, p, q, answered, once](election_result a) {
      w.send(q, p, [answered, once, a] {
        if (!std::exchange(*once, true)) answered(a);
      });
    });
  });
  w.local(p, confirm_wait + probe_timeout, [answered, once] {
    if (!std::exchange(*once, true)) answered({});
  });
}

inline void wait_for_majority(world& w, int p, time_point since, std::string cause) {
  process& m = w.procs[p];
  if (!m.ended.empty()) return;
  if (m.hosts()) return follow_elected(w, p, p);
  if (!m.replica->coordinator_control.empty()) {
    const int last = process_of(m.replica->coordinator_control);
    if (w.reachable(p, last) && !w.procs[last].killed && !w.procs[last].stopped && w.procs[last].hosts()) {
      m.saw_lost.reset();
      return follow(w, p, last);
    }
  }
  if (w.now() - since >= w.options.majority_wait)
    return end_member(w, p, "no member could take over from the lost coordinator (" + cause + ")");
  w.local(p, majority_retry, [&w, p, since, cause] {
    elect(w, p, 0, [&w, p, since, cause](election_result a) {
      if (a.elected >= 0) return follow_elected(w, p, a.elected);
      if (a.left_behind) return end_member(w, p, "a later epoch formed without this member");
      wait_for_majority(w, p, since, cause);
    });
  });
}

inline void begin_election(world& w, int p, const std::string& cause) {
  if (w.procs[p].hosts()) return follow_elected(w, p, p);
  elect(w, p, 0, [&w, p, cause](election_result a) {
    if (a.elected >= 0) return follow_elected(w, p, a.elected);
    if (a.left_behind) return end_member(w, p, "a later epoch formed without this member");
    wait_for_majority(w, p, w.now(), cause);
  });
}

// The job: process 0 hosts the first coordination; every starting rank says hello to it.
inline void start_job(world& w) {
  for (int p = 0; p < w.initial; ++p) w.add_process();
  start_coordination(w, 0, w.initial, std::nullopt, "");
  for (int p = 0; p < w.initial; ++p) w.local(p, std::chrono::milliseconds(w.rng() % 50), [&w, p] { say_hello(w, p, 0, false); });
}

inline void world::start_joiner() {
  process& joiner = add_process();
  joiner.joiner = true;
  const int p = joiner.index;
  // It reaches the coordinator through any member's standby: the newest formed epoch's.
  const int c = formed.empty() ? 0 : formed.back().coordinator;
  say_hello(*this, p, c, false);
}

inline void world::ask_to_leave(int p) {
  process& m = procs[p];
  if (!m.admitted || m.master_lost || m.leaving || !m.ended.empty()) return;
  m.leaving = true;
  const int c = m.coordinator;
  send(p, c, [this, c, generation = procs[c].machine_generation, id = m.id] {
    feed(*this, c, generation, [&](membership_machine& machine) { machine.on_leave(id, now()); });
  });
}

}  // namespace accord::sim
