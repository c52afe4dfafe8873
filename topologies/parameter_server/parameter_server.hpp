#pragma once
// parameter-server: sharded server actors hold the parameters and the optimizer state; each
// worker pulls the parameters, computes a gradient and pushes it to every shard, with no global
// barrier (the worker loop of topologies/asynchronous/workers.hpp). With max_staleness S = 0 the
// servers apply one synchronous round of every worker's gradient per step (DDP's arithmetic:
// summed in rank order, divided by the round's micro-batch count, the optimizer on each shard);
// with S >= 1 each shard applies every push on arrival, and a worker may run at most S pushes
// ahead of the slowest (stale synchronous parallel), so fast workers are not held back by slow
// ones. Every applied gradient's staleness (updates applied to the shard between the worker's
// pull and the gradient's apply) is recorded per step. Asynchronous servers keep going when
// workers leave, join or die (job_config::membership). In one process, over the emulated link
// (each pull and push takes its wire time and latency); between processes, one worker and one
// shard per process (topologies/parameter_server/processes.hpp).
#include <accord/topology.hpp>

namespace accord {

// The parameter server's registry entry: refuses what it cannot run (overlapped or
// sign-vote algorithms, checkpoints, membership changes of synchronous servers).
topology_factory parameter_server_topology();
std::vector<setting_declaration> parameter_server_settings();

}  // namespace accord
