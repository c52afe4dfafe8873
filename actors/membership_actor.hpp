#pragma once
// Membership of a job that spans processes: which worker processes train together, epoch by
// epoch. The membership actor lives in rank 0's process (published at MASTER_PORT); every
// worker process, rank 0's included, says hello, then asks for each epoch's plan.
//
// An epoch is a fixed member set with its own transport, its own coordinator and a start step.
// It ends when the job is done, when a membership change is waiting (a joiner said hello or a
// member asked to leave: every member's agent hears of it, the workers vote for it in the next
// round's all-reduce and all stop after the same step, keeping that step's state), or when it
// fails (a member's process went away: CAF's down message; or it hung: its agent's heartbeats
// stopped, judged by the adaptive detector of cluster/heartbeat_detector.hpp, or by the
// middleman's heartbeat timeout when that is off). Every surviving member prints one line naming
// the lost one, and the membership log and the metrics file record it. The next epoch then forms from the members alive and staying: it
// starts from the newest kept step whose every optimizer shard a member holds (its own or a
// copy: recovery/elastic_state.hpp's copy_holders) — after a failure the steps after that one
// are redone, never half-applied — and each new rank collects its state from the holders
// (recovery/elastic_state.hpp). A failure without a lost member (a model error, say) ends the
// job; so does any failure when the job is not elastic. After a loss only a strict majority of
// the last epoch's members not known to be dead goes on (cluster/certain_death.hpp says when a
// lost member counts as dead). A side without one waits (membership_setup::majority_wait): its
// lost members may come back (a stopped process that wakes, a partition that heals) and are
// counted again until an epoch forms without them; a side whose coordinator took over gives way
// to one earlier in the last epoch's order that it can reach.
//
// In an elastic job the state this actor forms epochs from is copied to every member's standby
// (actors/standby_actor.hpp) at each kept step and epoch formation. When the coordinator's
// process dies or hangs, the survivors elect the lowest live rank of the last epoch; its standby
// starts this actor from the copy (membership_setup::takeover), the survivors reconnect (a hello
// naming their member id), and the next epoch forms from the kept steps as after a worker loss.
#include "actors/coordination_replica.hpp"
#include "actors/coordinator_actor.hpp"
#include "membership/machine.hpp"

#include <accord/job.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

