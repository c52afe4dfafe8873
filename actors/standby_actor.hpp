#pragma once
// The standby of an elastic job's worker process: it holds the newest copy of the coordinator's
// state (actors/coordination_replica.hpp) and listens on the process's control port, so that
// when the coordinator's process dies or hangs the survivors can elect this process (the lowest
// live rank of the last epoch that answers) and reconnect to it: asked to take over, it starts a
// membership actor (and the coordinators under it) in its own process from the replica and
// replies with it. A joiner given this process's address asks it where the coordinator is.
#include "actors/coordination_replica.hpp"
#include "actors/membership_actor.hpp"

#include <functional>

namespace accord {

using where_atom = caf::atom_constant<caf::atom("where")>;
using elect_atom = caf::atom_constant<caf::atom("elect")>;
using membership_atom = caf::atom_constant<caf::atom("membership")>;

using standby_actor = caf::typed_actor<
    caf::reacts_to<replica_atom, coordination_replica>,  // the coordinator's newest state (kept if newer)
    caf::replies_to<replica_atom>::with<coordination_replica>,  // the newest held
    // HOST:PORT of the coordinator's standby as known here; empty when this process hosts it.
    caf::replies_to<where_atom>::with<std::string>,
    // The coordinator's membership actor when this process hosts it, else an error naming where it is.
    caf::replies_to<membership_atom>::with<membership_actor>,
    // The coordinator of `epoch` was lost (`cause`): this process takes over (once) and replies
    // with its membership actor.
    caf::replies_to<elect_atom, std::uint64_t, std::string>::with<membership_actor>>;

// Starts this process's coordination from `replica` after the coordinator was lost for `cause`.
using take_over_function = std::function<membership_actor(const coordination_replica& replica, const std::string& cause)>;

standby_actor spawn_standby_actor(caf::actor_system& system, take_over_function take_over);

}  // namespace accord
