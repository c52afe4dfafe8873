#pragma once
// Lion's per-element pieces and the two halves Distributed Lion splits it into (lion-notes.md):
// every worker runs lion_local_direction on its own gradient and momentum, the transport votes
// on the packed signs, and every replica runs apply_sign_update with the identical vote.
// The Lion optimizer (optimizer.cpp) is built from the same inline pieces, so a single worker's
// D-Lion step equals a Lion step bit for bit whenever no c is exactly 0.
//
// Packed layout (transport/transport.hpp): element i lives in word i/64, bit i%64,
// least significant bit first; a set bit means +1; bits past the last element are zero.
// A direction of exactly 0 packs as tie_vote(i, round), the same rule that breaks tied votes:
// the choice depends only on (i, round), so replicas agree, and alternates between rounds.
#include <cstddef>
#include <cstdint>
#include <span>

#include "optim/optimizer.hpp"  // scaled_run
#include "transport/sign_vote.hpp"  // tie_vote: the one tie rule, shared with the vote

namespace accord {

// The sign bit of `value` at element `index`: + is set, - is clear, 0 follows tie_vote.
// NaN packs as -1 (clear).
inline bool sign_bit(float value, std::size_t index, std::uint64_t round) {
  return value > 0.0f || (value == 0.0f && tie_vote(index, round));
}

// Lion's update direction c = beta1*m + (1-beta1)*g, taken before the momentum moves.
inline float lion_direction(float momentum, float gradient, float beta1) {
  return beta1 * momentum + (1.0f - beta1) * gradient;
}

// Lion's momentum update m = beta2*m + (1-beta2)*g, applied after the direction is used.
inline float lion_momentum(float momentum, float gradient, float beta2) {
  return beta2 * momentum + (1.0f - beta2) * gradient;
}

// x <- x*(1 - lr*wd) - lr*delta: decoupled weight decay on the old x, then the sign step.
// `decay` is 1 - lr*wd, computed once per step by sign_step_decay.
inline float sign_step_decay(float lr, float weight_decay) { return 1.0f - lr * weight_decay; }
inline float sign_step(float parameter, float delta, float decay, float lr) {
  return parameter * decay - lr * delta;
}

// c = beta1*m + (1-beta1)*g packed into sign bits (element i of the span is bit i, ties by
// tie_vote(i, round)), then m = beta2*m + (1-beta2)*g. `packed_signs` holds packed_words(n) words.
void lion_local_direction(std::span<const float> gradients, std::span<float> momentum,
                          float beta1, float beta2, std::span<std::uint64_t> packed_signs,
                          std::uint64_t round);

// Majority vote: delta_i = +1 where bit i is set, -1 where clear. `runs`, when not empty, cover
// the parameters and scale the learning rate and weight decay run by run (parameter groups).
void apply_sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority,
                       float lr, float weight_decay, std::span<const scaled_run> runs = {});

// Averaging: delta_i = (2*plus_votes_i - voters) / voters, in [-1, 1]; `runs` as above.
void apply_sign_update(std::span<float> parameters, std::span<const std::uint16_t> plus_votes,
                       int voters, float lr, float weight_decay, std::span<const scaled_run> runs = {});

// Packs the signs of `values` (ties by tie_vote(i, round)); `packed` holds packed_words(n) words.
void pack_signs(std::span<const float> values, std::uint64_t round,
                std::span<std::uint64_t> packed);
// Writes +1.0f / -1.0f per bit into `values` (values.size() elements).
void unpack_signs(std::span<const std::uint64_t> packed, std::span<float> values);

}  // namespace accord
