#include "actors/update_rule.hpp"

#include "actors/trace.hpp"

#include "optim/lion.hpp"

#include <algorithm>
#include <bit>
#include <optional>
#include <vector>

namespace accord {
namespace {

class sharded_optimizer_rule final : public update_rule {
public:
  sharded_optimizer_rule(const optimizer_config& config, std::span<const float> initial, int world,
                         int rank, round_precision precision, const rule_state* resume)
      : precision_(precision), own_(shard_of(initial.size(), world, rank)),
        master_(initial.begin() + own_.begin, initial.begin() + own_.end),
        optimizer_(make_optimizer(config, own_.size())) {
    if (!resume) return;
    optimizer_state state = optimizer_->state();
    if (!resume->present || resume->momentum || resume->slots != state.slots || resume->begin != own_.begin ||
        resume->values.size() != state.values.size())
      throw std::invalid_argument("restored optimizer state does not fit rank " + std::to_string(rank) + "'s shard (" +
                                  std::to_string(resume->slots) + " slots from " + std::to_string(resume->begin) +
                                  ", " + config.kind + " needs " + std::to_string(state.slots) + " from " +
                                  std::to_string(own_.begin) + ")");
    state.step = resume->optimizer_step;
    state.values = resume->values;
    optimizer_->restore(std::move(state));
  }

  void apply(transport& link, std::span<float> buffer, const round_totals&,
             const round_totals& global, float learning_rate, std::uint64_t,
             bool estimate, std::span<const float> current) override {
    const wire_precision wire = precision_.of(estimate);
    {
      const trace_span phase("reduce-scatter");
      link.reduce_scatter(buffer, wire);
    }
    std::optional<trace_span> optimizer_phase(std::in_place, "optimizer step");
    std::span<float> slice = buffer.subspan(own_.begin, own_.size());
    const float scale = global.micro_batches > 0 ? static_cast<float>(1.0 / global.micro_batches) : 0.f;
    double square_sum = 0;
    for (float& g : slice) {
      g *= scale;  // mean over every micro-batch of every worker
      square_sum += static_cast<double>(g) * g;
    }
    observed_.gradient_square_sum = square_sum;  // the shards' sums add up to the squared norm
    if (estimate) {
      // θ̃ comes from the committed master weights and state, which stay as they were.
      const optimizer_state committed = optimizer_->state();
      scratch_.assign(master_.begin(), master_.end());
      optimizer_->step(scratch_, slice, learning_rate);
      std::copy(scratch_.begin(), scratch_.end(), slice.begin());
      optimizer_->restore(committed);
    } else {
      optimizer_->step(master_, slice, learning_rate);
      std::copy(master_.begin(), master_.end(), slice.begin());
    }
    optimizer_phase.reset();
    const trace_span phase("all-gather");
    if (estimate)
      link.all_gather_delta(buffer, current, wire);  // int8 and sign: θ̃ - θ_t travels
    else
      link.all_gather(buffer, wire);
  }

  std::size_t state_bytes() const override {
    return (master_.size() + optimizer_->state().values.size()) * sizeof(float);
  }

  rule_state snapshot() const override {
    const optimizer_state& state = optimizer_->state();
    rule_state snapshot{true, false, state.step, static_cast<std::uint32_t>(state.slots), own_.begin, state.values, {}};
    if (precision_.real != wire_precision::fp32) snapshot.master = master_;
    return snapshot;
  }

private:
  round_precision precision_;
  shard own_;
  std::vector<float> master_;   // fp32 master weights of the own shard
  std::vector<float> scratch_;  // estimate rounds step a copy of master_
  std::unique_ptr<optimizer> optimizer_;
};

class sign_vote_rule final : public update_rule {
public:
  sign_vote_rule(bool average, const optimizer_config& lion, std::span<const float> initial,
                 const rule_state* resume)
      : average_(average), config_(lion), parameters_(initial.begin(), initial.end()),
        momentum_(initial.size(), 0.f), signs_(packed_words(initial.size())),
        voted_(packed_words(initial.size())) {
    if (average_) plus_votes_.resize(initial.size());
    if (resume && resume->present) {
      if (!resume->momentum || resume->values.size() != momentum_.size())
        throw std::invalid_argument("restored state is not a Lion momentum of " + std::to_string(momentum_.size()) +
                                    " values");
      momentum_ = resume->values;
    }
  }

