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
// τ may be chosen from measured times (--overlap-steps auto, topologies/overlap_schedule.hpp):
// the workers' round and step times travel with the outer rounds' squared norms, and every
// worker sets the same τ from their sums where a round lands.
// Eager outer updates (--outer-update eager; Kale et al., arXiv 2502.12996): when a fragment's
// outer round starts, the worker's copy of it takes the outer step at once with the worker's own
// pseudo-gradient as a proxy for the mean; when the mean lands, the copy trades the proxy's step
// for the mean's, keeping what its inner steps did meanwhile, and merges. Only the mean ever
// steps θ_global and the momentum, so they stay the same bits on every worker
// (docs/topologies.md#eager-outer-updates has the arithmetic).
// Compressed outer rounds (--outer-precision fp4, ...): the pseudo-gradients travel in a lossy
// code with error feedback (round_peers::start_all_reduce with a residual), each fragment's
// residual kept in its range from one of its rounds to the next.
// Hierarchical DiLoCo (--inner-group G): consecutive ranks in groups of G take each inner step
// as DDP inside the group (the group's gradient sum over its micro-batches, summed over the
// group's links, then the same optimizer step on every member: one replica per group, the same
// bits on each member), and the outer rounds run between groups only: member k of every group
// sums the k-th of G shares of the fragment's pseudo-gradient with member k of the others (its
// "column"), then the group gathers its shares over its own links. The slow links between groups
// carry the outer rounds and nothing else, spread over G columns (docs/topologies.md).
#include "topologies/builtins.hpp"
#include "topologies/overlap_schedule.hpp"

#include "transport/shard.hpp"
#include "transport/wire_precision.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord {
namespace {

enum class outer_update { delayed, eager };

[[noreturn]] void refuse(const std::string& why);

// The settings local-sgd declares (local_sgd_settings), read once from the job's.
struct local_sgd_options {
  std::uint64_t local_steps = 1, fragments = 1, overlap_steps = 0;
  bool automatic_overlap = false;  // --overlap-steps auto: τ chosen from measured times
  int inner_group = 1;  // workers per group whose inner steps are DDP over the group
  float outer_learning_rate = 0, outer_momentum = 0, overlap_mix = 0;
  outer_update update = outer_update::delayed;
  wire_precision outer_precision = wire_precision::fp32;
};

// What outlives a worker's rounds besides its own copy and inner optimizer state: θ_global and
// the outer momentum (every worker's the same bits), and this worker's own error-feedback
// residuals. Checkpoints and membership changes keep them (kept_state, with the rounds in flight
// landed), and every worker restarts from θ_global (docs/topologies.md#checkpoints-and-membership-changes).
struct local_sgd_outer_state {
  std::vector<float> global;    // θ_global after the last outer steps
  std::vector<float> velocity;  // outer momentum (none without it)
  // What the compressed outer rounds still owe the sums, each fragment's in its range (none at fp32)
  std::vector<float> residual;
};

class local_sgd_worker final : public worker_topology {
  using clock = std::chrono::steady_clock;

public:
  local_sgd_worker(const local_sgd_options& options, std::uint64_t steps, std::span<const float> initial)
      : options_(options), steps_(steps),
        outer_{{initial.begin(), initial.end()},
               std::vector<float>(options.outer_momentum > 0 ? initial.size() : 0),
               std::vector<float>(compressed() ? initial.size() : 0)},
        local_(initial.begin(), initial.end()), pseudo_gradient_(initial.size()),
        own_pseudo_gradient_(eager() ? initial.size() : 0), square_sums_(options.fragments * sent_per_round()),
        schedule_(options.automatic_overlap
                      ? overlap_schedule::automatic(overlap_bound(options.local_steps, options.fragments))
                      : overlap_schedule::fixed(options.overlap_steps)) {}

