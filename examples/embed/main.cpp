// An embedder's own model and data, trained by accord through its public API only (no CAF):
// logistic regression on two overlapping clouds, ACCO with two workers in this process.
#include <accord/job.hpp>
#include <accord/model.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>

namespace {

constexpr std::size_t width = 8;

// p(label 1 | x) = sigmoid(w·x + b), parameters laid out as [w_0 .. w_{width-1}, b].
class logistic_regression final : public accord::model {
public:
  std::string signature() const override { return "logistic_regression(" + std::to_string(width) + ")"; }
  std::size_t parameter_count() const override { return width + 1; }
  void initialize(std::span<float> parameters, std::uint64_t) const override {
    std::fill(parameters.begin(), parameters.end(), 0.0f);
  }
  double forward_backward(std::span<const float> parameters, const accord::batch& input,
                          std::span<float> gradients) override {
    std::fill(gradients.begin(), gradients.end(), 0.0f);
    return mean_cross_entropy(parameters, input, gradients);
  }
  // Optional: adding into the caller's running sum spares accord a gradient buffer per worker.
  double accumulate_gradients(std::span<const float> parameters, const accord::batch& input,
                              std::span<float> gradients) override {
    return mean_cross_entropy(parameters, input, gradients);
  }
  double evaluate(std::span<const float> parameters, const accord::batch& input) override {
    return mean_cross_entropy(parameters, input, {});
  }
  std::unique_ptr<accord::model> clone() const override { return std::make_unique<logistic_regression>(); }

private:
  // Adds d(mean loss)/d(parameters) to `gradients` unless it is empty.
  static double mean_cross_entropy(std::span<const float> parameters, const accord::batch& input,
                                   std::span<float> gradients) {
    const double scale = 1.0 / static_cast<double>(input.examples);
    double loss = 0;
    for (std::size_t e = 0; e < input.examples; ++e) {
      const float* x = &input.features[e * width];
      double logit = parameters[width];
      for (std::size_t i = 0; i < width; ++i) logit += parameters[i] * x[i];
      const double label = input.targets[e];
      // -log sigmoid(±logit), written so that large logits neither overflow nor lose precision.
      const double signed_logit = label > 0 ? logit : -logit;
      loss += std::log1p(std::exp(-std::abs(signed_logit))) + std::max(-signed_logit, 0.0);
      if (gradients.empty()) continue;
      const double error = (1.0 / (1.0 + std::exp(-logit)) - label) * scale;
      for (std::size_t i = 0; i < width; ++i) gradients[i] += static_cast<float>(error * x[i]);
      gradients[width] += static_cast<float>(error);
    }
    return loss * scale;
  }
};

// Example p: label from a hash of p, features uniform in ±1 around -0.5 (label 0) or +0.5 (label 1).
// A pure function of (seed, p), as accord::dataset requires.
class two_clouds final : public accord::dataset {
public:
  explicit two_clouds(std::uint64_t seed) : seed_(seed) {}
  std::string describe() const override { return "two clouds, seed " + std::to_string(seed_); }
  std::uint64_t size() const override { return 1u << 16; }
  accord::batch examples(std::uint64_t first, std::size_t count) const override {
    accord::batch out;
    out.examples = count;
    for (std::uint64_t p = first; p < first + count; ++p) {
      const std::uint64_t key = mix(seed_) + (p % size()) * (width + 1);
      const int label = static_cast<int>(mix(key) & 1);
      out.targets.push_back(label);
      for (std::size_t i = 0; i < width; ++i) {
        const double uniform = static_cast<double>(mix(key + 1 + i) >> 11) * 0x1.0p-53;  // [0, 1)
        out.features.push_back(static_cast<float>((label ? 0.5 : -0.5) + 2.0 * uniform - 1.0));
      }
    }
    return out;
  }

private:
  // splitmix64's finaliser: consecutive keys give unrelated bits.
  static std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  std::uint64_t seed_;
};

}  // namespace

int main() try {
  accord::job_config config;
  config.algorithm = "acco";
  config.workers = 2;
  config.steps = 40;
  config.micro_batch = 32;
  config.optimizer = "adamw";
  config.learning_rate = 0.05f;
  config.eval_interval = 0;  // evaluate once, at the end
  config.blas_threads = 1;

  logistic_regression net;
  const auto result = accord::run_job(net, std::make_shared<two_clouds>(1), std::make_shared<two_clouds>(2),
                                      config, [](const accord::step_metrics& step) {
                                        std::printf("step %3llu  train loss %.4f\n",
                                                    static_cast<unsigned long long>(step.step), step.train_loss);
                                      });

  const double first = result.steps.front().train_loss;
  const double last = result.steps.back().train_loss;
  std::printf("train loss %.4f -> %.4f, eval loss %.4f, replicas identical: %s\n", first, last,
              result.final_eval_loss, result.replicas_identical ? "yes" : "no");
  // Starting from w = 0 the loss is log 2; a trained model separates the clouds far better.
  if (!(last < 0.5 * first) || !(result.final_eval_loss < 0.5 * std::log(2.0)) || !result.replicas_identical) {
    std::fprintf(stderr, "accord-embed: training did not converge\n");
    return 1;
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "accord-embed: %s\n", error.what());
  return 1;
}