  void apply(transport& link, std::span<float> buffer, const round_totals& local,
             const round_totals&, float learning_rate, std::uint64_t step,
             bool estimate, std::span<const float>) override {
    // The vote is over each worker's own Lion direction from its own mean gradient.
    const float scale = local.micro_batches > 0 ? static_cast<float>(1.0 / local.micro_batches) : 0.f;
    double square_sum = 0;
    for (float& g : buffer) {
      g *= scale;
      square_sum += static_cast<double>(g) * g;
    }
    // No worker sees the summed gradient: the workers' shares add up to their mean squared norm.
    observed_.gradient_square_sum = square_sum / link.size();
    std::span<float> momentum = momentum_;
    if (estimate) {
      scratch_momentum_.assign(momentum_.begin(), momentum_.end());
      momentum = scratch_momentum_;
    }
    lion_local_direction(buffer, momentum, config_.beta1, config_.beta2, signs_, step);

    std::span<float> target = parameters_;
    if (estimate) {
      std::copy(parameters_.begin(), parameters_.end(), buffer.begin());
      target = buffer;
    }
    const trace_span phase("vote");
    if (!average_) {
      link.sign_majority(signs_, buffer.size(), step, voted_);
      apply_sign_update(target, voted_, learning_rate, config_.weight_decay);
      observed_.vote_agreement = majority_agreement(buffer.size());
    } else {
      link.sign_counts(signs_, buffer.size(), plus_votes_);
      apply_sign_update(target, plus_votes_, link.size(), learning_rate, config_.weight_decay);
      observed_.vote_agreement = average_agreement(link.size());
    }
    if (!estimate) std::copy(parameters_.begin(), parameters_.end(), buffer.begin());
  }

  std::size_t state_bytes() const override {
    return (parameters_.size() + momentum_.size()) * sizeof(float);
  }

  rule_state snapshot() const override { return {true, true, 0, 1, 0, momentum_, {}}; }

private:
  // Fraction of the own signs equal to the majority's (packed words, padding bits excluded).
  double majority_agreement(std::size_t count) const {
    std::size_t agreeing = 0;
    for (std::size_t w = 0; w < signs_.size(); ++w) {
      std::uint64_t same = ~(signs_[w] ^ voted_[w]);
      if (const std::size_t valid = count - w * 64; valid < 64) same &= (std::uint64_t{1} << valid) - 1;
      agreeing += static_cast<std::size_t>(std::popcount(same));
    }
    return count ? static_cast<double>(agreeing) / static_cast<double>(count) : 1.0;
  }
  // Fraction of the own signs on the side most voters took (a tie takes neither).
  double average_agreement(int voters) const {
    std::size_t agreeing = 0;
    for (std::size_t i = 0; i < plus_votes_.size(); ++i) {
      const bool plus = (signs_[i / 64] >> (i % 64)) & 1;
      const int margin = 2 * plus_votes_[i] - voters;
      agreeing += plus ? margin > 0 : margin < 0;
    }
    return plus_votes_.empty() ? 1.0 : static_cast<double>(agreeing) / static_cast<double>(plus_votes_.size());
  }

  bool average_;  // else the majority
  optimizer_config config_;
  std::vector<float> parameters_;  // committed replica θ (identical on every worker)
  std::vector<float> momentum_;    // this worker's own Lion momentum, never communicated
  std::vector<float> scratch_momentum_;
  std::vector<std::uint64_t> signs_;
  std::vector<std::uint64_t> voted_;
  std::vector<std::uint16_t> plus_votes_;
};

}  // namespace

std::unique_ptr<update_rule> make_sharded_optimizer_rule(const optimizer_config& config,
                                                         std::span<const float> initial,
                                                         int world, int rank, round_precision precision,
                                                         const rule_state* resume) {
  return std::make_unique<sharded_optimizer_rule>(config, initial, world, rank, precision, resume);
}

std::unique_ptr<update_rule> make_sign_vote_rule(bool average, const optimizer_config& lion,
                                                 std::span<const float> initial,
                                                 const rule_state* resume) {
  return std::make_unique<sign_vote_rule>(average, lion, initial, resume);
}

}  // namespace accord