  void round(std::span<float> buffer, const round_view& round, round_peers& peers, algorithm_rules& rules,
             topology_report& report) override {
    // Grouped: the group inside, and this worker's column (its place in every group) across.
    std::unique_ptr<round_peers> inside, across;
    if (options_.inner_group > 1) {
      inside = peers.among(group_of(peers.rank()));
      across = peers.among(column_of(peers.rank(), peers.size()));
    }
    round_peers& outer_peers = across ? *across : peers;
    if (schedule_.is_automatic()) measure_times();
    mean_gradient(buffer, round, inside.get());
    rules.local_step(local_, buffer);
    const bool last = round.step + 1 == steps_;
    double spread_square = 0;
    bool measured = false;
    const auto land = [&](outer_round& outer) {
      spread_square += outer_step(outer, inside.get(), peers.size());
      measured = true;
    };
    for (std::uint64_t f = 0; f < options_.fragments; ++f) {
      if (!last && (round.step + 1 + offset(f)) % options_.local_steps != 0) continue;
      // Only at the job's last step can the fragment's previous outer round still be out (τ < H):
      // its θ_global is the base of this one's pseudo-gradient.
      for (outer_round& earlier : pending_)
        if (earlier.fragment == f && earlier.sums) land(earlier);
      pending_.push_back(start_outer_round(outer_peers, inside.get(), f, round.step + (last ? 0 : schedule_.steps())));
    }
    // Outer rounds whose overlap is over (every one at the job's last step) land, waiting for
    // their sums only if they have not arrived, and merge into the copy.
    while (!pending_.empty() && (last || pending_.front().merge_at <= round.step)) {
      if (pending_.front().sums) land(pending_.front());
      merge(range_of(pending_.front().fragment), last);
      if (options_.fragments == 1 && options_.overlap_mix == 0) merged_whole_at_ = round.step;
      pending_.pop_front();
    }
    if (measured) report.consensus_distance = std::sqrt(spread_square);
    std::copy(local_.begin(), local_.end(), buffer.begin());
  }

  // One fragment taking θ_global wholly: every copy is θ_global after the round that merges it.
  bool replicas_agree(std::uint64_t step) const override { return step + 1 == steps_ || merged_whole_at_ == step; }

  // θ_global and the outer momentum as they are once every outer round in flight has landed
  // (waiting for them; the rounds themselves land later as they would have), and this worker's
  // residuals. What a restart keeps: every copy restarts from θ_global, dropping the inner steps
  // since each fragment's last outer round (none at an outer step of plain DiLoCo, where every
  // copy is θ_global: replicas_agree).
  std::optional<topology_state> kept_state() const override {
    for (const outer_round& outer : pending_)
      if (outer.sums) outer.sums->wait();  // also done writing the residuals
    local_sgd_outer_state landed = outer_;
    for (const outer_round& outer : pending_) {
      if (!outer.sums) continue;
      const shard range = range_of(outer.fragment);
      const float inverse = 1.0f / static_cast<float>(outer.replicas);
      for (std::size_t i = range.begin; i < range.end; ++i) step_global(landed, i, pseudo_gradient_[i] * inverse);
    }
    return topology_state{std::move(landed.global), std::move(landed.velocity), std::move(landed.residual)};
  }

  // Every copy restarts from the kept θ_global; a worker without residuals of its own (a joiner)
  // owes nothing yet.
  void restore(const topology_state& kept) override {
    const std::size_t n = local_.size();
    const auto fits = [n](const std::vector<float>& values, std::size_t expected, const std::string& what) {
      if (values.size() != expected)
        refuse("the kept state's " + what + " holds " + std::to_string(values.size()) + " values, this job's " +
               std::to_string(expected) + " (of " + std::to_string(n) + " parameters)");
    };
    fits(kept.parameters, n, "θ_global");
    fits(kept.shared, outer_.velocity.size(), "outer momentum (--outer-momentum 0 keeps none)");
    if (!kept.own.empty()) fits(kept.own, outer_.residual.size(), "residuals (--outer-precision fp32 keeps none)");
    outer_.global = kept.parameters;
    local_ = kept.parameters;
    outer_.velocity = kept.shared;
    if (!kept.own.empty()) outer_.residual = kept.own;
  }

private:
  // A fragment's outer round: its all-reduces start in the round that issues it and land
  // (the outer step on θ_global) by the round it merges in.
  struct outer_round {
    std::uint64_t merge_at;  // the step after whose inner step the fragment merges
    std::uint64_t fragment;
    int replicas;            // whose pseudo-gradients it sums
    std::unique_ptr<collective_in_flight> sums, squares;  // null once landed
    clock::time_point started = {};
    std::optional<double> took = {};  // seconds from its start to where the worker saw it done
  };

  bool eager() const { return options_.update == outer_update::eager; }
  // What travels with a fragment's squared norm: --overlap-steps auto's round and step times.
  std::size_t sent_per_round() const { return options_.automatic_overlap ? 3 : 1; }