namespace accord {

using change_atom = caf::atom_constant<caf::atom("change")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using kept_atom = caf::atom_constant<caf::atom("kept")>;
using restored_atom = caf::atom_constant<caf::atom("restored")>;
using grace_atom = caf::atom_constant<caf::atom("grace")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using rendezvous_atom = caf::atom_constant<caf::atom("rendezvous")>;
using dropped_atom = caf::atom_constant<caf::atom("dropped")>;
using clock_atom = caf::atom_constant<caf::atom("clock")>;
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;
using silence_atom = caf::atom_constant<caf::atom("silence")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;
using alive_atom = caf::atom_constant<caf::atom("alive")>;
using replica_atom = caf::atom_constant<caf::atom("replica")>;
using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;
using dead_atom = caf::atom_constant<caf::atom("dead")>;
using majority_atom = caf::atom_constant<caf::atom("majority")>;
using yield_atom = caf::atom_constant<caf::atom("yield")>;

// How to interrupt the transport of a worker process's current epoch (its connection setup,
// then the transport itself). The agent does so when the epoch fails, wherever the process is
// blocked on it: connecting to a peer that died, the state transfer, a collective.
class epoch_link {
public:
  using interrupter = std::function<void(const std::string& why)>;
  void set(std::uint64_t epoch, interrupter interrupt);  // {} once the epoch is over
  void interrupt(std::uint64_t epoch, const std::string& why);
  void interrupt_current(const std::string& why);  // whichever epoch runs

private:
  std::mutex mutex_;
  std::uint64_t epoch_ = 0;
  interrupter interrupt_;
};

// What a worker process hears when its connection to the coordinator's process is gone (an
// elastic job's workers then elect a new coordinator; the cause follows after ": ").
inline constexpr const char* coordinator_lost = "the coordinator's process went away";

// An epoch's plan for a member: its part, and the epoch's coordinator (invalid when finished or
// rejoining elsewhere).
struct epoch_plan : epoch_assignment {
  coordinator_actor coordinator;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_hello& x) {
  return f(caf::meta::type_name("member_hello"), x.rank, x.world, x.fingerprint, x.host, x.job, x.control, x.rejoin,
           x.member, x.replica);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, epoch_request& x) {
  return f(caf::meta::type_name("epoch_request"), x.member, x.address, x.kept);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, epoch_plan& x) {
  return f(caf::meta::type_name("epoch_plan"), x.finished, x.epoch, x.rank, x.world, x.addresses, x.coordinator,
           x.start_steps, x.data_position, x.from_origin, x.source, x.end_steps, x.rejoin);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, restored_report& x) {
  return f(caf::meta::type_name("restored_report"), x.epoch, x.rank, x.parameter_hash, x.state_checksum);
}

// One per worker process, next to its main thread: it hears that a membership change waits for
// the end of an epoch, asks the membership actor to let the process leave when told to, and
// relays the main thread's requests to rank 0's process — so that when that process goes away,
// they are answered with an error instead of never.
using member_agent = caf::typed_actor<
    caf::reacts_to<change_atom, std::uint64_t>,
    caf::reacts_to<abort_atom, std::uint64_t, std::string>,  // that epoch failed
    caf::reacts_to<leave_atom>,  // polls the leave request
    caf::reacts_to<heartbeat_atom>,  // sends the next heartbeat
    caf::reacts_to<lost_atom, std::string>,  // a member was lost or left: the line to show here
    caf::reacts_to<dropped_atom, std::string>,  // rank 0 went on without this member: why
    caf::replies_to<replica_atom, coordination_replica>::with<bool>,  // for the process's standby; true once passed on
    // The coordinator's heartbeat: when it was sent, and the newest of this member's it heard
    // (heartbeat_time of each sender's clock; cluster/certain_death.hpp).
    caf::reacts_to<alive_atom, std::int64_t, std::int64_t>,
    caf::replies_to<hello_atom, member_hello>::with<std::uint64_t>,
    caf::replies_to<epoch_atom, epoch_request>::with<epoch_plan>,
    caf::replies_to<wait_atom, coordinator_actor>::with<bool>>;

using membership_actor = caf::typed_actor<
    // Admits a worker process (refused with an error naming why); replies its member id.
    caf::replies_to<hello_atom, member_hello, member_agent>::with<std::uint64_t>,
    // Replies once the member's next epoch has formed (or the job is over, or failed).
    caf::replies_to<epoch_atom, epoch_request>::with<epoch_plan>,
    caf::reacts_to<leave_atom, std::uint64_t>,
    caf::reacts_to<restored_atom, restored_report>,
    // From the epochs' coordinators: the workers kept the state after `steps`, restartable at
    // `data_position` (epoch, steps, data position).
    caf::reacts_to<kept_atom, std::uint64_t, std::uint64_t, std::uint64_t>,
    caf::reacts_to<grace_atom, std::uint64_t>,
    caf::reacts_to<rendezvous_atom>,  // checks on the starting ranks' hellos
    // A member's agent is alive (member id, when sent, the newest coordinator heartbeat it heard).
    caf::reacts_to<heartbeat_atom, std::uint64_t, std::int64_t, std::int64_t>,
    caf::reacts_to<dead_atom, std::uint64_t, bool>,  // whether a lost member's control port refused
    caf::reacts_to<majority_atom, std::uint64_t>,  // the wait for a majority after that epoch is over
    caf::reacts_to<yield_atom>,  // looks for a coordinator earlier in the last epoch's order
    // A lost member's standby answered: its control port, its newest epoch, whether it coordinates
    // ("": the round of questions is over).
    caf::reacts_to<yield_atom, std::string, std::uint64_t, bool>,
    caf::reacts_to<silence_atom>,  // checks the heartbeats
    caf::reacts_to<reconnect_atom>,  // after a takeover: the members that did not reconnect are lost
    // Why a member was dropped from the job (asked by one that lost its connection to rank 0
    // and reconnected); empty when it was not.
    caf::replies_to<dropped_atom, std::uint64_t>::with<std::string>,
    // Rank 0's wall clock (microseconds since the epoch): the other processes' traces line up on it.
    caf::replies_to<clock_atom>::with<std::int64_t>,
    // Replies once the job is over and every member still alive has been told so.
    caf::replies_to<wait_atom>::with<bool>,
    caf::reacts_to<leave_atom>>;  // a replayed coordinator loss: this process goes away now

// The rules the machine decides by (membership/machine.hpp's membership_rules), and the wiring.
struct membership_setup : membership_rules {
  // Set (Ctrl-C, an app's cancel) while the starting ranks say hello: the job fails within a
  // second, naming the missing ones, instead of waiting for them. May be null.
  const std::atomic<bool>* stop_requested = nullptr;
  pipeline pipe = pipeline::synchronous;
  // Spawns the epoch's coordinator, which fills `result` and reports kept steps to `on_kept`.
  std::function<coordinator_actor(const epoch_spec&, std::shared_ptr<job_result> result,
                                  std::function<void(std::uint64_t steps, std::uint64_t data_position)> on_kept)>
      spawn_coordinator;
  std::function<void(const std::string&)> on_event;  // one line per membership event
  std::function<void(const membership_record&)> on_record;  // every event, for the membership log
  // When the job stops, the events (JSON lines) that no later epoch's coordinator will write to the
  // metrics file: the losses and the wait for a majority that ended it. May be empty.
  std::function<void(const std::vector<std::string>&)> on_unwritten_events;
  // Called once the job is over, before any member hears it: the master port stops taking
  // connections, so a member that starts the next job on it waits for that job's rank 0.
  std::function<void()> on_finished;
  std::shared_ptr<job_result> result;  // the whole job's, merged over epochs
  // Asks the standby listening at HOST:PORT (a lost member's) for the newest epoch it holds and
  // whether its process hosts a coordinator; nullopt when it does not answer. May block for a few
  // seconds (called off the actor's thread). A waiting side stops when a lost member holds a later
  // epoch, and gives way to a coordinator earlier in the last epoch's order. Empty: asks nobody.
  std::function<std::optional<std::pair<std::uint64_t, bool>>(const std::string& control)> ask_standby;
};

membership_actor spawn_membership_actor(caf::actor_system& system, membership_setup setup);

// The agent of a worker process: raises `change_epoch` to the epoch a change was announced to,
// interrupts `link` when its epoch fails, and once admitted, sends `membership` a heartbeat every
// 100 ms, polls `leave_requested` (may be null) and asks `membership` to let it leave. The lines
// naming lost members go to `on_event` (may be empty). In an elastic job it hands the
// coordinator's replicas to `standby`, judges the coordinator's heartbeats with `detector` (when
// set) and, when the coordinator is lost, names it in a line and interrupts the running epoch.
struct member_agent_setup {
  std::shared_ptr<std::atomic<std::uint64_t>> change_epoch;
  std::shared_ptr<epoch_link> link;
  const std::atomic<bool>* leave_requested = nullptr;
  membership_actor membership;
  std::function<void(const std::string&)> on_event;
  caf::actor standby;  // the process's standby_actor (elastic jobs), else invalid
  std::optional<heartbeat_detector_settings> detector;
  // Set (Ctrl-C, an app's cancel) before the first epoch plan came: the agent stops waiting for
  // it, and the plan request fails saying so. May be null (rank 0: its membership actor ends the
  // rendezvous for everyone).
  const std::atomic<bool>* stop_requested = nullptr;
};
member_agent spawn_member_agent(caf::actor_system& system, member_agent_setup setup);

void add_membership_message_types(caf::actor_system_config& config);

}  // namespace accord
