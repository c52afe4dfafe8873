// The machine's start, who it admits, the members' epoch requests, the rendezvous of the starting
// ranks, the timers, and the job's end (finished or failed) with every member told.
#include "membership/machine.hpp"

#include "cluster/fingerprint.hpp"

#include <algorithm>
#include <cstdio>

namespace accord {

membership_machine::membership_machine(membership_rules rules, time_point now)
    : rules_(std::move(rules)), epoch_ended_at_(now), created_(now) {  // the first epoch forms from here
  if (rules_.takeover)
    take_over(now);
  else
    emit(membership_do::timer{membership_timer::rendezvous, 0, std::chrono::milliseconds(0)});
  if (rules_.detector) {
    detector_.emplace(*rules_.detector);
    emit(membership_do::timer{membership_timer::silence, 0, std::chrono::milliseconds(0)});
  }
}

std::string membership_machine::dropped_reason(std::uint64_t member) const {
  const auto found = dropped_.find(member);
  return found == dropped_.end() ? std::string() : found->second;
}

// Releases the waiters once the job is over and every member alive has heard so.
void membership_machine::check_released() {
  if (now_ != membership_phase::finished && now_ != membership_phase::failed) return;
  for (const auto& [id, m] : members_)
    if (m.alive && !m.released) return;
  if (waiters_ > 0) emit(membership_do::release_waiters{});
  waiters_ = 0;
}

void membership_machine::on_waiter() {
  ++waiters_;
  check_released();
}

void membership_machine::answer(member_entry& m, epoch_assignment plan) {
  if (!m.asking) return;
  m.released = plan.finished;
  emit(membership_do::answer{m.id, std::move(plan)});
  m.asking = false;
  m.request.reset();
}

void membership_machine::fail_job(const std::string& why) {
  if (failure_) return;
  failure_ = why;
  now_ = membership_phase::failed;
  settle_losses(false);
  if (!metrics_events_.empty()) emit(membership_do::unwritten_events{metrics_events_});
  metrics_events_.clear();
  emit(membership_do::fail_worker{0, why});  // to the running epoch's coordinator, if any
  for (auto& [id, m] : members_)
    if (m.asking) {
      emit(membership_do::refuse{id, why});
      m.asking = false;
      m.released = true;
    }
  check_released();
}

void membership_machine::finish_job() {
  now_ = membership_phase::finished;
  emit(membership_do::finished{});
  for (auto& [id, m] : members_) answer(m, job_over());
  check_released();
}

std::variant<std::uint64_t, std::string> membership_machine::on_hello(const member_hello& hello, bool remote,
                                                                      time_point now) {
  auto refuse = [&](const std::string& why) {
    const std::string who =
        hello.rank >= 0 ? "rank " + std::to_string(hello.rank) : "a joiner" + (hello.host.empty() ? "" : " at " + hello.host);
    return who + " refused: " + why;
  };
  if (failure_) return *failure_;
  if (now_ == membership_phase::finished) return refuse("the job is already over");
  if (!yielded_to_.empty()) return refuse(gave_way_refusal + yielded_to_);
  if (hello.rejoin) {
    if (adoptable(hello.replica)) adopt(hello.replica, hello.member, now);
    // After a takeover, or (a side waiting for a majority) a lost member that comes back.
    // A member is its id and its process: a coordination that went on apart (stalled, or cut
    // off) may have given the same id to another joiner, whose side gives way here later.
    auto found = members_.find(hello.member);
    if (found != members_.end() && !found->second.control.empty() && !hello.control.empty() &&
        found->second.control != hello.control)
      found = members_.end();
    const bool back = found != members_.end() && returnable(found->second);
    if (found == members_.end() || !(found->second.reconnecting || back)) {
      if (const auto dropped = dropped_.find(hello.member); dropped != dropped_.end()) return dropped->second;
      return refuse("member " + std::to_string(hello.member) +
                    " is not one this coordinator waits for after the last one's loss");
    }
    member_entry& m = found->second;
    m.reconnecting = false;
    m.has_agent = true;
    m.remote = remote;
    m.request.reset();
    m.asking = false;
    if (back)
      readmit(m, now);
    else if (detector_ && m.remote)
      detector_->heard(m.id, now);
    return m.id;
  }
  if (!hello.job.empty() && hello.job != rules_.job_id)
    return refuse("it belongs to job '" + hello.job + "', but this master port is held by job '" + rules_.job_id +
                  "' (another job holds the port)");
  if (const std::string difference = fingerprint_difference(rules_.fingerprint, hello.fingerprint); !difference.empty())
    return refuse(difference);
  if (hello.rank >= 0) {
    if (now_ != membership_phase::starting) return refuse("the job has started; a new worker joins with --join");
    if (hello.world != rules_.initial_world)
      return refuse("it expects " + std::to_string(hello.world) + " workers, the job has " +
                    std::to_string(rules_.initial_world));
    if (hello.rank >= rules_.initial_world) return refuse("rank out of range");
    for (const auto& [id, m] : members_)
      if (m.initial_rank == hello.rank) return refuse("rank registered twice");
    ++initial_hellos_;
  } else if (!rules_.elastic) {
    return refuse("the job is not elastic (start it with --elastic to admit joiners)");
  }
  member_entry m;
  m.id = next_id_++;
  m.initial_rank = hello.rank;
  m.has_agent = true;
  m.host = hello.host;
  m.control = hello.control;
  m.remote = remote;
  if (detector_ && m.remote) detector_->heard(m.id, now);
  if (hello.rank < 0) {
    const membership_record joined =
        member_record("joined", epoch_, steps_done(), -1, m.host, "worker", "said hello as a joiner");
    record(joined);
    metrics_events_.push_back(to_json_line(joined));
  }
  // A replay's joiner waits for the step its change is due.
  m.held = hello.rank < 0 && rules_.replay;
  const std::string name = m.name();
  const bool announce = hello.rank < 0 && !m.held;
  const std::uint64_t id = m.id;
  members_.emplace(id, std::move(m));
  if (announce) announce_change(name + " joins");
  return id;
}

void membership_machine::on_epoch_request(epoch_request request, time_point now) {
  const std::uint64_t id = request.member;
  auto found = members_.find(id);
  if (found == members_.end()) {
    emit(membership_do::answer{id, job_over()});
    return;
  }
  member_entry& m = found->second;
  if (!yielded_to_.empty()) {
    emit(membership_do::answer{id, rejoin_at(yielded_to_)});
    return;
  }
  // Kept until its heartbeats say that it still follows this coordinator.
  if (returnable(m)) {
    m.asking = true;
    m.request = std::move(request);
    return;
  }
  if (failure_ || now_ == membership_phase::finished || !m.alive) {
    m.released = true;
    check_released();
    if (failure_)
      emit(membership_do::refuse{id, *failure_});
    else if (const auto dropped = dropped_.find(id); dropped != dropped_.end())
      emit(membership_do::refuse{id, dropped->second});
    else
      emit(membership_do::answer{id, job_over()});
    return;
  }
  m.asking = true;
  m.request = std::move(request);
  try_form(now);
}

void membership_machine::on_leave(std::uint64_t id, time_point now) {
  auto found = members_.find(id);
  if (found == members_.end() || !found->second.alive || found->second.leaving) return;
  if (!found->second.remote) {
    event("membership: this process hosts the coordinator and cannot leave; ignored");
    return;
  }
  found->second.leaving = true;
  report_member(found->second, "left", "asked to leave", now);
  announce_change(found->second.name() + " leaves");
  try_form(now);
}

void membership_machine::on_kept(std::uint64_t epoch, std::uint64_t steps, std::uint64_t data_position) {
  kept_positions_[{epoch, steps}] = data_position;
  anything_kept_ = true;
  replicate();
  if (epoch == epoch_) tell_dropped();
}

void membership_machine::on_restored(const restored_report& r) {
  if (r.epoch != epoch_ || !restoring_ || now_ != membership_phase::running) return;
  const state_source& source = *restoring_;
  if (r.parameter_hash != source.parameter_hash)
    check_.mismatch = "rank " + std::to_string(r.rank) + " restored other parameters than were kept";
  check_.checksum += r.state_checksum;
  if (++check_.reports < epoch_workers_) return;
  if (rules_.sharded && check_.checksum != source.state_checksum && !check_.mismatch)
    check_.mismatch = "the optimizer state's checksum changed in the transfer";
  if (check_.mismatch) {
    fail_job("epoch " + std::to_string(epoch_) + ": " + *check_.mismatch);
    return;
  }
  char line[240];
  if (rules_.sharded)
    std::snprintf(line, sizeof line,
                  "membership: epoch %llu restored the state of step %llu on %d workers from %zu holders; optimizer "
                  "state checksum %016llx before the transfer, %016llx after",
                  static_cast<unsigned long long>(epoch_), static_cast<unsigned long long>(source.steps),
                  epoch_workers_, source.parameter_holders.size(),
                  static_cast<unsigned long long>(source.state_checksum),
                  static_cast<unsigned long long>(check_.checksum));
  else
    std::snprintf(line, sizeof line,
                  "membership: epoch %llu restored the parameters of step %llu on %d workers from %zu holders "
                  "(hash %016llx everywhere); Lion momenta stay with their workers, joiners start from their mean",
                  static_cast<unsigned long long>(epoch_), static_cast<unsigned long long>(source.steps),
                  epoch_workers_, source.parameter_holders.size(),
                  static_cast<unsigned long long>(source.parameter_hash));
  event(line);
}

// While the starting ranks say hello: names the missing ones every 10 s, fails after the
// timeout, or within a second of this process being asked to stop (Ctrl-C).
void membership_machine::check_rendezvous(time_point now, bool stop_requested) {
  constexpr auto report_every = std::chrono::seconds(10);
  constexpr auto stop_poll = std::chrono::milliseconds(200);
  if (now_ != membership_phase::starting) return;
  std::vector<int> missing;
  for (int rank = 0; rank < rules_.initial_world; ++rank) {
    const bool present = std::any_of(members_.begin(), members_.end(),
                                     [rank](const auto& entry) { return entry.second.initial_rank == rank; });
    if (!present) missing.push_back(rank);
  }
  const auto waited = now - created_;
  const auto whole_seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
  const std::string whom = list_ranks(missing) + " of " + std::to_string(rules_.initial_world);
  if (stop_requested) {
    fail_job("rendezvous: asked to stop while waiting for " + whom);
    return;
  }
  if (waited >= rules_.rendezvous_timeout) {
    fail_job("rendezvous: " + whom + " did not say hello within " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(rules_.rendezvous_timeout).count()) +
             " s (rendezvous timeout); is every rank started, with this MASTER_ADDR and MASTER_PORT?");
    return;
  }
  if (waited >= (rendezvous_reports_ + 1) * report_every) {
    ++rendezvous_reports_;
    event(std::string(rendezvous_wait_line) + whom + " (" + std::to_string(whole_seconds) + " s)");
  }
  const auto next_report = (rendezvous_reports_ + 1) * report_every - waited;
  auto wait = std::chrono::ceil<std::chrono::milliseconds>(
      std::min<std::chrono::steady_clock::duration>(rules_.rendezvous_timeout - waited, next_report));
  if (rules_.stop_polled) wait = std::min<std::chrono::milliseconds>(wait, stop_poll);
  emit(membership_do::timer{membership_timer::rendezvous, 0, wait});
}

void membership_machine::on_timer(membership_timer kind, std::uint64_t epoch, time_point now, bool stop_requested) {
  switch (kind) {
    case membership_timer::rendezvous:
      check_rendezvous(now, stop_requested);
      return;
    case membership_timer::silence:
      check_silence(now);
      return;
    case membership_timer::grace:
      if (epoch == epoch_ && now_ == membership_phase::forming && epoch_failure_ && !lost_in_epoch_)
        fail_job(*epoch_failure_);
      return;
    case membership_timer::majority:
      if (epoch != epoch_ || now_ != membership_phase::forming) return;
      if (waiting_since_)
        majority_timer(now);
      else if (holders_waited_since_)
        try_form(now);  // the wait for the state's holders ran out, unless one came back
      return;
    case membership_timer::probe:
      probe_lost_members();
      return;
    case membership_timer::reconnect:
      if (--reconnect_timers_ > 0) return;  // an adopted copy restarted the wait
      for (auto& [id, m] : members_)
        if (m.reconnecting) member_lost(m, "did not reconnect to the new coordinator", now);
      return;
  }
}

}  // namespace accord
