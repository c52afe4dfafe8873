#include "topologies/parameter_server/server_shard.hpp"

#include <algorithm>

namespace accord {

server_shard::server_shard(shard own, int workers, bool synchronous, std::span<const float> initial,
                           const optimizer_config& optimizer, schedule_config schedule, std::uint64_t first_step,
                           const rule_state* resume)
    : own_(own), workers_(workers), synchronous_(synchronous),
      master_(initial.begin() + static_cast<std::ptrdiff_t>(own.begin),
              initial.begin() + static_cast<std::ptrdiff_t>(own.end)),
      opt_(make_optimizer(optimizer, own.size())), schedule_(schedule), first_step_(first_step), sum_(own.size()),
      round_(static_cast<std::size_t>(workers)), round_slices_(static_cast<std::size_t>(workers)) {
  if (resume) restore_shard_state(*opt_, *resume, own.begin, "the server of shard " + std::to_string(own.begin));
}

rule_state server_shard::state() const { return shard_state(*opt_, own_.begin); }

std::size_t server_shard::state_bytes() const {
  return (master_.size() + opt_->state().values.size()) * sizeof(float);
}

// One optimizer step of the shard from sum_, a gradient sum over `micro_batches` micro-batches.
void server_shard::step(double micro_batches, std::uint64_t optimizer_step) {
  const float scale = micro_batches > 0 ? static_cast<float>(1.0 / micro_batches) : 0.f;
  for (float& g : sum_) g *= scale;
  opt_->step(master_, sum_, learning_rate_at(schedule_, optimizer_step));
  ++version_;
}

std::vector<applied_gradient> server_shard::push(const push_summary& push, std::span<const float> slice) {
  const auto applied = [](const push_summary& p, std::uint64_t staleness) {
    return applied_gradient{p.worker, staleness, p.micro_batches, p.loss_sum, p.items};
  };
  if (!synchronous_) {  // applied on arrival, one optimizer step per push
    sum_.assign(slice.begin(), slice.end());
    const std::uint64_t staleness = version_ - push.pulled_version;
    step(push.micro_batches, first_step_ + version_ / static_cast<std::uint64_t>(workers_));
    return {applied(push, staleness)};
  }
  const auto w = static_cast<std::size_t>(push.worker);
  round_[w] = push;
  round_slices_[w].assign(slice.begin(), slice.end());
  if (std::any_of(round_.begin(), round_.end(), [](const auto& p) { return !p; })) return {};
  // Every worker's gradient of this round: summed in rank order, as one step (DDP).
  std::fill(sum_.begin(), sum_.end(), 0.f);
  double micro_batches = 0;
  for (std::size_t k = 0; k < round_.size(); ++k) {
    for (std::size_t i = 0; i < sum_.size(); ++i) sum_[i] += round_slices_[k][i];
    micro_batches += round_[k]->micro_batches;
  }
  step(micro_batches, first_step_ + version_);
  std::vector<applied_gradient> done;
  for (auto& p : round_) {
    done.push_back(applied(*p, 0));
    p.reset();
  }
  return done;
}

}  // namespace accord
