// local-sgd (DiLoCo, arXiv 2311.08105): each worker takes H inner steps of the algorithm's
// optimizer on its own copy, then every worker averages the pseudo-gradient θ_global − θ_worker
// and the shared θ_global takes an outer Nesterov step; the workers restart from it. The last
// step of a job is always an outer step, so the job ends with one set of parameters.
#include "actors/topology_builtins.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace accord {
namespace {

class local_sgd_worker final : public worker_topology {
public:
  local_sgd_worker(const topology_options& options, std::span<const float> initial)
      : local_steps_(options.local_steps), outer_rate_(options.outer_learning_rate),
        outer_momentum_(options.outer_momentum), global_(initial.begin(), initial.end()),
        local_(initial.begin(), initial.end()), pseudo_gradient_(initial.size()),
        velocity_(options.outer_momentum > 0 ? initial.size() : 0) {}

  void round(std::span<float> buffer, const topology_round& round, topology_peers& peers, algorithm_rules& rules,
             topology_report& report) override {
    steps_ = round.steps;
    const float scale = round.local_micro_batches > 0 ? static_cast<float>(1.0 / round.local_micro_batches) : 0.f;
    for (float& g : buffer) g *= scale;  // this worker's own mean gradient
    rules.local_step(local_, buffer);
    if (replicas_agree(round.step)) report.consensus_distance = outer_step(peers);
    std::copy(local_.begin(), local_.end(), buffer.begin());
  }

  bool replicas_agree(std::uint64_t step) const override {
    return (step + 1) % local_steps_ == 0 || step + 1 == steps_;
  }

private:
  // Averages the pseudo-gradients, steps θ_global, restarts the worker from it; returns the
  // workers' spread before the merge, sqrt(mean_i ‖θ_i − θ̄‖²).
  double outer_step(topology_peers& peers) {
    double own_square = 0;
    for (std::size_t i = 0; i < local_.size(); ++i) {
      pseudo_gradient_[i] = global_[i] - local_[i];
      own_square += static_cast<double>(pseudo_gradient_[i]) * pseudo_gradient_[i];
    }
    peers.all_reduce(std::span<float>(pseudo_gradient_));
    double squares[1] = {own_square};
    peers.all_reduce(std::span<double>(squares));
    const float inverse = 1.0f / static_cast<float>(peers.size());
    double mean_square = 0;
    for (std::size_t i = 0; i < global_.size(); ++i) {
      float delta = pseudo_gradient_[i] * inverse;
      mean_square += static_cast<double>(delta) * delta;
      if (outer_momentum_ > 0) {  // Nesterov: v ← μv + Δ, step along Δ + μv
        velocity_[i] = outer_momentum_ * velocity_[i] + delta;
        delta += outer_momentum_ * velocity_[i];
      }
      global_[i] -= outer_rate_ * delta;
    }
    local_ = global_;
    // mean_i ‖Δ_i‖² − ‖Δ̄‖² is the spread of the θ_i around their mean (Δ_i = θ_global − θ_i).
    return std::sqrt(std::max(0.0, squares[0] / peers.size() - mean_square));
  }

  std::uint64_t local_steps_;
  float outer_rate_, outer_momentum_;
  std::uint64_t steps_ = 0;
  std::vector<float> global_;           // θ_global after the last outer step (every worker's the same)
  std::vector<float> local_;            // this worker's own θ_i
  std::vector<float> pseudo_gradient_;  // Σ_i (θ_global − θ_i), then its mean
  std::vector<float> velocity_;         // outer momentum (none without it)
};

class local_sgd final : public topology {
public:
  explicit local_sgd(topology_options options) : options_(std::move(options)) {}
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float> initial) const override {
    return std::make_unique<local_sgd_worker>(options_, initial);
  }

private:
  topology_options options_;
};

void refuse(const std::string& why) { throw std::invalid_argument("--topology local-sgd: " + why); }

}  // namespace

void require_own_copies_fit(const topology_job& job, const std::string& name) {
  const std::string topology = "--topology " + name + ": ";
  if (!job.synchronous || !job.sharded_optimizer)
    throw std::invalid_argument(topology + "its inner steps use the optimizer of a synchronous, sharded-optimizer "
                                "algorithm (ddp, lion), not --algo " + job.algorithm);
  if (job.checkpoints)
    throw std::invalid_argument(topology + "checkpoints are not supported (each worker's own copy and optimizer "
                                "state are not saved)");
  if (job.membership_changes) throw std::invalid_argument(topology + "workers coming and going are not supported");
}

topology_factory local_sgd_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    require_own_copies_fit(job, "local-sgd");
    const topology_options& o = job.options;
    if (o.local_steps < 1) refuse("--local-steps must be at least 1");
    if (!std::isfinite(o.outer_learning_rate) || o.outer_learning_rate <= 0) refuse("--outer-lr must be a finite number > 0");
    if (!(o.outer_momentum >= 0 && o.outer_momentum < 1)) refuse("--outer-momentum must be in [0, 1)");
    return std::make_unique<local_sgd>(o);
  };
}

}  // namespace accord
