// local-sgd (DiLoCo, arXiv 2311.08105): each worker takes H inner steps of the algorithm's
// optimizer on its own copy, then every worker averages the pseudo-gradient θ_global − θ_worker
// and the shared θ_global takes an outer Nesterov step; the workers restart from it. The last
// step of a job is always an outer step, so the job ends with one set of parameters.
// Streaming DiLoCo (arXiv 2501.18512): the parameters split into P fragments (consecutive
// ranges), fragment f taking its outer step at the steps offset by f·H/P, so one fragment
// crosses the link at a time; its outer step's result is merged τ inner steps later (the
// worker went on meanwhile), as α·θ_local + (1 − α)·θ_global. P = 1, τ = 0, α = 0 is DiLoCo.
// The outer all-reduce is in flight meanwhile: it starts in the round that issues it
// (round_peers::start_all_reduce, on the worker's channel beside its rounds) and lands in the
// round that merges it, which waits for it only if it has not arrived; the outer step itself
// is taken there. The arithmetic is that of running it at once (the fragment's θ_global is read
// only by its merge and its next outer round), so only when the link is busy changes.
#include "topologies/builtins.hpp"

#include "transport/shard.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <stdexcept>
#include <vector>

namespace accord {
namespace {

// The settings local-sgd declares (local_sgd_settings), read once from the job's.
struct local_sgd_options {
  std::uint64_t local_steps = 1, fragments = 1, overlap_steps = 0;
  float outer_learning_rate = 0, outer_momentum = 0, overlap_mix = 0;
};

class local_sgd_worker final : public worker_topology {
public:
  local_sgd_worker(const local_sgd_options& options, std::uint64_t steps, std::span<const float> initial)
      : steps_(steps), local_steps_(options.local_steps), fragments_(options.fragments), overlap_(options.overlap_steps),
        mix_(options.overlap_mix), outer_rate_(options.outer_learning_rate), outer_momentum_(options.outer_momentum),
        global_(initial.begin(), initial.end()), local_(initial.begin(), initial.end()),
        pseudo_gradient_(initial.size()), square_sums_(options.fragments), velocity_(options.outer_momentum > 0 ? initial.size() : 0) {}

  void round(std::span<float> buffer, const round_view& round, round_peers& peers, algorithm_rules& rules,
             topology_report& report) override {
    const float scale = round.micro_batches > 0 ? static_cast<float>(1.0 / round.micro_batches) : 0.f;
    for (float& g : buffer) g *= scale;  // this worker's own mean gradient
    rules.local_step(local_, buffer);
    const bool last = round.step + 1 == steps_;
    double spread_square = 0;
    bool measured = false;
    const auto land = [&](outer_round& outer) {
      spread_square += outer_step(outer, peers.size());
      measured = true;
    };
    for (std::uint64_t f = 0; f < fragments_; ++f) {
      if (!last && (round.step + 1 + offset(f)) % local_steps_ != 0) continue;
      // Only at the job's last step can the fragment's previous outer round still be out (τ < H):
      // its θ_global is the base of this one's pseudo-gradient.
      for (outer_round& earlier : pending_)
        if (earlier.fragment == f && earlier.sums) land(earlier);
      pending_.push_back(start_outer_round(peers, f, round.step + (last ? 0 : overlap_)));
    }
    // Outer rounds whose overlap is over (every one at the job's last step) land, waiting for
    // their sums only if they have not arrived, and merge into the copy.
    while (!pending_.empty() && (last || pending_.front().merge_at <= round.step)) {
      if (pending_.front().sums) land(pending_.front());
      merge(range_of(pending_.front().fragment), last);
      pending_.pop_front();
    }
    if (measured) report.consensus_distance = std::sqrt(spread_square);
    std::copy(local_.begin(), local_.end(), buffer.begin());
  }

  bool replicas_agree(std::uint64_t step) const override {
    if (step + 1 == steps_) return true;
    return fragments_ == 1 && overlap_ == 0 && mix_ == 0 && (step + 1) % local_steps_ == 0;
  }

private:
  // A fragment's outer round: its all-reduces start in the round that issues it and land
  // (the outer step on θ_global) by the round it merges in.
  struct outer_round {
    std::uint64_t merge_at;  // the step after whose inner step the fragment merges
    std::uint64_t fragment;
    std::unique_ptr<collective_in_flight> sums, squares;  // null once landed
  };

  // The steps fragment f's outer steps come after the plain schedule's.
  std::uint64_t offset(std::uint64_t f) const { return f * local_steps_ / fragments_; }
  shard range_of(std::uint64_t f) const {
    return shard_of(local_.size(), static_cast<int>(fragments_), static_cast<int>(f));
  }

  // Starts summing the fragment's pseudo-gradients θ_global − θ_i (and their squared norms, for
  // the spread) over the workers; the worker goes on with its copy meanwhile.
  outer_round start_outer_round(round_peers& peers, std::uint64_t f, std::uint64_t merge_at) {
    const shard range = range_of(f);
    double own_square = 0;
    for (std::size_t i = range.begin; i < range.end; ++i) {
      pseudo_gradient_[i] = global_[i] - local_[i];
      own_square += static_cast<double>(pseudo_gradient_[i]) * pseudo_gradient_[i];
    }
    square_sums_[f] = own_square;
    outer_round outer{merge_at, f, nullptr, nullptr};
    outer.sums = peers.start_all_reduce(std::span<float>(pseudo_gradient_.data() + range.begin, range.size()));
    outer.squares = peers.start_all_reduce(std::span<double>(&square_sums_[f], 1));
    return outer;
  }

