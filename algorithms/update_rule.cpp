#include "algorithms/update_rule.hpp"

#include "algorithms/kept_values.hpp"
#include "recovery/elastic_state.hpp"
#include "observe/trace.hpp"

#include "optim/lion.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <optional>
#include <vector>

namespace accord {

void update_rule::apply_on_device(device_collectives&, std::span<float>, const round_totals&, const round_totals&,
                                  float, std::uint64_t, bool) {
  throw std::logic_error("this update rule has no device form; its rounds run on the host");
}

void update_rule::reduce_bucket(transport&, std::span<float>, shard) {
  throw std::logic_error("this update rule takes no gradient buckets; its rounds reduce the whole buffer");
}

namespace {

// torch's clip_grad_norm_: the factor max / (norm + 1e-6) that scales a gradient of this squared
// norm to at most `max_norm`, or 1 where it is within already.
double clip_factor(float max_norm, double square_sum) {
  return std::min(1.0, max_norm / (std::sqrt(square_sum) + 1e-6));
}

// A rule's state in the device memory of its collectives, uploaded from the host state once.
device_array<float> upload(const device_collectives& collectives, std::span<const float> host) {
  const memory_location where = collectives.memory();
  const device_kind kind = where.on_host() ? device_kind::cpu : device_kind::cuda;
  if (kind == device_kind::cuda) use_cuda_device(where.device);
  return device_array<float>(kind, host);
}

class sharded_optimizer_rule final : public update_rule {
public:
  sharded_optimizer_rule(const optimizer_config& config, std::span<const float> initial, int world,
                         int rank, round_precision precision, const rule_state* resume)
      : config_(config), precision_(precision), own_(shard_of(initial.size(), world, rank)),
        master_(initial.begin() + own_.begin, initial.begin() + own_.end),
        runs_(shard_runs(config.groups, initial.size(), own_.begin, own_.end)), kept_(config.groups),
        first_rank_(rank == 0), optimizer_(make_optimizer(config, own_.size(), own_.begin)) {
    const std::string owner = "rank " + std::to_string(rank);
    // What compressed rounds fail to deliver would carry the app's values into later rounds.
    if (!kept_.empty() && (block_quantized(precision_.real.gradients) || block_quantized(precision_.estimate.gradients)))
      throw std::invalid_argument("parameter groups the app keeps (roles averaged, broadcast) travel in fp32, bf16 "
                                  "or fp16 only, not " + round_wires_name(precision_.real));
    trained_ = trained_runs();
    bucket_prefix_ = kept_.first_begin(initial.size());
    if (block_quantized(precision_.real.gradients)) residual_.assign(initial.size(), 0.f);
    if (resume) {
      restore_shard_state(*optimizer_, *resume, own_.begin, owner);
      restore_feedback(*resume, owner);
    }
  }

  // Buckets are reduced before the round's totals are known: not where the buffer is scaled
  // first (error feedback), and not over the app's values, which the totals weigh.
  std::size_t bucket_prefix() const override { return residual_.empty() ? bucket_prefix_ : 0; }

  void reduce_bucket(transport& link, std::span<float> buffer, shard range) override {
    if (range.end > bucket_prefix()) update_rule::reduce_bucket(link, buffer, range);
    traveling_.push_back(link.start_reduce_scatter_range(buffer, range, precision_.real.gradients));
    bucketed_.push_back(range);
  }

  void finish_buckets() override {
    // In starting order, as every worker started them; one that fails leaves the rest to the
    // destructors, which abandon their transfers on the interrupted transport.
    for (auto& bucket : traveling_) std::exchange(bucket, nullptr)->finish();
    traveling_.clear();
  }

