#pragma once
// Public embedder API: one round as a worker's own code sees it — an aggregation rule
// (<accord/update_rule.hpp>) or a topology's worker (<accord/topology.hpp>), which get the same
// view of the round and the same peers. No CAF.
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

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

// A collective started by round_peers::start_all_reduce: it completes while the worker goes on.
class collective_in_flight {
public:
  virtual ~collective_in_flight() = default;
  // Whether it has completed (wait() would return at once), without waiting.
  virtual bool done() const = 0;
  // Blocks until it has completed; throws what the collective threw (a peer lost, an interrupt).
  virtual void wait() = 0;
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
  // Starts all_reduce(values) and returns at once: the sums arrive while the worker computes, on a
  // channel of their own that progresses without the worker calling in (a thread per worker
  // over the same links; the round's own collectives meanwhile travel beside them). Until it
  // has completed, `values` must not be touched. Every worker starts the same collectives in the
  // same order; the results are the bits all_reduce gives. A handle that goes first waits for its
  // collective (which ends at once when the job is torn down). Where the transport has no such
  // channel (NCCL, hierarchical groups) the default runs all_reduce at once.
  virtual std::unique_ptr<collective_in_flight> start_all_reduce(std::span<float> values);
  virtual std::unique_ptr<collective_in_flight> start_all_reduce(std::span<double> values);
  // start_all_reduce(values) travelling in `precision`, a --wire-precision name (fp32, bf16,
  // fp16, or a block code: int8, fp8, fp4, sign, sign2, sign3), with error feedback: `residual`,
  // as long as `values` and this worker's own (zeros at first, kept from call to call), is sent
  // with the values and keeps what the wire missed, which a later call sends again. Every worker
  // gets the same bits: the sum of values + residual less what the residuals keep afterwards.
  // Neither span may be touched until it has completed; an unknown precision throws
  // std::invalid_argument naming it. The default sends fp32 and misses nothing (the residual is
  // sent and left at zero).
  virtual std::unique_ptr<collective_in_flight> start_all_reduce(std::span<float> values, std::span<float> residual,
                                                                 std::string_view precision);
  // Swaps `mine` for `peer`'s (which calls exchange with this rank at the same point).
  virtual void exchange(int peer, std::span<const float> mine, std::span<float> theirs) = 0;
  // The peers among ranks `members` alone (ascending, this worker's rank among them) as a round
  // of their own: rank() and size() count within them, and their collectives (started ones too,
  // on this worker's channel in the order started with the others) travel only between those
  // ranks' links: a group of fast-linked workers, or one worker per group. Every member takes the
  // same subgroup at the same point. Members that are not ascending ranks holding this one throw
  // std::invalid_argument; the default throws std::logic_error (peers without subgroups).
  virtual std::unique_ptr<round_peers> among(std::vector<int> members);
};

namespace detail {
// What the default start_all_reduce returns: a collective that completed when it started.
class completed_collective final : public collective_in_flight {
public:
  bool done() const override { return true; }
  void wait() override {}
};

// The default start_all_reduce of either element type: all_reduce at once.
template <class Value>
std::unique_ptr<collective_in_flight> all_reduce_at_once(round_peers& peers, std::span<Value> values) {
  peers.all_reduce(values);
  return std::make_unique<completed_collective>();
}
}  // namespace detail

inline std::unique_ptr<round_peers> round_peers::among(std::vector<int>) {
  throw std::logic_error("round_peers::among: these peers have no subgroups");
}
inline std::unique_ptr<collective_in_flight> round_peers::start_all_reduce(std::span<float> values) {
  return detail::all_reduce_at_once(*this, values);
}
inline std::unique_ptr<collective_in_flight> round_peers::start_all_reduce(std::span<double> values) {
  return detail::all_reduce_at_once(*this, values);
}
inline std::unique_ptr<collective_in_flight> round_peers::start_all_reduce(std::span<float> values,
                                                                           std::span<float> residual,
                                                                           std::string_view) {
  if (residual.size() != values.size())
    throw std::invalid_argument("round_peers::start_all_reduce: the residual is not as long as the values");
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] += residual[i];
    residual[i] = 0;
  }
  return start_all_reduce(values);
}

}  // namespace accord