  // Waits for the outer round's sums, then steps the fragment's θ_global with their mean;
  // returns the workers' spread over the fragment before the merge, mean_i ‖θ_i − θ̄‖².
  double outer_step(outer_round& outer, int workers) {
    outer.sums->wait();
    outer.squares->wait();
    outer.sums.reset();
    outer.squares.reset();
    const shard range = range_of(outer.fragment);
    const float inverse = 1.0f / static_cast<float>(workers);
    double mean_square = 0;
    for (std::size_t i = range.begin; i < range.end; ++i) {
      float delta = pseudo_gradient_[i] * inverse;
      mean_square += static_cast<double>(delta) * delta;
      if (outer_momentum_ > 0) {  // Nesterov: v ← μv + Δ, step along Δ + μv
        velocity_[i] = outer_momentum_ * velocity_[i] + delta;
        delta += outer_momentum_ * velocity_[i];
      }
      global_[i] -= outer_rate_ * delta;
    }
    // mean_i ‖Δ_i‖² − ‖Δ̄‖² is the spread of the θ_i around their mean (Δ_i = θ_global − θ_i).
    return std::max(0.0, square_sums_[outer.fragment] / workers - mean_square);
  }

  // The worker's copy of the fragment takes the global one (mixed with its own by α, except at
  // the job's end, which ends with one model).
  void merge(shard range, bool last) {
    if (mix_ == 0 || last) {
      std::copy(global_.begin() + static_cast<std::ptrdiff_t>(range.begin),
                global_.begin() + static_cast<std::ptrdiff_t>(range.end),
                local_.begin() + static_cast<std::ptrdiff_t>(range.begin));
      return;
    }
    for (std::size_t i = range.begin; i < range.end; ++i) local_[i] = mix_ * local_[i] + (1 - mix_) * global_[i];
  }

  std::uint64_t steps_;  // the job's
  std::uint64_t local_steps_, fragments_, overlap_;
  float mix_;
  float outer_rate_, outer_momentum_;
  std::vector<float> global_;           // θ_global after the last outer steps (every worker's the same)
  std::vector<float> local_;            // this worker's own θ_i
  // Σ_i (θ_global − θ_i) (a fragment's range is being summed while its outer round is out)
  std::vector<float> pseudo_gradient_;
  std::vector<double> square_sums_;     // per fragment, Σ_i ‖θ_global − θ_i‖²
  std::vector<float> velocity_;         // outer momentum (none without it)
  std::deque<outer_round> pending_;     // outer rounds not merged yet, in order
};

class local_sgd final : public topology {
public:
  local_sgd(local_sgd_options options, std::uint64_t steps) : options_(options), steps_(steps) {}
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float> initial) const override {
    return std::make_unique<local_sgd_worker>(options_, steps_, initial);
  }

private:
  local_sgd_options options_;
  std::uint64_t steps_;
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
    const topology_options& given = job.options;
    const std::int64_t local_steps = given.whole("local_steps"), fragments = given.whole("fragments"),
                       overlap_steps = given.whole("overlap_steps");
    local_sgd_options o;
    o.outer_learning_rate = static_cast<float>(given.number("outer_learning_rate"));
    o.outer_momentum = static_cast<float>(given.number("outer_momentum"));
    o.overlap_mix = static_cast<float>(given.number("overlap_mix"));
    if (local_steps < 1) refuse("--local-steps must be at least 1");
    if (!std::isfinite(o.outer_learning_rate) || o.outer_learning_rate <= 0) refuse("--outer-lr must be a finite number > 0");
    if (!(o.outer_momentum >= 0 && o.outer_momentum < 1)) refuse("--outer-momentum must be in [0, 1)");
    if (fragments < 1 || fragments > local_steps) refuse("--fragments must be in 1..--local-steps");
    if (overlap_steps < 0 || overlap_steps >= local_steps) refuse("--overlap-steps must be below --local-steps");
    if (!(o.overlap_mix >= 0 && o.overlap_mix < 1)) refuse("--overlap-mix must be in [0, 1)");
    o.local_steps = static_cast<std::uint64_t>(local_steps);
    o.fragments = static_cast<std::uint64_t>(fragments);
    o.overlap_steps = static_cast<std::uint64_t>(overlap_steps);
    return std::make_unique<local_sgd>(o, job.steps);
  };
}

std::vector<setting_declaration> local_sgd_settings() {
  constexpr double most = 1e9;  // steps
  using enum setting_kind;
  return {
      {.name = "local_steps", .flag = "local-steps", .kind = whole, .fallback = std::int64_t{1}, .low = 1,
       .high = most, .unit = "steps", .help = "inner optimizer steps per worker between outer steps (H)"},
      {.name = "outer_learning_rate", .flag = "outer-lr", .kind = number, .fallback = 0.7, .low = 0, .high = 1e6,
       .above_low = true, .help = "outer learning rate on the averaged pseudo-gradient"},
      {.name = "outer_momentum", .flag = "outer-momentum", .kind = number, .fallback = 0.9, .low = 0, .high = 1,
       .help = "outer Nesterov momentum (0: plain outer SGD)"},
      {.name = "fragments", .flag = "fragments", .kind = whole, .fallback = std::int64_t{1}, .low = 1, .high = most,
       .help = "Streaming DiLoCo's fragments P (fragment f's outer steps come f*H/P steps later; 1: plain DiLoCo)"},
      {.name = "overlap_steps", .flag = "overlap-steps", .kind = whole, .fallback = std::int64_t{0}, .low = 0,
       .high = most, .unit = "steps", .help = "inner steps an outer step's result is merged late (tau; 0: at once)"},
      {.name = "overlap_mix", .flag = "overlap-mix", .kind = number, .fallback = 0.0, .low = 0, .high = 1,
       .help = "weight of the worker's own fragment when the late result merges (alpha; 0: the global one)"},
  };
}

}  // namespace accord
