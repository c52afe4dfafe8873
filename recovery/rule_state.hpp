#pragma once
// A worker's share of the optimizer state: what a checkpoint stores, a kept generation holds and
// a transfer moves. Plain data: the actors' wire format for it is in actors/messages.hpp.
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

// A topology's own state (include/accord/topology.hpp's topology_state: local-sgd's θ_global,
// outer momentum and residuals), and the optimizer that takes this worker's local steps on its
// own copy, as a checkpoint and a kept step hold them beside the algorithm's.
struct kept_topology {
  bool present = false;
  std::vector<float> parameters, shared, own;  // as topology_state's
  std::uint64_t local_step = 0;
  std::uint32_t local_slots = 0;               // 0: no local step taken yet
  std::vector<float> local_values;             // local_slots × the parameter count, slot after slot
};

// A worker's share of the optimizer state, as it goes into a checkpoint.
struct rule_state {
  bool present = false;
  bool momentum = false;           // values: this worker's Distributed Lion momentum
  std::uint64_t optimizer_step = 0;
  std::uint32_t slots = 0;
  std::uint64_t begin = 0;         // sharded: where the shard starts in the flat buffer
  std::vector<float> values;       // sharded: slots × shard size, slot after slot
  // Sharded with a 16-bit wire: the shard's fp32 master weights, which the parameters every
  // worker holds are only a rounded copy of (empty otherwise: the copy is exact).
  std::vector<float> master;
  // Sharded with a block-quantized wire (int8, fp8, sign: `feedback` names it): the error-feedback
  // residuals of the shard's range, summed over workers (update_rule::settle), and `master`
  // also when kept for an elastic job (the replica is not a function of the masters then).
  std::string feedback;
  std::vector<float> residual;
  kept_topology topology;  // beside the algorithm's state, where the job's topology keeps its own
};

}  // namespace accord
