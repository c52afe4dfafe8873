// Your own rule: signSGD with error feedback (Karimireddy et al., arXiv 1901.09847) as an
// accord algorithm, on the synchronous pipeline and on ACCO's, training accord's byte-level
// GPT on the fortunes corpus:
//   accord-example-custom-rule
#include <accord/job.hpp>
#include <accord/update_rule.hpp>

#include "data/text.hpp"   // accord's own corpus and model, installed with the package
#include "models/gpt.hpp"

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

// Each worker compresses p = lr·g + e to δ = (‖p‖₁/n)·sign(p) and keeps e' = p − δ for the next
// round; the workers average their δ and step θ -= mean(δ). Estimate rounds (ACCO) commit nothing.
class signsgd_error_feedback final : public accord::aggregation_rule {
public:
  explicit signsgd_error_feedback(const accord::rule_setup& s)
      : parameters_(s.initial.begin(), s.initial.end()), error_(s.initial.size()), next_error_(s.initial.size()) {}

  void apply(accord::round_peers& peers, std::span<float> buffer, const accord::round_view& round) override {
    const double n = static_cast<double>(buffer.size());
    const float mean = round.micro_batches > 0 ? static_cast<float>(1.0 / round.micro_batches) : 0.0f;
    double l1 = 0;
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      buffer[i] = round.learning_rate * mean * buffer[i] + error_[i];  // p
      l1 += std::fabs(buffer[i]);
    }
    const float scale = static_cast<float>(l1 / n);
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      const float delta = buffer[i] >= 0 ? scale : -scale;
      next_error_[i] = buffer[i] - delta;
      buffer[i] = delta;
    }
    peers.all_reduce(buffer);  // the same sums, bit for bit, on every worker
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = parameters_[i] - buffer[i] / peers.size();
    if (round.estimate) return;
    parameters_.assign(buffer.begin(), buffer.end());
    error_.swap(next_error_);
  }
  std::size_t state_bytes() const override { return 3 * parameters_.size() * sizeof(float); }

private:
  std::vector<float> parameters_, error_, next_error_;
};

}  // namespace

int main() try {
  auto make = [](const accord::rule_setup& s) { return std::make_unique<signsgd_error_feedback>(s); };
  accord::register_algorithm("signsgd-ef", accord::pipeline::synchronous, make, "sgd", "signSGD, error feedback");
  accord::register_algorithm("acco-signsgd-ef", accord::pipeline::acco, make, "sgd", "the same behind ACCO");

  accord::gpt_config shape;
  shape.context = 32, shape.layers = 1, shape.heads = 2, shape.width = 32;
  accord::gpt net(shape);
  const auto train = accord::load_default_corpus(shape.context, true, 1);
  const auto eval = accord::load_default_corpus(shape.context, false, 1);
  for (const char* algorithm : {"signsgd-ef", "acco-signsgd-ef"}) {
    accord::job_config config;
    config.algorithm = algorithm;
    config.workers = 2;
    config.steps = 40;
    config.micro_batch = 8;
    config.learning_rate = 0.3f;
    config.eval_interval = 0;
    config.eval_examples = 64;
    config.blas_threads = 1;
    const accord::job_result result = accord::run_job(net, train, eval, config);
    std::printf("%s: train loss %.4f -> %.4f, eval loss %.4f, %.1f bits/param/step, replicas identical: %s\n",
                algorithm, result.steps.front().train_loss, result.steps.back().train_loss, result.final_eval_loss,
                result.bits_per_parameter_per_step, result.replicas_identical ? "yes" : "no");
    // Untrained, the loss is about ln 256 = 5.5; byte frequencies alone bring it near 3.4.
    if (!(result.final_eval_loss < 4.0) || !result.replicas_identical) {
      std::fprintf(stderr, "accord-example-custom-rule: %s did not train\n", algorithm);
      return 1;
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "accord-example-custom-rule: %s\n", error.what());
  return 1;
}
