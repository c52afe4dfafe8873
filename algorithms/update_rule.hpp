#pragma once
// What one round does to a worker's communication buffer: gradient sum in, new parameters out.
// Runs on the communicator's thread and owns the state this worker keeps across rounds (its
// optimizer shard and master weights, or its Lion momentum). Plain C++, no actors: the
// algorithms are testable on their own.
#include "algorithms/round_state.hpp"
#include "gpu/device_collectives.hpp"
#include "optim/optimizer.hpp"
#include "transport/shard.hpp"
#include "transport/transport.hpp"

#include <memory>
#include <span>

namespace accord {

// What a round's gradients and parameters travel as (transport/wire_precision.hpp). ACCO's
// estimate rounds commit nothing and may travel with fewer bits than the real ones.
struct round_precision {
  round_wires real;
  round_wires estimate;
  const round_wires& of(bool estimate_round) const { return estimate_round ? estimate : real; }
};

class update_rule {
public:
  virtual ~update_rule() = default;
  // `buffer`: this worker's gradient sum over local.micro_batches micro-batches on entry, the new
  // parameters on exit (identical on every worker). `global` is summed over all workers.
  // An estimate computes parameters from the committed state without changing that state.
  // `step` is the optimizer step the round belongs to (ACCO: both of its rounds); sign votes
  // break ties by its parity, so that ties alternate between committed steps and an estimate
  // breaks them as the real round of its step will. `current`: in an estimate round, the
  // parameters θ_t the compute stage holds (identical on every worker, only read meanwhile), from
  // which block-quantized estimates travel as a difference; in a real round the parameters the
  // compute stage holds meanwhile (θ̃ in ACCO's), from which block-quantized real rounds' changes
  // travel. May be empty where neither happens.
  virtual void apply(transport& link, std::span<float> buffer, const round_totals& local,
                     const round_totals& global, float learning_rate, std::uint64_t step,
                     bool estimate, std::span<const float> current) = 0;
  // The device form: the same round with `buffer` in collectives.memory() (a resident GPU
  // worker over --transport nccl), its state kept there too (uploaded at the first call), and
  // every step a kernel on the collectives' stream; returns once the round has run
  // (collectives.finish()). Results equal apply's up to the collectives' summation order.
  // Only rules whose has_device_form() is true have one (the others throw std::logic_error);
  // their rounds run on the host.
  virtual bool has_device_form() const { return false; }
  virtual void apply_on_device(device_collectives& collectives, std::span<float> buffer, const round_totals& local,
                               const round_totals& global, float learning_rate, std::uint64_t step,
                               bool estimate);
  // DDP's gradient buckets (job_config::bucket_cap_mb): a rule that takes them starts reducing a
  // range of the next real round's buffer as soon as backward has finished it, before apply
  // (reduce_bucket, which may return while the bucket travels); finish_buckets, called first in
  // the round, completes them, and apply then reduces only what no bucket covered. Every worker
  // hands the same ranges in the same order. The buckets cover [0, bucket_prefix()) only (0: the
  // rule takes none): the rest waits for the round, whose totals weigh it (the app's kept
  // values, a module's buffers, lie at the end).
  virtual std::size_t bucket_prefix() const { return 0; }
  virtual void reduce_bucket(transport& link, std::span<float> buffer, shard range);
  virtual void finish_buckets() {}
  // Before a snapshot (a checkpoint or an elastic kept step: every worker calls it after the
  // same real round) brings state spread over workers into the shape snapshot() takes; a
  // collective. The sharded rule folds its error-feedback residuals into their ranges' owners.
  virtual void settle(transport&) {}
  // This worker's error-feedback residuals over the whole buffer (empty without them): what its
  // compressed gradients have not delivered yet. For tests and the metrics.
  virtual std::span<const float> residuals() const { return {}; }
  // Bytes of state this worker keeps (master weights, optimizer state), for the memory report.
  virtual std::size_t state_bytes() const = 0;
  // This worker's share of the committed state, for a checkpoint.
  virtual rule_state snapshot() const = 0;
  // What the last apply saw (gradient norm, vote agreement), for the metrics.
  const round_observations& observations() const { return observed_; }

protected:
  round_observations observed_;
};

// ZeRO-1: reduce-scatter the gradient sums, divide by the global micro-batch count, step the
// own shard's fp32 master weights with the optimizer, all-gather the parameters, both
// collectives in `precision` (the compute copy everyone gets, the owner's too, is the rounded
// one; master weights and optimizer state stay fp32).
// A block-quantized real precision (int8, fp8, sign) runs both collectives with error feedback: each
// worker sends its mean gradient plus its residual and keeps what the records missed; the owner
// sends master − the parameters every worker holds (apply's `current`, then needed in every
// round), which every worker adds to them, so replicas stay bit-identical and master − replica
// is the gather side's residual. See docs/algorithms.md "Compressed real rounds".
// With `resume`, the shard's optimizer state is restored from it (a slice of a checkpoint or a
// shard transferred to this rank); it must cover exactly this rank's shard.
std::unique_ptr<update_rule> make_sharded_optimizer_rule(const optimizer_config& config,
                                                         std::span<const float> initial,
                                                         int world, int rank, round_precision precision = {},
                                                         const rule_state* resume = nullptr);

// Both built-in rules have a device form, the sharded one for AdamW and Lion (not SGD).
// Distributed Lion: local mean gradient → local Lion direction with this worker's own momentum
// → packed sign vote (majority, or average when `average`) → the same update x -= lr (Δ + wd x)
// everywhere. Votes are 1 bit up whatever the wire precision, and parameters never travel.
// With a present `resume`, the worker continues with that momentum; else it starts from zero.
std::unique_ptr<update_rule> make_sign_vote_rule(bool average, const optimizer_config& lion,
                                                 std::span<const float> initial,
                                                 const rule_state* resume = nullptr);

}  // namespace accord