  void apply(transport& link, std::span<float> buffer, const round_totals& local,
             const round_totals& global, float learning_rate, std::uint64_t,
             bool estimate, std::span<const float> current) override {
    const round_wires wire = precision_.of(estimate);
    const float scale = global.micro_batches > 0 ? static_cast<float>(1.0 / global.micro_batches) : 0.f;
    const bool feedback = !residual_.empty();
    kept_.weigh_broadcast(buffer, first_rank_, local, global);
    {
      const trace_span phase("reduce-scatter");
      // With error feedback the residuals are in units of the mean gradient, whatever each
      // round's micro-batch count: the buffer is scaled before it is encoded. An estimate
      // reads them (θ̃ anticipates what the real round will pay) and commits nothing.
      if (feedback)
        link.reduce_scatter_feedback(buffer, scale, residual_, wire.gradients, !estimate);
      else
        reduce_unbucketed(link, buffer, wire.gradients);
    }
    std::optional<trace_span> optimizer_phase(std::in_place, "optimizer step");
    std::span<float> slice = buffer.subspan(own_.begin, own_.size());
    if (!feedback)  // mean over every micro-batch of every worker
      for (float& g : slice) g *= scale;
    // The squared norm over the trained elements (the shards' sums add up to the whole).
    double square_sum = 0;
    for (const scaled_run& run : trained_)
      for (const float g : slice.subspan(run.offset, run.count)) square_sum += static_cast<double>(g) * g;
    if (config_.max_gradient_norm > 0) clip(link, slice, square_sum);
    observed_.gradient_square_sum = square_sum;
    std::span<float> target = master_;
    if (estimate) {
      // θ̃ comes from the committed master weights and state, which stay as they were.
      const optimizer_state committed = optimizer_->state();
      scratch_.assign(master_.begin(), master_.end());
      target = scratch_;
      take_kept_values(slice, target);
      optimizer_->step(target, slice, learning_rate, runs_);
      optimizer_->restore(committed);
    } else {
      take_kept_values(slice, target);
      optimizer_->step(target, slice, learning_rate, runs_);
    }
    observed_.learning_rate = optimizer_->applied_learning_rate();
    std::copy(target.begin(), target.end(), slice.begin());
    optimizer_phase.reset();
    const trace_span phase("all-gather");
    if (estimate || block_quantized(wire.parameters)) {
      // Block codes: the change from the parameters every worker computes with travels (θ̃ − θ_t
      // for an estimate; master − replica for a real round, which is the gather side's error
      // feedback: what a round's records missed stays in master − replica and travels again).
      if (block_quantized(wire.parameters) && current.size() != buffer.size())
        throw std::logic_error("a block-quantized round needs the parameters every worker holds");
      link.all_gather_delta(buffer, current, wire.parameters);
    } else {
      link.all_gather(buffer, wire.parameters);
    }
  }

  // Residuals go back to every worker's range of the flat buffer only at a snapshot: each
  // range's owner takes Σ over workers of their residuals for it (an fp32 reduce-scatter), the
  // others keep zero. The aggregate only ever sees the sum over workers, so what is owed is
  // unchanged, and the owner pays it exactly in its next real round (its own shard travels
  // uncompressed). Then the residuals shard like the optimizer state.
  void settle(transport& link) override {
    if (residual_.empty()) return;
    const trace_span phase("fold residuals");
    link.reduce_scatter(residual_, wire_precision::fp32);
    std::fill(residual_.begin(), residual_.begin() + static_cast<std::ptrdiff_t>(own_.begin), 0.f);
    std::fill(residual_.begin() + static_cast<std::ptrdiff_t>(own_.end), residual_.end(), 0.f);
  }

  // Block-quantized rounds (int8, fp8, fp4, sign, sign2, sign3) have no device collectives: such rounds stay on the host.
  // Parameter groups and clipping have no kernels: rounds with them stay on the host.
  bool has_device_form() const override {
    return (config_.kind == "adamw" || config_.kind == "lion") && !block_quantized(precision_.estimate.gradients) &&
           !block_quantized(precision_.real.gradients) && config_.groups.empty() && config_.max_gradient_norm == 0;
  }

