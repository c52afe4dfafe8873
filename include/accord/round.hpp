#pragma once
// Public embedder API: one round as a worker's own code sees it — an aggregation rule
// (<accord/update_rule.hpp>) or a topology's worker (<accord/topology.hpp>), which get the same
// view of the round and the same peers. No CAF.
#include <cstdint>
#include <span>

namespace accord {

// What a round is.
struct round_view {
  std::uint64_t step = 0;           // the optimizer step it belongs to, 0-based (ACCO: both rounds of a step)
  float learning_rate = 0;          // of this step, the job's schedule applied
  double micro_batches = 0;         // in this worker's gradient sum
  double global_micro_batches = 0;  // summed over every worker (divide by it for the mean)
  // ACCO's estimate round: compute parameters from the committed state without changing it.
  bool estimate = false;
};

// This worker's peers in the round, over the job's transport (in-process, UCX or NCCL): every
// worker calls the same collectives in the same order.
class round_peers {
public:
  virtual ~round_peers() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;  // the workers of the round
  // Element-wise sums over every worker, in place and added in a fixed order: every worker gets
  // bit-identical values.
  virtual void all_reduce(std::span<float> values) = 0;
  virtual void all_reduce(std::span<double> values) = 0;
  // Swaps `mine` for `peer`'s (which calls exchange with this rank at the same point).
  virtual void exchange(int peer, std::span<const float> mine, std::span<float> theirs) = 0;
};

}  // namespace accord
