#include "actors/membership_actor.hpp"

#include "actors/standby_actor.hpp"

#include "cluster/certain_death.hpp"
#include "cluster/fingerprint.hpp"
#include "observe/trace.hpp"

#include <algorithm>
#include <climits>
#include <csignal>
#include <functional>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

namespace accord {
namespace {

struct member {
  std::uint64_t id = 0;
  int initial_rank = -1;  // -1: joined later
  member_agent agent;
  std::string host;
  bool alive = true;
  bool leaving = false;
  bool remote = false;  // in another process than the membership actor (its heartbeats are judged)
  int rank = -1;  // in the running epoch; -1 when not in it
  int last_rank = -1;  // in the last epoch formed (the succession order); -1 when not in it
  std::string control;  // HOST:PORT of its standby
  bool reconnecting = false;  // after a takeover: known from the replica, not yet reconnected
  bool held = false;  // a replay's joiner: admitted when its change is due
  std::optional<epoch_request> request;
  std::optional<caf::typed_response_promise<epoch_plan>> promise;
  bool released = false;  // told that the job is over (or failed)
  heartbeat_contact contact;     // its heartbeats and this actor's, echoed
  bool checking_death = false;  // lost while in contact: its control port is being tried
  bool known_dead = false;      // and it refused: the process is gone (cluster/certain_death.hpp)
  // Lost since the last epoch formed: its loss, recorded once an epoch forms without it (until
  // then it may come back), and when the verdict came.
  std::optional<membership_record> lost_record;
  std::chrono::steady_clock::time_point lost_at;

