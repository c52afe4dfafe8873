#pragma once
// An algorithm is a pipeline (when rounds start and what compute does meanwhile) combined with
// an aggregation (what a round does to the gradients). Adding an algorithm is adding a row to
// the table in algorithm.cpp, or a new pipeline or update rule.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

enum class pipeline {
  synchronous,  // accumulate, communicate, wait, apply (DDP)
  delayed,      // communicate round k while computing round k+1; apply one round late (DPU)
  acco,         // overlapped, with ACCO's estimate round correcting the one-step delay
};

enum class aggregation {
  sharded_optimizer,  // reduce-scatter, ZeRO-1 optimizer step on the own shard, all-gather
  sign_majority,      // Distributed Lion: local Lion direction, 1-bit majority vote
  sign_average,       // Distributed Lion: local Lion direction, average of the votes
};

struct algorithm {
  std::string name;
  pipeline pipe;
  aggregation aggregate;
  std::string default_optimizer;  // for sharded_optimizer; sign votes always use Lion
  std::string summary;
};

const std::vector<algorithm>& algorithms();
// Throws std::invalid_argument naming the bad name and listing the valid ones.
const algorithm& find_algorithm(std::string_view name);

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
