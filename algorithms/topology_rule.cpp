#include "algorithms/topology_rule.hpp"
#include "algorithms/collective_channel.hpp"
#include "algorithms/transport_peers.hpp"

#include <stdexcept>
#include <string>

namespace accord {
namespace {

// The algorithm's rules bound to one round's arguments.
class round_rules final : public algorithm_rules {
public:
  round_rules(update_rule& algorithm, transport& link, const round_totals& local, const round_totals& global,
              float learning_rate, std::uint64_t step, bool estimate, std::span<const float> current,
              const optimizer_config& config, std::unique_ptr<optimizer>& own)
      : algorithm_(algorithm), link_(link), local_(local), global_(global), learning_rate_(learning_rate),
        step_(step), estimate_(estimate), current_(current), config_(config), own_(own) {}

  void aggregate(std::span<float> buffer) override {
    algorithm_.apply(link_, buffer, local_, global_, learning_rate_, step_, estimate_, current_);
  }
  void local_step(std::span<float> parameters, std::span<const float> mean_gradient) override {
    if (!own_) own_ = make_optimizer(config_, parameters.size());  // only topologies that step locally pay for it
    own_->step(parameters, mean_gradient, learning_rate_);
  }

private:
  update_rule& algorithm_;
  transport& link_;
  const round_totals& local_;
  const round_totals& global_;
  float learning_rate_;
  std::uint64_t step_;
  bool estimate_;
  std::span<const float> current_;
  const optimizer_config& config_;
  std::unique_ptr<optimizer>& own_;
};

class topology_rule final : public update_rule {
public:
  topology_rule(std::unique_ptr<worker_topology> worker, std::unique_ptr<update_rule> algorithm,
                const optimizer_config& optimizer, std::shared_ptr<topology_status> status, const kept_topology* resume)
      : worker_(std::move(worker)), algorithm_(std::move(algorithm)), config_(optimizer), status_(std::move(status)) {
    if (resume && resume->present) restore(*resume);
  }

  void apply(transport& link, std::span<float> buffer, const round_totals& local, const round_totals& global,
             float learning_rate, std::uint64_t step, bool estimate, std::span<const float> current) override {
    transport_peers peers(link, &channel_);
    round_rules rules(*algorithm_, link, local, global, learning_rate, step, estimate, current, config_, own_);
    const round_view round{step, learning_rate, local.micro_batches, global.micro_batches, estimate};
    topology_report report;
    worker_->round(buffer, round, peers, rules, report);
    observed_ = algorithm_->observations();  // the metrics see the algorithm's gradient norm and votes
    if (channel_) observed_.unwaited_seconds = channel_->take_unwaited_seconds();
    if (status_) *status_ = {worker_->replicas_agree(step), report.consensus_distance};
  }

  std::size_t state_bytes() const override {
    return algorithm_->state_bytes() + (own_ ? own_->state().values.size() * sizeof(float) : 0);
  }
  // The ring's round is the algorithm's (worker_spawn buckets only there).
  std::size_t bucket_prefix() const override { return algorithm_->bucket_prefix(); }
  void reduce_bucket(transport& link, std::span<float> buffer, shard range) override {
    algorithm_->reduce_bucket(link, buffer, range);
  }
  void finish_buckets() override { algorithm_->finish_buckets(); }
  void settle(transport& link) override { algorithm_->settle(link); }
  std::span<const float> residuals() const override { return algorithm_->residuals(); }
  rule_state snapshot() const override {
    rule_state state = algorithm_->snapshot();
    std::optional<topology_state> kept = worker_->kept_state();
    if (!kept) return state;
    kept_topology& topology = state.topology;
    topology.present = true;
    topology.parameters = std::move(kept->parameters);
    topology.shared = std::move(kept->shared);
    topology.own = std::move(kept->own);
    if (own_) {
      const optimizer_state& local = own_->state();
      topology.local_step = local.step;
      topology.local_slots = static_cast<std::uint32_t>(local.slots);
      topology.local_values = local.values;
    }
    return state;
  }

private:
  void restore(const kept_topology& resume) {
    worker_->restore({resume.parameters, resume.shared, resume.own});
    if (resume.local_slots == 0) return;  // no local step taken yet, or a joiner: a fresh optimizer
    own_ = make_optimizer(config_, resume.parameters.size());
    const std::size_t slots = own_->state().slots;
    if (resume.local_slots != slots || resume.local_values.size() != slots * resume.parameters.size())
      throw std::invalid_argument("the kept state of this worker's local optimizer holds " +
                                  std::to_string(resume.local_slots) + " slots of " +
                                  std::to_string(resume.local_values.size()) + " values; --optimizer " +
                                  config_.kind + " needs " + std::to_string(slots) + " of " +
                                  std::to_string(slots * resume.parameters.size()));
    own_->restore({resume.local_step, slots, resume.local_values});
  }

  std::unique_ptr<worker_topology> worker_;
  std::unique_ptr<update_rule> algorithm_;
  optimizer_config config_;
  std::shared_ptr<topology_status> status_;
  std::unique_ptr<optimizer> own_;  // local_step's state, this worker's own
  // The worker's collectives in flight; after worker_, so it closes before the buffers they fill go.
  std::unique_ptr<collective_channel> channel_;
};

}  // namespace

std::unique_ptr<update_rule> make_topology_rule(std::unique_ptr<worker_topology> worker,
                                                std::unique_ptr<update_rule> algorithm,
                                                const optimizer_config& optimizer,
                                                std::shared_ptr<topology_status> status,
                                                const kept_topology* resume) {
  return std::make_unique<topology_rule>(std::move(worker), std::move(algorithm), optimizer, std::move(status), resume);
}

}  // namespace accord