  std::string name() const { return member_name(initial_rank, id, host); }
};

// yielded: a side without a majority gave way to an earlier coordinator (its members went there).
enum class phase { starting, running, forming, finished, failed, yielded };

struct restore_check {
  int reports = 0;
  std::uint64_t checksum = 0;
  std::optional<std::string> mismatch;
};

struct membership_state {
  membership_setup setup;
  std::map<std::uint64_t, member> members;
  std::uint64_t next_id = 0;
  int initial_hellos = 0;
  phase now = phase::starting;
  std::uint64_t epoch = 0;       // the running (or last) epoch
  int epoch_workers = 0;
  std::uint64_t epoch_start = 0;
  coordinator_actor coordinator;
  std::shared_ptr<job_result> epoch_result;
  bool lost_in_epoch = false;    // a member of the running epoch went away
  std::optional<std::string> epoch_failure;
  std::optional<std::string> failure;  // the job's
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> kept_positions;  // (epoch, steps) → data
  bool anything_kept = false;
  std::optional<state_source> restoring;  // what the running epoch restored, to be verified
  restore_check check;
  std::string pending_reason;    // why the next epoch forms
  std::vector<caf::typed_response_promise<bool>> waiters;  // for every member's release
  std::chrono::steady_clock::time_point epoch_ended_at;    // when the last epoch ended
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  int rendezvous_reports = 0;  // lines naming the missing starting ranks, one per 10 s
  std::map<std::uint64_t, std::string> dropped;  // member → why the job went on without it
  std::optional<heartbeat_detector> detector;
  bool lost_since_epoch = false;              // a member was lost since the running epoch formed
  std::vector<std::string> metrics_events;    // for the next epoch's metrics file
  std::uint64_t replica_sequence = 0;
  bool departing = false;                  // a replay's coordinator loss: this process goes away
  bool replayed_coordinator_gone = false;  // this process took over from a replayed coordinator loss
  bool replay_waiting = false;             // for a due joiner (said once)
  // Since when this side, without a majority of the last epoch's members, waits for them.
  std::optional<std::chrono::steady_clock::time_point> waiting_since;
  // Since when the waiting side has its majority back while others it waited for are still away.
  std::optional<std::chrono::steady_clock::time_point> majority_back_since;
  std::string yielded_to;  // the control port of the coordinator this side gave way to
};

using self_pointer = membership_actor::stateful_pointer<membership_state>;

// A closed connection's cause: while the peer was in contact (it may count as dead), or not.
constexpr const char* closed_in_contact_cause = "connection closed (killed, or its host went away)";
constexpr const char* closed_out_of_contact_cause =
    "connection closed (killed, its host went away, or silent past the heartbeat timeout)";

std::string closed_cause(const std::optional<heartbeat_detector_settings>& detector, const heartbeat_contact& contact) {
  return detector && closed_in_contact(std::chrono::steady_clock::now(), contact.echoed, earliest_verdict(*detector))
             ? closed_in_contact_cause
             : closed_out_of_contact_cause;
}

// How long a lost member's control port is given to refuse; a partitioned one never answers.
constexpr auto death_probe_timeout = std::chrono::milliseconds(2000);

// `m` was lost by a closed connection while in contact: it counts as dead once its control port
// refuses a connection, which is tried off this actor's thread; an epoch whose majority needs
// the answer waits for it.
void check_death(self_pointer self, member& m) {
  if (m.control.empty()) return;
  m.checking_death = true;
  self->home_system().spawn([membership = caf::actor_cast<membership_actor>(self), id = m.id,
                             control = m.control](caf::blocking_actor*) {
    caf::anon_send(membership, dead_atom::value, id, port_refuses_connection(control, death_probe_timeout));
  });
}

// "hung (silent for 1.62 s; its heartbeats allowed 1.50 s)"
std::string hung_cause(const heartbeat_detector::suspicion& silent) {
  char cause[96];
  std::snprintf(cause, sizeof cause, "hung (silent for %.2f s; its heartbeats allowed %.2f s)",
                std::chrono::duration<double>(silent.silent).count(),
                std::chrono::duration<double>(silent.threshold).count());
  return cause;
}

void event(self_pointer self, const std::string& line) {
  if (self->state.setup.on_event) self->state.setup.on_event(line);
}

void record(self_pointer self, const membership_record& r) {
  if (self->state.setup.on_record) self->state.setup.on_record(r);
}

std::uint64_t steps_done(const membership_state& s) {
  return s.setup.steps_done ? std::max(s.setup.steps_done->load(), s.epoch_start) : s.epoch_start;
}

// A member was lost or left (`what`): one line here and in every other member's process, a
// record for the membership log and the metrics file.
// The coordinator's process hosts this actor (its agent is local); the standby is next in
// line: the lowest rank of the last epoch besides it.
std::string role_of(const membership_state& s, const member& m) {
  if (!m.remote) return "coordinator";
  const member* next = nullptr;
  for (const auto& [id, other] : s.members)
    if (other.remote && other.last_rank >= 0 && (!next || other.last_rank < next->last_rank)) next = &other;
  return next == &m ? "standby" : "worker";
}

// `line` here and in every other member's process but `except`'s.
void tell_everyone(self_pointer self, const std::string& line, std::uint64_t except) {
  event(self, line);
  for (const auto& [id, other] : self->state.members)
    if (other.alive && other.remote && other.agent && other.id != except) self->send(other.agent, lost_atom::value, line);
}

void report_member(self_pointer self, member& m, const std::string& what, const std::string& cause) {
  auto& s = self->state;
  const membership_record r =
      member_record(what, s.epoch, steps_done(s), m.initial_rank, m.host, role_of(s, m), cause);
  // A lost member may come back before the next epoch forms (a side without a majority waits
  // for it): its loss is recorded once an epoch forms without it.
  if (what == "lost") {
    m.lost_record = r;
    m.lost_at = std::chrono::steady_clock::now();
  } else {
    record(self, r);
    s.metrics_events.push_back(to_json_line(r));
  }
  tell_everyone(self, member_event_line(m.name(), r), m.id);
}

// The members lost since the last epoch that did not come back: their losses go to the
// membership log and the metrics file, and when the job goes on without them each hears why
// (a hung process that wakes, instead of waiting on peers that went on without it).
void settle_losses(self_pointer self, bool job_goes_on) {
  auto& s = self->state;
  for (auto& [id, m] : s.members) {
    if (!m.lost_record) continue;
    record(self, *m.lost_record);
    s.metrics_events.push_back(to_json_line(*m.lost_record));
    m.lost_record.reset();
    if (const auto dropped = s.dropped.find(id); job_goes_on && dropped != s.dropped.end() && m.agent)
      self->send(m.agent, dropped_atom::value, dropped->second);
  }
}

// A member lost since the last epoch formed that may still come back: no epoch formed without
// it yet, and it is neither known dead nor leaving.
bool returnable(const membership_state& s, const member& m) {
  return s.now == phase::forming && !m.alive && m.lost_record && !m.known_dead && !m.leaving;
}

// This process's own member (named by its standby's control port).
const member* own_member(const membership_state& s) {
  for (const auto& [id, m] : s.members)
    if (!s.setup.control.empty() && m.control == s.setup.control) return &m;
  return nullptr;
}

// A lost member answers again before an epoch formed without it (a stopped process woke, a
// link healed): it counts again, and the next epoch may take it.
void readmit(self_pointer self, member& m) {
  auto& s = self->state;
  m.alive = true;
  const std::uint64_t step = m.lost_record->step;
  // The metrics file tells the loss that undid itself (a detector's false suspicion, a healed
  // link); the membership log does not: no epoch changed.
  s.metrics_events.push_back(to_json_line(*m.lost_record));
  m.lost_record.reset();
  s.dropped.erase(m.id);
  if (s.detector && m.remote) s.detector->heard(m.id, std::chrono::steady_clock::now());
  s.pending_reason += "; " + m.name() + " back";
  const membership_record r =
      member_record("back", s.epoch, step, m.initial_rank, m.host, role_of(s, m), "it answers again");
  s.metrics_events.push_back(to_json_line(r));
  tell_everyone(self, member_event_line(m.name(), r), m.id);
}

// How long a member's agent has to answer for a copy of the coordinator's state: a hung member
// must not keep the requests open.
constexpr auto replica_answer_wait = std::chrono::seconds(10);

// Copies what forming the next epoch needs to every other member's standby; `passed_on`, if
// given, runs once each member's agent has handed it to its standby, or failed to.
void replicate(self_pointer self, std::function<void()> passed_on = {}) {
  auto& s = self->state;
  if (!s.setup.elastic) {
    if (passed_on) passed_on();
    return;
  }
  coordination_replica r;
  r.epoch = s.epoch;
  r.sequence = ++s.replica_sequence;
  r.coordinator_control = s.setup.control;
  r.epoch_workers = s.epoch_workers;
  r.epoch_start = s.epoch_start;
  r.steps_done = steps_done(s);
  r.next_id = s.next_id;
  for (const auto& [id, m] : s.members) {
    if (!m.alive) continue;
    if (!m.remote) r.coordinator = id;
    r.members.push_back({id, m.initial_rank, m.host, m.control, m.last_rank, m.leaving});
  }
  // Two generations are kept by the workers; a few more positions cover a kept step that a
  // member still holds from before a change.
  constexpr std::size_t positions = 8;
  for (auto it = s.kept_positions.rbegin(); it != s.kept_positions.rend() && r.kept.size() < positions; ++it)
    r.kept.push_back({it->first.first, it->first.second, it->second});
  std::vector<member_agent> agents;
  for (const auto& [id, m] : s.members)
    if (m.alive && m.remote && m.agent) agents.push_back(m.agent);
  if (agents.empty() && passed_on) passed_on();
  auto waiting = std::make_shared<std::size_t>(agents.size());
  const auto answered = [waiting, passed_on] {
    if (--*waiting == 0 && passed_on) passed_on();
  };
  for (const member_agent& agent : agents)
    self->request(agent, replica_answer_wait, replica_atom::value, r)
        .then([answered](bool) { answered(); }, [answered](caf::error&) { answered(); });
}

// Answers the waiters once the job is over and every member alive has heard so.
void check_released(self_pointer self) {
  auto& s = self->state;
  if (s.now != phase::finished && s.now != phase::failed) return;
  for (const auto& [id, m] : s.members)
    if (m.alive && !m.released) return;
  for (auto& w : s.waiters) w.deliver(true);
  s.waiters.clear();
}

epoch_plan job_over() {
  epoch_plan plan;
  plan.finished = true;
  return plan;
}

void answer(member& m, epoch_plan plan) {
  if (!m.promise) return;
  m.released = plan.finished;
  m.promise->deliver(std::move(plan));
  m.promise.reset();
  m.request.reset();
}

void fail_job(self_pointer self, const std::string& why) {
  auto& s = self->state;
  if (s.failure) return;
  s.failure = why;
  s.now = phase::failed;
  settle_losses(self, false);
  if (s.setup.on_unwritten_events && !s.metrics_events.empty()) s.setup.on_unwritten_events(s.metrics_events);
  s.metrics_events.clear();
  if (s.coordinator) self->send(s.coordinator, worker_failure{0, why});
  for (auto& [id, m] : s.members)
    if (m.promise) {
      m.promise->deliver(caf::make_error(caf::sec::runtime_error, why));
      m.promise.reset();
      m.released = true;
    }
  check_released(self);
}

void finish_job(self_pointer self) {
  auto& s = self->state;
  s.now = phase::finished;
  if (s.setup.on_finished) s.setup.on_finished();
  for (auto& [id, m] : s.members) answer(m, job_over());
  check_released(self);
}

// Tells the running epoch's members that a change waits for the next step boundary.
void announce_change(self_pointer self, const std::string& reason) {
  auto& s = self->state;
  s.pending_reason += (s.pending_reason.empty() ? "" : "; ") + reason;
  if (s.now != phase::running) return;
  for (auto& [id, m] : s.members)
    if (m.alive && m.rank >= 0 && m.agent) self->send(m.agent, change_atom::value, s.epoch);
}

// Interrupts the transports of the running epoch's members: they may be blocked on a dead one.
void abort_epoch(self_pointer self, const std::string& why) {
  auto& s = self->state;
  for (auto& [id, m] : s.members)
    if (m.alive && m.rank >= 0 && m.agent) self->send(m.agent, abort_atom::value, s.epoch, why);
}

void merge_epoch_result(membership_state& s, job_result&& part) {
  job_result& total = *s.setup.result;
  for (const auto& m : part.steps) total.steps.push_back(m);
  add_epoch_result(total, std::move(part));
}

// "ranks 2, 3" or "rank 2".
std::string list_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// The newest kept step the members can rebuild completely, or none; then `why_not` says why
// the newest kept step cannot be.
std::optional<state_source> choose_source(const membership_state& s, const std::vector<member*>& order,
                                          std::string* why_not = nullptr) {
  struct candidate {
    int world = 0;
    std::map<int, int> own_holder, copy_holder;  // old shard → new rank
    std::vector<int> holders;
    const kept_summary* any = nullptr;
  };
  std::map<std::pair<std::uint64_t, std::uint64_t>, candidate> found;  // (steps, layout)
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    if (!order[rank]->request) continue;
    for (const kept_summary& k : order[rank]->request->kept) {
      candidate& c = found[{k.steps, k.layout}];
      c.world = k.world;
      c.any = &k;
      c.holders.push_back(static_cast<int>(rank));
      c.own_holder.emplace(k.rank, static_cast<int>(rank));
      for (const int shard : k.copies) c.copy_holder.emplace(shard, static_cast<int>(rank));
    }
  }
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const auto [steps, layout] = it->first;
    candidate& c = it->second;
    const bool newest = it == found.rbegin();
    const auto position = s.kept_positions.find({layout, steps});
    if (position == s.kept_positions.end()) {  // the coordinator never completed that step
      if (newest && why_not)
        *why_not = "the newest state kept by a survivor, after step " + std::to_string(steps) +
                   ", was never completed by every worker, and no older one is kept whole";
      continue;
    }
    state_source source;
    source.layout = layout;
    source.steps = steps;
    source.world = c.world;
    source.parameter_holders = c.holders;
    source.optimizer_step = c.any->optimizer_step;
    source.slots = c.any->slots;
    source.parameter_hash = c.any->parameter_hash;
    bool complete = true;
    if (s.setup.sharded) {
      source.state_checksum = 0;
      for (int shard = 0; shard < c.world && complete; ++shard) {
        if (auto own = c.own_holder.find(shard); own != c.own_holder.end()) {
          source.shard_senders.push_back(own->second);
          continue;
        }
        auto copy = c.copy_holder.find(shard);
        if (copy == c.copy_holder.end()) {
          complete = false;
          break;
        }
        source.shard_senders.push_back(copy->second);
      }
      if (!complete) {
        if (newest && why_not) {
          std::vector<int> missing;
          for (int shard = 0; shard < c.world; ++shard)
            if (!c.own_holder.count(shard) && !c.copy_holder.count(shard)) missing.push_back(shard);
          *why_not = "the newest kept state, after step " + std::to_string(steps) + " (epoch " +
                     std::to_string(layout) + ", " + std::to_string(c.world) + " workers), lacks the optimizer shard of " +
                     list_ranks(missing) + ": the member holding it and every member keeping a copy of it are gone";
        }
        continue;
      }
      // Sum of the old shards' checksums, each from whoever sends it.
      for (int shard = 0; shard < c.world; ++shard) {
        const int sender = source.shard_senders[static_cast<std::size_t>(shard)];
        for (const kept_summary& k : order[static_cast<std::size_t>(sender)]->request->kept) {
          if (k.layout != layout || k.steps != steps) continue;
          if (k.rank == shard) source.state_checksum += k.own_checksum;
          for (std::size_t i = 0; i < k.copies.size() && k.rank != shard; ++i)
            if (k.copies[i] == shard) source.state_checksum += k.copy_checksums[i];
        }
      }
    }
    return source;
  }
  return std::nullopt;
}

