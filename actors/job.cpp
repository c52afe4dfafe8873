// run_job: builds the actors of a job for one process and waits for the coordinator.
#include <accord/job.hpp>

#include "actors/accumulator_actor.hpp"
#include "actors/algorithm.hpp"
#include "actors/communicator_actor.hpp"
#include "actors/compute_actor.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/update_rule.hpp"
#include "optim/schedule.hpp"
#include "transport/inproc.hpp"
#include "transport/link_model.hpp"

#include <cblas.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <thread>

namespace accord {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

void validate(const job_config& c) {
  require(c.workers >= 1, "workers must be at least 1 (got " + std::to_string(c.workers) + ")");
  require(c.steps >= 1, "steps must be at least 1");
  require(c.micro_batch >= 1, "micro-batch must be at least 1");
  require(c.accumulation >= 1, "accumulation must be at least 1");
  require(c.max_accumulation == 0 || c.max_accumulation >= c.accumulation,
          "max-accumulation must be 0 (no cap) or at least accumulation");
  require(c.speed_factors.empty() || c.speed_factors.size() == static_cast<std::size_t>(c.workers),
          "speed factors: expected " + std::to_string(c.workers) + " values (one per worker), got " +
              std::to_string(c.speed_factors.size()));
  for (double f : c.speed_factors)
    require(f >= 1.0, "speed factors must be >= 1 (a factor f makes a worker f times slower)");
  require(c.learning_rate >= 0, "learning rate must not be negative");
  require(c.eval_batches >= 1, "eval batches must be at least 1");
}

optimizer_config optimizer_for(const algorithm& algo, const job_config& c) {
  optimizer_config o;
  o.kind = algo.aggregate == aggregation::sharded_optimizer && !c.optimizer.empty() ? c.optimizer
                                                                                     : algo.default_optimizer;
  if (algo.aggregate != aggregation::sharded_optimizer && !c.optimizer.empty() && c.optimizer != "lion")
    throw std::invalid_argument("algorithm " + algo.name + " votes on Lion directions; optimizer '" +
                                c.optimizer + "' does not apply");
  if (o.kind == "adamw") {
    o.learning_rate = 3e-3f, o.beta1 = 0.9f, o.beta2 = 0.95f;
  } else if (o.kind == "lion") {
    o.learning_rate = 3e-4f, o.beta1 = 0.9f, o.beta2 = 0.99f;
  } else if (o.kind == "sgd") {
    o.learning_rate = 0.05f, o.beta1 = 0.9f;
  } else {
    throw std::invalid_argument("unknown optimizer '" + o.kind + "' (expected adamw|lion|sgd)");
  }
  if (c.learning_rate > 0) o.learning_rate = c.learning_rate;
  if (c.beta1 >= 0) o.beta1 = c.beta1;
  if (c.beta2 >= 0) o.beta2 = c.beta2;
  o.epsilon = c.epsilon;
  o.weight_decay = c.weight_decay;
  return o;
}

// After a failure every transport throws, so no communicator stays blocked in a collective.
void fail_everyone(inproc_fabric& fabric, int workers) {
  for (int rank = 0; rank < workers; ++rank) fabric.fail(rank);
}

}  // namespace

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& a : algorithms()) names.push_back(a.name);
  return names;
}

