// job_actors (include/accord/caf/worker_actors.hpp): an in-process job's actors in the caller's
// actor system, wired as run_job wires them.
#include <accord/caf/worker_actors.hpp>

#include "actors/membership_actor.hpp"
#include "job/worker_spawn.hpp"
#include "transport/inproc.hpp"

namespace accord {

void configure_actor_system(caf::actor_system_config& config) {
  add_control_message_types(config);
  add_membership_message_types(config);
}

struct job_actors::parts {
  explicit parts(job_plan p)
      : plan(std::move(p)), workers_in_job(plan.workers),
        fabric(std::make_shared<inproc_fabric>(plan.workers, plan.link)) {}
  const job_plan plan;
  int workers_in_job;
  // Every edge is one plan.link (run_job gives a grouped topology's edges across groups
  // plan.inter_link; these never did).
  // Shared with the coordinator's abort, which may run while this object goes away.
  std::shared_ptr<inproc_fabric> fabric;
  local_actors local;
  std::shared_ptr<job_result> result = std::make_shared<job_result>();
  std::vector<worker_handles> workers;
  coordinator_actor coordinator;
  evaluator_actor evaluator;
  // After a failure every transport throws, so no communicator stays blocked in a collective.
  static void fail_everyone(inproc_fabric& fabric, int workers) {
    for (int rank = 0; rank < workers; ++rank) fabric.fail(rank);
  }
};

job_actors::job_actors(caf::actor_system& system, const model& prototype, std::shared_ptr<const dataset> train,
                       std::shared_ptr<const dataset> eval, const job_config& config,
                       std::function<void(const step_metrics&)> on_step) {
  require(train != nullptr, "no training data set");
  require(config.membership.empty(), "job_actors: membership changes are run_job's (one epoch per worker set)");
  require(config.workers <= max_workers_in_process, "workers: " + std::to_string(config.workers) + " in one process exceed " +
                                                        std::to_string(max_workers_in_process));
  job_plan plan = plan_job(prototype, *train, config);
  require_worker_memory(prototype, config.workers);
  if (!config.checkpoint_path.empty()) check_checkpoint_path(config.checkpoint_path);
  const job_hooks hooks = hooks_of(config, std::move(on_step));
  // From here on, only the plan.
  size_blas(plan, plan.workers);
  parts_ = std::make_unique<parts>(std::move(plan));
  parts& p = *parts_;
  const int workers = p.plan.workers;
  p.evaluator = spawn_evaluation(system, p.local, prototype, eval ? eval : train, p.plan);
  coordinator_setup setup = coordination_for(p.plan, prototype, hooks, p.evaluator);
  setup.on_step = hooks.on_step;
  setup.abort = [fabric = p.fabric, workers] { parts::fail_everyone(*fabric, workers); };
  setup.result = p.result;
  p.coordinator = p.local.keep(spawn_coordinator_actor(system, std::move(setup)), "coordinator");
  for (int rank = 0; rank < workers; ++rank) {
    worker_spec spec;
    spec.rank = rank;
    spec.link = p.fabric->endpoint(rank);
    spec.coordinator = p.coordinator;
    spec.state = p.plan.state_of(workers, rank);
    p.workers.push_back(spawn_worker(system, p.local, p.plan, prototype, train, hooks, std::move(spec)));
  }
}

job_actors::~job_actors() {
  parts::fail_everyone(*parts_->fabric, parts_->workers_in_job);
  for (auto& a : parts_->local.everyone) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

const std::vector<worker_handles>& job_actors::workers() const { return parts_->workers; }
coordinator_actor job_actors::coordinator() const { return parts_->coordinator; }
evaluator_actor job_actors::evaluator() const { return parts_->evaluator; }

void job_actors::start() {
  for (const auto& w : parts_->workers) caf::anon_send(w.accumulator, start_atom::value);
}

job_result job_actors::result() const {
  job_result r = *parts_->result;
  parts_->local.account(r, parts_->plan);
  return r;
}

}  // namespace accord