// The order of an epoch's ranks: the coordinator's own process first (it hosts this actor), then
// the members the job started with in their RANK order, then joiners by arrival.
std::tuple<bool, int, std::uint64_t> order_key(const member* m) {
  return std::make_tuple(m->remote, m->initial_rank >= 0 ? m->initial_rank : INT_MAX, m->id);
}

// The change a replay has due where the epoch just ended (before the first: where the job
// starts): its members depart and its joiners are admitted. False while the forming waits: for
// a due joiner that has not asked for its epoch yet, or for this process's end (the coordinator
// departs; the member that takes over applies the rest of the change).
bool apply_replayed_change(self_pointer self) {
  auto& s = self->state;
  if (s.departing) return false;
  const replayed_change* due = s.setup.replay->first_from(s.epoch == 0 ? s.setup.origin_steps : s.epoch_start + 1);
  if (!due || due->step != steps_done(s)) return true;  // none due here (a failure came first)
  const bool coordinator_departs =
      std::any_of(due->departures.begin(), due->departures.end(), [](const auto& d) { return d.coordinator; });
  if (coordinator_departs && !s.replayed_coordinator_gone) {
    s.departing = true;
    event(self, "membership: replaying the coordinator's loss after step " + std::to_string(due->step) +
                    ": this process goes away");
    // With this step's kept position, which the next epoch starts from: the process goes once
    // every member holds it, as members had long before a real loss after that step.
    replicate(self, [self] { self->send(self, leave_atom::value); });
    return false;
  }
  std::vector<member*> joiners;
  for (auto& [id, m] : s.members)
    if (m.alive && m.held && m.request && static_cast<int>(joiners.size()) < due->joiners) joiners.push_back(&m);
  if (static_cast<int>(joiners.size()) < due->joiners) {
    if (!std::exchange(s.replay_waiting, true))
      event(self, "membership: the replay waits after step " + std::to_string(due->step) + " for " +
                      std::to_string(due->joiners - static_cast<int>(joiners.size())) +
                      " joiner(s) (accord-launch --replay-membership starts them)");
    return false;
  }
  for (const replayed_departure& d : due->departures) {
    if (d.coordinator) continue;  // gone: this process took over from it
    // The member of the recorded starting rank, else the last in the epoch's order.
    member* chosen = nullptr;
    for (auto& [id, m] : s.members) {
      if (!m.alive || !m.remote || m.leaving || m.held) continue;
      if (d.rank >= 0 && m.initial_rank == d.rank) {
        chosen = &m;
        break;
      }
      if (!chosen || order_key(chosen) < order_key(&m)) chosen = &m;
    }
    if (!chosen) continue;
    chosen->leaving = true;
    report_member(self, *chosen, "left", "replayed from the membership log");
  }
  for (member* m : joiners) m->held = false;
  s.replayed_coordinator_gone = s.replay_waiting = false;
  return true;
}

void try_form(self_pointer self);

void epoch_ended(self_pointer self, std::uint64_t epoch, std::optional<std::string> failure) {
  auto& s = self->state;
  if (epoch != s.epoch || s.now != phase::running) return;
  s.epoch_ended_at = std::chrono::steady_clock::now();
  if (failure) abort_epoch(self, *failure);
  merge_epoch_result(s, std::move(*s.epoch_result));
  for (auto& [id, m] : s.members) m.rank = -1;
  if (!failure) {
    // Done, or an app-driven worker's data ran out (a new epoch would find none either).
    if (s.epoch_result->rounds >= s.setup.total_rounds || s.setup.result->data_ended) {
      finish_job(self);
      return;
    }
    if (!s.setup.elastic) {  // no membership changes: the workers voted to stop the job
      event(self, "membership: the job stopped after step " +
                      std::to_string(s.epoch_result->steps.empty() ? s.epoch_start : s.epoch_result->steps.back().step) +
                      " (a worker was asked to stop)");
      finish_job(self);
      return;
    }
    s.now = phase::forming;
    try_form(self);
    return;
  }
  if (!s.setup.elastic) {
    fail_job(self, *failure);
    return;
  }
  s.epoch_failure = failure;
  s.now = phase::forming;
  if (!s.lost_in_epoch) self->delayed_send(self, s.setup.loss_grace, grace_atom::value, epoch);
  try_form(self);
}

