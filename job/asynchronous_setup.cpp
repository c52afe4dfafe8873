#include "job/asynchronous_setup.hpp"

namespace accord {

asynchronous_setup asynchronous_for(const job_plan& plan, const model& prototype,
                                    std::shared_ptr<const dataset> train, const job_config& config,
                                    coordinator_actor coordinator) {
  asynchronous_setup s;
  s.workers = config.workers;
  s.prototype = &prototype;
  s.train = std::move(train);
  s.micro_batch = config.micro_batch;
  s.accumulation = config.accumulation;
  s.steps = config.steps;
  s.data_position = plan.data_position;
  s.speed_factors = config.speed_factors;
  s.membership = config.membership;
  s.link = link_model::parse(config.link);
  s.optimizer = plan.optimizer;
  s.schedule = plan.schedule;
  s.initial = plan.initial;
  s.eval_interval = config.eval_interval;
  s.coordinator = std::move(coordinator);
  s.stop_requested = config.stop_requested;
  return s;
}

}  // namespace accord
