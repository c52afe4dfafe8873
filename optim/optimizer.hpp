#pragma once
// Optimizers over one shard [begin, end) of the flat parameter buffer (ZeRO-1): the caller
// passes the shard's parameters and gradients; the optimizer owns the state of that shard only.
#include <accord/config.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace accord {

struct optimizer_config {
  std::string kind = "adamw";  // adamw | lion | sgd, or the app optimizer's name
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;          // AdamW/Lion beta1; SGD momentum
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;   // decoupled (AdamW, Lion) / L2 on the gradient (SGD)
  // Applied by the sharded-optimizer rule (job_config::parameter_groups, max_gradient_norm).
  std::vector<parameter_group> groups;
  float max_gradient_norm = 0.0f;
  // job_config::app_optimizer: steps the shards instead of kind's (its settings replace the
  // betas, epsilon, weight decay and the groups' scales; learning_rate is the schedule's peak).
  const elementwise_optimizer* app = nullptr;
};

// A run of a shard's elements stepped with scaled settings: a parameter group's part of it.
struct scaled_run {
  std::size_t offset = 0, count = 0;  // within the shard
  float learning_rate_scale = 1.0f, weight_decay_scale = 1.0f;
};

// The runs covering the shard [begin, end) of the flat parameters under `groups` (elements in
// no group: scales 1). Throws std::invalid_argument naming the problem for groups out of order,
// overlapping, beyond `parameter_count`, with a negative or non-finite scale or an unknown role.
std::vector<scaled_run> shard_runs(const std::vector<parameter_group>& groups, std::size_t parameter_count,
                                   std::size_t begin, std::size_t end);

// A shard's optimizer state as plain data: `slots` vectors of `shard_size` floats laid out
// slot after slot (AdamW: m then v; Lion: m; SGD: momentum buffer), plus the step count.
// Plain data so it can be checkpointed, backed up, re-sharded and sent to a buddy.
struct optimizer_state {
  std::uint64_t step = 0;
  std::size_t slots = 0;
  std::vector<float> values;
};

class optimizer {
public:
  virtual ~optimizer() = default;
  // One update of the shard with the given learning rate (schedules live outside); `runs`, when
  // not empty, cover the shard and scale the learning rate and weight decay run by run.
  virtual void step(std::span<float> parameters, std::span<const float> gradients, float lr,
                    std::span<const scaled_run> runs = {}) = 0;
  virtual const optimizer_state& state() const = 0;
  virtual void restore(optimizer_state state) = 0;
  virtual const optimizer_config& config() const = 0;
  // The learning rate the last step used by the optimizer's own account (the app's optimizer:
  // its scheduler's); negative where the rate passed to step() is it.
  virtual double applied_learning_rate() const { return -1; }
};

// `shard_begin`: where the shard starts in the flat parameters (for an app optimizer's step).
std::unique_ptr<optimizer> make_optimizer(const optimizer_config& config, std::size_t shard_size,
                                          std::size_t shard_begin = 0);

}  // namespace accord