void start_epoch(self_pointer self, std::vector<member*> order, std::optional<state_source> source) {
  auto& s = self->state;
  settle_losses(self, true);
  s.waiting_since.reset();
  s.majority_back_since.reset();
  const int before = s.epoch_workers;
  ++s.epoch;
  s.epoch_workers = static_cast<int>(order.size());
  epoch_spec spec;
  spec.epoch = s.epoch;
  spec.workers = s.epoch_workers;
  spec.start_steps = source ? source->steps : s.setup.origin_steps;
  spec.data_position = source ? s.kept_positions.at({source->layout, source->steps}) : s.setup.origin_data_position;
  spec.metrics_events = std::move(s.metrics_events);
  s.metrics_events.clear();
  s.epoch_start = spec.start_steps;
  record(self, epoch_record(s.epoch, spec.start_steps, s.epoch_workers, s.lost_since_epoch));
  s.lost_since_epoch = false;
  // Steps after the restart point are redone: drop them from the merged metrics.
  auto& steps = s.setup.result->steps;
  while (!steps.empty() && steps.back().step > spec.start_steps) steps.pop_back();
  s.epoch_result = std::make_shared<job_result>();
  s.coordinator = s.setup.spawn_coordinator(
      spec, s.epoch_result,
      [membership = caf::actor_cast<membership_actor>(self), epoch = s.epoch](std::uint64_t steps,
                                                                               std::uint64_t position) {
        caf::anon_send(membership, kept_atom::value, epoch, steps, position);
      });
  s.lost_in_epoch = false;
  s.epoch_failure.reset();
  s.restoring = source;
  s.check = {};

  std::vector<std::string> addresses;
  for (member* m : order) addresses.push_back(m->request->address);
  for (auto& [id, m] : s.members) m.last_rank = -1;
  for (std::size_t rank = 0; rank < order.size(); ++rank) order[rank]->rank = order[rank]->last_rank = static_cast<int>(rank);
  // Every standby holds the epoch before any member starts it (one sender: the order holds).
  replicate(self);
  bool leavers_stay = false;
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    member& m = *order[rank];
    leavers_stay = leavers_stay || m.leaving;
    epoch_plan plan;
    plan.epoch = s.epoch;
    plan.rank = m.rank;
    plan.world = s.epoch_workers;
    plan.addresses = addresses;
    plan.coordinator = s.coordinator;
    plan.start_steps = spec.start_steps;
    plan.data_position = spec.data_position;
    plan.from_origin = !source;
    if (source) plan.source = *source;
    if (s.setup.replay)
      if (const replayed_change* next = s.setup.replay->first_from(spec.start_steps + 1)) plan.end_steps = next->step;
    answer(m, std::move(plan));
  }
  s.now = phase::running;
  // Epoch 1 forms while the starting ranks say hello: the rendezvous.
  if (trace_recorder* trace = trace_recorder::active()) {
    const auto wall_now = trace_clock::now();
    trace->span(membership_track, "epoch forming",
                wall_now - std::chrono::duration_cast<trace_clock::duration>(std::chrono::steady_clock::now() -
                                                                             s.epoch_ended_at),
                wall_now, static_cast<std::int64_t>(s.epoch));
  }
  if (s.epoch > 1) {
    std::ostringstream line;
    line << "membership: epoch " << s.epoch << ", " << before << " -> " << s.epoch_workers << " workers from step "
         << spec.start_steps + 1;
    if (!s.pending_reason.empty()) line << " (" << s.pending_reason << ")";
    line.precision(2);
    line << std::fixed << ", formed "
         << std::chrono::duration<double>(std::chrono::steady_clock::now() - s.epoch_ended_at).count()
         << " s after the last one ended";
    event(self, line.str());
  }
  s.pending_reason.clear();
  self->request(s.coordinator, caf::infinite, wait_atom::value)
      .then([self, epoch = s.epoch](bool) { epoch_ended(self, epoch, std::nullopt); },
            [self, epoch = s.epoch](caf::error& e) { epoch_ended(self, epoch, describe(self->system(), e)); });
  // A leaver kept for its shard, or a joiner that came while the epoch formed, ends it at once.
  if (leavers_stay) announce_change(self, "a leaving member stays one more epoch for its shard");
  for (auto& [id, m] : s.members)
    if (m.alive && m.rank < 0 && !m.leaving && !m.held) announce_change(self, m.name() + " joins");
}

struct majority_count {
  int last = 0, reachable = 0, dead = 0;
  bool confirming = false;  // a lost member's death is being checked
};

majority_count count_majority(const membership_state& s) {
  majority_count c;
  for (const auto& [id, m] : s.members) {
    if (m.last_rank < 0) continue;
    ++c.last;
    if (m.alive) ++c.reachable;
    if (m.known_dead) ++c.dead;
    c.confirming = c.confirming || m.checking_death;
  }
  return c;
}

bool has_majority(const majority_count& c) { return majority_remains(c.last, c.reachable, c.dead); }

// "2 of the last epoch's 4 members are reachable, 0 known dead (...)"
std::string reachable_members(const membership_state& s) {
  const majority_count c = count_majority(s);
  return std::to_string(c.reachable) + " of the last epoch's " + std::to_string(c.last) + " members are reachable, " +
         std::to_string(c.dead) + " known dead (" + s.pending_reason + ")";
}

std::string no_majority(const membership_state& s) { return "no majority: " + reachable_members(s); }

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

// How long the others lost with a waiting side's majority may take to come back once it is back.
constexpr auto returning_grace = std::chrono::milliseconds(1000);

// How often a waiting side asks the lost members' standbys where the job is.
constexpr auto majority_probe_interval = std::chrono::milliseconds(1000);

// No majority on this side: it keeps its state and trains nothing while its lost members may
// come back (the next epoch then forms as after any loss), for majority_wait; then the job fails.
void wait_for_majority(self_pointer self) {
  auto& s = self->state;
  if (s.waiting_since) return;
  const std::string stops = "; this side stops so that a majority elsewhere can go on";
  if (s.setup.majority_wait.count() == 0) {
    fail_job(self, no_majority(s) + stops);
    return;
  }
  s.waiting_since = std::chrono::steady_clock::now();
  const member* own = own_member(s);
  // In the metrics file: the next epoch's, or, when the wait ends the job, on_unwritten_events.
  s.metrics_events.push_back(to_json_line(member_record("waiting", s.epoch, steps_done(s), own ? own->initial_rank : -1,
                                                        own ? own->host : std::string(), "coordinator", no_majority(s))));
  tell_everyone(self,
                "membership: " + (own ? own->name() : std::string("this process")) + ", coordinator, waits for a majority at step " +
                    std::to_string(steps_done(s)) + ": " + reachable_members(s) +
                    "; this side keeps its state, trains nothing and waits up to " +
                    seconds_text(s.setup.majority_wait) + " for them (--majority-wait)",
                own ? own->id : UINT64_MAX);
  self->delayed_send(self, s.setup.majority_wait, majority_atom::value, s.epoch);
  if (s.setup.ask_standby) self->send(self, yield_atom::value);
}

void try_form(self_pointer self) {
  auto& s = self->state;
  if (s.now != phase::starting && s.now != phase::forming) return;
  if (s.now == phase::starting && s.initial_hellos < s.setup.initial_world) return;
  for (auto& [id, m] : s.members)
    if (m.alive && !m.request && !m.held) return;  // everyone alive takes part in forming
  if (s.epoch_failure && !s.lost_in_epoch) return;  // wait for the death that explains it

  // No split brain: after a loss, only a strict majority of the last epoch's members not known
  // to be dead goes on (a partition's other side cannot have one too).
  if (s.epoch > 0 && s.lost_since_epoch) {
    const majority_count count = count_majority(s);
    if (!has_majority(count)) {
      if (!count.confirming) wait_for_majority(self);  // a death being confirmed may still make one
      return;
    }
  }
  // Members lost together often come back together (a partition heals, stopped processes wake):
  // once a waiting side has its majority back, the others it waited for get a moment to return as
  // members instead of as joiners (a state transfer and an epoch more each).
  if (s.waiting_since &&
      std::any_of(s.members.begin(), s.members.end(), [&](const auto& entry) { return returnable(s, entry.second); })) {
    const auto now = std::chrono::steady_clock::now();
    if (!s.majority_back_since) {
      s.majority_back_since = now;
      self->delayed_send(self, returning_grace, majority_atom::value, s.epoch);
    }
    if (now - *s.majority_back_since < returning_grace) return;
  }
  if (s.setup.replay && !apply_replayed_change(self)) return;
  std::vector<member*> staying, leaving;
  for (auto& [id, m] : s.members) {
    if (!m.alive || m.held) continue;
    (m.leaving ? leaving : staying).push_back(&m);
  }
  std::sort(staying.begin(), staying.end(), [&](member* a, member* b) { return order_key(a) < order_key(b); });
  if (staying.empty() || staying.front()->remote) {
    fail_job(self, "the coordinator's process is not a member any more");
    return;
  }
  std::optional<state_source> source;
  if (s.epoch > 0) {
    std::string why_not;
    source = choose_source(s, staying, &why_not);
    if (!source && !leaving.empty()) {
      // A leaver whose shard nobody else holds stays for one more epoch.
      std::vector<member*> with_leavers = staying;
      with_leavers.insert(with_leavers.end(), leaving.begin(), leaving.end());
      source = choose_source(s, with_leavers);
      if (source) {
        staying = with_leavers;
        leaving.clear();
      }
    }
    if (!source && s.anything_kept) {
      fail_job(self, "the training state cannot be rebuilt after " + s.pending_reason + ": " +
                         (why_not.empty() ? "no survivor kept any state" : why_not) +
                         (s.epoch_failure ? " (the epoch failed: " + *s.epoch_failure + ")" : ""));
      return;
    }
  }
  for (member* m : leaving) {
    answer(*m, job_over());
    m->alive = false;  // gone from the job; its down message changes nothing
    if (s.detector) s.detector->forget(m->id);
  }
  start_epoch(self, std::move(staying), source);
}

