// gossip: each worker takes the algorithm's optimizer steps on its own copy and averages it
// with a neighbour on a graph at Poisson events (A2CiD2, arXiv 2306.08289).
// Asynchronous (the default): each worker runs the shared loop of actors/asynchronous_workers.hpp
// without waiting for any other: compute its micro-batches on its copy, step its own optimizer,
// then, at N ~ Poisson(rate) events drawn from the seed and the gradient's number, average with
// a neighbour among the active workers (ring: ±1; exponential: ±2^k; complete: any, i.e. random
// pairs). An average locks both copies, so both end with the same mean and an exchange that
// overlaps another on one worker reads that worker's copy after it (no lost update). The model
// evaluated and returned is the mean of the copies; their spread is reported every step. A
// worker that leaves cleanly spreads its copy's difference from the mean over the others (the
// mean keeps it); one that dies takes its copy along; a joiner starts from the mean.
// Lockstep (--gossip-lockstep): after each step the pairs of a matching on the graph (ring:
// alternating neighbour pairs; complete: a random matching) average their copies, each pair
// with probability 1 - exp(-rate); the job's last step averages every copy (one all-reduce) and
// reports the spread just before. Every worker draws the same choices from the seed and step.
#include "actors/topology_builtins.hpp"

#include "actors/asynchronous_workers.hpp"
#include "actors/gossip_processes.hpp"
#include "actors/gossip_rules.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <mutex>
#include <random>
#include <shared_mutex>
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

// The element-wise mean of `copies` (each of `length` values), summed in double.
std::vector<double> mean_in_double(const std::vector<const std::vector<float>*>& copies, std::size_t length) {
  std::vector<double> mean(length, 0.0);
  for (const std::vector<float>* copy : copies)
    for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += (*copy)[i];
  for (double& m : mean) m /= static_cast<double>(copies.size());
  return mean;
}

}  // namespace

std::mt19937_64 gossip_draw(std::uint64_t seed, std::uint64_t ticket) {
  return std::mt19937_64(seed * 0x9e3779b97f4a7c15ull + ticket);
}

// As many events as a Poisson process of `rate` per worker-step gives.
int gossip_events(double rate, std::mt19937_64& draw) {
  return rate > 0 ? std::poisson_distribution<int>(rate)(draw) : 0;
}

std::size_t gossip_neighbour(const std::string& graph, const std::vector<std::size_t>& present, std::size_t w,
                             std::mt19937_64& draw) {
  const auto n = present.size();
  const auto at = static_cast<std::size_t>(std::find(present.begin(), present.end(), w) - present.begin());
  if (n < 2 || at == n) return w;
  if (graph == "complete") {
    const std::size_t other = std::uniform_int_distribution<std::size_t>(0, n - 2)(draw);
    return present[other < at ? other : other + 1];
  }
  std::size_t hop = 1;
  if (graph == "exponential") {  // ±2^k hops, 2^k < n
    std::size_t ways = 0;
    while ((std::size_t{1} << (ways + 1)) < n) ++ways;
    hop = std::size_t{1} << std::uniform_int_distribution<std::size_t>(0, ways)(draw);
  }
  const bool forward = std::bernoulli_distribution(0.5)(draw);
  return present[(forward ? at + hop : at + n - hop) % n];
}

void step_own_copy(optimizer& opt, std::vector<float>& copy, computed_gradient& g, const asynchronous_setup& setup) {
  const float scale = g.micro_batches > 0 ? static_cast<float>(1.0 / g.micro_batches) : 0.f;
  for (float& v : *g.sum) v *= scale;
  const std::uint64_t step = g.ticket / static_cast<std::uint64_t>(setup.workers);
  opt.step(copy, *g.sum, learning_rate_at(setup.schedule, step));
}

std::pair<std::vector<float>, double> mean_and_spread(const std::vector<const std::vector<float>*>& copies,
                                                      bool with_mean) {
  if (copies.empty()) return {{}, 0.0};
  const std::vector<double> mean = mean_in_double(copies, copies.front()->size());
  double square = 0;
  for (const std::vector<float>* copy : copies)
    for (std::size_t i = 0; i < mean.size(); ++i) square += ((*copy)[i] - mean[i]) * ((*copy)[i] - mean[i]);
  std::vector<float> result;
  if (with_mean) result.assign(mean.begin(), mean.end());
  return {std::move(result), std::sqrt(square / static_cast<double>(copies.size()))};
}

