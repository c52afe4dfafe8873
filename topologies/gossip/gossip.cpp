// gossip: each worker takes the algorithm's optimizer steps on its own copy and averages it
// with a neighbour on a graph at Poisson events (A2CiD2, arXiv 2306.08289).
// Asynchronous (the default): each worker runs the shared loop of topologies/asynchronous/workers.hpp
// without waiting for any other: compute its micro-batches on its copy, step its own optimizer,
// then, at N ~ Poisson(rate) events drawn from the seed and the gradient's number, average with
// a neighbour among the active workers (ring: ±1; exponential: ±2^k; complete: any, i.e. random
// pairs). An average locks both copies, so both end with the same mean and an exchange that
// overlaps another on one worker reads that worker's copy after it (no lost update). The model
// evaluated and returned is the mean of the copies; their spread is reported every step. A
// worker that leaves cleanly spreads its copy's difference from the mean over the others (the
// mean keeps it); one that dies takes its copy along; a joiner starts from the mean.
// --gossip-momentum a2cid2: A2CiD2's continuous momentum, as the paper's reference code does
// it: each worker also keeps θ̃; between its events θ and θ̃ mix (an ODE solved in closed form),
// a gradient's update goes to both, and an average also moves θ̃ by α̃ towards the neighbour's θ;
// η and α̃ come from the graph (χ1, χ2 of its Laplacian weighted by the event rates). One
// simplification: time is the job's steps (applied gradients / workers), not each worker's
// wall clock, so every copy mixes on one clock whatever its speed.
// Lockstep (--gossip-lockstep): after each step the pairs of a matching on the graph (ring:
// alternating neighbour pairs; complete: a random matching) average their copies, each pair
// with probability 1 - exp(-rate); the job's last step averages every copy (one all-reduce) and
// reports the spread just before. Every worker draws the same choices from the seed and step.
#include "topologies/builtins.hpp"

#include "topologies/asynchronous/workers.hpp"
#include "topologies/gossip/processes.hpp"
#include "topologies/gossip/rules.hpp"
#include "topologies/gossip/arithmetic.hpp"

#include <algorithm>
#include <atomic>
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
  gossip_worker(const gossip_options& options, std::uint64_t seed, std::uint64_t steps,
                std::span<const float> initial)
      : complete_(options.gossip_graph == "complete"), activation_(1.0 - std::exp(-options.gossip_rate)), seed_(seed),
        steps_(steps), local_(initial.begin(), initial.end()), theirs_(initial.size()) {}

  void round(std::span<float> buffer, const round_view& round, round_peers& peers, algorithm_rules& rules,
             topology_report& report) override {
    const float scale = round.micro_batches > 0 ? static_cast<float>(1.0 / round.micro_batches) : 0.f;
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
  double average(round_peers& peers) {
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
  std::uint64_t steps_;        // the job's
  std::vector<float> local_;   // this worker's own θ_i
  std::vector<float> theirs_;  // the partner's, during an exchange
};

class gossip final : public topology {
public:
  gossip(gossip_options options, std::uint64_t seed, std::uint64_t steps)
      : options_(std::move(options)), seed_(seed), steps_(steps) {}
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float> initial) const override {
    return std::make_unique<gossip_worker>(options_, seed_, steps_, initial);
  }

private:
  gossip_options options_;
  std::uint64_t seed_;
  std::uint64_t steps_;
};

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
  return pick_neighbour(neighbour_offsets(graph, present.size()), present, w, draw);
}

void step_own_copy(optimizer& opt, std::vector<float>& copy, computed_gradient& g, const asynchronous_setup& setup,
                   std::span<float> tilde) {
  const float scale = g.micro_batches > 0 ? static_cast<float>(1.0 / g.micro_batches) : 0.f;
  for (float& v : *g.sum) v *= scale;
  const std::uint64_t step = setup.first_step + g.ticket / static_cast<std::uint64_t>(setup.workers);
  if (!tilde.empty())  // θ̃ takes the optimizer's update too: θ̃ − θ is kept across the step
    for (std::size_t i = 0; i < copy.size(); ++i) tilde[i] -= copy[i];
  opt.step(copy, *g.sum, learning_rate_at(setup.schedule, step));
  if (!tilde.empty())
    for (std::size_t i = 0; i < copy.size(); ++i) tilde[i] += copy[i];
}