// `cause`: "connection closed (...)" or "hung (silent for 1.62 s)".
void member_lost(self_pointer self, member& m, const std::string& cause) {
  auto& s = self->state;
  if (!m.alive) return;
  m.alive = false;
  // A pending request stays: the member may come back before the next epoch forms.
  if (s.detector) s.detector->forget(m.id);
  if (s.now == phase::finished || s.now == phase::failed || s.now == phase::yielded) {
    check_released(self);
    return;
  }
  const bool in_epoch = s.now == phase::running && m.rank >= 0;
  report_member(self, m, "lost", cause);
  if (!s.setup.elastic) {
    fail_job(self, "the process of " + m.name() + " was lost before the job ended: " + cause);
    return;
  }
  if (in_epoch || (s.now == phase::forming && s.epoch_failure)) s.lost_in_epoch = true;
  s.lost_since_epoch = true;
  const std::string dropped = "this worker (" + m.name() + ") was dropped from the job in epoch " +
                              std::to_string(s.epoch) + ": the coordinator counted it as lost (" + cause +
                              "); the job goes on without it";
  s.dropped[m.id] = dropped;
  s.pending_reason += (s.pending_reason.empty() ? "" : "; ") + m.name() + " lost";
  const std::string lost = "its process was lost: " + cause;
  if (in_epoch) {
    abort_epoch(self, m.name() + ": " + lost);
    if (m.agent) self->send(m.agent, abort_atom::value, s.epoch, "the coordinator dropped this member: " + cause);
    self->send(s.coordinator, worker_failure{m.rank, lost});
  }
  if (cause == closed_in_contact_cause) check_death(self, m);
  try_form(self);
}

// The adaptive detector's verdicts, every check interval while the job runs.
void check_silence(self_pointer self) {
  auto& s = self->state;
  if (s.now == phase::finished || s.now == phase::failed || s.now == phase::yielded) return;
  // The members judge the coordinator by its own heartbeats; a lost one that may come back
  // still hears them (it echoes them when it answers again).
  if (s.setup.elastic)
    for (const auto& [id, m] : s.members)
      if ((m.alive || returnable(s, m)) && m.remote && m.agent)
        self->send(m.agent, alive_atom::value, heartbeat_time(std::chrono::steady_clock::now()), m.contact.heard_sent);
  for (const heartbeat_detector::suspicion& silent : s.detector->check(std::chrono::steady_clock::now())) {
    const auto found = s.members.find(silent.member);
    if (found == s.members.end()) continue;
    member_lost(self, found->second, hung_cause(silent));
  }
  self->delayed_send(self, s.setup.detector->check_interval, silence_atom::value);
}

void check_restored(self_pointer self, const restored_report& r) {
  auto& s = self->state;
  if (r.epoch != s.epoch || !s.restoring || s.now != phase::running) return;
  const state_source& source = *s.restoring;
  if (r.parameter_hash != source.parameter_hash)
    s.check.mismatch = "rank " + std::to_string(r.rank) + " restored other parameters than were kept";
  s.check.checksum += r.state_checksum;
  if (++s.check.reports < s.epoch_workers) return;
  if (s.setup.sharded && s.check.checksum != source.state_checksum && !s.check.mismatch)
    s.check.mismatch = "the optimizer state's checksum changed in the transfer";
  if (s.check.mismatch) {
    fail_job(self, "epoch " + std::to_string(s.epoch) + ": " + *s.check.mismatch);
    return;
  }
  char line[240];
  if (s.setup.sharded)
    std::snprintf(line, sizeof line,
                  "membership: epoch %llu restored the state of step %llu on %d workers from %zu holders; optimizer "
                  "state checksum %016llx before the transfer, %016llx after",
                  static_cast<unsigned long long>(s.epoch), static_cast<unsigned long long>(source.steps),
                  s.epoch_workers, source.parameter_holders.size(),
                  static_cast<unsigned long long>(source.state_checksum),
                  static_cast<unsigned long long>(s.check.checksum));
  else
    std::snprintf(line, sizeof line,
                  "membership: epoch %llu restored the parameters of step %llu on %d workers from %zu holders "
                  "(hash %016llx everywhere); Lion momenta stay with their workers, joiners start from their mean",
                  static_cast<unsigned long long>(s.epoch), static_cast<unsigned long long>(source.steps),
                  s.epoch_workers, source.parameter_holders.size(),
                  static_cast<unsigned long long>(source.parameter_hash));
  event(self, line);
}

// While the starting ranks say hello: names the missing ones every 10 s, fails after the
// timeout, or within a second of this process being asked to stop (Ctrl-C).
void check_rendezvous(self_pointer self) {
  constexpr auto report_every = std::chrono::seconds(10);
  constexpr auto stop_poll = std::chrono::milliseconds(200);
  auto& s = self->state;
  if (s.now != phase::starting) return;
  std::vector<int> missing;
  for (int rank = 0; rank < s.setup.initial_world; ++rank) {
    const bool present = std::any_of(s.members.begin(), s.members.end(),
                                     [rank](const auto& entry) { return entry.second.initial_rank == rank; });
    if (!present) missing.push_back(rank);
  }
  const auto waited = std::chrono::steady_clock::now() - s.created;
  const auto whole_seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
  const std::string whom = list_ranks(missing) + " of " + std::to_string(s.setup.initial_world);
  if (s.setup.stop_requested && s.setup.stop_requested->load()) {
    fail_job(self, "rendezvous: asked to stop while waiting for " + whom);
    return;
  }
  if (waited >= s.setup.rendezvous_timeout) {
    fail_job(self, "rendezvous: " + whom + " did not say hello within " +
                       std::to_string(std::chrono::duration_cast<std::chrono::seconds>(s.setup.rendezvous_timeout).count()) +
                       " s (rendezvous timeout); is every rank started, with this MASTER_ADDR and MASTER_PORT?");
    return;
  }
  if (waited >= (s.rendezvous_reports + 1) * report_every) {
    ++s.rendezvous_reports;
    event(self, std::string(rendezvous_wait_line) + whom + " (" + std::to_string(whole_seconds) + " s)");
  }
  const auto next_report = (s.rendezvous_reports + 1) * report_every - waited;
  auto wait = std::chrono::ceil<std::chrono::milliseconds>(
      std::min<std::chrono::steady_clock::duration>(s.setup.rendezvous_timeout - waited, next_report));
  if (s.setup.stop_requested) wait = std::min<std::chrono::milliseconds>(wait, stop_poll);
  self->delayed_send(self, wait, rendezvous_atom::value);
}

