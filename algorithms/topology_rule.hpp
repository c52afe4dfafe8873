#pragma once
// A worker's update rule under a topology (include/accord/topology.hpp): the communicator runs
// it as any update rule; it hands the round to the topology's worker, with the algorithm's own
// rule as `aggregate` and the algorithm's optimizer, on a full copy, as `local_step`.
#include <accord/topology.hpp>

#include "algorithms/update_rule.hpp"
#include "recovery/rule_state.hpp"

#include <memory>

namespace accord {

// Written by the topology's rule during a round, read by the communicator after it.
struct topology_status {
  bool replicas_agree = true;      // after this round: the replica check applies
  double consensus_distance = -1;  // measured in this round, else -1
};

// `status` (may be null) receives each round's report. A topology that keeps state of its own
// (worker_topology::kept_state) has it in the rule's snapshots (rule_state::topology), with the
// state of the optimizer of this worker's local steps; with a present `resume` the worker and
// that optimizer start from it (a worker without its own share, a joiner, from a fresh optimizer).
std::unique_ptr<update_rule> make_topology_rule(std::unique_ptr<worker_topology> worker,
                                                std::unique_ptr<update_rule> algorithm,
                                                const optimizer_config& optimizer,
                                                std::shared_ptr<topology_status> status,
                                                const kept_topology* resume = nullptr);

}  // namespace accord