job_result run_job(const model& prototype, std::shared_ptr<const dataset> train,
                   std::shared_ptr<const dataset> eval, const job_config& config,
                   std::function<void(const step_metrics&)> on_step) {
  validate(config);
  if (!train) throw std::invalid_argument("no training data set");
  const algorithm& algo = find_algorithm(config.algorithm);
  const optimizer_config optimizer = optimizer_for(algo, config);
  schedule_config schedule;
  schedule.kind = config.cosine ? "cosine" : "constant";
  schedule.peak_learning_rate = optimizer.learning_rate;
  schedule.warmup_steps = config.warmup_steps;
  schedule.total_steps = config.steps;
  schedule.final_fraction = config.min_lr_ratio;
  learning_rate_at(schedule, 0);  // validates the schedule before any actor starts
  const link_model link = link_model::parse(config.link);

  const int workers = config.workers;
  const std::uint64_t rounds = rounds_for_steps(algo.pipe, config.steps);
  std::vector<float> initial(prototype.parameter_count());
  prototype.initialize(initial, config.seed);

  // Each compute actor stands for one device: BLAS threads share the cores among them.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  openblas_set_num_threads(config.blas_threads > 0 ? config.blas_threads : std::max(1, cores / workers));

  inproc_fabric fabric(workers, link);
  auto result = std::make_shared<job_result>();
  auto meter = std::make_shared<memory_meter>();
  std::size_t state_bytes = 0;
  caf::actor_system_config system_config;
  system_config.set("scheduler.max-threads", std::max(2, cores));
  std::optional<std::string> failure;
  {
    caf::actor_system system{system_config};
    std::vector<caf::actor> everyone;

    auto evaluator = spawn_evaluator_actor(system, prototype.clone(), eval ? eval : train,
                                           config.micro_batch, config.eval_batches);
    coordinator_setup coordination;
    coordination.workers = workers;
    coordination.pipe = algo.pipe;
    coordination.rounds = rounds;
    coordination.parameter_count = initial.size();
    coordination.eval_interval = config.eval_interval;
    coordination.evaluator = evaluator;
    coordination.metrics_path = config.metrics_path;
    coordination.on_step = std::move(on_step);
    coordination.abort = [&fabric, workers] { fail_everyone(fabric, workers); };
    coordination.result = result;
    auto coordinator = spawn_coordinator_actor(system, std::move(coordination));
    everyone.push_back(caf::actor_cast<caf::actor>(evaluator));
    everyone.push_back(caf::actor_cast<caf::actor>(coordinator));

    std::vector<accumulator_actor> accumulators;
    for (int rank = 0; rank < workers; ++rank) {
      auto compute = std::make_shared<compute_setup>();
      compute->net = prototype.clone();
      compute->data = train;
      compute->stream = {rank, workers, config.micro_batch};
      compute->parameters = make_tensor(initial, meter);
      compute->meter = meter;
      compute->speed_factor = config.speed_factors.empty() ? 1.0 : config.speed_factors[rank];
      auto communication = std::make_shared<communicator_setup>();
      communication->link = fabric.endpoint(rank);
      communication->rule = make_update_rule(algo.aggregate, optimizer, initial, workers, rank);
      communication->hash_interval = config.replica_check_interval;
      state_bytes += communication->rule->state_bytes();

      accumulator_setup accumulation;
      accumulation.rank = rank;
      accumulation.pipe = algo.pipe;
      accumulation.rounds = rounds;
      accumulation.dpu_warmup = config.dpu_warmup;
      accumulation.accumulation = config.accumulation;
      accumulation.max_accumulation = config.max_accumulation;
      accumulation.parameter_count = initial.size();
      accumulation.learning_rate = [schedule](std::uint64_t step) { return learning_rate_at(schedule, step); };
      const auto pipe = algo.pipe;
      const auto interval = config.eval_interval;
      accumulation.wants_parameters = [rank, pipe, rounds, interval](std::uint64_t round) {
        return rank == 0 && evaluation_due(pipe, round, rounds, interval);
      };
      accumulation.compute = spawn_compute_actor(system, std::move(compute));
      accumulation.communicator = spawn_communicator_actor(system, std::move(communication));
      accumulation.coordinator = coordinator;
      accumulation.meter = meter;
      everyone.push_back(caf::actor_cast<caf::actor>(accumulation.compute));
      everyone.push_back(caf::actor_cast<caf::actor>(accumulation.communicator));
      accumulators.push_back(spawn_accumulator_actor(system, std::move(accumulation)));
      everyone.push_back(caf::actor_cast<caf::actor>(accumulators.back()));
    }

    caf::scoped_actor self{system};
    for (auto& a : accumulators) self->send(a, start_atom::value);
    self->request(coordinator, caf::infinite, wait_atom::value)
        .receive([](bool) {}, [&](caf::error& e) { failure = describe(system, e); });
    if (failure) fail_everyone(fabric, workers);
    for (auto& a : everyone) self->send_exit(a, caf::exit_reason::user_shutdown);
  }
  if (failure) throw std::runtime_error(*failure);
  const std::size_t parameter_bytes = initial.size() * sizeof(float);
  result->state_bytes_per_worker = state_bytes / static_cast<std::size_t>(workers);
  result->peak_bytes_per_worker = meter->peak / static_cast<std::size_t>(workers) + result->state_bytes_per_worker;
  result->minimum_bytes_per_worker = 3 * parameter_bytes + result->state_bytes_per_worker;
  return std::move(*result);
}

}  // namespace accord