// A survivor's process takes over from the lost coordinator: the replicated members are
// expected to reconnect, the lost coordinator is recorded, and the next epoch forms as after a
// worker's loss (its shards from their buddies' copies).
void take_over(self_pointer self) {
  auto& s = self->state;
  const coordination_replica& r = *s.setup.takeover;
  s.epoch = r.epoch;
  s.epoch_workers = r.epoch_workers;
  s.epoch_start = r.epoch_start;
  s.next_id = r.next_id;
  for (const kept_position& k : r.kept) s.kept_positions[{k.epoch, k.steps}] = k.data_position;
  s.anything_kept = !r.kept.empty();
  for (const replica_member& rm : r.members) {
    member& m = s.members[rm.id];
    m.id = rm.id;
    m.initial_rank = rm.initial_rank;
    m.host = rm.host;
    m.control = rm.control;
    m.last_rank = rm.rank;
    m.leaving = rm.leaving;
    m.remote = true;
    m.reconnecting = rm.id != r.coordinator;
    m.alive = m.reconnecting;
    m.held = s.setup.replay && rm.initial_rank < 0 && rm.rank < 0;
  }
  s.replayed_coordinator_gone = s.setup.replay.has_value();
  member& lost = s.members.at(r.coordinator);
  // Every survivor named it already (its agent saw the loss); here it is recorded, once an
  // epoch forms without it (this side may give way to it instead).
  lost.lost_record =
      member_record("lost", s.epoch, r.steps_done, lost.initial_rank, lost.host, "coordinator", s.setup.takeover_cause);
  lost.lost_at = std::chrono::steady_clock::now();
  s.now = phase::forming;
  s.epoch_failure = "the coordinator's process was lost: " + s.setup.takeover_cause;
  s.lost_in_epoch = true;
  s.lost_since_epoch = true;
  s.pending_reason = "the coordinator, " + lost.name() + ", lost";
  if (s.setup.takeover_cause == closed_in_contact_cause) check_death(self, lost);
  self->delayed_send(self, s.setup.reconnect_grace, reconnect_atom::value);
}

// While this side waits for a majority, the lost members of the last epoch are asked, off this
// actor's thread, where the job is: each answering standby replies (yield_atom, its control
// port, the newest epoch it holds, whether it hosts a coordinator), then (yield_atom, "") ends
// the round.
void probe_lost_members(self_pointer self) {
  auto& s = self->state;
  if (!s.waiting_since || s.now != phase::forming) return;
  std::vector<std::string> controls;
  for (const auto& [id, m] : s.members)
    if (!m.alive && m.last_rank >= 0 && !m.known_dead && !m.control.empty()) controls.push_back(m.control);
  self->home_system().spawn([membership = caf::actor_cast<membership_actor>(self), controls,
                             ask = s.setup.ask_standby](caf::blocking_actor*) {
    for (const std::string& control : controls)
      if (const auto answer = ask(control))
        caf::anon_send(membership, yield_atom::value, control, answer->first, answer->second);
    caf::anon_send(membership, yield_atom::value, std::string(), std::uint64_t{0}, false);
  });
}

// The answer of a lost member's standby at `control`: it holds a later epoch (a majority went on
// without this side, which stops), or it coordinates a side of its own and comes earlier in the
// last epoch's order (this side, its coordinator a successor, gives way: every member goes there).
void heard_from_lost_member(self_pointer self, const std::string& control, std::uint64_t epoch, bool coordinates) {
  auto& s = self->state;
  if (!s.waiting_since || s.now != phase::forming) return;
  if (control.empty()) {
    self->delayed_send(self, majority_probe_interval, yield_atom::value);
    return;
  }
  if (epoch > s.epoch) {
    fail_job(self, no_majority(s) + "; the job went on without this side (the member at " + control +
                       " holds epoch " + std::to_string(epoch) + "), which stops");
    return;
  }
  const member* own = own_member(s);
  const auto there = std::find_if(s.members.begin(), s.members.end(),
                                  [&](const auto& entry) { return entry.second.control == control; });
  if (!coordinates || !own || there == s.members.end() || there->second.last_rank < 0 ||
      there->second.last_rank >= own->last_rank)
    return;
  s.now = phase::yielded;
  s.yielded_to = control;
  tell_everyone(self,
                "membership: this side (no majority) gives way to the coordinator of " + there->second.name() +
                    ", earlier in the last epoch's order; its members say hello there again",
                UINT64_MAX);
  for (auto& [id, m] : s.members)
    if (m.alive && m.promise) {
      epoch_plan plan;
      plan.rejoin = control;
      answer(m, std::move(plan));
    }
}

