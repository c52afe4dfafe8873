#pragma once
// The built-in topologies' factories, registered under their names by the registry
// (topologies/registry.cpp) as an embedding app registers its own.
#include <accord/topology.hpp>

namespace accord {

// ring: the algorithm's own round over every worker, every step (today's collectives).
topology_factory ring_topology();
// The ring's worker: the algorithm's own round over every worker (hierarchical reuses it).
std::unique_ptr<worker_topology> make_ring_worker();
// local-sgd: H inner steps per worker, then an outer Nesterov step on the averaged pseudo-gradient.
topology_factory local_sgd_topology();
std::vector<setting_declaration> local_sgd_settings();
// gossip: own copies averaged pairwise at a Poisson rate over a graph: asynchronous workers
// (topologies/asynchronous/workers.hpp), or lockstep rounds with one average at the end.
topology_factory gossip_topology();
std::vector<setting_declaration> gossip_settings();
// Refuses, as topology `name`, a job its workers' own copies cannot serve: an overlapped or
// sign-vote algorithm, checkpoints, membership changes.
void require_own_copies_fit(const topology_job& job, const std::string& name);
// hierarchical: the ring's rounds, each collective inside groups first, then across leaders.
topology_factory hierarchical_topology();
std::vector<setting_declaration> hierarchical_settings();

}  // namespace accord
