#pragma once
// Asynchronous gossip between processes: each process runs one worker with its own copy and
// optimizer state (the rules of topologies/gossip/rules.hpp), claiming the job's gradients one at a
// time from rank 0's process (so a fast worker computes more of them, as in one process). At a gradient's events the worker
// sends its copy to a neighbour, whose exchange thread (topologies/asynchronous/peer_exchange.hpp) replaces its
// copy by the mean and answers with the copy it had; the initiator then takes the mean too (the
// same bits) or, if an exchange another worker started changed its copy meanwhile, adds half the
// difference (the sum of the copies is kept, no update is lost). Only the initiator waits, and
// only for an answer that never waits: overlapping exchanges cannot deadlock. With A2CiD2 each
// process also keeps its θ̃ and mixes on the job's clock, gradient t at step t / N (fractional),
// the offer and the answer naming the time of the event (topologies/gossip/arithmetic.hpp's
// process_copy). Each applied gradient goes to rank 0's process, which reports the steps, and
// so does a 256-float sketch of the copy whenever it changes (a fixed random projection, the
// same on every process): every step's consensus distance is estimated from the latest
// sketches; at evaluations and the last step rank 0 collects every copy instead: the exact
// consensus distance and the evaluated model (their mean).
#include "topologies/asynchronous/workers.hpp"

#include <accord/topology.hpp>

#include <memory>
#include <string>

namespace accord {

// The settings gossip declares (gossip_settings in topologies/builtins.hpp), read once from the job's.
struct gossip_options {
  double gossip_rate = 1.0;
  std::string gossip_graph = "ring";
  bool gossip_lockstep = false;
  std::string gossip_momentum = "none";
};

std::unique_ptr<asynchronous_run> start_gossip_processes(caf::actor_system& system, asynchronous_setup setup,
                                                         const gossip_options& options, std::uint64_t seed);

}  // namespace accord