std::pair<std::vector<float>, double> mean_and_spread(const std::vector<std::vector<float>>& copies, bool with_mean) {
  if (copies.empty()) return {{}, 0.0};
  const std::vector<double> mean = mean_in_double(std::vector<std::span<const float>>(copies.begin(), copies.end()));
  double square = 0;
  for (const std::vector<float>& copy : copies)
    for (std::size_t i = 0; i < mean.size(); ++i) square += (copy[i] - mean[i]) * (copy[i] - mean[i]);
  std::vector<float> result;
  if (with_mean) result.assign(mean.begin(), mean.end());
  return {std::move(result), std::sqrt(square / static_cast<double>(copies.size()))};
}

namespace {

// The asynchronous workers' copies, exchanges and membership. With A2CiD2 each worker also
// keeps θ̃ and both mix continuously between its events (topologies/gossip/arithmetic.hpp); time runs in
// steps of the job (one per `workers` applied gradients), so that every copy mixes on one clock.
class gossip_run final : public asynchronous_run, private asynchronous_use {
public:
  gossip_run(caf::actor_system& system, asynchronous_setup setup, const gossip_options& options, std::uint64_t seed)
      : graph_(options.gossip_graph), rate_(options.gossip_rate), momentum_(options.gossip_momentum == "a2cid2"),
        seed_(seed) {
    setup.max_ahead = ~std::uint64_t{0} / 4;  // nobody waits for anybody
    workers_ = std::make_unique<asynchronous_workers>(system, std::move(setup));
    const asynchronous_setup& s = workers_->setup();
    const auto most = static_cast<std::size_t>(workers_->most_workers());
    copies_.assign(most, s.initial);
    if (momentum_) tildes_.assign(most, s.initial);
    mixed_until_.assign(most, 0.0);
    optimizers_.resize(most);
    locks_ = std::make_unique<std::mutex[]>(most);
    active_.assign(most, false);
    for (std::size_t w = 0; w < static_cast<std::size_t>(s.workers); ++w) {
      active_[w] = true;
      optimizers_[w] = make_optimizer(s.optimizer, s.initial.size());
    }
    regraph();
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
    const std::size_t variables = momentum_ ? 2 : 1;  // θ, and A2CiD2's θ̃
    for (std::size_t w = 0; w < copies_.size(); ++w)
      if (optimizers_[w])
        bytes += (variables * copies_[w].size() + optimizers_[w]->state().values.size()) * sizeof(float);
    return bytes;
  }

private:
  std::optional<std::vector<float>> fetch(int w, std::uint64_t, caf::scoped_actor&) override {
    std::shared_lock membership(membership_);
    std::lock_guard lock(locks_[static_cast<std::size_t>(w)]);
    catch_up(static_cast<std::size_t>(w), clock_.load());
    return copies_[static_cast<std::size_t>(w)];
  }

  void deliver(int w, computed_gradient g, caf::scoped_actor&) override {
    const auto mine = static_cast<std::size_t>(w);
    {
      std::shared_lock membership(membership_);
      std::lock_guard lock(locks_[mine]);
      catch_up(mine, clock_.load());
      step_own_copy(*optimizers_[mine], copies_[mine], g, workers_->setup(),
                    momentum_ ? std::span<float>(tildes_[mine]) : std::span<float>());
    }
    clock_.fetch_add(1.0 / static_cast<double>(workers_->setup().workers));
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
    const std::vector<std::size_t> remaining = active_workers();
    std::vector<std::unique_lock<std::mutex>> held;
    for (std::size_t k : remaining) held.emplace_back(locks_[k]);
    const double now = clock_.load();
    for (std::size_t k : remaining) catch_up(k, now);  // mixed so far at the old count's rate
    catch_up(leaver, now);
    // A clean leaver's copy stays in the mean; a dead one's dies with it.
    if (!crashed) {
      spread_leaver(spans_of(copies_, remaining), copies_[leaver]);
      if (momentum_) spread_leaver(spans_of(tildes_, remaining), tildes_[leaver]);
    }
    regraph();
  }