  // apply's steps as kernels on the collectives' stream, on master weights and state kept there.
  void apply_on_device(device_collectives& collectives, std::span<float> buffer, const round_totals&,
                       const round_totals& global, float learning_rate, std::uint64_t, bool estimate) override {
    if (!device_) device_.emplace(collectives, master_, optimizer_->state());
    kernels& k = collectives.stream();
    // Device rounds are never block-quantized, so both collectives travel alike.
    const wire_precision wire = precision_.of(estimate).gradients;
    collectives.reduce_scatter(buffer, wire);
    const std::span<float> slice = buffer.subspan(own_.begin, own_.size());
    k.scale(slice, global.micro_batches > 0 ? static_cast<float>(1.0 / global.micro_batches) : 0.f);
    // square_sum waits for the stream; the reduce-scatter first, watching for failed peers.
    collectives.finish();
    observed_.gradient_square_sum = k.square_sum(slice);
    device_shard& d = *device_;
    std::span<float> master = d.master.span(), state = d.state.span();
    if (estimate) {  // step copies: the committed master and state stay as they were
      k.copy(master, d.scratch_master.span());
      k.copy(state, d.scratch_state.span());
      master = d.scratch_master.span();
      state = d.scratch_state.span();
    }
    const std::uint64_t step = d.steps + 1;
    const std::size_t n = own_.size();
    if (config_.kind == "adamw")
      k.adamw_step(master, slice, state.first(n), state.subspan(n, n),
                   {learning_rate, config_.beta1, config_.beta2, config_.epsilon, config_.weight_decay, step});
    else
      k.lion_step(master, slice, state.first(n), {learning_rate, config_.beta1, config_.beta2, config_.weight_decay});
    if (!estimate) d.steps = step;
    k.copy(master, slice);
    collectives.all_gather(buffer, wire);
    collectives.finish();
  }

  std::size_t state_bytes() const override {
    return (master_.size() + optimizer_->state().values.size() + residual_.size()) * sizeof(float);
  }

  std::span<const float> residuals() const override { return residual_; }

  rule_state snapshot() const override {
    if (device_) {  // the committed state lives on the device: bring it back for the checkpoint
      device_->master.copy_to(master_);
      optimizer_state state = optimizer_->state();
      state.step = device_->steps;
      device_->state.copy_to(state.values);
      optimizer_->restore(std::move(state));
    }
    rule_state snapshot = shard_state(*optimizer_, own_.begin);
    if (precision_.real.parameters != wire_precision::fp32) snapshot.master = master_;
    if (!residual_.empty()) {  // the own range (after settle: the sum over workers of what is owed)
      snapshot.feedback = precision_name(precision_.real.gradients);
      snapshot.residual.assign(residual_.begin() + static_cast<std::ptrdiff_t>(own_.begin),
                               residual_.begin() + static_cast<std::ptrdiff_t>(own_.end));
    }
    return snapshot;
  }

private:
  // The own shard's runs the optimizer trains (a group the app keeps has scales 0 and is
  // skipped by the norm); without groups, the whole shard. Fixed for the rule's life.
  std::vector<scaled_run> trained_runs() const {
    if (runs_.empty()) return {{0, own_.size(), 1.0f, 1.0f}};
    std::vector<scaled_run> trained;
    for (const scaled_run& run : runs_)
      if (!kept_by_app(run)) trained.push_back(run);
    return trained;
  }
  bool kept_by_app(const scaled_run& run) const { return kept_.holds(own_.begin + run.offset); }

  // The values the app keeps take the round's means from the slice instead of an optimizer
  // step: their runs step with learning rate and decay 0, and a zero gradient keeps the
  // optimizer's state for them at zero (finite whatever the values).
  void take_kept_values(std::span<float> slice, std::span<float> target) const {
    kept_.for_each_within(own_.begin, own_.end, [&](std::size_t begin, std::size_t end) {
      const auto from = static_cast<std::ptrdiff_t>(begin - own_.begin), to = static_cast<std::ptrdiff_t>(end - own_.begin);
      std::copy(slice.begin() + from, slice.begin() + to, target.begin() + from);
      std::fill(slice.begin() + from, slice.begin() + to, 0.f);
    });
  }