namespace {

// The asynchronous workers' copies, exchanges and membership.
class gossip_run final : public asynchronous_run, private asynchronous_use {
public:
  gossip_run(caf::actor_system& system, asynchronous_setup setup, const topology_options& options, std::uint64_t seed)
      : graph_(options.gossip_graph), rate_(options.gossip_rate), seed_(seed) {
    setup.max_ahead = ~std::uint64_t{0} / 4;  // nobody waits for anybody
    workers_ = std::make_unique<asynchronous_workers>(system, std::move(setup));
    const asynchronous_setup& s = workers_->setup();
    const auto most = static_cast<std::size_t>(workers_->most_workers());
    copies_.assign(most, s.initial);
    optimizers_.resize(most);
    locks_ = std::make_unique<std::mutex[]>(most);
    active_.assign(most, false);
    for (std::size_t w = 0; w < static_cast<std::size_t>(s.workers); ++w) {
      active_[w] = true;
      optimizers_[w] = make_optimizer(s.optimizer, s.initial.size());
    }
    workers_->start(*this);
  }
  ~gossip_run() override {
    stop();
    workers_->join();
  }

  void stop() override { workers_->stop(); }

  std::vector<float> finish() override {
    workers_->join();
    return spread(true).first;
  }

  std::size_t state_bytes() const override {
    std::size_t bytes = 0;
    for (std::size_t w = 0; w < copies_.size(); ++w)
      if (optimizers_[w]) bytes += (copies_[w].size() + optimizers_[w]->state().values.size()) * sizeof(float);
    return bytes;
  }

private:
  std::optional<std::vector<float>> fetch(int w, std::uint64_t, caf::scoped_actor&) override {
    std::lock_guard lock(locks_[static_cast<std::size_t>(w)]);
    return copies_[static_cast<std::size_t>(w)];
  }

  void deliver(int w, computed_gradient g, caf::scoped_actor&) override {
    const auto mine = static_cast<std::size_t>(w);
    {
      std::lock_guard lock(locks_[mine]);
      step_own_copy(*optimizers_[mine], copies_[mine], g, workers_->setup());
    }
    workers_->applied({w, 0, g.micro_batches, g.loss_sum, g.items});
    std::mt19937_64 draw = gossip_draw(seed_, g.ticket);
    const int events = gossip_events(rate_, draw);
    for (int e = 0; e < events && !workers_->stopping(); ++e) exchange(w, draw);
  }

  asynchronous_view observe(std::uint64_t, bool with_parameters, caf::scoped_actor&) override {
    auto [mean, distance] = spread(with_parameters);
    asynchronous_view view;
    view.consensus_distance = distance;
    if (with_parameters) view.parameters = std::make_shared<std::vector<float>>(std::move(mean));
    return view;
  }

  void rest(int w, bool crashed) override {
    std::unique_lock membership(membership_);
    const auto leaver = static_cast<std::size_t>(w);
    if (!active_[leaver]) return;
    active_[leaver] = false;
    if (crashed) return;  // its copy dies with it
    // Each remaining copy takes (θ_w − θ̄)/(n − 1): their mean is the mean with θ_w.
    const std::vector<std::size_t> remaining = active_workers();
    if (remaining.empty()) return;
    std::vector<std::unique_lock<std::mutex>> held;
    for (std::size_t k : remaining) held.emplace_back(locks_[k]);
    const std::vector<float> mean = mean_of(remaining, &copies_[leaver]);
    const float share = 1.0f / static_cast<float>(remaining.size());
    for (std::size_t k : remaining)
      for (std::size_t i = 0; i < mean.size(); ++i) copies_[k][i] += (copies_[leaver][i] - mean[i]) * share;
  }

  void wake(int w) override {
    std::unique_lock membership(membership_);
    const auto joiner = static_cast<std::size_t>(w);
    if (active_[joiner]) return;
    std::vector<std::size_t> present = active_workers();
    if (!present.empty()) {
      std::vector<std::unique_lock<std::mutex>> held;
      for (std::size_t k : present) held.emplace_back(locks_[k]);
      copies_[joiner] = mean_of(present, nullptr);  // the average model, as a fresh worker would pull
    }
    optimizers_[joiner] = make_optimizer(workers_->setup().optimizer, copies_[joiner].size());
    active_[joiner] = true;
  }

  // With membership_ held: the active workers, by rank.
  std::vector<std::size_t> active_workers() const {
    std::vector<std::size_t> present;
    for (std::size_t k = 0; k < active_.size(); ++k)
      if (active_[k]) present.push_back(k);
    return present;
  }

