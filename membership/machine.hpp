#pragma once
// The membership of a job that spans processes as a state machine: who trains together epoch by
// epoch, which epoch forms and from which kept step, who is lost, who may come back, when a side
// without a majority waits, gives way or stops (actors/membership_actor.hpp tells the rules).
// Each event (a hello, an epoch request, a closed connection, a heartbeat, a probe's answer, a
// timer, a kept step, an ended epoch) changes the state and returns the actions it calls for.
// No CAF, no sockets, no clocks: the time of each event is passed in. actors/membership_actor.cpp
// wires it to CAF; tests and the simulator drive it directly.
#include "cluster/heartbeat_detector.hpp"
#include "membership/actions.hpp"
#include "membership/member.hpp"
#include "membership/source_choice.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace accord {

// The job's settings the machine decides by (actors/membership_actor.hpp's membership_setup adds the wiring).
struct membership_rules {
  int initial_world = 0;
  bool elastic = false;
  bool sharded = false;     // ZeRO-1 shards to cover (else only parameters matter)
  std::string fingerprint;  // what every member's settings must match (cluster/fingerprint.hpp)
  std::string job_id;       // what every member's hello must name (a joiner's may be empty)
  // Until every starting rank said hello: a line naming the missing ones every 10 s, and after
  // this long the job fails naming them.
  std::chrono::milliseconds rendezvous_timeout{300'000};
  bool stop_polled = false;  // the rendezvous checks for a stop request (Ctrl-C) every 200 ms
  std::uint64_t total_rounds = 0;
  std::uint64_t origin_steps = 0;  // where the job starts (> 0 when resumed)
  std::uint64_t origin_data_position = 0;
  // The steps the job has done (the running coordinator's), for the events' lines. May be null.
  std::shared_ptr<const std::atomic<std::uint64_t>> steps_done;
  // Judges the members' heartbeats; nullopt: a hung member is found by the middleman's
  // heartbeat timeout only.
  std::optional<heartbeat_detector_settings> detector;
  // Time a failed epoch waits for the death that may explain it before the job fails.
  std::chrono::milliseconds loss_grace{3000};
  // Elastic jobs: HOST:PORT of this process's standby, named in the replicas as the coordinator's.
  std::string control;
  // Set when this process takes over from a lost coordinator: the state to go on from, why the
  // coordinator was lost, and how long the other members have to reconnect.
  std::optional<coordination_replica> takeover;
  std::string takeover_cause;
  std::chrono::milliseconds reconnect_grace{3000};
  // A side without a majority of the last epoch's members keeps its state and waits this long
  // for them (they may be behind a partition that heals) before the job fails; 0: it fails at once.
  std::chrono::milliseconds majority_wait{30'000};
  bool asks_standbys = false;  // a waiting side probes the lost members' standbys
  // Replays these changes (process_group::membership_replay): each epoch ends at the next one's
  // step; then its departing members leave (the coordinator's process goes away, as a killed one
  // does), and its joiners, held since their hello, are admitted (waited for when not there yet).
  std::optional<process_replay> replay;
};

// A closed connection's cause: while the peer was in contact (it may count as dead), or not.
inline constexpr const char* closed_in_contact_cause = "connection closed (killed, or its host went away)";
inline constexpr const char* closed_out_of_contact_cause =
    "connection closed (killed, its host went away, or silent past the heartbeat timeout)";
std::string closed_cause(const std::optional<heartbeat_detector_settings>& detector, const heartbeat_contact& contact,
                         std::chrono::steady_clock::time_point now);
// "hung (silent for 1.62 s; its heartbeats allowed 1.50 s)"
std::string hung_cause(const heartbeat_detector::suspicion& silent);

// How the line naming the starting ranks the coordinator still waits for begins (one every 10 s).
inline constexpr std::string_view rendezvous_wait_line = "membership: waiting for ";

// What an ended epoch's result says.
struct epoch_outcome {
  std::uint64_t rounds = 0;  // counted from the job's start
  bool data_ended = false;   // the job's data ran out (this epoch's or an earlier one's)
  std::uint64_t last_step = 0;  // its last step (its start step when it did none)
};

// How long the others lost with a waiting side's majority may take to come back once it is back.
inline constexpr std::chrono::milliseconds returning_grace{1000};
// How often a waiting side asks the lost members' standbys where the job is.
inline constexpr std::chrono::milliseconds majority_probe_interval{1000};

// yielded: a side without a majority gave way to an earlier coordinator (its members went there).
enum class membership_phase { starting, running, forming, finished, failed, yielded };

class membership_machine {
public:
  using time_point = std::chrono::steady_clock::time_point;

  // The first actions: the rendezvous (or, taking over, the reconnection wait) and the heartbeat checks.
  membership_machine(membership_rules rules, time_point now);
  membership_actions take_actions() { return std::exchange(out_, {}); }
  // The same into `into` (cleared), which lends its storage to the next actions: no allocation
  // per event where the caller keeps the buffer (the simulation).
  void take_actions(membership_actions& into) {
    into.clear();
    std::swap(into, out_);
  }

  // A hello: the member id, or why it is refused. `remote`: from another process.
  std::variant<std::uint64_t, std::string> on_hello(const member_hello& hello, bool remote, time_point now);
  // Answered by an answer or refuse action for `request.member` (at once or once the epoch forms).
  void on_epoch_request(epoch_request request, time_point now);
  void on_leave(std::uint64_t member, time_point now);
  void on_restored(const restored_report& report);
  void on_kept(std::uint64_t epoch, std::uint64_t steps, std::uint64_t data_position);
  // The running epoch's coordinator ended (`failure`: it failed, why).
  void on_epoch_ended(std::uint64_t epoch, std::optional<std::string> failure, const epoch_outcome& outcome,
                      time_point now);
  void on_connection_closed(std::uint64_t member, time_point now);
  void on_heartbeat(std::uint64_t member, std::int64_t sent, std::int64_t echo, time_point now);
  void on_death_probe(std::uint64_t member, bool refused, time_point now);
  // A lost member's standby answered (control empty: the round of questions is over).
  void on_standby_answer(const std::string& control, std::uint64_t epoch, bool coordinates, time_point now);
  // `stop_requested`: Ctrl-C while the starting ranks say hello (rendezvous timers only).
  void on_timer(membership_timer kind, std::uint64_t epoch, time_point now, bool stop_requested = false);
  // Someone waits for the job's end: a release_waiters action once every member alive heard it.
  void on_waiter();

  // Why a member was dropped from the job; empty when it was not.
  std::string dropped_reason(std::uint64_t member) const;
  // A replayed coordinator loss: this process goes away once its replica is passed on.
  bool departing() const { return departing_; }
  membership_phase phase() const { return now_; }
  std::uint64_t epoch() const { return epoch_; }
  int epoch_workers() const { return epoch_workers_; }
  std::uint64_t epoch_start() const { return epoch_start_; }
  const std::map<std::uint64_t, member_entry>& members() const { return members_; }
  const std::optional<std::string>& failure() const { return failure_; }

private:
  struct restore_check {
    int reports = 0;
    std::uint64_t checksum = 0;
    std::optional<std::string> mismatch;
  };
  struct majority_count {
    int last = 0, reachable = 0, dead = 0;
    bool confirming = false;  // a lost member's death is being checked
  };

  template <class Action>
  void emit(Action a) { out_.emplace_back(std::move(a)); }
  void event(const std::string& line) { emit(membership_do::print{line}); }
  void record(const membership_record& r) { emit(membership_do::record{r}); }
  std::uint64_t steps_done() const;
  std::string role_of(const member_entry& m) const;
  const member_entry* own_member() const;
  bool returnable(const member_entry& m) const;
  majority_count count_majority() const;
  std::string reachable_members() const;
  std::string no_majority() const;

  // admission.cpp
  void check_released();
  void answer(member_entry& m, epoch_assignment plan);
  void fail_job(const std::string& why);
  // This side stops coordinating; its members say hello to the coordination at `control`.
  void give_way(const std::string& control, const std::string& why);
  void finish_job();
  void check_rendezvous(time_point now, bool stop_requested);
  void check_restored(const restored_report& r);
  // losses.cpp
  void tell_everyone(const std::string& line, std::uint64_t except);
  void report_member(member_entry& m, const std::string& what, const std::string& cause, time_point now);
  void settle_losses(bool job_goes_on);
  void tell_dropped();
  void readmit(member_entry& m, time_point now);
  void member_lost(member_entry& m, const std::string& cause, time_point now);
  void check_death(member_entry& m);
  void check_silence(time_point now);
  void probe_lost_members();
  void heard_from_lost_member(const std::string& control, std::uint64_t epoch, bool coordinates);
  void wait_for_majority(time_point now);
  void majority_timer(time_point now);
  bool wait_for_state_holders(const std::string& cannot, time_point now);
  // This side waits for lost members: for a majority, or for the holders of the state.
  bool waiting() const { return waiting_since_ || holders_waited_since_; }
  // takeover.cpp
  void take_over(time_point now);
  bool adoptable(const coordination_replica& r) const;
  void adopt(const coordination_replica& r, std::uint64_t bringer, time_point now);
  // forming.cpp
  void replicate(bool then_depart = false);
  void announce_change(const std::string& reason);
  void abort_epoch(const std::string& why);
  bool apply_replayed_change(time_point now);
  void note_stall(time_point now);
  bool all_in_contact(time_point now);
  void try_form(time_point now);
  void start_epoch(std::vector<member_entry*> order, std::optional<state_source> source, time_point now);

  membership_rules rules_;
  membership_actions out_;
  std::map<std::uint64_t, member_entry> members_;
  std::uint64_t next_id_ = 0;
  int initial_hellos_ = 0;
  membership_phase now_ = membership_phase::starting;
  std::uint64_t epoch_ = 0;  // the running (or last) epoch
  int epoch_workers_ = 0;
  std::uint64_t epoch_start_ = 0;
  bool lost_in_epoch_ = false;  // a member of the running epoch went away
  std::optional<std::string> epoch_failure_;
  std::optional<std::string> failure_;  // the job's
  kept_positions kept_positions_;
  bool anything_kept_ = false;
  std::optional<state_source> restoring_;  // what the running epoch restored, to be verified
  restore_check check_;
  std::string pending_reason_;  // why the next epoch forms
  int waiters_ = 0;             // for every member's release
  time_point epoch_ended_at_;   // when the last epoch ended
  time_point created_;
  int rendezvous_reports_ = 0;  // lines naming the missing starting ranks, one per 10 s
  std::map<std::uint64_t, std::string> dropped_;  // member → why the job went on without it
  std::vector<std::uint64_t> drops_due_;  // dropped members told so once the epoch keeps a step
  std::optional<heartbeat_detector> detector_;
  bool lost_since_epoch_ = false;          // a member was lost since the running epoch formed
  std::vector<std::string> metrics_events_;  // for the next epoch's metrics file
  std::uint64_t replica_sequence_ = 0;
  bool departing_ = false;                 // a replay's coordinator loss: this process goes away
  bool replayed_coordinator_gone_ = false;  // this process took over from a replayed coordinator loss
  bool replay_waiting_ = false;            // for a due joiner (said once)
  // Since when this side, without a majority of the last epoch's members, waits for them.
  std::optional<time_point> waiting_since_;
  // Since when this side, with a majority but not the whole newest kept state, waits for lost
  // members that may hold what is missing.
  std::optional<time_point> holders_waited_since_;
  // Since when the waiting side has its majority back while others it waited for are still away.
  std::optional<time_point> majority_back_since_;
  std::string yielded_to_;  // the control port of the coordinator this side gave way to
  bool awaiting_contact_ = false;  // the forming waits for a member's fresh heartbeat
  std::optional<time_point> last_heartbeats_;  // when this process last sent the members heartbeats
  // Since this process's last stall: members count for forming once they echo a heartbeat sent since.
  std::optional<time_point> fresh_after_;
  int reconnect_timers_ = 0;  // set after a takeover (or an adopted copy): the last one ends the wait
};

}  // namespace accord