  // Scales the trained elements of the own slice so that the mean gradient's norm over every
  // shard is at most max_gradient_norm (clip_factor), and leaves the clipped norm's square share
  // in `square_sum`.
  void clip(transport& link, std::span<float> slice, double& square_sum) {
    double total = square_sum;
    link.all_reduce(std::span<double>(&total, 1));
    const double factor = clip_factor(config_.max_gradient_norm, total);
    if (factor == 1) return;
    for (const scaled_run& run : trained_)
      for (float& g : slice.subspan(run.offset, run.count)) g *= static_cast<float>(factor);
    square_sum *= factor * factor;
  }

  // A restored shard's residuals (its range: the other ranges start at zero) and, where it came
  // with them, its fp32 master weights (the replica every worker computes with is their
  // decoded copy and came as the initial parameters).
  void restore_feedback(const rule_state& resume, const std::string& owner) {
    if (!resume.residual.empty()) {
      if (residual_.empty() || resume.feedback != precision_name(precision_.real.gradients))
        throw std::invalid_argument("restored error-feedback residuals were written for wire precision " +
                                    resume.feedback + ", " + owner + " runs " +
                                    std::string(precision_name(precision_.real.gradients)));
      if (resume.residual.size() != own_.size())
        throw std::invalid_argument("restored error-feedback residuals hold " + std::to_string(resume.residual.size()) +
                                    " values, " + owner + "'s shard " + std::to_string(own_.size()));
      std::copy(resume.residual.begin(), resume.residual.end(),
                residual_.begin() + static_cast<std::ptrdiff_t>(own_.begin));
    }
    if (block_quantized(precision_.real.parameters) && !resume.master.empty()) {
      if (resume.master.size() != own_.size())
        throw std::invalid_argument("restored master weights hold " + std::to_string(resume.master.size()) +
                                    " values, " + owner + "'s shard " + std::to_string(own_.size()));
      master_ = resume.master;
    }
  }

  // The round's reduce-scatter where no bucket reduced the buffer yet: all of it, or the gaps
  // between the buckets (each element is summed in the same order either way).
  void reduce_unbucketed(transport& link, std::span<float> buffer, wire_precision wire) {
    finish_buckets();
    if (bucketed_.empty()) return link.reduce_scatter(buffer, wire);
    std::sort(bucketed_.begin(), bucketed_.end(), [](const shard& a, const shard& b) { return a.begin > b.begin; });
    std::size_t end = buffer.size();
    for (const shard& bucket : bucketed_) {
      if (bucket.end < end) link.reduce_scatter_range(buffer, {bucket.end, end}, wire);
      end = std::min(end, bucket.begin);
    }
    if (end > 0) link.reduce_scatter_range(buffer, {0, end}, wire);
    bucketed_.clear();
  }

  // The own shard's master weights and optimizer state (slot after slot, as optimizer_state)
  // in device memory, with copies for estimate rounds.
  struct device_shard {
    device_array<float> master, state, scratch_master, scratch_state;
    std::uint64_t steps;
    device_shard(const device_collectives& collectives, std::span<const float> master_values,
                 const optimizer_state& host)
        : master(upload(collectives, master_values)), state(upload(collectives, host.values)),
          scratch_master(upload(collectives, master_values)), scratch_state(upload(collectives, host.values)),
          steps(host.step) {}
  };