  // Auto τ: the time since the last round less its waits for outer rounds is an inner step's;
  // an outer round seen done now took until now (at most a step late: τ's margin covers it).
  void measure_times() {
    const clock::time_point now = clock::now();
    if (last_round_) schedule_.step_took(std::chrono::duration<double>(now - *last_round_).count() - waited_);
    last_round_ = now;
    waited_ = 0;
    for (outer_round& outer : pending_)
      if (!outer.took && outer.sums && outer.sums->done() && outer.squares->done())
        outer.took = std::chrono::duration<double>(now - outer.started).count();
  }
  bool compressed() const { return options_.outer_precision != wire_precision::fp32; }

  // The ranks of `rank`'s group, and those at its place in every group.
  std::vector<int> group_of(int rank) const {
    std::vector<int> members(static_cast<std::size_t>(options_.inner_group));
    for (int m = 0; m < options_.inner_group; ++m) members[m] = rank / options_.inner_group * options_.inner_group + m;
    return members;
  }
  std::vector<int> column_of(int rank, int workers) const {
    std::vector<int> members;
    for (int r = rank % options_.inner_group; r < workers; r += options_.inner_group) members.push_back(r);
    return members;
  }

  // `buffer`, this worker's gradient sum, becomes the mean gradient of its inner step: its own,
  // or (grouped) its group's, the same bits on every member.
  // Grouped with auto τ, the group's times are summed too (group_times_): every member then sends
  // the same ones, so every column's sums, and τ, are the same.
  void mean_gradient(std::span<float> buffer, const round_view& round, round_peers* inside) {
    const overlap_times times = schedule_.to_send();
    double counts[3] = {round.micro_batches, times.round_seconds, times.step_seconds};
    if (inside) {
      inside->all_reduce(buffer);
      inside->all_reduce(std::span<double>(counts, sent_per_round()));
    }
    group_times_ = {counts[1], counts[2]};
    const double micro_batches = counts[0];
    const float scale = micro_batches > 0 ? static_cast<float>(1.0 / micro_batches) : 0.f;
    for (float& g : buffer) g *= scale;
  }

  // What of fragment f's range this worker sums across: all of it, or (grouped) its share.
  static shard share_of(shard range, round_peers* inside) {
    if (!inside) return range;
    const shard share = shard_of(range.size(), inside->size(), inside->rank());
    return {range.begin + share.begin, range.begin + share.end};
  }

  // The steps fragment f's outer steps come after the plain schedule's.
  std::uint64_t offset(std::uint64_t f) const { return f * options_.local_steps / options_.fragments; }
  shard range_of(std::uint64_t f) const {
    return shard_of(local_.size(), static_cast<int>(options_.fragments), static_cast<int>(f));
  }
  template <class T>
  static std::span<T> part(std::vector<T>& values, shard range) {
    return std::span<T>(values).subspan(range.begin, range.size());
  }

  // Starts summing the fragment's pseudo-gradients θ_global − θ_i (and their squared norms, for
  // the spread) over the replicas (grouped: this worker's share, over its column); the worker goes
  // on with its copy meanwhile (eager: from the proxy's outer step).
  outer_round start_outer_round(round_peers& peers, round_peers* inside, std::uint64_t f, std::uint64_t merge_at) {
    const shard range = range_of(f);
    double own_square = 0;
    for (std::size_t i = range.begin; i < range.end; ++i) {
      pseudo_gradient_[i] = outer_.global[i] - local_[i];
      own_square += static_cast<double>(pseudo_gradient_[i]) * pseudo_gradient_[i];
    }
    double* norms = &square_sums_[f * sent_per_round()];
    norms[0] = own_square;
    if (schedule_.is_automatic()) {
      norms[1] = group_times_.round_seconds;
      norms[2] = group_times_.step_seconds;
      schedule_.sent();
    }
    if (eager())
      for (std::size_t i = range.begin; i < range.end; ++i) {
        own_pseudo_gradient_[i] = pseudo_gradient_[i];
        local_[i] = proxy_at(i);
      }
    outer_round outer{merge_at, f, peers.size(), nullptr, nullptr, clock::now()};
    const shard sent = share_of(range, inside);
    outer.sums = compressed() ? peers.start_all_reduce(part(pseudo_gradient_, sent), part(outer_.residual, sent),
                                                       precision_name(options_.outer_precision))
                              : peers.start_all_reduce(part(pseudo_gradient_, sent));
    outer.squares = peers.start_all_reduce(std::span<double>(norms, sent_per_round()));
    return outer;
  }

