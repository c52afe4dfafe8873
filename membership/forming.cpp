// Forming epochs: when the next one may form (everyone alive asked, a strict majority after a
// loss, a replay's change due), with whom, from which kept step, and ending the running one.
#include "membership/machine.hpp"

#include <algorithm>
#include <sstream>

namespace accord {

// Two generations are kept by the workers; a few more positions cover a kept step that a member
// still holds from before a change.
constexpr std::size_t replicated_positions = 8;

// Copies what forming the next epoch needs to every other member's standby.
void membership_machine::replicate(bool then_depart) {
  membership_do::replicate out;
  out.then_depart = then_depart;
  if (!rules_.elastic) {  // no standbys: only a departure waits for nobody
    if (then_depart) emit(std::move(out));
    return;
  }
  coordination_replica& r = out.replica;
  r.epoch = epoch_;
  r.sequence = ++replica_sequence_;
  r.coordinator_control = rules_.control;
  r.epoch_workers = epoch_workers_;
  r.epoch_start = epoch_start_;
  r.steps_done = steps_done();
  r.next_id = next_id_;
  r.members.reserve(members_.size());
  out.to.reserve(members_.size());
  r.kept.reserve(replicated_positions);
  for (const auto& [id, m] : members_) {
    if (!m.alive) continue;
    if (!m.remote) r.coordinator = id;
    r.members.push_back({id, m.initial_rank, m.host, m.control, m.last_rank, m.leaving});
    // Its own process's standby too: asked by a waiting side where the job is, it answers with
    // the epoch this coordination formed, not the one it took over from (found by the
    // membership simulation: both sides waited, each behind the other's epoch).
    if (m.has_agent) out.to.push_back(id);
  }
  for (auto it = kept_positions_.rbegin(); it != kept_positions_.rend() && r.kept.size() < replicated_positions; ++it)
    r.kept.push_back({it->first.first, it->first.second, it->second});
  emit(std::move(out));
}

// Tells the running epoch's members that a change waits for the next step boundary.
void membership_machine::announce_change(const std::string& reason) {
  pending_reason_ += (pending_reason_.empty() ? "" : "; ") + reason;
  if (now_ != membership_phase::running) return;
  for (auto& [id, m] : members_)
    if (m.alive && m.rank >= 0 && m.has_agent) emit(membership_do::change{id, epoch_});
}

// Interrupts the transports of the running epoch's members: they may be blocked on a dead one.
void membership_machine::abort_epoch(const std::string& why) {
  for (auto& [id, m] : members_)
    if (m.alive && m.rank >= 0 && m.has_agent) emit(membership_do::abort{id, epoch_, why});
}

// The change a replay has due where the epoch just ended (before the first: where the job
// starts): its members depart and its joiners are admitted. False while the forming waits: for
// a due joiner that has not asked for its epoch yet, or for this process's end (the coordinator
// departs; the member that takes over applies the rest of the change).
bool membership_machine::apply_replayed_change(time_point now) {
  if (departing_) return false;
  const replayed_change* due = rules_.replay->first_from(epoch_ == 0 ? rules_.origin_steps : epoch_start_ + 1);
  if (!due || due->step != steps_done()) return true;  // none due here (a failure came first)
  const bool coordinator_departs =
      std::any_of(due->departures.begin(), due->departures.end(), [](const auto& d) { return d.coordinator; });
  if (coordinator_departs && !replayed_coordinator_gone_) {
    departing_ = true;
    event("membership: replaying the coordinator's loss after step " + std::to_string(due->step) +
          ": this process goes away");
    // With this step's kept position, which the next epoch starts from: the process goes once
    // every member holds it, as members had long before a real loss after that step.
    replicate(true);
    return false;
  }
  std::vector<member_entry*> joiners;
  for (auto& [id, m] : members_)
    if (m.alive && m.held && m.request && static_cast<int>(joiners.size()) < due->joiners) joiners.push_back(&m);
  if (static_cast<int>(joiners.size()) < due->joiners) {
    if (!std::exchange(replay_waiting_, true))
      event("membership: the replay waits after step " + std::to_string(due->step) + " for " +
            std::to_string(due->joiners - static_cast<int>(joiners.size())) +
            " joiner(s) (accord-launch --replay-membership starts them)");
    return false;
  }
  for (const replayed_departure& d : due->departures) {
    if (d.coordinator) continue;  // gone: this process took over from it
    // The member of the recorded starting rank, else the last in the epoch's order.
    member_entry* chosen = nullptr;
    for (auto& [id, m] : members_) {
      if (!m.alive || !m.remote || m.leaving || m.held) continue;
      if (d.rank >= 0 && m.initial_rank == d.rank) {
        chosen = &m;
        break;
      }
      if (!chosen || order_key(*chosen) < order_key(m)) chosen = &m;
    }
    if (!chosen) continue;
    chosen->leaving = true;
    report_member(*chosen, "left", "replayed from the membership log", now);
  }
  for (member_entry* m : joiners) m->held = false;
  replayed_coordinator_gone_ = replay_waiting_ = false;
  return true;
}

void membership_machine::on_epoch_ended(std::uint64_t epoch, std::optional<std::string> failure,
                                        const epoch_outcome& outcome, time_point now) {
  if (epoch != epoch_ || now_ != membership_phase::running) return;
  epoch_ended_at_ = now;
  if (failure) abort_epoch(*failure);
  emit(membership_do::merge_result{});
  for (auto& [id, m] : members_) m.rank = -1;
  if (!failure) {
    // Done, or an app-driven worker's data ran out (a new epoch would find none either).
    if (outcome.rounds >= rules_.total_rounds || outcome.data_ended) {
      finish_job();
      return;
    }
    if (!rules_.elastic) {  // no membership changes: the workers voted to stop the job
      event("membership: the job stopped after step " + std::to_string(outcome.last_step) +
            " (a worker was asked to stop)");
      finish_job();
      return;
    }
    now_ = membership_phase::forming;
    try_form(now);
    return;
  }
  if (!rules_.elastic) {
    fail_job(*failure);
    return;
  }
  epoch_failure_ = failure;
  now_ = membership_phase::forming;
  if (!lost_in_epoch_) emit(membership_do::timer{membership_timer::grace, epoch, rules_.loss_grace});
  try_form(now);
}

void membership_machine::start_epoch(std::vector<member_entry*> order, std::optional<state_source> source,
                                     time_point now) {
  settle_losses(true);
  fresh_after_.reset();
  waiting_since_.reset();
  majority_back_since_.reset();
  holders_waited_since_.reset();
  const int before = epoch_workers_;
  ++epoch_;
  epoch_workers_ = static_cast<int>(order.size());
  epoch_spec spec;
  spec.epoch = epoch_;
  spec.workers = epoch_workers_;
  spec.start_steps = source ? source->steps : rules_.origin_steps;
  spec.data_position = source ? kept_positions_.at({source->layout, source->steps}) : rules_.origin_data_position;
  spec.metrics_events = std::move(metrics_events_);
  metrics_events_.clear();
  epoch_start_ = spec.start_steps;
  record(epoch_record(epoch_, spec.start_steps, epoch_workers_, lost_since_epoch_));
  lost_since_epoch_ = false;
  const std::uint64_t start_steps = spec.start_steps, data_position = spec.data_position;
  emit(membership_do::spawn_coordinator{std::move(spec)});
  lost_in_epoch_ = false;
  epoch_failure_.reset();
  restoring_ = source;
  check_ = {};

  std::vector<std::string> addresses;
  for (member_entry* m : order) addresses.push_back(m->request->address);
  for (auto& [id, m] : members_) m.last_rank = -1;
  for (std::size_t rank = 0; rank < order.size(); ++rank) order[rank]->rank = order[rank]->last_rank = static_cast<int>(rank);
  // Every standby holds the epoch before any member starts it (one sender: the order holds).
  replicate();
  bool leavers_stay = false;
  for (member_entry* m : order) {
    leavers_stay = leavers_stay || m->leaving;
    epoch_assignment plan;
    plan.epoch = epoch_;
    plan.rank = m->rank;
    plan.world = epoch_workers_;
    plan.addresses = addresses;
    plan.start_steps = start_steps;
    plan.data_position = data_position;
    plan.from_origin = !source;
    if (source) plan.source = *source;
    if (rules_.replay)
      if (const replayed_change* next = rules_.replay->first_from(start_steps + 1)) plan.end_steps = next->step;
    answer(*m, std::move(plan));
  }
  now_ = membership_phase::running;
  // Epoch 1 forms while the starting ranks say hello: the rendezvous.
  if (epoch_ > 1) {
    std::ostringstream line;
    line << "membership: epoch " << epoch_ << ", " << before << " -> " << epoch_workers_ << " workers from step "
         << start_steps + 1;
    if (!pending_reason_.empty()) line << " (" << pending_reason_ << ")";
    line.precision(2);
    line << std::fixed << ", formed " << std::chrono::duration<double>(now - epoch_ended_at_).count()
         << " s after the last one ended";
    event(line.str());
  }
  pending_reason_.clear();
  emit(membership_do::watch_epoch{epoch_, now - epoch_ended_at_});
  // A leaver kept for its shard, or a joiner that came while the epoch formed, ends it at once.
  if (leavers_stay) announce_change("a leaving member stays one more epoch for its shard");
  for (auto& [id, m] : members_)
    if (m.alive && m.rank < 0 && !m.leaving && !m.held) announce_change(m.name() + " joins");
}

// Whether every member that asked for the next epoch can still be counted. After this process
// stalled (stopped, or starved) past the earliest verdict, every member may have judged this
// coordinator lost and asked another for this epoch meanwhile: the requests read after the
// stall were sent before their senders' agents ended, which come later in the mailbox. So a
// member counts again once it echoes a heartbeat sent after the stall (on_heartbeat), or its
// agent's end says that it went. Without the detector, or before the first epoch (nobody can
// take over yet), every member counts.
bool membership_machine::all_in_contact(time_point now) {
  awaiting_contact_ = false;
  if (!detector_ || epoch_ == 0) return true;
  note_stall(now);
  if (!fresh_after_) return true;
  for (const auto& [id, m] : members_)
    if (m.alive && m.remote && !m.held && !(m.contact.echoed && *m.contact.echoed >= *fresh_after_))
      awaiting_contact_ = true;
  return !awaiting_contact_;
}

void membership_machine::try_form(time_point now) {
  if (now_ != membership_phase::starting && now_ != membership_phase::forming) return;
  if (now_ == membership_phase::starting && initial_hellos_ < rules_.initial_world) return;
  for (auto& [id, m] : members_)
    if (m.alive && !m.request && !m.held) return;  // everyone alive takes part in forming
  if (epoch_failure_ && !lost_in_epoch_) return;  // wait for the death that explains it

  // No split brain: after a loss, only a strict majority of the last epoch's members not known
  // to be dead goes on (a partition's other side cannot have one too).
  if (epoch_ > 0 && lost_since_epoch_) {
    const majority_count count = count_majority();
    if (!majority_remains(count.last, count.reachable, count.dead)) {
      if (!count.confirming) wait_for_majority(now);  // a death being confirmed may still make one
      return;
    }
  }
  // Members lost together often come back together (a partition heals, stopped processes wake):
  // once a waiting side has its majority back, the others it waited for get a moment to return as
  // members instead of as joiners (a state transfer and an epoch more each).
  if (waiting_since_ &&
      std::any_of(members_.begin(), members_.end(), [&](const auto& entry) { return returnable(entry.second); })) {
    if (!majority_back_since_) {
      majority_back_since_ = now;
      emit(membership_do::timer{membership_timer::majority, epoch_, returning_grace});
    }
    if (now - *majority_back_since_ < returning_grace) return;
  }
  if (!all_in_contact(now)) return;
  if (rules_.replay && !apply_replayed_change(now)) return;
  std::vector<member_entry*> staying, leaving;
  for (auto& [id, m] : members_) {
    if (!m.alive || m.held) continue;
    (m.leaving ? leaving : staying).push_back(&m);
  }
  std::sort(staying.begin(), staying.end(),
            [&](const member_entry* a, const member_entry* b) { return order_key(*a) < order_key(*b); });
  if (staying.empty() || staying.front()->remote) {
    fail_job("the coordinator's process is not a member any more");
    return;
  }
  std::optional<state_source> source;
  if (epoch_ > 0) {
    std::string why_not;
    source = choose_source(kept_positions_, rules_.sharded, {staying.begin(), staying.end()}, &why_not);
    if (!source && !leaving.empty()) {
      // A leaver whose shard nobody else holds stays for one more epoch.
      std::vector<member_entry*> with_leavers = staying;
      with_leavers.insert(with_leavers.end(), leaving.begin(), leaving.end());
      source = choose_source(kept_positions_, rules_.sharded, {with_leavers.begin(), with_leavers.end()});
      if (source) {
        staying = with_leavers;
        leaving.clear();
      }
    }
    if (!source && anything_kept_) {
      const std::string cannot = "the training state cannot be rebuilt after " + pending_reason_ + ": " +
                                 (why_not.empty() ? "no survivor kept any state" : why_not) +
                                 (epoch_failure_ ? " (the epoch failed: " + *epoch_failure_ + ")" : "");
      if (!wait_for_state_holders(cannot, now)) fail_job(cannot);
      return;
    }
  }
  for (member_entry* m : leaving) {
    answer(*m, job_over());
    m->alive = false;  // gone from the job; its down message changes nothing
    if (detector_) detector_->forget(m->id);
  }
  start_epoch(std::move(staying), source, now);
}

}  // namespace accord
