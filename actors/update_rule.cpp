#include "actors/update_rule.hpp"

#include "optim/lion.hpp"

#include <algorithm>
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
             bool estimate) override {
    const wire_precision wire = precision_.of(estimate);
    link.reduce_scatter(buffer, wire);
    std::span<float> slice = buffer.subspan(own_.begin, own_.size());
    const float scale = global.micro_batches > 0 ? static_cast<float>(1.0 / global.micro_batches) : 0.f;
    for (float& g : slice) g *= scale;  // mean over every micro-batch of every worker
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
  sign_vote_rule(aggregation vote, const optimizer_config& lion, std::span<const float> initial,
                 const rule_state* resume)
      : vote_(vote), config_(lion), parameters_(initial.begin(), initial.end()),
        momentum_(initial.size(), 0.f), signs_(packed_words(initial.size())),
        voted_(packed_words(initial.size())) {
    if (vote_ == aggregation::sign_average) plus_votes_.resize(initial.size());
    if (resume && resume->present) {
      if (!resume->momentum || resume->values.size() != momentum_.size())
        throw std::invalid_argument("restored state is not a Lion momentum of " + std::to_string(momentum_.size()) +
                                    " values");
      momentum_ = resume->values;
    }
  }

  void apply(transport& link, std::span<float> buffer, const round_totals& local,
             const round_totals&, float learning_rate, std::uint64_t step,
             bool estimate) override {
    // The vote is over each worker's own Lion direction from its own mean gradient.
    const float scale = local.micro_batches > 0 ? static_cast<float>(1.0 / local.micro_batches) : 0.f;
    for (float& g : buffer) g *= scale;
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
    if (vote_ == aggregation::sign_majority) {
      link.sign_majority(signs_, buffer.size(), step, voted_);
      apply_sign_update(target, voted_, learning_rate, config_.weight_decay);
    } else {
      link.sign_counts(signs_, buffer.size(), plus_votes_);
      apply_sign_update(target, plus_votes_, link.size(), learning_rate, config_.weight_decay);
    }
    if (!estimate) std::copy(parameters_.begin(), parameters_.end(), buffer.begin());
  }

  std::size_t state_bytes() const override {
    return (parameters_.size() + momentum_.size()) * sizeof(float);
  }

  rule_state snapshot() const override { return {true, true, 0, 1, 0, momentum_, {}}; }

private:
  aggregation vote_;
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

std::unique_ptr<update_rule> make_sign_vote_rule(aggregation vote, const optimizer_config& lion,
                                                 std::span<const float> initial,
                                                 const rule_state* resume) {
  return std::make_unique<sign_vote_rule>(vote, lion, initial, resume);
}

std::unique_ptr<update_rule> make_update_rule(aggregation aggregate, const optimizer_config& config,
                                              std::span<const float> initial, int world, int rank,
                                              round_precision precision, const rule_state* resume) {
  if (aggregate == aggregation::sharded_optimizer)
    return make_sharded_optimizer_rule(config, initial, world, rank, precision, resume);
  return make_sign_vote_rule(aggregate, config, initial, resume);
}

}  // namespace accord