  optimizer_config config_;
  round_precision precision_;
  shard own_;
  mutable std::vector<float> master_;  // fp32 master weights of the own shard (stale while device_ holds them)
  std::vector<float> scratch_;  // estimate rounds step a copy of master_
  std::vector<shard> bucketed_;  // ranges of the next round's buffer its buckets reduced already
  std::vector<std::unique_ptr<transport::range_reduction>> traveling_;  // started buckets, not finished yet
  // int8/sign real rounds: this worker's reduce-scatter residual over the whole buffer, in mean
  // gradient units (zero in its own range between rounds: that range never travels compressed).
  std::vector<float> residual_;
  std::vector<scaled_run> runs_;  // the own shard under config_.groups (empty: no groups)
  kept_values kept_;
  std::size_t bucket_prefix_ = 0;  // before the first kept value
  std::vector<scaled_run> trained_;  // trained_runs(), made once instead of every round
  bool first_rank_;
  std::unique_ptr<optimizer> optimizer_;
  mutable std::optional<device_shard> device_;
};

class sign_vote_rule final : public update_rule {
public:
  sign_vote_rule(bool average, const optimizer_config& lion, std::span<const float> initial,
                 const rule_state* resume)
      : average_(average), config_(lion), runs_(shard_runs(lion.groups, initial.size(), 0, initial.size())),
        kept_(lion.groups), parameters_(initial.begin(), initial.end()), momentum_(initial.size(), 0.f),
        signs_(packed_words(initial.size())), voted_(packed_words(initial.size())) {
    if (average_) plus_votes_.resize(initial.size());
    if (resume && resume->present) {
      if (!resume->momentum || resume->values.size() != momentum_.size())
        throw std::invalid_argument("restored state is not a Lion momentum of " + std::to_string(momentum_.size()) +
                                    " values");
      momentum_ = resume->values;
    }
  }

  void apply(transport& link, std::span<float> buffer, const round_totals& local,
             const round_totals& global, float learning_rate, std::uint64_t step,
             bool estimate, std::span<const float>) override {
    take_kept_means(link, buffer, local, global);
    // The vote is over each worker's own Lion direction from its own mean gradient (the kept
    // values' gradients are zero now: their momentum stays zero and the norm leaves them out).
    const float scale = local.micro_batches > 0 ? static_cast<float>(1.0 / local.micro_batches) : 0.f;
    double square_sum = 0;
    for (float& g : buffer) {
      g *= scale;
      square_sum += static_cast<double>(g) * g;
    }
    if (config_.max_gradient_norm > 0) clip_own(buffer, square_sum);
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
      apply_sign_update(target, voted_, learning_rate, config_.weight_decay, runs_);
      observed_.vote_agreement = majority_agreement(buffer.size());
    } else {
      link.sign_counts(signs_, buffer.size(), plus_votes_);
      apply_sign_update(target, plus_votes_, link.size(), learning_rate, config_.weight_decay, runs_);
      observed_.vote_agreement = average_agreement(link.size());
    }
    put_kept_means(target);
    if (!estimate) std::copy(parameters_.begin(), parameters_.end(), buffer.begin());
  }

  // Parameter groups, kept values and clipping have no kernels: rounds with them stay on the host.
  bool has_device_form() const override { return config_.groups.empty() && config_.max_gradient_norm == 0; }

  // apply's steps as kernels on the collectives' stream; θ and the momentum are kept there.
  void apply_on_device(device_collectives& collectives, std::span<float> buffer, const round_totals& local,
                       const round_totals&, float learning_rate, std::uint64_t step, bool estimate) override {
    if (!device_) device_.emplace(collectives, parameters_, momentum_, average_);
    kernels& k = collectives.stream();
    device_replica& d = *device_;
    k.scale(buffer, local.micro_batches > 0 ? static_cast<float>(1.0 / local.micro_batches) : 0.f);
    observed_.gradient_square_sum = k.square_sum(buffer) / collectives.world();
    std::span<float> momentum = d.momentum.span();
    if (estimate) {
      k.copy(momentum, d.scratch_momentum.span());
      momentum = d.scratch_momentum.span();
    }
    k.lion_signs(buffer, momentum, config_.beta1, config_.beta2, step, d.signs.span());
    std::span<float> target = d.parameters.span();
    if (estimate) {
      k.copy(d.parameters.span(), buffer);
      target = buffer;
    }
    const trace_span phase("vote");
    if (!average_) {
      collectives.sign_majority(d.signs.span(), buffer.size(), step, d.voted.span());
      k.sign_update(target, d.voted.span(), learning_rate, config_.weight_decay);
    } else {
      collectives.sign_counts(d.signs.span(), buffer.size(), d.plus_votes.span());
      k.sign_update(target, d.plus_votes.span(), collectives.world(), learning_rate, config_.weight_decay);
    }
    if (!estimate) k.copy(d.parameters.span(), buffer);
    collectives.finish();
    observed_.vote_agreement = -1;  // not observed on the device (it would need the signs on the host)
  }

