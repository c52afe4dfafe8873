#pragma once
// An algorithm is a pipeline (when rounds start and what compute does meanwhile) combined with
// an aggregation (what a round does to the gradients). The built-in ones are the table in
// algorithm.cpp; apps add theirs through register_algorithm (include/accord/update_rule.hpp),
// into the same registry.
#include <accord/update_rule.hpp>

#include "algorithms/update_rule.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

enum class aggregation {
  sharded_optimizer,  // reduce-scatter, ZeRO-1 optimizer step on the own shard, all-gather
  sign_majority,      // Distributed Lion: local Lion direction, 1-bit majority vote
  sign_average,       // Distributed Lion: local Lion direction, average of the votes
  registered,         // an app's rule (register_algorithm): no checkpointable state
};

// What a worker's update rule is made from.
struct rule_inputs {
  const optimizer_config& optimizer;
  std::span<const float> initial;
  int world = 1;
  int rank = 0;
  round_precision precision;
  const rule_state* resume = nullptr;  // restored optimizer shard or momentum
};

struct algorithm {
  std::string name;
  pipeline pipe;
  aggregation aggregate;
  std::string default_optimizer;  // for sharded_optimizer; sign votes always use Lion
  std::string summary;
  std::function<std::unique_ptr<update_rule>(const rule_inputs&)> make_rule;
};

// A copy of the registry (built-in algorithms first, then registered ones in order).
std::vector<algorithm> algorithms();
// Adds to the registry (register_algorithm's checks: a free, non-empty name, a rule factory).
void add_algorithm(algorithm a);
// Throws std::invalid_argument naming the bad name and listing the valid ones.
const algorithm& find_algorithm(std::string_view name);

// Refuses, with one line naming the flag, a wire precision the algorithm or topology cannot use:
// int8, fp8 and sign real rounds need the sharded optimizer's error feedback (ddp, dpu, acco, lion)
// on the ring topology (other topologies move fp32, or replicas differ, or, hierarchical,
// their collectives take fp32|bf16|fp16); Distributed Lion's votes are 1 bit whatever the wire;
// block-quantized estimates are refused by the hierarchical topology.
void require_wire_precision(const algorithm& algo, const round_precision& precision, const std::string& topology);
// job_config::wire_precision and estimate_precision as the rounds' precisions: "auto" is the
// measured best for the algorithm and topology (recommended_wires), an empty estimate precision
// the real one. Throws std::invalid_argument naming the setting for a bad name.
round_precision resolve_wire_precision(const algorithm& algo, const std::string& topology, std::string_view wire,
                                       std::string_view estimate, bool app_kept_values);
// What "auto" means: fp8 on both of ACCO's rounds on the ring (within 0.4% of DDP fp32's final
// loss over 10 seeds at a third of fp32's bytes: docs/results/2026-12-06-compressed-rounds.md),
// fp32 everywhere else (DDP as torch DDP: exact unless asked) and where parameter groups hold
// values the app keeps (BatchNorm's statistics, averaged or broadcast), which block codes cannot carry.
round_wires recommended_wires(const algorithm& algo, const std::string& topology, bool app_kept_values);
// The precision whose error-feedback residuals a sharded rule keeps: the real one's name when it
// is block-quantized, else "".
std::string feedback_precision(const round_precision& precision);

// Rounds needed for `steps` optimizer steps: ACCO runs an estimate and a real round per step.
std::uint64_t rounds_for_steps(pipeline pipe, std::uint64_t steps);
// The optimizer step a round belongs to (the learning rate it uses).
std::uint64_t step_of_round(pipeline pipe, std::uint64_t round);
// ACCO's even rounds compute θ̃ from the first half of the step's gradients and commit nothing.
bool is_estimate_round(pipeline pipe, std::uint64_t round);
// Whether compute keeps accumulating while round `round` is in flight.
bool overlaps_round(pipeline pipe, std::uint64_t round, std::uint64_t dpu_warmup);
// ACCO keeps the accumulation handed to an estimate round: the real round of the same step
// needs g̃ + g. Every other round takes the accumulation and leaves an empty buffer.
bool keeps_accumulation(pipeline pipe, std::uint64_t round);

}  // namespace accord