  // The direction of an outer step on the outer gradient `delta`: Nesterov's (v ← μv + Δ, step
  // along Δ + μv), or Δ without momentum.
  float outer_direction(float delta, float& velocity) const {
    if (options_.outer_momentum == 0) return delta;
    velocity = options_.outer_momentum * velocity + delta;
    return delta + options_.outer_momentum * velocity;
  }

  // Element i of θ_global (and of the momentum) in `outer` takes the outer step on the mean
  // outer gradient `delta`.
  void step_global(local_sgd_outer_state& outer, std::size_t i, float delta) const {
    float no_velocity = 0;
    float& velocity = outer.velocity.empty() ? no_velocity : outer.velocity[i];
    outer.global[i] -= options_.outer_learning_rate * outer_direction(delta, velocity);
  }

  // Eager: where the proxy puts the copy, θ_global taking the outer step with this worker's own
  // Δ_i instead of the mean, from the velocity as it is (the same bits at the round's start and
  // where its mean lands: only that landing moves the fragment's θ_global and velocity).
  float proxy_at(std::size_t i) const {
    float velocity = outer_.velocity.empty() ? 0.f : outer_.velocity[i];
    return outer_.global[i] - options_.outer_learning_rate * outer_direction(own_pseudo_gradient_[i], velocity);
  }

  // Waits for the outer round's sums (grouped: gathers the group's shares of them), then steps
  // the fragment's θ_global with their mean over the round's replicas (eager: the copy trades the
  // proxy's step for it); returns the replicas' spread over the fragment before the merge,
  // mean_i ‖θ_i − θ̄‖². Auto τ: the round's times, summed over the `workers`, set τ.
  double outer_step(outer_round& outer, round_peers* inside, int workers) {
    const clock::time_point waiting = clock::now();
    outer.sums->wait();
    outer.squares->wait();
    outer.sums.reset();
    outer.squares.reset();
    if (schedule_.is_automatic()) {
      const clock::time_point now = clock::now();
      waited_ += std::chrono::duration<double>(now - waiting).count();
      schedule_.round_took(outer.took.value_or(std::chrono::duration<double>(now - outer.started).count()));
      const double* sums = &square_sums_[outer.fragment * sent_per_round()];
      schedule_.landed({sums[1], sums[2]}, workers);
    }
    const shard range = range_of(outer.fragment);
    if (inside) gather_shares(range, *inside);
    const float inverse = 1.0f / static_cast<float>(outer.replicas);
    double mean_square = 0;
    for (std::size_t i = range.begin; i < range.end; ++i) {
      const float delta = pseudo_gradient_[i] * inverse;
      mean_square += static_cast<double>(delta) * delta;
      const float proxy = eager() ? proxy_at(i) : 0.f;
      step_global(outer_, i, delta);
      if (eager()) local_[i] += outer_.global[i] - proxy;
    }
    // mean_i ‖Δ_i‖² − ‖Δ̄‖² is the spread of the θ_i around their mean (Δ_i = θ_global − θ_i).
    return std::max(0.0, square_sums_[outer.fragment * sent_per_round()] / outer.replicas - mean_square);
  }

  // Every member's share of the range's sums to every member of the group, over its own links:
  // a sum in which each share is one member's and zeros elsewhere (x + 0 is x), the same bits
  // on every member.
  void gather_shares(shard range, round_peers& inside) {
    const shard mine = share_of(range, &inside);
    std::fill(pseudo_gradient_.begin() + range.begin, pseudo_gradient_.begin() + mine.begin, 0.f);
    std::fill(pseudo_gradient_.begin() + mine.end, pseudo_gradient_.begin() + range.end, 0.f);
    inside.all_reduce(part(pseudo_gradient_, range));
  }

  // The worker's copy of the fragment takes the global one (mixed with its own by α, except at
  // the job's end, which ends with one model).
  void merge(shard range, bool last) {
    const float mix = options_.overlap_mix;
    if (mix == 0 || last) {
      std::ranges::copy(part(outer_.global, range), part(local_, range).begin());
      return;
    }
    for (std::size_t i = range.begin; i < range.end; ++i) local_[i] = mix * local_[i] + (1 - mix) * outer_.global[i];
  }

