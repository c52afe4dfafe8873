// register_algorithm (include/accord/update_rule.hpp): an app's aggregation rule, run by the
// communicator as the built-in update rules are, over the job's transport.
#include <accord/update_rule.hpp>

#include "algorithms/algorithm.hpp"
#include "algorithms/transport_peers.hpp"

#include <stdexcept>

namespace accord {
namespace {

class registered_rule final : public update_rule {
public:
  explicit registered_rule(std::unique_ptr<aggregation_rule> rule) : rule_(std::move(rule)) {}
  void apply(transport& link, std::span<float> buffer, const round_totals& local, const round_totals& global,
             float learning_rate, std::uint64_t step, bool estimate, std::span<const float>) override {
    transport_peers peers(link);
    rule_->apply(peers, buffer, round_view{step, learning_rate, local.micro_batches, global.micro_batches, estimate});
  }
  std::size_t state_bytes() const override { return rule_->state_bytes(); }
  rule_state snapshot() const override { return {}; }  // nothing to checkpoint (refused in plan_job)

private:
  std::unique_ptr<aggregation_rule> rule_;
};

}  // namespace

void register_algorithm(const std::string& name, pipeline pipe, rule_factory make_rule,
                        const std::string& default_optimizer, const std::string& summary) {
  algorithm a;
  a.name = name;
  a.pipe = pipe;
  a.aggregate = aggregation::registered;
  a.default_optimizer = default_optimizer;
  a.summary = summary;
  if (make_rule)
    a.make_rule = [name, make = std::move(make_rule)](const rule_inputs& in) {
      const optimizer_config& o = in.optimizer;
      auto rule = make(rule_setup{in.initial, in.rank, in.world, o.learning_rate, o.beta1, o.beta2, o.epsilon,
                                  o.weight_decay});
      if (!rule) throw std::invalid_argument("algorithm " + name + ": the rule factory returned no rule");
      return std::unique_ptr<update_rule>(std::make_unique<registered_rule>(std::move(rule)));
    };
  add_algorithm(std::move(a));
}

}  // namespace accord