  void wake(int w) override {
    std::unique_lock membership(membership_);
    const auto joiner = static_cast<std::size_t>(w);
    if (active_[joiner]) return;
    const std::vector<std::size_t> present = active_workers();
    const double now = clock_.load();
    if (!present.empty()) {
      std::vector<std::unique_lock<std::mutex>> held;
      for (std::size_t k : present) held.emplace_back(locks_[k]);
      for (std::size_t k : present) catch_up(k, now);
      std::vector<std::span<const float>> copies;
      for (std::size_t k : present) copies.emplace_back(copies_[k]);
      const std::vector<double> mean = mean_in_double(copies);
      copies_[joiner].assign(mean.begin(), mean.end());  // the average model, as a fresh worker would pull
    }
    if (momentum_) tildes_[joiner] = copies_[joiner];
    mixed_until_[joiner] = now;
    optimizers_[joiner] = make_optimizer(workers_->setup().optimizer, copies_[joiner].size());
    active_[joiner] = true;
    regraph();
  }

  // With membership_ held exclusively (or before the workers start): how the active workers
  // pick neighbours, and A2CiD2's constants for them. Each worker starts rate · workers / n
  // events per step (a step is `workers` gradients, whoever computes them).
  void regraph() {
    const std::size_t n = active_workers().size();
    offsets_ = neighbour_offsets(graph_, n);
    if (momentum_ && n > 0)
      constants_ = a2cid2_for(offsets_, n, rate_ * workers_->setup().workers / static_cast<double>(n));
  }

  // With membership_ held and worker k's lock: its θ and θ̃ mixed up to `now` (A2CiD2 only).
  void catch_up(std::size_t k, double now) {
    if (!momentum_) return;
    a2cid2_mix(copies_[k], tildes_[k], constants_.eta, now - mixed_until_[k]);
    mixed_until_[k] = std::max(mixed_until_[k], now);
  }

  static std::vector<std::span<float>> spans_of(std::vector<std::vector<float>>& all, const std::vector<std::size_t>& ranks) {
    std::vector<std::span<float>> spans;
    for (std::size_t k : ranks) spans.emplace_back(all[k]);
    return spans;
  }

  // With membership_ held: the active workers, by rank.
  std::vector<std::size_t> active_workers() const {
    std::vector<std::size_t> present;
    for (std::size_t k = 0; k < active_.size(); ++k)
      if (active_[k]) present.push_back(k);
    return present;
  }

  // One pairwise average of `w` with a neighbour: both copies locked, both end with the mean.
  // Each side sends its copy (two copies cross, one each way at once: one copy's wire time).
  void exchange(int w, std::mt19937_64& draw) {
    const auto mine = static_cast<std::size_t>(w);
    std::shared_lock membership(membership_);
    const std::size_t peer = pick_neighbour(offsets_, active_workers(), mine, draw);
    if (peer == mine) return;
    const std::size_t bytes = copies_[mine].size() * sizeof(float);
    workers_->cross_link(w, bytes, static_cast<int>(peer));
    workers_->count_sent(static_cast<int>(peer), bytes, w);
    std::scoped_lock pair(locks_[mine], locks_[peer]);
    if (!momentum_) return average_pair(copies_[mine], copies_[peer]);
    const double now = clock_.load();  // both at one time: the event is theirs alike
    catch_up(mine, now);
    catch_up(peer, now);
    average_pair(copies_[mine], copies_[peer], tildes_[mine], tildes_[peer], constants_.alpha_tilde);
  }

  // The mean of the active copies (empty unless `with_mean`) and their spread,
  // sqrt(mean_i ‖θ_i − θ̄‖²). With A2CiD2 each copy is mixed up to now first.
  std::pair<std::vector<float>, double> spread(bool with_mean) {
    std::shared_lock membership(membership_);
    const std::vector<std::size_t> present = active_workers();
    const double now = clock_.load();
    std::vector<std::vector<float>> snapshot;
    for (std::size_t k : present) {
      std::lock_guard lock(locks_[k]);
      catch_up(k, now);
      snapshot.push_back(copies_[k]);
    }
    return mean_and_spread(snapshot, with_mean);
  }

