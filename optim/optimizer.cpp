#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "optim/lion.hpp"

namespace accord {
namespace {

// State handling shared by every optimizer; subclasses implement `update` on the slot spans.
class shard_optimizer : public optimizer {
public:
  shard_optimizer(const optimizer_config& config, std::size_t shard_size, std::size_t slots)
      : config_(config), shard_size_(shard_size) {
    state_.slots = slots;
    state_.values.assign(slots * shard_size, 0.0f);
  }

  void step(std::span<float> parameters, std::span<const float> gradients, float lr,
            std::span<const scaled_run> runs) override {
    if (parameters.size() != shard_size_ || gradients.size() != shard_size_)
      throw std::invalid_argument(config_.kind + " step: shard of " + std::to_string(shard_size_) +
                                  " elements got " + std::to_string(parameters.size()) +
                                  " parameters and " + std::to_string(gradients.size()) +
                                  " gradients");
    ++state_.step;
    advance(parameters, gradients, lr, runs);
  }

  const optimizer_state& state() const override { return state_; }

  void restore(optimizer_state state) override {
    if (state.slots != state_.slots || state.values.size() != state_.slots * shard_size_)
      throw std::invalid_argument(
          config_.kind + " restore: expected " + std::to_string(state_.slots) + " slots of " +
          std::to_string(shard_size_) + " values, got " + std::to_string(state.slots) +
          " slots and " + std::to_string(state.values.size()) + " values");
    state_ = std::move(state);
  }

  const optimizer_config& config() const override { return config_; }

protected:
  // The step's update of the whole shard, after the step count grew.
  virtual void advance(std::span<float> parameters, std::span<const float> gradients, float lr,
                       std::span<const scaled_run> runs) = 0;

  float* slot(std::size_t index, std::size_t offset) { return state_.values.data() + index * shard_size_ + offset; }
  std::span<float> slots() { return state_.values; }
  std::uint64_t step_count() const { return state_.step; }

  const optimizer_config config_;

private:
  const std::size_t shard_size_;
  optimizer_state state_;
};

// accord's own optimizers: each run of the shard stepped with its scaled rate and decay.
class run_optimizer : public shard_optimizer {
public:
  using shard_optimizer::shard_optimizer;

protected:
  // Steps the shard's elements from `offset` on (as many as `parameters` holds).
  virtual void update(std::size_t offset, std::span<float> parameters, std::span<const float> gradients,
                      float lr, float weight_decay) = 0;

private:
  void advance(std::span<float> parameters, std::span<const float> gradients, float lr,
               std::span<const scaled_run> runs) override {
    if (runs.empty()) return update(0, parameters, gradients, lr, config_.weight_decay);
    for (const scaled_run& run : runs)
      update(run.offset, parameters.subspan(run.offset, run.count), gradients.subspan(run.offset, run.count),
             lr * run.learning_rate_scale, config_.weight_decay * run.weight_decay_scale);
  }
};

// The app's elementwise optimizer (job_config::app_optimizer): one call per shard and step, its
// own settings per range; the groups' scales are not its (optimizer_for refuses trained ones).
class app_shard_optimizer final : public shard_optimizer {
public:
  app_shard_optimizer(const optimizer_config& config, std::size_t shard_size, std::size_t shard_begin)
      : shard_optimizer(config, shard_size, config.app->slots), shard_begin_(shard_begin) {}

private:
  void advance(std::span<float> parameters, std::span<const float> gradients, float lr,
               std::span<const scaled_run>) override {
    const float factor = config_.learning_rate > 0 ? lr / config_.learning_rate : 0.0f;
    applied_ = config_.app->step(shard_begin_, parameters, gradients, slots(), step_count(), factor);
  }
  double applied_learning_rate() const override { return applied_; }

  const std::size_t shard_begin_;
  double applied_ = -1;
};

// AdamW (Loshchilov & Hutter) with PyTorch's arrangement: decoupled decay p *= 1 - lr*wd,
// then p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class adamw final : public run_optimizer {
public:
  adamw(const optimizer_config& config, std::size_t shard_size)
      : run_optimizer(config, shard_size, 2) {}

private:
  void update(std::size_t offset, std::span<float> parameters, std::span<const float> gradients, float lr,
              float weight_decay) override {
    const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
    const double t = static_cast<double>(step_count());
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(double{b1}, t)));
    const float inv_sqrt_correction2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{b2}, t)));
    const float decay = 1.0f - lr * weight_decay;
    float* m = slot(0, offset);
    float* v = slot(1, offset);
    float* p = parameters.data();
    const float* g = gradients.data();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_correction2 + eps);
    }
  }
};

