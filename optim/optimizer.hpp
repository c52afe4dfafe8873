#pragma once
// Optimizers over one shard [begin, end) of the flat parameter buffer (ZeRO-1): the caller
// passes the shard's parameters and gradients; the optimizer owns the state of that shard only.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace accord {

struct optimizer_config {
  std::string kind = "adamw";  // adamw | lion | sgd
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;          // AdamW/Lion beta1; SGD momentum
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;   // decoupled (AdamW, Lion) / L2 on the gradient (SGD)
};

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
  // One update of the shard with the given learning rate (schedules live outside).
  virtual void step(std::span<float> parameters, std::span<const float> gradients, float lr) = 0;
  virtual const optimizer_state& state() const = 0;
  virtual void restore(optimizer_state state) = 0;
  virtual const optimizer_config& config() const = 0;
};

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& config, std::size_t shard_size);

}  // namespace accord