  // The mean of the copies of `ranks` (and `also`, when given), their locks held.
  std::vector<float> mean_of(const std::vector<std::size_t>& ranks, const std::vector<float>* also) const {
    std::vector<const std::vector<float>*> copies;
    for (std::size_t k : ranks) copies.push_back(&copies_[k]);
    if (also) copies.push_back(also);
    const std::vector<double> mean = mean_in_double(copies, copies_[ranks.front()].size());
    return std::vector<float>(mean.begin(), mean.end());
  }

  // One pairwise average of `w` with a neighbour: both copies locked, both end with the mean.
  void exchange(int w, std::mt19937_64& draw) {
    const auto mine = static_cast<std::size_t>(w);
    std::shared_lock membership(membership_);
    const std::size_t peer = gossip_neighbour(graph_, active_workers(), mine, draw);
    if (peer == mine) return;
    const std::size_t bytes = copies_[mine].size() * sizeof(float);
    workers_->cross_link(w, bytes);  // both copies cross at once
    workers_->count_sent(static_cast<int>(peer), bytes);
    std::scoped_lock pair(locks_[mine], locks_[peer]);
    std::vector<float>& a = copies_[mine];
    std::vector<float>& b = copies_[peer];
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = 0.5f * (a[i] + b[i]);
  }

  // The mean of the active copies (empty unless `with_mean`) and their spread,
  // sqrt(mean_i ‖θ_i − θ̄‖²).
  std::pair<std::vector<float>, double> spread(bool with_mean) {
    std::shared_lock membership(membership_);
    const std::vector<std::size_t> present = active_workers();
    std::vector<std::vector<float>> snapshot;
    for (std::size_t k : present) {
      std::lock_guard lock(locks_[k]);
      snapshot.push_back(copies_[k]);
    }
    std::vector<const std::vector<float>*> copies;
    for (const auto& copy : snapshot) copies.push_back(&copy);
    return mean_and_spread(copies, with_mean);
  }

  std::string graph_;
  double rate_;
  std::uint64_t seed_;
  std::unique_ptr<asynchronous_workers> workers_;
  std::vector<std::vector<float>> copies_;               // θ_i by worker, each under its lock
  std::vector<std::unique_ptr<optimizer>> optimizers_;   // each worker's own state
  std::unique_ptr<std::mutex[]> locks_;
  std::shared_mutex membership_;                         // exclusive while workers come and go
  std::vector<bool> active_;                             // guarded by membership_
};

class asynchronous_gossip final : public asynchronous_topology {
public:
  asynchronous_gossip(topology_options options, std::uint64_t seed) : options_(std::move(options)), seed_(seed) {}
  std::unique_ptr<asynchronous_run> start(caf::actor_system& system, asynchronous_setup setup) const override {
    if (setup.peers) return start_gossip_processes(system, std::move(setup), options_, seed_);
    return std::make_unique<gossip_run>(system, std::move(setup), options_, seed_);
  }
  bool follows_membership() const override { return true; }
  bool runs_between_processes() const override { return true; }

private:
  topology_options options_;
  std::uint64_t seed_;
};

void refuse(const std::string& why) { throw std::invalid_argument("--topology gossip: " + why); }

}  // namespace

topology_factory gossip_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    const topology_options& o = job.options;
    if (!std::isfinite(o.gossip_rate) || o.gossip_rate < 0)
      throw std::invalid_argument("--gossip-rate must be a finite number >= 0");
    if (o.gossip_lockstep) {
      require_own_copies_fit(job, "gossip");
      if (o.gossip_graph != "ring" && o.gossip_graph != "complete")
        throw std::invalid_argument("--gossip-graph: '" + o.gossip_graph + "' (expected ring|complete with --gossip-lockstep)");
      return std::make_unique<gossip>(o, job.seed);
    }
    if (o.gossip_graph != "ring" && o.gossip_graph != "exponential" && o.gossip_graph != "complete")
      throw std::invalid_argument("--gossip-graph: '" + o.gossip_graph + "' (expected ring|exponential|complete)");
    if (!job.synchronous || !job.sharded_optimizer)
      refuse("its workers step the optimizer of a synchronous, sharded-optimizer algorithm (ddp, lion), not --algo " +
             job.algorithm);
    if (job.checkpoints) refuse("checkpoints are not supported (each worker's own copy and optimizer state are not saved)");
    return std::make_unique<asynchronous_gossip>(o, job.seed);
  };
}

}  // namespace accord