  std::string graph_;
  double rate_;
  bool momentum_;  // A2CiD2
  std::uint64_t seed_;
  std::unique_ptr<asynchronous_workers> workers_;
  std::vector<std::vector<float>> copies_;               // θ_i by worker, each under its lock
  std::vector<std::vector<float>> tildes_;               // A2CiD2's θ̃_i, under the same lock
  std::vector<double> mixed_until_;                      // when θ_i and θ̃_i were last mixed, under the same lock
  std::atomic<double> clock_{0};                         // steps of the job: 1 / workers per applied gradient
  std::vector<std::unique_ptr<optimizer>> optimizers_;   // each worker's own state
  std::unique_ptr<std::mutex[]> locks_;
  std::shared_mutex membership_;                         // exclusive while workers come and go
  std::vector<bool> active_;                             // guarded by membership_
  std::vector<neighbour_offset> offsets_;                // guarded by membership_
  a2cid2_constants constants_;                           // guarded by membership_
};

class asynchronous_gossip final : public asynchronous_topology {
public:
  asynchronous_gossip(gossip_options options, std::uint64_t seed) : options_(std::move(options)), seed_(seed) {}
  std::unique_ptr<asynchronous_run> start(caf::actor_system& system, asynchronous_setup setup) const override {
    if (setup.peers) return start_gossip_processes(system, std::move(setup), options_, seed_);
    return std::make_unique<gossip_run>(system, std::move(setup), options_, seed_);
  }
  bool follows_membership() const override { return true; }
  bool runs_between_processes() const override { return true; }
  // Its kept steps average the copies and optimizer states, where A2CiD2's θ̃ settles at the mean.
  bool elastic_between_processes() const override { return true; }

private:
  gossip_options options_;
  std::uint64_t seed_;
};

void refuse(const std::string& why) { throw std::invalid_argument("--topology gossip: " + why); }

}  // namespace

topology_factory gossip_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    gossip_options o;
    o.gossip_rate = job.options.number("gossip_rate");
    o.gossip_graph = job.options.text("gossip_graph");
    o.gossip_lockstep = job.options.boolean("gossip_lockstep");
    o.gossip_momentum = job.options.text("gossip_momentum");
    if (!std::isfinite(o.gossip_rate) || o.gossip_rate < 0)
      throw std::invalid_argument("--gossip-rate must be a finite number >= 0");
    if (o.gossip_momentum != "none" && o.gossip_momentum != "a2cid2")
      throw std::invalid_argument("--gossip-momentum: '" + o.gossip_momentum + "' (expected none|a2cid2)");
    if (o.gossip_lockstep) {
      if (o.gossip_momentum != "none")
        throw std::invalid_argument("--gossip-momentum " + o.gossip_momentum +
                                    ": a continuous momentum between asynchronous events, not with --gossip-lockstep");
      require_own_copies_fit(job, "gossip");
      if (o.gossip_graph != "ring" && o.gossip_graph != "complete")
        throw std::invalid_argument("--gossip-graph: '" + o.gossip_graph + "' (expected ring|complete with --gossip-lockstep)");
      return std::make_unique<gossip>(o, job.seed, job.steps);
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

std::vector<setting_declaration> gossip_settings() {
  using enum setting_kind;
  return {
      {.name = "gossip_rate", .flag = "gossip-rate", .kind = number, .fallback = 1.0, .low = 0, .high = 1000,
       .unit = "per step", .help = "averaging events per worker and step (Poisson rate; 0: none until the final average)"},
      {.name = "gossip_graph", .flag = "gossip-graph", .kind = text, .fallback = std::string("ring"),
       .help = "who averages with whom: ring (neighbours) | exponential (peers 2^k hops away) | complete (random pairs)"},
      {.name = "gossip_lockstep", .flag = "gossip-lockstep", .kind = boolean, .fallback = false,
       .help = "rounds in lockstep (every worker, every step; runs between processes) instead of asynchronous workers"},
      {.name = "gossip_momentum", .flag = "gossip-momentum", .kind = text, .fallback = std::string("none"),
       .help = "none | a2cid2 (asynchronous only: A2CiD2's continuous momentum, a second variable per worker mixing "
               "with its copy between events, at rates set by the graph and --gossip-rate)"},
  };
}

}  // namespace accord
