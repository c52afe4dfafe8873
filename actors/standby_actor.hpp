#pragma once
// The standby of an elastic job's worker process: it holds the newest copy of the coordinator's
// state (actors/coordination_replica.hpp) and listens on the process's control port, so that
// when the coordinator's process dies or hangs the survivors can elect this process (the lowest
// live rank of the last epoch that answers) and reconnect to it: asked to take over, it starts a
// membership actor (and the coordinators under it) in its own process from the replica and
// replies with it. A joiner given this process's address asks it where the coordinator is.
//
// It takes over only once its own process has judged the coordinator lost too: a member cut off
// from a live coordinator (a partition, a flapping link) must not start a second one in a healthy
// process, which would later hand the survivors a copy of the state that went stale while the
// real coordinator trained on. Asked before that, it waits for its own verdict up to
// `takeover_confirm_wait`, then refuses with `coordinator_still_heard`: the asker is the one cut off.
#include "actors/coordination_replica.hpp"
#include "actors/membership_actor.hpp"
#include "membership/election.hpp"

#include <chrono>
#include <functional>

namespace accord {

using where_atom = caf::atom_constant<caf::atom("where")>;
using elect_atom = caf::atom_constant<caf::atom("elect")>;
using membership_atom = caf::atom_constant<caf::atom("membership")>;
using unconfirmed_atom = caf::atom_constant<caf::atom("unconfirm")>;
using follow_atom = caf::atom_constant<caf::atom("follow")>;
using elected_atom = caf::atom_constant<caf::atom("elected")>;

using standby_actor = caf::typed_actor<
    caf::reacts_to<replica_atom, coordination_replica>,  // the coordinator's newest state (kept if newer)
    caf::replies_to<replica_atom>::with<coordination_replica>,  // the newest held
    // This process judged the coordinator of the newest replica lost (the cause): from the agent.
    caf::reacts_to<lost_atom, std::string>,
    // HOST:PORT of the coordinator's standby as known here; empty when this process hosts it.
    caf::replies_to<where_atom>::with<std::string>,
    // The coordinator's membership actor when this process hosts it, else an error naming where it is.
    caf::replies_to<membership_atom>::with<membership_actor>,
    // This process hosts that membership actor from the start (rank 0's): it is the coordinator here.
    caf::reacts_to<membership_atom, membership_actor>,
    // The coordinator of `epoch` was lost (`cause`, as the asker saw it): this process takes over
    // (once) and replies with its membership actor, when it judged that coordinator lost too.
    caf::replies_to<elect_atom, std::uint64_t, std::string>::with<membership_actor>,
    caf::reacts_to<unconfirmed_atom, std::uint64_t>,  // a deferred election's wait is over
    // This process said hello again to the coordinator reached through the standby at HOST:PORT
    // (its side had no majority, or the last coordinator is back): a coordination it hosted is
    // over, and its verdict on the last coordinator is spent (its member follows another one; a
    // takeover here would be a coordination without it, found by the membership simulation).
    caf::reacts_to<follow_atom, std::string>,
    // This process follows a member elected elsewhere after the coordinator's loss: its verdict on
    // that coordinator is spent, and a later asker must not make it take over from it too (a
    // coordination behind the epoch its successor forms).
    caf::reacts_to<elected_atom>>;

// Starts this process's coordination from `replica` after the coordinator was lost for `cause`.
using take_over_function = std::function<membership_actor(const coordination_replica& replica, const std::string& cause)>;

standby_actor spawn_standby_actor(caf::actor_system& system, take_over_function take_over,
                                  std::chrono::milliseconds confirm_wait = takeover_confirm_wait);

}  // namespace accord