membership_actor::behavior_type membership_behavior(self_pointer self, membership_setup setup) {
  self->state.setup = std::move(setup);
  self->state.epoch_ended_at = std::chrono::steady_clock::now();  // the first epoch forms from here
  if (self->state.setup.takeover)
    take_over(self);
  else
    self->send(self, rendezvous_atom::value);
  if (self->state.setup.detector) {
    self->state.detector.emplace(*self->state.setup.detector);
    self->send(self, silence_atom::value);
  }
  self->set_down_handler([self](const caf::down_msg& down) {
    // Without the detector (no heartbeats echoed), a hung member's connection closes after the
    // heartbeat timeout too.
    for (auto& [id, m] : self->state.members)
      if (m.agent && m.agent.address() == down.source)
        member_lost(self, m, closed_cause(self->state.setup.detector, m.contact));
  });
  return {
      [self](hello_atom, const member_hello& hello, member_agent agent) -> caf::result<std::uint64_t> {
        auto& s = self->state;
        auto refuse = [&](const std::string& why) {
          const std::string who = hello.rank >= 0 ? "rank " + std::to_string(hello.rank)
                                                  : "a joiner" + (hello.host.empty() ? "" : " at " + hello.host);
          return caf::make_error(caf::sec::runtime_error, who + " refused: " + why);
        };
        if (s.failure) return caf::make_error(caf::sec::runtime_error, *s.failure);
        if (s.now == phase::finished) return refuse("the job is already over");
        if (!s.yielded_to.empty()) return refuse("this side gave way to the coordinator at " + s.yielded_to);
        if (hello.rejoin) {
          // After a takeover, or (a side waiting for a majority) a lost member that comes back.
          const auto found = s.members.find(hello.member);
          const bool back = found != s.members.end() && returnable(s, found->second);
          if (found == s.members.end() || !(found->second.reconnecting || back)) {
            if (const auto dropped = s.dropped.find(hello.member); dropped != s.dropped.end())
              return caf::make_error(caf::sec::runtime_error, dropped->second);
            return refuse("member " + std::to_string(hello.member) +
                          " is not one this coordinator waits for after the last one's loss");
          }
          member& m = found->second;
          m.reconnecting = false;
          m.agent = agent;
          m.remote = agent.node() != self->node();
          m.request.reset();
          m.promise.reset();
          self->monitor(agent);
          if (back)
            readmit(self, m);
          else if (s.detector && m.remote)
            s.detector->heard(m.id, std::chrono::steady_clock::now());
          return m.id;
        }
        if (!hello.job.empty() && hello.job != s.setup.job_id)
          return refuse("it belongs to job '" + hello.job + "', but this master port is held by job '" +
                        s.setup.job_id + "' (another job holds the port)");
        if (const std::string difference = fingerprint_difference(s.setup.fingerprint, hello.fingerprint);
            !difference.empty())
          return refuse(difference);
        if (hello.rank >= 0) {
          if (s.now != phase::starting) return refuse("the job has started; a new worker joins with --join");
          if (hello.world != s.setup.initial_world)
            return refuse("it expects " + std::to_string(hello.world) + " workers, the job has " +
                          std::to_string(s.setup.initial_world));
          if (hello.rank >= s.setup.initial_world) return refuse("rank out of range");
          for (const auto& [id, m] : s.members)
            if (m.initial_rank == hello.rank) return refuse("rank registered twice");
          ++s.initial_hellos;
        } else if (!s.setup.elastic) {
          return refuse("the job is not elastic (start it with --elastic to admit joiners)");
        }
        member m;
        m.id = s.next_id++;
        m.initial_rank = hello.rank;
        m.agent = agent;
        m.host = hello.host;
        m.control = hello.control;
        m.remote = agent.node() != self->node();
        self->monitor(agent);
        if (s.detector && m.remote) s.detector->heard(m.id, std::chrono::steady_clock::now());
        if (hello.rank < 0) {
          const membership_record joined =
              member_record("joined", s.epoch, steps_done(s), -1, m.host, "worker", "said hello as a joiner");
          record(self, joined);
          s.metrics_events.push_back(to_json_line(joined));
        }
        // A replay's joiner waits for the step its change is due.
        m.held = hello.rank < 0 && s.setup.replay;
        const std::string name = m.name();
        const bool announce = hello.rank < 0 && !m.held;
        s.members.emplace(m.id, std::move(m));
        if (announce) announce_change(self, name + " joins");
        return s.members.rbegin()->first;
      },
      [self](epoch_atom, epoch_request& request) -> caf::result<epoch_plan> {
        auto& s = self->state;
        auto found = s.members.find(request.member);
        if (found == s.members.end()) return job_over();
        member& m = found->second;
        if (!s.yielded_to.empty()) {
          epoch_plan plan;
          plan.rejoin = s.yielded_to;
          return plan;
        }
        // Kept until its heartbeats say that it still follows this coordinator.
        if (returnable(s, m)) {
          m.promise = self->make_response_promise<epoch_plan>();
          m.request = std::move(request);
          return *m.promise;
        }
        if (s.failure || s.now == phase::finished || !m.alive) {
          m.released = true;
          check_released(self);
          if (s.failure) return caf::make_error(caf::sec::runtime_error, *s.failure);
          if (const auto dropped = s.dropped.find(m.id); dropped != s.dropped.end())
            return caf::make_error(caf::sec::runtime_error, dropped->second);
          return job_over();
        }
        m.promise = self->make_response_promise<epoch_plan>();
        auto promise = *m.promise;
        m.request = std::move(request);
        try_form(self);
        return promise;
      },
      [self](leave_atom, std::uint64_t id) {
        auto& s = self->state;
        auto found = s.members.find(id);
        if (found == s.members.end() || !found->second.alive || found->second.leaving) return;
        if (!found->second.remote) {
          event(self, "membership: this process hosts the coordinator and cannot leave; ignored");
          return;
        }
        found->second.leaving = true;
        report_member(self, found->second, "left", "asked to leave");
        announce_change(self, found->second.name() + " leaves");
        try_form(self);
      },
      [self](restored_atom, const restored_report& report) { check_restored(self, report); },
      [self](kept_atom, std::uint64_t epoch, std::uint64_t steps, std::uint64_t data_position) {
        self->state.kept_positions[{epoch, steps}] = data_position;
        self->state.anything_kept = true;
        replicate(self);
      },
      [self](grace_atom, std::uint64_t epoch) {
        auto& s = self->state;
        if (epoch == s.epoch && s.now == phase::forming && s.epoch_failure && !s.lost_in_epoch)
          fail_job(self, *s.epoch_failure);
      },
      [self](rendezvous_atom) { check_rendezvous(self); },
      [self](heartbeat_atom, std::uint64_t id, std::int64_t sent, std::int64_t echo) {
        auto& s = self->state;
        const auto found = s.members.find(id);
        if (!s.detector || found == s.members.end() || !found->second.remote) return;
        member& m = found->second;
        if (!m.alive) {
          // A lost member that heard this coordinator after the verdict still follows it (one
          // sent before may have left for another side since): it is back.
          if (!returnable(s, m) || heartbeat_time_point(echo) <= m.lost_at) return;
          readmit(self, m);
          m.contact.heard(sent, echo);
          try_form(self);
          return;
        }
        s.detector->heard(id, std::chrono::steady_clock::now());
        m.contact.heard(sent, echo);
      },
      [self](dead_atom, std::uint64_t id, bool refused) {
        const auto found = self->state.members.find(id);
        if (found == self->state.members.end() || !found->second.checking_death) return;
        found->second.checking_death = false;
        found->second.known_dead = refused;
        try_form(self);
      },
      [self](silence_atom) { check_silence(self); },
      [self](majority_atom, std::uint64_t epoch) {
        auto& s = self->state;
        if (!s.waiting_since || epoch != s.epoch || s.now != phase::forming) return;
        if (has_majority(count_majority(s))) {
          if (s.majority_back_since) {  // the others' moment to come back ran out
            try_form(self);
            return;
          }
          // A majority answers again but has not asked for the epoch yet: a later loss waits afresh.
          s.waiting_since.reset();
          return;
        }
        fail_job(self, no_majority(s) + "; this side stops so that a majority elsewhere can go on (it waited " +
                           seconds_text(std::chrono::steady_clock::now() - *s.waiting_since) +
                           " for one: --majority-wait)");
      },
      [self](yield_atom) { probe_lost_members(self); },
      [self](yield_atom, const std::string& control, std::uint64_t epoch, bool coordinates) {
        heard_from_lost_member(self, control, epoch, coordinates);
      },
      [self](reconnect_atom) {
        for (auto& [id, m] : self->state.members)
          if (m.reconnecting) member_lost(self, m, "did not reconnect to the new coordinator");
      },
      [self](dropped_atom, std::uint64_t id) -> std::string {
        const auto found = self->state.dropped.find(id);
        return found == self->state.dropped.end() ? std::string() : found->second;
      },
      [](clock_atom) -> std::int64_t {
        return std::chrono::duration_cast<std::chrono::microseconds>(trace_clock::now().time_since_epoch()).count();
      },
      [self](wait_atom) -> caf::result<bool> {
        self->state.waiters.push_back(self->make_response_promise<bool>());
        auto promise = self->state.waiters.back();
        check_released(self);
        return promise;
      },
      // Sent by this actor to itself; from anyone else (the master port is unauthenticated) it does nothing.
      [self](leave_atom) {
        if (self->state.departing) std::raise(SIGKILL);
      },
  };
}

// Promises of requests the agent relays, answered by the relayed reply or by the loss of rank
// 0's process, whichever comes first.
template <class T>
struct relayed {
  std::map<std::uint64_t, caf::typed_response_promise<T>> open;
  std::uint64_t next = 0;
};

struct agent_state {
  member_agent_setup setup;
  std::optional<heartbeat_detector> coordinator_heartbeats;
  coordination_replica replica;  // the newest, for the line naming a lost coordinator
  std::optional<std::uint64_t> member;
  bool asked_to_leave = false;
  std::optional<std::string> master_lost;
  // The coordinator said the job is over: its process may exit before this one, which is no loss.
  bool job_over = false;
  bool planned = false;  // an epoch plan came: the rendezvous is over
  heartbeat_contact coordinator_contact;  // the coordinator's heartbeats and this agent's, echoed
  relayed<std::uint64_t> hellos;
  relayed<epoch_plan> plans;
  relayed<bool> waits;
};

using agent_pointer = member_agent::stateful_pointer<agent_state>;

constexpr auto leave_poll = std::chrono::milliseconds(100);
// Well under the adaptive detector's floor (1.5 s): it learns the gaps from many heartbeats.
constexpr auto heartbeat_interval = std::chrono::milliseconds(100);

// Relays `request` (already sent) and answers `promise` with its outcome, once.
template <class T, class Request, class OnValue>
caf::typed_response_promise<T> relay(agent_pointer self, relayed<T>& table, Request request, OnValue on_value) {
  auto promise = self->template make_response_promise<T>();
  if (self->state.master_lost) {
    promise.deliver(caf::make_error(caf::sec::runtime_error, *self->state.master_lost));
    return promise;
  }
  const std::uint64_t key = table.next++;
  table.open.emplace(key, promise);
  request.then(
      [self, &table, key, on_value](T& value) {
        auto found = table.open.find(key);
        if (found == table.open.end()) return;
        on_value(value);
        found->second.deliver(std::move(value));
        table.open.erase(found);
      },
      [&table, key](caf::error& e) {
        auto found = table.open.find(key);
        if (found == table.open.end()) return;
        found->second.deliver(std::move(e));
        table.open.erase(found);
      });
  return promise;
}