// Lion exactly as the reference (lion-notes.md §1): decay first, sign(0) = 0, momentum after.
class lion final : public run_optimizer {
public:
  lion(const optimizer_config& config, std::size_t shard_size)
      : run_optimizer(config, shard_size, 1) {}

private:
  void update(std::size_t offset, std::span<float> parameters, std::span<const float> gradients, float lr,
              float weight_decay) override {
    const float b1 = config_.beta1, b2 = config_.beta2;
    const float decay = sign_step_decay(lr, weight_decay);
    float* m = slot(0, offset);
    float* p = parameters.data();
    const float* g = gradients.data();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const float c = lion_direction(m[i], g[i], b1);
      const float sign = static_cast<float>((c > 0.0f) - (c < 0.0f));
      p[i] = sign_step(p[i], sign, decay, lr);
      m[i] = lion_momentum(m[i], g[i], b2);
    }
  }
};

// SGD with heavy-ball momentum (PyTorch form, no dampening): g += wd*p (L2), b = beta1*b + g,
// p -= lr*b. beta1 = 0 is plain SGD.
class sgd final : public run_optimizer {
public:
  sgd(const optimizer_config& config, std::size_t shard_size)
      : run_optimizer(config, shard_size, 1) {}

private:
  void update(std::size_t offset, std::span<float> parameters, std::span<const float> gradients, float lr,
              float weight_decay) override {
    const float momentum = config_.beta1, wd = weight_decay;
    float* b = slot(0, offset);
    float* p = parameters.data();
    const float* g = gradients.data();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      b[i] = momentum * b[i] + (g[i] + wd * p[i]);
      p[i] -= lr * b[i];
    }
  }
};

void check_range(const optimizer_config& config, const char* name, float value, float low,
                 float high) {
  if (!(value >= low && value <= high))
    throw std::invalid_argument(config.kind + " optimizer: " + name + " " +
                                std::to_string(value) + " outside [" + std::to_string(low) +
                                ", " + std::to_string(high) + "]");
}

}  // namespace

std::vector<scaled_run> shard_runs(const std::vector<parameter_group>& groups, std::size_t parameter_count,
                                   std::size_t begin, std::size_t end) {
  std::vector<scaled_run> runs;
  std::size_t covered = begin;  // the shard's elements before it have their runs
  const auto add = [&](std::size_t from, std::size_t to, float learning_rate_scale, float weight_decay_scale) {
    from = std::max(from, begin), to = std::min(to, end);
    if (from < to) runs.push_back({from - begin, to - from, learning_rate_scale, weight_decay_scale});
  };
  std::uint64_t previous_end = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const parameter_group& g = groups[i];
    const std::string which = "parameter group " + std::to_string(i) + " [" + std::to_string(g.begin) + ", " +
                              std::to_string(g.end) + ")";
    if (!(g.begin < g.end && g.end <= parameter_count))
      throw std::invalid_argument(which + " is empty or beyond the " + std::to_string(parameter_count) + " parameters");
    if (g.begin < previous_end) throw std::invalid_argument(which + " overlaps or precedes the group before it");
    if (!(std::isfinite(g.learning_rate_scale) && g.learning_rate_scale >= 0 &&
          std::isfinite(g.weight_decay_scale) && g.weight_decay_scale >= 0))
      throw std::invalid_argument(which + ": learning_rate_scale and weight_decay_scale must be finite and >= 0");
    if (g.role != "trained" && g.role != "averaged" && g.role != "broadcast")
      throw std::invalid_argument(which + ": role '" + g.role + "' is not trained, averaged or broadcast");
    previous_end = g.end;
    add(covered, g.begin, 1.0f, 1.0f);
    // The rule sets the values of a group that is not trained; the optimizer leaves them be.
    const bool trained = g.role == "trained";
    add(g.begin, g.end, trained ? g.learning_rate_scale : 0.0f, trained ? g.weight_decay_scale : 0.0f);
    covered = std::max<std::size_t>(covered, g.end);
  }
  add(covered, end, 1.0f, 1.0f);
  return runs;
}

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& config, std::size_t shard_size,
                                          std::size_t shard_begin) {
  if (config.app) {
    if (!config.app->step) throw std::invalid_argument("app optimizer " + config.app->name + ": no step function");
    return std::make_unique<app_shard_optimizer>(config, shard_size, shard_begin);
  }
  if (config.kind != "adamw" && config.kind != "lion" && config.kind != "sgd")
    throw std::invalid_argument("unknown optimizer kind '" + config.kind +
                                "' (expected adamw, lion or sgd)");
  const bool adam = config.kind == "adamw";
  // AdamW's bias correction divides by 1 - beta^t, so its betas must stay below 1.
  const float beta_limit = adam ? std::nextafter(1.0f, 0.0f) : 1.0f;
  check_range(config, "beta1", config.beta1, 0.0f, beta_limit);
  if (config.kind != "sgd") check_range(config, "beta2", config.beta2, 0.0f, beta_limit);
  check_range(config, "weight_decay", config.weight_decay, 0.0f, INFINITY);
  if (config.kind == "sgd") return std::make_unique<sgd>(config, shard_size);
  if (config.kind == "lion") return std::make_unique<lion>(config, shard_size);
  check_range(config, "epsilon", config.epsilon, 1e-30f, 1.0f);
  return std::make_unique<adamw>(config, shard_size);
}

}  // namespace accord