  local_sgd_options options_;
  std::uint64_t steps_;  // the job's
  local_sgd_outer_state outer_;
  std::vector<float> local_;  // this worker's own θ_i
  // Σ_i (θ_global − θ_i) (a fragment's range is being summed while its outer round is out)
  std::vector<float> pseudo_gradient_;
  std::vector<float> own_pseudo_gradient_;  // eager: this worker's Δ_i, from its round's start to its landing
  // per fragment, Σ_i ‖θ_global − θ_i‖² (auto τ: then the round's and step's seconds summed)
  std::vector<double> square_sums_;
  std::deque<outer_round> pending_;  // outer rounds not merged yet, in order
  overlap_schedule schedule_;
  std::uint64_t merged_whole_at_ = ~std::uint64_t{0};  // the last step every copy took θ_global
  // Auto τ's clock: the last round's start, its waits for outer rounds so far, the group's times
  std::optional<clock::time_point> last_round_;
  double waited_ = 0;
  overlap_times group_times_;
};

class local_sgd final : public topology {
public:
  local_sgd(local_sgd_options options, std::uint64_t steps) : options_(options), steps_(steps) {}
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float> initial) const override {
    return std::make_unique<local_sgd_worker>(options_, steps_, initial);
  }
  // Its groups reduce over the flat transport themselves; the links between them are the slow ones.
  int link_group_size() const override { return options_.inner_group; }

private:
  local_sgd_options options_;
  std::uint64_t steps_;
};

[[noreturn]] void refuse(const std::string& why) { throw std::invalid_argument("--topology local-sgd: " + why); }

// --overlap-steps: "auto" or a whole number of steps.
std::int64_t overlap_steps_of(const std::string& text) {
  std::int64_t steps = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, steps);
  if (text.empty() || error != std::errc{} || stop != end || steps < 0)
    throw std::invalid_argument("--overlap-steps: '" + text + "' is not auto or a whole number of steps");
  return steps;
}

// "fp32", "bf16", ...: every wire precision's name, as precision_names lists them.
std::vector<std::string> every_precision_name() {
  std::vector<std::string> names;
  const std::string listed = precision_names(false);
  for (std::size_t begin = 0, bar = 0; bar != std::string::npos; begin = bar + 1) {
    bar = listed.find('|', begin);
    names.push_back(listed.substr(begin, bar == std::string::npos ? std::string::npos : bar - begin));
  }
  return names;
}

}  // namespace

namespace {
// Refuses, as topology `name`, an algorithm whose optimizer cannot step a worker's own copy.
void require_local_steps(const topology_job& job, const std::string& name) {
  if (!job.synchronous || !job.sharded_optimizer)
    throw std::invalid_argument("--topology " + name + ": its inner steps use the optimizer of a synchronous, "
                                "sharded-optimizer algorithm (ddp, lion), not --algo " + job.algorithm);
}
}  // namespace

void require_own_copies_fit(const topology_job& job, const std::string& name) {
  const std::string topology = "--topology " + name + ": ";
  require_local_steps(job, name);
  if (job.checkpoints)
    throw std::invalid_argument(topology + "checkpoints are not supported (each worker's own copy and optimizer "
                                "state are not saved)");
  if (job.membership_changes) throw std::invalid_argument(topology + "workers coming and going are not supported");
}

