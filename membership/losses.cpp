// Losing members and getting them back: closed connections, silent heartbeats, certain deaths,
// the wait of a side without a majority, members that return, and taking over from a lost
// coordinator.
#include "membership/machine.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace accord {

std::string closed_cause(const std::optional<heartbeat_detector_settings>& detector, const heartbeat_contact& contact,
                         std::chrono::steady_clock::time_point now) {
  return detector && closed_in_contact(now, contact.echoed, earliest_verdict(*detector)) ? closed_in_contact_cause
                                                                                          : closed_out_of_contact_cause;
}

std::string hung_cause(const heartbeat_detector::suspicion& silent) {
  char cause[96];
  std::snprintf(cause, sizeof cause, "hung (silent for %.2f s; its heartbeats allowed %.2f s)",
                std::chrono::duration<double>(silent.silent).count(),
                std::chrono::duration<double>(silent.threshold).count());
  return cause;
}

namespace {

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

std::uint64_t membership_machine::steps_done() const {
  return rules_.steps_done ? std::max(rules_.steps_done->load(), epoch_start_) : epoch_start_;
}

// The coordinator's process hosts the machine (its member is local); the standby is next in
// line: the lowest rank of the last epoch besides it.
std::string membership_machine::role_of(const member_entry& m) const {
  if (!m.remote) return "coordinator";
  const member_entry* next = nullptr;
  for (const auto& [id, other] : members_)
    if (other.remote && other.last_rank >= 0 && (!next || other.last_rank < next->last_rank)) next = &other;
  return next == &m ? "standby" : "worker";
}

// This process's own member (named by its standby's control port).
const member_entry* membership_machine::own_member() const {
  for (const auto& [id, m] : members_)
    if (!rules_.control.empty() && m.control == rules_.control) return &m;
  return nullptr;
}

// A member lost since the last epoch formed that may still come back: no epoch formed without
// it yet, and it is not known dead. Also while the epoch it was lost in still runs (aborted, its
// end not heard yet): a member that took over or gave way says hello again as soon as it follows
// this coordinator, which may be before then. A leaver too: it counts for the majority until
// released at the next epoch's forming.
bool membership_machine::returnable(const member_entry& m) const {
  return (now_ == membership_phase::forming || now_ == membership_phase::running) && !m.alive && m.lost_record &&
         !m.known_dead;
}

membership_machine::majority_count membership_machine::count_majority() const {
  majority_count c;
  for (const auto& [id, m] : members_) {
    if (m.last_rank < 0) continue;
    ++c.last;
    if (m.alive) ++c.reachable;
    if (m.known_dead) ++c.dead;
    c.confirming = c.confirming || m.checking_death;
  }
  return c;
}

// "2 of the last epoch's 4 members are reachable, 0 known dead (...)"
std::string membership_machine::reachable_members() const {
  const majority_count c = count_majority();
  return std::to_string(c.reachable) + " of the last epoch's " + std::to_string(c.last) + " members are reachable, " +
         std::to_string(c.dead) + " known dead (" + pending_reason_ + ")";
}

std::string membership_machine::no_majority() const { return "no majority: " + reachable_members(); }

// `line` here and in every other member's process but `except`'s.
void membership_machine::tell_everyone(const std::string& line, std::uint64_t except) {
  event(line);
  for (const auto& [id, other] : members_)
    if (other.alive && other.remote && other.has_agent && other.id != except) emit(membership_do::tell{id, line});
}

// A member was lost or left (`what`): one line here and in every other member's process, a
// record for the membership log and the metrics file.
void membership_machine::report_member(member_entry& m, const std::string& what, const std::string& cause,
                                       time_point now) {
  const membership_record r = member_record(what, epoch_, steps_done(), m.initial_rank, m.host, role_of(m), cause);
  // A lost member may come back before the next epoch forms (a side without a majority waits
  // for it): its loss is recorded once an epoch forms without it.
  if (what == "lost") {
    m.lost_record = r;
    m.lost_at = now;
  } else {
    record(r);
    metrics_events_.push_back(to_json_line(r));
  }
  tell_everyone(member_event_line(m.name(), r), m.id);
}

// The members lost since the last epoch that did not come back: their losses go to the
// membership log and the metrics file, and when the job goes on without them each hears why
// (a hung process that wakes, instead of waiting on peers that went on without it) once the
// epoch formed without them kept a step (tell_dropped).
void membership_machine::settle_losses(bool job_goes_on) {
  for (auto& [id, m] : members_) {
    if (!m.lost_record) continue;
    record(*m.lost_record);
    metrics_events_.push_back(to_json_line(*m.lost_record));
    m.lost_record.reset();
    if (job_goes_on && dropped_.count(id) && m.has_agent) drops_due_.push_back(id);
  }
}

// The running epoch kept a step: every one of its members had its plan (and its copy, sent
// first), so the job surely went on without the members it dropped, and they hear so. Not
// before: a cut may hold the plans until the coordinator is lost, and then the members it
// dropped are among the ones whose majority the survivors need, from the epoch before (found
// by the membership simulation: 4025559).
void membership_machine::tell_dropped() {
  for (const std::uint64_t id : std::exchange(drops_due_, {}))
    if (const auto dropped = dropped_.find(id); dropped != dropped_.end()) emit(membership_do::drop{id, dropped->second});
}

// A lost member answers again before an epoch formed without it (a stopped process woke, a
// link healed): it counts again, and the next epoch may take it.
void membership_machine::readmit(member_entry& m, time_point now) {
  m.alive = true;
  const std::uint64_t step = m.lost_record->step;
  // The metrics file tells the loss that undid itself (a detector's false suspicion, a healed
  // link); the membership log does not: no epoch changed.
  metrics_events_.push_back(to_json_line(*m.lost_record));
  m.lost_record.reset();
  dropped_.erase(m.id);
  if (detector_ && m.remote) detector_->heard(m.id, now);
  pending_reason_ += "; " + m.name() + " back";
  const membership_record r = member_record("back", epoch_, step, m.initial_rank, m.host, role_of(m), "it answers again");
  metrics_events_.push_back(to_json_line(r));
  tell_everyone(member_event_line(m.name(), r), m.id);
}

// `m` was lost by a closed connection while in contact: it counts as dead once its control port
// refuses a connection; an epoch whose majority needs the answer waits for it.
void membership_machine::check_death(member_entry& m) {
  if (m.control.empty()) return;
  m.checking_death = true;
  emit(membership_do::probe_death{m.id, m.control});
}

// `cause`: "connection closed (...)" or "hung (silent for 1.62 s)".
void membership_machine::member_lost(member_entry& m, const std::string& cause, time_point now) {
  if (!m.alive) return;
  m.alive = false;
  // A pending request stays: the member may come back before the next epoch forms.
  if (detector_) detector_->forget(m.id);
  if (now_ == membership_phase::finished || now_ == membership_phase::failed || now_ == membership_phase::yielded) {
    check_released();
    return;
  }
  const bool in_epoch = now_ == membership_phase::running && m.rank >= 0;
  report_member(m, "lost", cause, now);
  if (!rules_.elastic) {
    fail_job("the process of " + m.name() + " was lost before the job ended: " + cause);
    return;
  }
  if (in_epoch || (now_ == membership_phase::forming && epoch_failure_)) lost_in_epoch_ = true;
  lost_since_epoch_ = true;
  dropped_[m.id] = "this worker (" + m.name() + ") was dropped from the job in epoch " + std::to_string(epoch_) +
                   ": the coordinator counted it as lost (" + cause + "); the job goes on without it";
  pending_reason_ += (pending_reason_.empty() ? "" : "; ") + m.name() + " lost";
  const std::string lost = "its process was lost: " + cause;
  if (in_epoch) {
    abort_epoch(m.name() + ": " + lost);
    if (m.has_agent) emit(membership_do::abort{m.id, epoch_, "the coordinator dropped this member: " + cause});
    emit(membership_do::fail_worker{m.rank, lost});
  }
  if (cause == closed_in_contact_cause) check_death(m);
  try_form(now);
}

void membership_machine::on_connection_closed(std::uint64_t member, time_point now) {
  // Without the detector (no heartbeats echoed), a hung member's connection closes after the
  // heartbeat timeout too.
  if (const auto found = members_.find(member); found != members_.end())
    member_lost(found->second, closed_cause(rules_.detector, found->second.contact, now), now);
}

void membership_machine::on_heartbeat(std::uint64_t id, std::int64_t sent, std::int64_t echo, time_point now) {
  const auto found = members_.find(id);
  if (!detector_ || found == members_.end() || !found->second.remote) return;
  member_entry& m = found->second;
  if (!m.alive) {
    // A lost member that heard this coordinator after the verdict still follows it (one sent
    // before may have left for another side since): it is back.
    if (!returnable(m) || heartbeat_time_point(echo) <= m.lost_at) return;
    readmit(m, now);
    m.contact.heard(sent, echo);
    try_form(now);
    return;
  }
  detector_->heard(id, now);
  m.contact.heard(sent, echo);
  if (awaiting_contact_) try_form(now);
}

void membership_machine::on_death_probe(std::uint64_t id, bool refused, time_point now) {
  const auto found = members_.find(id);
  if (found == members_.end() || !found->second.checking_death) return;
  found->second.checking_death = false;
  found->second.known_dead = refused;
  try_form(now);
}

// The adaptive detector's verdicts, every check interval while the job runs.
void membership_machine::check_silence(time_point now) {
  if (!detector_) return;
  if (now_ == membership_phase::finished || now_ == membership_phase::failed || now_ == membership_phase::yielded)
    return;
  // The members judge the coordinator by its own heartbeats; a lost one that may come back
  // still hears them (it echoes them when it answers again).
  note_stall(now);
  last_heartbeats_ = now;
  out_.reserve(out_.size() + members_.size() + 1);  // a heartbeat each, and the next check's timer
  if (rules_.elastic)
    for (const auto& [id, m] : members_)
      if ((m.alive || returnable(m)) && m.remote && m.has_agent)
        emit(membership_do::heartbeat{id, heartbeat_time(now), m.contact.heard_sent});
  for (const heartbeat_detector::suspicion& silent : detector_->check(now)) {
    const auto found = members_.find(silent.member);
    if (found == members_.end()) continue;
    member_lost(found->second, hung_cause(silent), now);
  }
  emit(membership_do::timer{membership_timer::silence, 0, rules_.detector->check_interval});
}

// This process sent no heartbeats for longer than a member's earliest verdict (it was stopped, or
// starved): the members' requests from before may be from members that went to another coordinator.
void membership_machine::note_stall(time_point now) {
  if (last_heartbeats_ && now - *last_heartbeats_ >= earliest_verdict(*rules_.detector)) fresh_after_ = now;
}

// No majority on this side: it keeps its state and trains nothing while its lost members may
// come back (the next epoch then forms as after any loss), for majority_wait; then the job fails.
void membership_machine::wait_for_majority(time_point now) {
  if (waiting_since_) return;
  const std::string stops = "; this side stops so that a majority elsewhere can go on";
  if (rules_.majority_wait.count() == 0) {
    fail_job(no_majority() + stops);
    return;
  }
  waiting_since_ = now;
  const member_entry* own = own_member();
  // In the metrics file: the next epoch's, or, when the wait ends the job, the unwritten events.
  metrics_events_.push_back(to_json_line(member_record("waiting", epoch_, steps_done(), own ? own->initial_rank : -1,
                                                       own ? own->host : std::string(), "coordinator", no_majority())));
  tell_everyone("membership: " + (own ? own->name() : std::string("this process")) +
                    ", coordinator, waits for a majority at step " + std::to_string(steps_done()) + ": " +
                    reachable_members() + "; this side keeps its state, trains nothing and waits up to " +
                    seconds_text(rules_.majority_wait) + " for them (--majority-wait)",
                own ? own->id : UINT64_MAX);
  emit(membership_do::timer{membership_timer::majority, epoch_, rules_.majority_wait});
  if (rules_.asks_standbys) emit(membership_do::timer{membership_timer::probe, epoch_, std::chrono::milliseconds(0)});
}

// The newest kept state lacks what only lost members may hold (`cannot` says what): while one of
// them is not known dead (stopped, or behind a partition) this side waits for them as for a
// majority, up to majority_wait, and then fails the job. False: nobody to wait for.
bool membership_machine::wait_for_state_holders(const std::string& cannot, time_point now) {
  if (rules_.majority_wait.count() == 0 ||
      std::none_of(members_.begin(), members_.end(), [&](const auto& entry) { return returnable(entry.second); }))
    return false;
  if (!holders_waited_since_) {
    const bool probing = waiting_since_.has_value();  // a wait for a majority asks the standbys already
    holders_waited_since_ = now;
    const member_entry* own = own_member();
    const std::string why = cannot + ", but a member that may hold it is lost, not known dead";
    metrics_events_.push_back(to_json_line(member_record("waiting", epoch_, steps_done(), own ? own->initial_rank : -1,
                                                         own ? own->host : std::string(), "coordinator", why)));
    tell_everyone("membership: " + (own ? own->name() : std::string("this process")) + ", coordinator, waits at step " +
                      std::to_string(steps_done()) + ": " + why + "; this side keeps its state, trains nothing and " +
                      "waits up to " + seconds_text(rules_.majority_wait) + " for it (--majority-wait)",
                  own ? own->id : UINT64_MAX);
    emit(membership_do::timer{membership_timer::majority, epoch_, rules_.majority_wait});
    // The holders may be the members of a side that waits for a majority itself, with an earlier
    // coordinator: this side gives way to it (on_standby_answer), and both are whole there.
    if (rules_.asks_standbys && !probing)
      emit(membership_do::timer{membership_timer::probe, epoch_, std::chrono::milliseconds(0)});
  }
  if (now - *holders_waited_since_ < rules_.majority_wait) return true;
  fail_job(cannot + " (it waited " + seconds_text(now - *holders_waited_since_) +
           " for the members that may hold it: --majority-wait)");
  return true;
}

// The wait for a majority, or the returning members' moment, ran out.
void membership_machine::majority_timer(time_point now) {
  const majority_count count = count_majority();
  if (majority_remains(count.last, count.reachable, count.dead)) {
    if (majority_back_since_) {  // the others' moment to come back ran out
      try_form(now);
      return;
    }
    // A majority answers again but has not asked for the epoch yet: a later loss waits afresh.
    waiting_since_.reset();
    return;
  }
  // The returning members' moment ran out after the majority went again, or an earlier wait's
  // timer came: this wait goes on until its own end.
  if (now - *waiting_since_ < rules_.majority_wait) {
    majority_back_since_.reset();
    return;
  }
  fail_job(no_majority() + "; this side stops so that a majority elsewhere can go on (it waited " +
           seconds_text(now - *waiting_since_) + " for one: --majority-wait)");
}

// While this side waits for a majority, the lost members of the last epoch are asked where the
// job is: each answering standby replies (on_standby_answer), then an empty answer ends the round.
void membership_machine::probe_lost_members() {
  if (!waiting() || now_ != membership_phase::forming) return;
  std::vector<std::string> controls;
  for (const auto& [id, m] : members_)
    if (!m.alive && m.last_rank >= 0 && !m.known_dead && !m.control.empty()) controls.push_back(m.control);
  emit(membership_do::probe_standbys{std::move(controls)});
}

// The answer of a lost member's standby at `control`: it holds a later epoch, or it coordinates a
// side of its own and comes earlier in the last epoch's order (this side, its coordinator a
// successor). Either way this side gives way: every member says hello there again. A later
// epoch may have counted this side's members while a cut held their plans (they judged its
// coordinator lost first): they come back to it as lost members of its running epoch. Those it
// formed without are refused there as dropped, and end, as this side once stopped at once
// (found by the membership simulation).
void membership_machine::on_standby_answer(const std::string& control, std::uint64_t epoch, bool coordinates,
                                           time_point) {
  if (!waiting() || now_ != membership_phase::forming) return;
  if (control.empty()) {
    emit(membership_do::timer{membership_timer::probe, epoch_, majority_probe_interval});
    return;
  }
  if (epoch > epoch_) {
    const std::string why = waiting_since_ ? no_majority() : "the training state cannot be rebuilt";
    return give_way(control, "the member at " + control + " holds a later epoch, " + std::to_string(epoch) +
                                 ": this side (" + why + ") gives way to its coordinator; its members say hello there "
                                 "again");
  }
  const member_entry* own = own_member();
  const auto there =
      std::find_if(members_.begin(), members_.end(), [&](const auto& entry) { return entry.second.control == control; });
  if (!coordinates || !own || there == members_.end() || there->second.last_rank < 0 ||
      there->second.last_rank >= own->last_rank)
    return;
  give_way(control, "this side (no majority) gives way to the coordinator of " + there->second.name() +
                        ", earlier in the last epoch's order; its members say hello there again");
}

void membership_machine::give_way(const std::string& control, const std::string& why) {
  now_ = membership_phase::yielded;
  yielded_to_ = control;
  tell_everyone("membership: " + why, UINT64_MAX);
  for (auto& [id, m] : members_)
    if (m.alive && m.asking) answer(m, rejoin_at(control));
}

}  // namespace accord
