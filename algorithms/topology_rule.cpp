#include "algorithms/topology_rule.hpp"

#include <stdexcept>
#include <string>

namespace accord {
namespace {

// A user tag of its own ("topo"): topologies' pairwise messages never match anything else's.
constexpr std::uint64_t exchange_tag = 0x746f706f;

class link_peers final : public topology_peers {
public:
  explicit link_peers(transport& link) : link_(link) {}
  int rank() const override { return link_.rank(); }
  int size() const override { return link_.size(); }
  void all_reduce(std::span<float> values) override { link_.all_reduce(values); }
  void all_reduce(std::span<double> values) override { link_.all_reduce(values); }
  void exchange(int peer, std::span<const float> mine, std::span<float> theirs) override {
    if (mine.size() != theirs.size())
      throw std::invalid_argument("topology exchange: " + std::to_string(mine.size()) + " values out, " +
                                  std::to_string(theirs.size()) + " in");
    const transport::request sent = link_.post_send(peer, exchange_tag, std::as_bytes(mine));
    link_.recv(peer, exchange_tag, std::as_writable_bytes(theirs));
    link_.wait(sent);
  }

private:
  transport& link_;
};

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
                const optimizer_config& optimizer, std::uint64_t steps, std::shared_ptr<topology_status> status)
      : worker_(std::move(worker)), algorithm_(std::move(algorithm)), config_(optimizer), steps_(steps),
        status_(std::move(status)) {}

  void apply(transport& link, std::span<float> buffer, const round_totals& local, const round_totals& global,
             float learning_rate, std::uint64_t step, bool estimate, std::span<const float> current) override {
    link_peers peers(link);
    round_rules rules(*algorithm_, link, local, global, learning_rate, step, estimate, current, config_, own_);
    const topology_round round{step, steps_, learning_rate, local.micro_batches, global.micro_batches, estimate};
    topology_report report;
    worker_->round(buffer, round, peers, rules, report);
    observed_ = algorithm_->observations();  // the metrics see the algorithm's gradient norm and votes
    if (status_) *status_ = {worker_->replicas_agree(step), report.consensus_distance};
  }

  std::size_t state_bytes() const override {
    return algorithm_->state_bytes() + (own_ ? own_->state().values.size() * sizeof(float) : 0);
  }
  void settle(transport& link) override { algorithm_->settle(link); }
  std::span<const float> residuals() const override { return algorithm_->residuals(); }
  rule_state snapshot() const override { return algorithm_->snapshot(); }

private:
  std::unique_ptr<worker_topology> worker_;
  std::unique_ptr<update_rule> algorithm_;
  optimizer_config config_;
  std::uint64_t steps_;
  std::shared_ptr<topology_status> status_;
  std::unique_ptr<optimizer> own_;  // local_step's state, this worker's own
};

}  // namespace

std::unique_ptr<update_rule> make_topology_rule(std::unique_ptr<worker_topology> worker,
                                                std::unique_ptr<update_rule> algorithm,
                                                const optimizer_config& optimizer, std::uint64_t steps,
                                                std::shared_ptr<topology_status> status) {
  return std::make_unique<topology_rule>(std::move(worker), std::move(algorithm), optimizer, steps,
                                         std::move(status));
}

}  // namespace accord