topology_factory local_sgd_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    require_local_steps(job, "local-sgd");
    const topology_options& given = job.options;
    const std::int64_t local_steps = given.whole("local_steps"), fragments = given.whole("fragments"),
                       inner_group = given.whole("inner_group");
    const std::string overlap = given.text("overlap_steps");
    local_sgd_options o;
    o.automatic_overlap = overlap == "auto";
    const std::int64_t overlap_steps = o.automatic_overlap ? 0 : overlap_steps_of(overlap);
    o.outer_learning_rate = static_cast<float>(given.number("outer_learning_rate"));
    o.outer_momentum = static_cast<float>(given.number("outer_momentum"));
    o.overlap_mix = static_cast<float>(given.number("overlap_mix"));
    if (local_steps < 1) refuse("--local-steps must be at least 1");
    if (!std::isfinite(o.outer_learning_rate) || o.outer_learning_rate <= 0) refuse("--outer-lr must be a finite number > 0");
    if (!(o.outer_momentum >= 0 && o.outer_momentum < 1)) refuse("--outer-momentum must be in [0, 1)");
    if (fragments < 1 || fragments > local_steps) refuse("--fragments must be in 1..--local-steps");
    if (overlap_steps < 0 || overlap_steps >= local_steps) refuse("--overlap-steps must be below --local-steps");
    if (!(o.overlap_mix >= 0 && o.overlap_mix < 1)) refuse("--overlap-mix must be in [0, 1)");
    if (inner_group < 1 || job.workers % inner_group != 0)
      refuse("--inner-group must be a whole number of workers dividing the " + std::to_string(job.workers) +
             " workers, not " + std::to_string(inner_group));
    // A group's members hold shares of the outer rounds' sums until the group gathers them: a
    // kept state would need that collective in flight.
    if (inner_group > 1 && (job.checkpoints || job.membership_changes))
      refuse("--inner-group " + std::to_string(inner_group) + " keeps no state yet: checkpoints and workers coming "
             "and going need --inner-group 1");
    o.inner_group = static_cast<int>(inner_group);
    o.local_steps = static_cast<std::uint64_t>(local_steps);
    o.fragments = static_cast<std::uint64_t>(fragments);
    o.overlap_steps = static_cast<std::uint64_t>(overlap_steps);
    const std::string update = given.text("outer_update");
    if (update != "delayed" && update != "eager") refuse("--outer-update must be delayed or eager, not '" + update + "'");
    o.update = update == "eager" ? outer_update::eager : outer_update::delayed;
    o.outer_precision = parse_wire_precision(given.text("outer_precision"), "--topology local-sgd: --outer-precision");
    return std::make_unique<local_sgd>(o, job.steps);
  };
}

std::vector<setting_declaration> local_sgd_settings() {
  constexpr double most = 1e9;  // steps
  using enum setting_kind;
  return {
      {.name = "local_steps", .flag = "local-steps", .kind = whole, .fallback = std::int64_t{1}, .low = 1,
       .high = most, .unit = "steps", .help = "inner optimizer steps per worker between outer steps (H)"},
      {.name = "outer_learning_rate", .flag = "outer-lr", .kind = number, .fallback = 0.5, .low = 0, .high = 1e6,
       .above_low = true, .help = "outer learning rate on the averaged pseudo-gradient"},
      {.name = "outer_momentum", .flag = "outer-momentum", .kind = number, .fallback = 0.7, .low = 0, .high = 1,
       .help = "outer Nesterov momentum (0: plain outer SGD)"},
      {.name = "fragments", .flag = "fragments", .kind = whole, .fallback = std::int64_t{1}, .low = 1, .high = most,
       .help = "Streaming DiLoCo's fragments P (fragment f's outer steps come f*H/P steps later; 1: plain DiLoCo)"},
      {.name = "overlap_steps", .flag = "overlap-steps", .kind = text, .fallback = std::string("0"),
       .help = "inner steps an outer step's result is merged late (tau; 0: at once; auto: chosen from the measured "
               "outer round and inner step times, at most H/fragments)",
       .check =
           [](const setting_value& value) {
             if (const std::string& text = std::get<std::string>(value); text != "auto") overlap_steps_of(text);
           },
       .accepts = "auto | a whole number of steps"},
      {.name = "overlap_mix", .flag = "overlap-mix", .kind = number, .fallback = 0.0, .low = 0, .high = 1,
       .help = "weight of the worker's own fragment when the late result merges (alpha; 0: the global one)"},
      {.name = "inner_group", .flag = "inner-group", .kind = whole, .fallback = std::int64_t{1}, .low = 1,
       .high = 65535, .unit = "workers",
       .help = "workers per group (consecutive ranks) whose inner steps are DDP over the group's links (--link; "
               "--inter-link between groups, in one process); the outer rounds run between groups only "
               "(1: each worker alone)"},
      {.name = "outer_update", .flag = "outer-update", .kind = text, .fallback = std::string("delayed"),
       .help = "delayed: a copy goes on from its own fragment until the mean's outer step lands; eager: it takes the "
               "outer step with its own pseudo-gradient at once and trades it for the mean's when that lands",
       .choices = [] { return std::vector<std::string>{"delayed", "eager"}; }},
      {.name = "outer_precision", .flag = "outer-precision", .kind = text, .fallback = std::string("fp32"),
       .help = "what the outer rounds' pseudo-gradients travel as (other than fp32: with error feedback, "
               "residuals kept per fragment)",
       .choices = every_precision_name},
  };
}

}  // namespace accord
