#include "job/asynchronous_setup.hpp"

namespace accord {

asynchronous_setup asynchronous_for(const job_plan& plan, const model& prototype,
                                    std::shared_ptr<const dataset> train, const job_hooks& hooks,
                                    coordinator_actor coordinator) {
  asynchronous_setup s;
  s.workers = plan.workers;
  s.prototype = &prototype;
  s.train = std::move(train);
  s.micro_batch = plan.config.micro_batch;
  s.accumulation = plan.accumulation;
  s.steps = plan.steps;
  s.data_position = plan.data_position;
  s.speed_factors = plan.config.speed_factors;
  s.membership = plan.config.membership;
  s.link = plan.link;
  s.optimizer = plan.optimizer;
  s.schedule = plan.schedule;
  s.initial = plan.initial;
  s.eval_interval = plan.config.eval_interval;
  s.coordinator = std::move(coordinator);
  s.stop_requested = hooks.stop_requested;
  return s;
}

}  // namespace accord
