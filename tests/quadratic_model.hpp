#pragma once
// A quadratic model (and a linear one) and a dataset of fixed waves, whose gradients make every
// update of an algorithm, topology or app-driven worker checkable by hand (shared by the actor,
// topology and worker tests).
#include <accord/job.hpp>
#include <accord/model.hpp>
#include <accord/worker.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accord::testing {

// f_x(θ) = ½‖θ − x‖² averaged over the batch: the gradient θ − mean(x) makes every update
// of an algorithm checkable by hand.
class quadratic final : public model {
public:
  explicit quadratic(std::size_t dim) : dim_(dim) {}
  std::string signature() const override { return "quadratic(" + std::to_string(dim_) + ")"; }
  std::size_t parameter_count() const override { return dim_; }
  void initialize(std::span<float> p, std::uint64_t) const override {
    for (std::size_t i = 0; i < dim_; ++i) p[i] = 1.0f + 0.1f * static_cast<float>(i);
  }
  double forward_backward(std::span<const float> p, const batch& b, std::span<float> g) override {
    std::fill(g.begin(), g.end(), 0.f);
    double loss = 0;
    for (std::size_t e = 0; e < b.examples; ++e)
      for (std::size_t i = 0; i < dim_; ++i) {
        const float d = p[i] - b.features[e * dim_ + i];
        loss += 0.5 * d * d;
        g[i] += d / static_cast<float>(b.examples);
      }
    return loss / static_cast<double>(b.examples);
  }
  // Backward as a layered model's: the gradients are added from the last quarter to the first,
  // each reported final (DDP's buckets), with the default's bits.
  double accumulate_gradients(std::span<const float> p, const batch& b, std::span<float> g) override {
    scratch_.resize(dim_);
    const double loss = forward_backward(p, b, scratch_);
    const std::size_t layer = (dim_ + 3) / 4;
    for (std::size_t end = dim_; end > 0;) {
      const std::size_t begin = end > layer ? end - layer : 0;
      for (std::size_t i = begin; i < end; ++i) g[i] += scratch_[i];
      gradients_final_from(begin);
      end = begin;
    }
    return loss;
  }
  double evaluate(std::span<const float> p, const batch& b) override {
    std::vector<float> g(dim_);
    return forward_backward(p, b, g);
  }
  std::unique_ptr<model> clone() const override { return std::make_unique<quadratic>(dim_); }

private:
  std::size_t dim_;
  std::vector<float> scratch_;
};

// f_x(θ) = −⟨θ, x⟩ averaged over the batch: the gradient −mean(x) does not depend on θ, so plain
// SGD's updates add up to the same sum whichever copy of the parameters takes each one.
class linear final : public model {
public:
  explicit linear(std::size_t dim) : dim_(dim) {}
  std::string signature() const override { return "linear(" + std::to_string(dim_) + ")"; }
  std::size_t parameter_count() const override { return dim_; }
  void initialize(std::span<float> p, std::uint64_t) const override {  // small, so float rounding stays small
    for (std::size_t i = 0; i < dim_; ++i) p[i] = 1.0f + 0.1f * static_cast<float>(i % 16);
  }
  double forward_backward(std::span<const float> p, const batch& b, std::span<float> g) override {
    std::fill(g.begin(), g.end(), 0.f);
    double loss = 0;
    for (std::size_t e = 0; e < b.examples; ++e)
      for (std::size_t i = 0; i < dim_; ++i) {
        loss -= static_cast<double>(p[i]) * b.features[e * dim_ + i];
        g[i] -= b.features[e * dim_ + i] / static_cast<float>(b.examples);
      }
    return loss / static_cast<double>(b.examples);
  }
  double evaluate(std::span<const float> p, const batch& b) override {
    std::vector<float> g(dim_);
    return forward_backward(p, b, g);
  }
  std::unique_ptr<model> clone() const override { return std::make_unique<linear>(dim_); }

private:
  std::size_t dim_;
};

// Example p is a fixed vector, different for every position (and for every phase).
class waves final : public dataset {
public:
  explicit waves(std::size_t dim, double phase = 0) : dim_(dim), phase_(phase) {}
  std::string describe() const override { return "waves"; }
  std::uint64_t size() const override { return 1u << 20; }
  static float value(std::uint64_t p, std::size_t i, double phase = 0) {
    return static_cast<float>(std::sin(0.7 * static_cast<double>(p) + static_cast<double>(i) + phase));
  }
  batch examples(std::uint64_t first, std::size_t count) const override {
    batch b;
    b.examples = count;
    for (std::size_t e = 0; e < count; ++e) {
      for (std::size_t i = 0; i < dim_; ++i) b.features.push_back(value(first + e, i, phase_));
      b.targets.push_back(0);
    }
    return b;
  }

private:
  std::size_t dim_;
  double phase_;
};

// `job` run in one process on a quadratic of `dimension` parameters, its data also held out.
inline job_result run_quadratic(const job_config& job, std::function<void(const step_metrics&)> on_step = {},
                                std::size_t dimension = 5) {
  quadratic net(dimension);
  auto data = std::make_shared<waves>(dimension);
  return run_job(net, data, data, job, std::move(on_step));
}

// An app-driven job's model (include/accord/worker.hpp): a quadratic of `dim` parameters in
// `memory`, evaluated on the first 6 examples of `held_out`.
inline app_model quadratic_app(std::size_t dim, const waves& held_out, memory_location memory = {}) {
  quadratic net(dim);
  app_model m;
  m.signature = net.signature();
  m.memory = memory;
  m.initial_parameters.resize(dim);
  net.initialize(m.initial_parameters, 0);
  m.evaluate = [dim, &held_out](std::span<const float> p) {
    quadratic evaluator(dim);
    return evaluator.evaluate(p, held_out.examples(0, 6));
  };
  return m;
}

}  // namespace accord::testing
