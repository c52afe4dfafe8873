#include "optim/lion.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord {
namespace {

void check_packed(const char* function, std::size_t count, std::size_t words) {
  if (words != packed_words(count))
    throw std::invalid_argument(std::string(function) + ": " + std::to_string(count) +
                                " elements need " + std::to_string(packed_words(count)) +
                                " packed words, got " + std::to_string(words));
}

// Calls step(begin, end, lr, weight_decay) for each run of `count` elements (one run of the
// job's settings when `runs` is empty).
template <class Step>
void for_each_run(std::size_t count, float lr, float weight_decay, std::span<const scaled_run> runs, Step step) {
  if (runs.empty()) return step(std::size_t{0}, count, lr, weight_decay);
  for (const scaled_run& run : runs)
    step(run.offset, run.offset + run.count, lr * run.learning_rate_scale, weight_decay * run.weight_decay_scale);
}

}  // namespace

void lion_local_direction(std::span<const float> gradients, std::span<float> momentum,
                          float beta1, float beta2, std::span<std::uint64_t> packed_signs,
                          std::uint64_t round) {
  const std::size_t count = gradients.size();
  if (momentum.size() != count)
    throw std::invalid_argument("lion_local_direction: " + std::to_string(count) +
                                " gradients but " + std::to_string(momentum.size()) +
                                " momentum values");
  check_packed("lion_local_direction", count, packed_signs.size());
  // Word by word: directions and momenta in one vectorisable pass, then their 64 sign bits.
  float direction[64];
  for (std::size_t w = 0; w < packed_signs.size(); ++w) {
    const std::size_t begin = w * 64;
    const std::size_t bits = std::min<std::size_t>(64, count - begin);
    const float* g = gradients.data() + begin;
    float* m = momentum.data() + begin;
    for (std::size_t b = 0; b < bits; ++b) {
      direction[b] = lion_direction(m[b], g[b], beta1);
      m[b] = lion_momentum(m[b], g[b], beta2);
    }
    pack_signs(bits, [&](std::size_t b) { return sign_bit(direction[b], begin + b, round); },
               packed_signs.subspan(w, 1));
  }
}

void apply_sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority,
                       float lr, float weight_decay, std::span<const scaled_run> runs) {
  check_packed("apply_sign_update", parameters.size(), majority.size());
  for_each_run(parameters.size(), lr, weight_decay, runs, [&](std::size_t begin, std::size_t end, float run_lr,
                                                              float run_weight_decay) {
    const float decay = sign_step_decay(run_lr, run_weight_decay);
    for (std::size_t i = begin; i < end; ++i)
      parameters[i] = sign_step(parameters[i], packed_bit(majority, i) ? 1.0f : -1.0f, decay, run_lr);
  });
}

void apply_sign_update(std::span<float> parameters, std::span<const std::uint16_t> plus_votes,
                       int voters, float lr, float weight_decay, std::span<const scaled_run> runs) {
  if (voters < 1)
    throw std::invalid_argument("apply_sign_update: " + std::to_string(voters) + " voters");
  if (plus_votes.size() != parameters.size())
    throw std::invalid_argument("apply_sign_update: " + std::to_string(parameters.size()) +
                                " parameters but " + std::to_string(plus_votes.size()) +
                                " vote counts");
  // delta for each possible count, so every replica rounds (2c - N) / N the same way.
  std::vector<float> delta(static_cast<std::size_t>(voters) + 1);
  for (int c = 0; c <= voters; ++c)
    delta[static_cast<std::size_t>(c)] =
        static_cast<float>(2 * c - voters) / static_cast<float>(voters);
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (plus_votes[i] > voters)
      throw std::invalid_argument("apply_sign_update: element " + std::to_string(i) + " has " +
                                  std::to_string(plus_votes[i]) + " plus votes of " +
                                  std::to_string(voters) + " voters");
  for_each_run(parameters.size(), lr, weight_decay, runs, [&](std::size_t begin, std::size_t end, float run_lr,
                                                              float run_weight_decay) {
    const float decay = sign_step_decay(run_lr, run_weight_decay);
    for (std::size_t i = begin; i < end; ++i) parameters[i] = sign_step(parameters[i], delta[plus_votes[i]], decay, run_lr);
  });
}

void pack_signs(std::span<const float> values, std::uint64_t round,
                std::span<std::uint64_t> packed) {
  pack_signs(values.size(), [&](std::size_t i) { return sign_bit(values[i], i, round); }, packed);
}

void unpack_signs(std::span<const std::uint64_t> packed, std::span<float> values) {
  check_packed("unpack_signs", values.size(), packed.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = packed_bit(packed, i) ? 1.0f : -1.0f;
}

}  // namespace accord