  std::size_t state_bytes() const override {
    return (parameters_.size() + momentum_.size()) * sizeof(float);
  }

  rule_state snapshot() const override {
    if (device_) device_->momentum.copy_to(momentum_);  // the committed momentum lives on the device
    return {true, true, 0, 1, 0, momentum_, {}, {}, {}, {}};
  }

private:
  // The kept values' means over the round (their sums, all-reduced in fp32, over the global
  // micro-batch count) into kept_means_, and zeros where their gradients would be.
  void take_kept_means(transport& link, std::span<float> buffer, const round_totals& local,
                       const round_totals& global) {
    if (kept_.empty()) return;
    kept_.weigh_broadcast(buffer, link.rank() == 0, local, global);
    const float scale = global.micro_batches > 0 ? static_cast<float>(1.0 / global.micro_batches) : 0.f;
    kept_means_.clear();
    kept_.for_each_within(0, buffer.size(), [&](std::size_t begin, std::size_t end) {
      const std::span<float> values = buffer.subspan(begin, end - begin);
      link.all_reduce(values, wire_precision::fp32);
      for (float& value : values) kept_means_.push_back(value * scale);
      std::fill(values.begin(), values.end(), 0.f);
    });
  }
  void put_kept_means(std::span<float> target) const {
    auto mean = kept_means_.begin();
    kept_.for_each_within(0, target.size(), [&](std::size_t begin, std::size_t end) {
      std::copy(mean, mean + static_cast<std::ptrdiff_t>(end - begin), target.begin() + static_cast<std::ptrdiff_t>(begin));
      mean += static_cast<std::ptrdiff_t>(end - begin);
    });
  }

  // Scales this worker's mean gradient to at most max_gradient_norm (clip_factor): the gradient
  // its own Lion momentum and direction see.
  void clip_own(std::span<float> gradient, double& square_sum) const {
    const double factor = clip_factor(config_.max_gradient_norm, square_sum);
    if (factor == 1) return;
    for (float& g : gradient) g *= static_cast<float>(factor);
    square_sum *= factor * factor;
  }

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

  // θ, the momentum and the vote's buffers in device memory.
  struct device_replica {
    device_array<float> parameters, momentum, scratch_momentum;
    device_array<std::uint64_t> signs, voted;
    device_array<std::uint16_t> plus_votes;
    device_replica(const device_collectives& collectives, std::span<const float> theta,
                   std::span<const float> momentum_values, bool average)
        : parameters(upload(collectives, theta)), momentum(upload(collectives, momentum_values)),
          scratch_momentum(upload(collectives, momentum_values)),
          signs(parameters.kind(), packed_words(theta.size())), voted(parameters.kind(), packed_words(theta.size())),
          plus_votes(parameters.kind(), average ? theta.size() : 0) {}
  };

  bool average_;  // else the majority
  optimizer_config config_;
  std::vector<scaled_run> runs_;  // the parameters under config_.groups (empty: no groups)
  kept_values kept_;
  std::vector<float> kept_means_;  // this round's means of the kept values, in their order
  std::vector<float> parameters_;  // committed replica θ (identical on every worker; stale while device_ holds it)
  mutable std::vector<float> momentum_;  // this worker's own Lion momentum, never communicated
  mutable std::optional<device_replica> device_;
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
