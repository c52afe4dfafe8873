// Taking over from a lost coordinator: from the replica this process's standby held, and from a
// later one that a rejoining member brings.
#include "membership/machine.hpp"

#include <algorithm>

namespace accord {

// A survivor's process takes over from the lost coordinator: the replicated members are
// expected to reconnect, the lost coordinator is recorded, and the next epoch forms as after a
// worker's loss (its shards from their buddies' copies).
void membership_machine::take_over(time_point now) {
  const coordination_replica& r = *rules_.takeover;
  epoch_ = r.epoch;
  epoch_workers_ = r.epoch_workers;
  epoch_start_ = r.epoch_start;
  next_id_ = r.next_id;
  for (const kept_position& k : r.kept) kept_positions_[{k.epoch, k.steps}] = k.data_position;
  anything_kept_ = !r.kept.empty();
  for (const replica_member& rm : r.members) {
    member_entry& m = members_[rm.id];
    m.id = rm.id;
    m.initial_rank = rm.initial_rank;
    m.host = rm.host;
    m.control = rm.control;
    m.last_rank = rm.rank;
    m.leaving = rm.leaving;
    m.remote = true;
    m.reconnecting = rm.id != r.coordinator;
    m.alive = m.reconnecting;
    m.held = rules_.replay && rm.initial_rank < 0 && rm.rank < 0;
  }
  replayed_coordinator_gone_ = rules_.replay.has_value();
  member_entry& lost = members_.at(r.coordinator);
  // Every survivor named it already (its agent saw the loss); here it is recorded, once an
  // epoch forms without it (this side may give way to it instead).
  lost.lost_record =
      member_record("lost", epoch_, r.steps_done, lost.initial_rank, lost.host, "coordinator", rules_.takeover_cause);
  lost.lost_at = now;
  now_ = membership_phase::forming;
  epoch_failure_ = "the coordinator's process was lost: " + rules_.takeover_cause;
  lost_in_epoch_ = true;
  lost_since_epoch_ = true;
  pending_reason_ = "the coordinator, " + lost.name() + ", lost";
  if (rules_.takeover_cause == closed_in_contact_cause) check_death(lost);
  ++reconnect_timers_;
  emit(membership_do::timer{membership_timer::reconnect, 0, rules_.reconnect_grace});
}

// Whether `r`, the copy a rejoining member brings, is of a later epoch that counted this process's
// own member while this side forms the next epoch from an older one: that epoch's coordinator
// formed it, a cut held its copies and plans from this process (and from others), and it was lost
// before they came (found by the membership simulation: 3125409, 5023320). Its members measure
// the majority against the epoch it counted them in; from the older one, its dropped members and
// lost coordinator would count as merely lost, and the side would wait in vain.
bool membership_machine::adoptable(const coordination_replica& r) const {
  if (!rules_.elastic || now_ != membership_phase::forming || r.epoch <= epoch_ || rules_.control.empty()) return false;
  return std::any_of(r.members.begin(), r.members.end(), [&](const replica_member& m) {
    return m.control == rules_.control && m.rank >= 0 && m.id != r.coordinator;
  });
}

// Goes on from `r` as this process's standby would have, had the copy reached it: r's members are
// the ones to wait for (those already here keep their agents and requests), its coordinator is
// lost, and the members r formed without are dropped.
void membership_machine::adopt(const coordination_replica& r, std::uint64_t bringer, time_point now) {
  event("membership: member " + std::to_string(bringer) + " brought the copy of epoch " + std::to_string(r.epoch) +
        ", later than this coordination's epoch " + std::to_string(epoch_) +
        " (a cut held it from this process): this side goes on from it");
  std::map<std::uint64_t, member_entry> before = std::exchange(members_, {});
  const std::uint64_t older = epoch_;
  epoch_ = r.epoch;
  epoch_workers_ = r.epoch_workers;
  epoch_start_ = r.epoch_start;
  next_id_ = std::max(next_id_, r.next_id);
  replica_sequence_ = std::max(replica_sequence_, r.sequence);  // this side's copies replace r's
  for (const kept_position& k : r.kept) kept_positions_[{k.epoch, k.steps}] = k.data_position;
  anything_kept_ = anything_kept_ || !r.kept.empty();
  for (const replica_member& rm : r.members) {
    member_entry& m = members_[rm.id];
    if (const auto old = before.find(rm.id); old != before.end() && old->second.control == rm.control) {
      m = std::move(old->second);  // said hello here already, or waited for: keeps its agent and request
      before.erase(old);
    } else {
      m.id = rm.id;
      m.remote = true;
      m.reconnecting = true;
    }
    m.initial_rank = rm.initial_rank;
    m.host = rm.host;
    m.control = rm.control;
    m.last_rank = rm.rank;
    m.leaving = rm.leaving;
    m.rank = -1;
    if (rm.control == rules_.control) m.remote = false;
  }
  member_entry& lost = members_.at(r.coordinator);
  if (lost.alive && !lost.has_agent) {
    lost.alive = lost.reconnecting = false;
    lost.lost_record = member_record("lost", epoch_, r.steps_done, lost.initial_rank, lost.host, "coordinator",
                                     "its copies and plans of epoch " + std::to_string(epoch_) + " were held from "
                                     "this side, and its members judged it lost");
    lost.lost_at = now;
  }
  pending_reason_ = "the coordinator, " + lost.name() + ", lost";
  for (auto& [id, m] : before) {  // epoch r formed without them
    dropped_[id] = "this worker (" + m.name() + ") was dropped from the job in epoch " + std::to_string(r.epoch) +
                   " (after epoch " + std::to_string(older) + "); the job goes on without it";
    if (m.alive && m.asking) {
      emit(membership_do::refuse{id, dropped_[id]});
      m.released = true;
    } else if (m.alive && m.has_agent && m.remote) {
      emit(membership_do::drop{id, dropped_[id]});
    }
  }
  epoch_failure_ = "the coordinator's process was lost before epoch " + std::to_string(epoch_) + " reached this side";
  lost_in_epoch_ = lost_since_epoch_ = true;
  waiting_since_.reset();
  majority_back_since_.reset();
  holders_waited_since_.reset();
  ++reconnect_timers_;
  emit(membership_do::timer{membership_timer::reconnect, 0, rules_.reconnect_grace});
}

}  // namespace accord
