#pragma once
// The parameter server between processes: each process runs one worker (its rank) and holds
// one server shard (shard_of(parameters, world, rank): its parameters and optimizer state,
// topologies/parameter_server/server_shard.hpp). A worker pulls every shard from its owner and pushes each owner its
// gradient's slice over the transport (topologies/asynchronous/peer_exchange.hpp), with no global barrier. S = 0:
// a pull for round k is answered once the shard applied round k - 1 (synchronous, DDP's
// arithmetic; worker r computes gradients r, r + N, ...). S >= 1: workers claim the job's
// gradients from rank 0's process (topologies/asynchronous/gradient_tickets.hpp: fast ones compute more), and a
// pull for a worker's k-th gradient is answered once every worker pushed k - S gradients to that
// shard or has no gradient left (stale synchronous parallel). Shard 0's process records every
// applied gradient and reports the steps (with the other workers' figures, carried on their
// pushes); evaluations and the final model are the shards' parameters.
#include "topologies/asynchronous/workers.hpp"

#include <memory>

namespace accord {

std::unique_ptr<asynchronous_run> start_parameter_server_processes(caf::actor_system& system,
                                                                   asynchronous_setup setup,
                                                                   std::uint64_t max_staleness);

}  // namespace accord
