// gossip: each worker takes the algorithm's optimizer steps on its own copy; after each step the
// pairs of a matching on the graph (ring: alternating neighbour pairs; complete: a random
// matching) average their copies, each pair with probability 1 - exp(-rate), as events of a
// Poisson process of that rate per worker and step would (A2CiD2, arXiv 2306.08289). Pairwise
// averaging keeps the mean of the copies; the job's last step averages every copy (one
// all-reduce), so it ends with the average model, and reports the spread just before.
// The choices come from the job's seed and the step: every worker draws the same ones.
#include "actors/topology_builtins.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace accord {
namespace {

class gossip_worker final : public worker_topology {
public:
  gossip_worker(const topology_options& options, std::uint64_t seed, std::span<const float> initial)
      : complete_(options.gossip_graph == "complete"), activation_(1.0 - std::exp(-options.gossip_rate)), seed_(seed),
        local_(initial.begin(), initial.end()), theirs_(initial.size()) {}

  void round(std::span<float> buffer, const topology_round& round, topology_peers& peers, algorithm_rules& rules,
             topology_report& report) override {
    steps_ = round.steps;
    const float scale = round.local_micro_batches > 0 ? static_cast<float>(1.0 / round.local_micro_batches) : 0.f;
    for (float& g : buffer) g *= scale;
    rules.local_step(local_, buffer);
    if (const int partner = partner_of(peers.rank(), peers.size(), round.step); partner >= 0) {
      peers.exchange(partner, local_, theirs_);
      for (std::size_t i = 0; i < local_.size(); ++i) local_[i] = 0.5f * (local_[i] + theirs_[i]);  // the same bits on both
    }
    if (replicas_agree(round.step)) report.consensus_distance = average(peers);
    std::copy(local_.begin(), local_.end(), buffer.begin());
  }

  bool replicas_agree(std::uint64_t step) const override { return step + 1 == steps_; }

private:
  // This step's partner of `rank`, or -1 when it does not gossip in this step.
  int partner_of(int rank, int world, std::uint64_t step) const {
    if (world < 2) return -1;
    std::vector<int> order(static_cast<std::size_t>(world));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 draw(seed_ * 0x9e3779b97f4a7c15ull + step);
    if (complete_) {
      std::shuffle(order.begin(), order.end(), draw);
    } else {  // ring: pairs (0,1),(2,3),... on even steps, (1,2),(3,4),... on odd ones
      std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(step % 2), order.end());
    }
    std::bernoulli_distribution gossips(activation_);
    for (std::size_t p = 0; p + 1 < order.size(); p += 2) {
      const bool active = gossips(draw);  // drawn for every pair, so every worker draws alike
      if (order[p] == rank) return active ? order[p + 1] : -1;
      if (order[p + 1] == rank) return active ? order[p] : -1;
    }
    return -1;
  }

  // Every copy becomes their mean; returns their spread before, sqrt(mean_i ‖θ_i − θ̄‖²).
  double average(topology_peers& peers) {
    double own_square = 0;
    for (float v : local_) own_square += static_cast<double>(v) * v;
    peers.all_reduce(std::span<float>(local_));
    double squares[1] = {own_square};
    peers.all_reduce(std::span<double>(squares));
    const float inverse = 1.0f / static_cast<float>(peers.size());
    double mean_square = 0;
    for (float& v : local_) {
      v *= inverse;
      mean_square += static_cast<double>(v) * v;
    }
    return std::sqrt(std::max(0.0, squares[0] / peers.size() - mean_square));
  }

  bool complete_;
  double activation_;
  std::uint64_t seed_;
  std::uint64_t steps_ = 0;
  std::vector<float> local_;   // this worker's own θ_i
  std::vector<float> theirs_;  // the partner's, during an exchange
};

class gossip final : public topology {
public:
  gossip(topology_options options, std::uint64_t seed) : options_(std::move(options)), seed_(seed) {}
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float> initial) const override {
    return std::make_unique<gossip_worker>(options_, seed_, initial);
  }

private:
  topology_options options_;
  std::uint64_t seed_;
};

}  // namespace

topology_factory gossip_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    require_own_copies_fit(job, "gossip");
    const topology_options& o = job.options;
    if (o.gossip_graph != "ring" && o.gossip_graph != "complete")
      throw std::invalid_argument("--gossip-graph: '" + o.gossip_graph + "' (expected ring|complete)");
    if (!std::isfinite(o.gossip_rate) || o.gossip_rate < 0)
      throw std::invalid_argument("--gossip-rate must be a finite number >= 0");
    return std::make_unique<gossip>(o, job.seed);
  };
}

}  // namespace accord