template <class T>
void fail_all(relayed<T>& table, const std::string& why) {
  for (auto& [key, promise] : table.open) promise.deliver(caf::make_error(caf::sec::runtime_error, why));
  table.open.clear();
}

// From now on every request relayed to the coordinator's process fails with `why`.
void stop_relaying(agent_pointer self, const std::string& why) {
  auto& s = self->state;
  if (s.master_lost) return;
  s.master_lost = why;
  fail_all(s.hellos, why);
  fail_all(s.plans, why);
  fail_all(s.waits, why);
}

// The coordinator's process died or hung (`cause`). An elastic job's member names it and
// interrupts its epoch (its peers may wait on the dead one); its main thread then elects the
// next coordinator (job/between_processes.cpp).
void coordinator_gone(agent_pointer self, const std::string& cause) {
  auto& s = self->state;
  if (s.master_lost || s.job_over) return;
  if (s.setup.standby && s.replica.epoch > 0) {
    for (const replica_member& m : s.replica.members)
      if (m.id == s.replica.coordinator && s.setup.on_event)
        s.setup.on_event(member_event_line(
            member_name(m.initial_rank, m.id, m.host),
            member_record("lost", s.replica.epoch, s.replica.steps_done, m.initial_rank, m.host, "coordinator", cause)));
    s.setup.link->interrupt_current(std::string(coordinator_lost) + ": " + cause);
  }
  // The standby may take over from now on (it refuses while this process still hears the coordinator).
  if (s.setup.standby) caf::anon_send(s.setup.standby, lost_atom::value, cause);
  stop_relaying(self, std::string(coordinator_lost) + ": " + cause);
}

member_agent::behavior_type agent_behavior(agent_pointer self, member_agent_setup setup) {
  self->state.setup = std::move(setup);
  self->monitor(self->state.setup.membership);
  self->set_down_handler([self](const caf::down_msg&) {
    coordinator_gone(self, closed_cause(self->state.setup.detector, self->state.coordinator_contact));
  });
  return {
      [self](change_atom, std::uint64_t epoch) {
        auto& current = *self->state.setup.change_epoch;
        if (epoch > current.load()) current.store(epoch);
      },
      [self](abort_atom, std::uint64_t epoch, const std::string& why) {
        self->state.setup.link->interrupt(epoch, why);
      },
      [self](leave_atom) {
        auto& s = self->state;
        if (s.asked_to_leave || s.master_lost) return;
        if (s.setup.leave_requested->load()) {
          s.asked_to_leave = true;
          self->send(s.setup.membership, leave_atom::value, *s.member);
          return;
        }
        self->delayed_send(self, leave_poll, leave_atom::value);
      },
      [self](heartbeat_atom) {
        auto& s = self->state;
        if (s.master_lost || s.job_over) return;
        if (!s.planned && s.setup.stop_requested && s.setup.stop_requested->load()) {
          stop_relaying(self, "asked to stop while waiting for the job's other ranks (rendezvous)");
          return;
        }
        self->send(s.setup.membership, heartbeat_atom::value, *s.member,
                   heartbeat_time(std::chrono::steady_clock::now()), s.coordinator_contact.heard_sent);
        // The coordinator's heartbeats are judged as it judges the members'.
        if (s.coordinator_heartbeats)
          for (const heartbeat_detector::suspicion& silent : s.coordinator_heartbeats->check(std::chrono::steady_clock::now())) {
            coordinator_gone(self, hung_cause(silent));
            return;
          }
        self->delayed_send(self, heartbeat_interval, heartbeat_atom::value);
      },
      [self](alive_atom, std::int64_t sent, std::int64_t echo) {
        auto& s = self->state;
        if (!s.setup.detector || s.master_lost) return;
        if (!s.coordinator_heartbeats) s.coordinator_heartbeats.emplace(*s.setup.detector);
        s.coordinator_heartbeats->heard(0, std::chrono::steady_clock::now());
        s.coordinator_contact.heard(sent, echo);
      },
      [self](replica_atom, coordination_replica& replica) {
        auto& s = self->state;
        // After the loss, a hung coordinator that wakes must not refresh the copy a successor starts from.
        if (s.master_lost || !newer(replica, s.replica)) return true;
        s.replica = replica;
        // The standby is in this process and hears this agent in order: passed on is held.
        caf::anon_send(s.setup.standby, replica_atom::value, std::move(replica));
        return true;
      },
      [self](lost_atom, const std::string& line) {
        if (self->state.setup.on_event) self->state.setup.on_event(line);
      },
      [self](dropped_atom, const std::string& why) { stop_relaying(self, why); },
      [self](hello_atom, member_hello& hello) {
        auto& s = self->state;
        return relay(self, s.hellos,
                     self->request(s.setup.membership, caf::infinite, hello_atom::value, std::move(hello),
                                   caf::actor_cast<member_agent>(self)),
                     [self](std::uint64_t id) {
                       self->state.member = id;
                       self->send(self, heartbeat_atom::value);
                       if (self->state.setup.leave_requested) self->send(self, leave_atom::value);
                     });
      },
      [self](epoch_atom, epoch_request& request) {
        auto& s = self->state;
        return relay(self, s.plans,
                     self->request(s.setup.membership, caf::infinite, epoch_atom::value, std::move(request)),
                     [self](const epoch_plan& plan) {
                       self->state.planned = true;
                       self->state.job_over = self->state.job_over || plan.finished;
                     });
      },
      [self](wait_atom, coordinator_actor coordinator) {
        return relay(self, self->state.waits, self->request(coordinator, caf::infinite, wait_atom::value),
                     [](bool) {});
      },
  };
}

}  // namespace

membership_actor spawn_membership_actor(caf::actor_system& system, membership_setup setup) {
  return system.spawn(membership_behavior, std::move(setup));
}

member_agent spawn_member_agent(caf::actor_system& system, member_agent_setup setup) {
  return system.spawn(agent_behavior, std::move(setup));
}

std::string member_name(int initial_rank, std::uint64_t id, const std::string& host) {
  return (initial_rank >= 0 ? "rank " + std::to_string(initial_rank) : "member " + std::to_string(id)) +
         (host.empty() ? "" : " (" + host + ")");
}

std::string member_event_line(const std::string& name, const membership_record& r) {
  return "membership: " + name + ", " + r.role + ", " + r.event + " at step " + std::to_string(r.step) + ": " + r.cause;
}

void epoch_link::set(std::uint64_t epoch, interrupter interrupt) {
  std::lock_guard lock(mutex_);
  epoch_ = epoch;
  interrupt_ = std::move(interrupt);
}

void epoch_link::interrupt(std::uint64_t epoch, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (interrupt_ && epoch_ == epoch) interrupt_(why);
}

void epoch_link::interrupt_current(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (interrupt_) interrupt_(why);
}

void add_membership_message_types(caf::actor_system_config& config) {
  config.add_message_type<kept_summary>("accord::kept_summary");
  config.add_message_type<state_source>("accord::state_source");
  config.add_message_type<member_hello>("accord::member_hello");
  config.add_message_type<epoch_request>("accord::epoch_request");
  config.add_message_type<epoch_plan>("accord::epoch_plan");
  config.add_message_type<restored_report>("accord::restored_report");
  config.add_message_type<member_agent>("accord::member_agent");
  config.add_message_type<coordinator_actor>("accord::coordinator_actor");
  config.add_message_type<replica_member>("accord::replica_member");
  config.add_message_type<kept_position>("accord::kept_position");
  config.add_message_type<coordination_replica>("accord::coordination_replica");
  config.add_message_type<membership_actor>("accord::membership_actor");
  config.add_message_type<standby_actor>("accord::standby_actor");
}

}  // namespace accord
