// Spawning a worker's actors (and the evaluator, and the coordinator's setup) in one process.
#include "job/worker_spawn.hpp"

#include <accord/blas_threads.hpp>

#include "actors/communicator_actor.hpp"
#include "actors/compute_actor.hpp"
#include "actors/membership_actor.hpp"
#include "transport/hierarchical.hpp"
#include "transport/wire_precision.hpp"

#include <cblas.h>

#include <algorithm>
#include <thread>

namespace accord {

void size_blas(const job_plan& plan, int local_workers) {
  openblas_set_num_threads(choose_blas_threads(plan.config.blas_threads, local_workers).threads);
}

std::optional<blas_threads_choice> size_blas_for_epoch(const job_plan& plan, const std::vector<std::string>& addresses,
                                                       int rank) {
  const auto host = [](const std::string& address) { return address.substr(0, address.rfind(':')); };
  const std::string mine = host(addresses.at(static_cast<std::size_t>(rank)));
  const auto here = std::count_if(addresses.begin(), addresses.end(),
                                  [&](const std::string& a) { return host(a) == mine; });
  const blas_threads_choice choice = choose_blas_threads(plan.config.blas_threads, 1, static_cast<int>(here));
  if (choice.threads == openblas_get_num_threads()) return std::nullopt;
  openblas_set_num_threads(choice.threads);
  return choice;
}

void configure_system(caf::actor_system_config& system_config) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  system_config.set("scheduler.max-threads", std::max(2, cores));
  // An idle scheduler thread sleeps on its condition variable (woken by the next message) after a
  // short spin, instead of CAF's default 500 wake-ups at 50 us: those ran beside the compute
  // thread while rounds were in flight and took a third of a shared core from it.
  system_config.set("work-stealing.aggressive-poll-attempts", std::size_t{20});
  system_config.set("work-stealing.moderate-poll-attempts", std::size_t{0});
  add_control_message_types(system_config);
  add_membership_message_types(system_config);
}

coordinator_setup coordination_for(const job_plan& plan, const model& prototype, const job_hooks& hooks,
                                   evaluator_actor evaluator) {
  coordinator_setup setup;
  setup.workers = plan.workers;
  setup.pipe = plan.algo->pipe;
  setup.first_round = plan.first_round;
  setup.rounds = plan.rounds;
  setup.parameter_count = plan.initial.size();
  setup.micro_batch = plan.config.micro_batch;
  setup.data_offset = plan.data_position;
  setup.checkpoint_path = plan.config.checkpoint_path;
  setup.checkpoint_interval = plan.config.checkpoint_interval;
  setup.algorithm = plan.algo->name;
  setup.signature = prototype.signature();
  setup.eval_interval = plan.config.eval_interval;
  setup.evaluator = std::move(evaluator);
  setup.defer_evaluation = plan.config.defer_evaluation;
  setup.metrics_path = plan.config.metrics_path;
  setup.append_metrics = plan.resume.has_value();  // a resumed job's file goes on
  setup.data_hash = plan.data_hash;
  setup.learning_rate = [schedule = plan.schedule](std::uint64_t step) { return learning_rate_at(schedule, step); };
  setup.on_checkpoint_written = hooks.on_checkpoint_written;
  setup.started = std::chrono::steady_clock::now() - plan.clock_before();
  return setup;
}

evaluator_actor spawn_evaluation(caf::actor_system& system, local_actors& local, const model& prototype,
                                 std::shared_ptr<const dataset> eval, const job_plan& plan) {
  return local.keep(spawn_evaluator_actor(system, prototype.clone(), std::move(eval), plan.config.eval_examples),
                    "evaluator");
}

// Buckets where they change nothing but timing: a synchronous rule on the ring that takes them
// (DDP's sharded optimizer over fp32 or 16-bit wires, no values the app keeps), between workers,
// with rounds and sums on the host (a resident worker's sum is on its device until the round).
namespace {
bool uses_gradient_buckets(const job_plan& plan, const compute_setup& compute, const update_rule& rule) {
  return bucket_elements(plan.config.bucket_cap_mb) > 0 && plan.workers > 1 && plan.algo->pipe == pipeline::synchronous &&
         plan.topology_name == "ring" && !compute.resident && rule.bucket_prefix() > 0;
}
}  // namespace

worker_handles spawn_worker(caf::actor_system& system, local_actors& local, const job_plan& plan,
                            const model& prototype, std::shared_ptr<const dataset> train, const job_hooks& hooks,
                            worker_spec spec) {
  const int workers = plan.workers;
  const int rank = spec.rank;
  auto compute = std::make_shared<compute_setup>();
  compute->net = prototype.clone();
  compute->data = std::move(train);
  compute->stream = {rank, workers, plan.config.micro_batch, plan.data_position};
  compute->parameters = make_tensor(plan.initial, local.meter);
  // A resumed 16-bit job computes with the rounded copy of its masters, as it did before.
  // (With int8, fp8, fp4, sign, sign2 or sign3 the replica itself was resumed: its masters are not a rounding of it.)
  // (A topology's own state names the parameters to restart from: they are not rounded masters.)
  if (plan.resume && plan.algo->aggregate == aggregation::sharded_optimizer &&
      !block_quantized(plan.precision.real.parameters) && plan.resume->topology_workers.empty())
    round_to_wire(plan.precision.real.parameters, *compute->parameters);
  compute->speed_factor = plan.speed_factor(rank);
  compute->app = spec.app;
  // An app-driven worker too: its model's memory() is the app's (app_model::memory).
  compute->resident = plan.config.resident_on_host || !compute->net->memory().on_host();
  if (spec.app) spec.app->open();
  auto communication = std::make_shared<communicator_setup>();
  const int group_size = plan.topo->group_size();
  communication->link = group_size > 1 ? std::shared_ptr<transport>(make_hierarchical_transport(spec.link, group_size))
                                       : std::move(spec.link);
  auto status = std::make_shared<topology_status>();
  std::unique_ptr<update_rule> algorithm_rule = plan.algo->make_rule(
      rule_inputs{plan.optimizer, plan.initial, workers, rank, plan.precision, spec.state ? &*spec.state : nullptr});
  // Rounds on the device (README "GPU data path"): a resident worker on the ring, whose rule has
  // a device form, over collectives that serve its memory (NCCL on its GPU; the reference on
  // host memory for resident_on_host). Anything else runs its rounds on the host.
  if (compute->resident && plan.config.device_rounds && plan.topology_name == "ring" && algorithm_rule->has_device_form())
    communication->collectives = make_device_collectives(*communication->link, compute->net->memory());
  if (communication->collectives) {
    communication->memory = compute->memory = std::make_shared<resident_memory>(compute->net->memory());
    communication->rule = std::move(algorithm_rule);  // the ring adds nothing to the algorithm's round
  } else {
    communication->rule = make_topology_rule(plan.topo->make_worker(rank, plan.initial), std::move(algorithm_rule),
                                             plan.optimizer, status, spec.state ? &spec.state->topology : nullptr);
    communication->topology = std::move(status);
  }
  communication->hash_interval = plan.config.replica_check_interval;
  communication->crash = std::move(spec.crash);
  communication->crash_round = spec.crash_round;
  communication->keeper = spec.keeper;
  communication->pipe = plan.algo->pipe;
  communication->layout = spec.layout;
  communication->replicate = plan.sharded();
  communication->change_epoch = spec.change_epoch;
  communication->end_steps = spec.end_steps;
  communication->stop_requested = hooks.stop_requested;
  local.state_bytes += communication->rule->state_bytes();

  accumulator_setup accumulation;
  accumulation.rank = rank;
  accumulation.pipe = plan.algo->pipe;
  accumulation.first_round = plan.first_round;
  accumulation.rounds = plan.rounds;
  accumulation.dpu_warmup = plan.config.dpu_warmup;
  accumulation.fixed_steps = plan.fixed_steps;
  accumulation.app_driven = spec.app != nullptr;
  const job_settings::micro_batch_counts counts = plan.micro_batches_of(rank);
  accumulation.accumulation = counts.least;
  accumulation.max_accumulation = counts.most;
  accumulation.estimate_accumulation = counts.estimate_least;
  accumulation.estimate_max_accumulation = counts.estimate_most;
  accumulation.parameter_count = plan.initial.size();
  accumulation.parameters = compute->parameters;
  accumulation.fetch_sums = compute->resident && !compute->memory;
  accumulation.memory = compute->memory;
  accumulation.learning_rate = [schedule = plan.schedule](std::uint64_t step) {
    return learning_rate_at(schedule, step);
  };
  accumulation.schedule_micro_batches = plan.schedule_micro_batches;
  accumulation.applied = plan.data_position / plan.config.micro_batch;  // a resumed job's, as far as consumed
  const bool checkpoints = !plan.config.checkpoint_path.empty() || spec.keeps_state;
  auto checkpoint_due = [checkpoints, pipe = plan.algo->pipe, rounds = plan.rounds,
                         interval = plan.config.checkpoint_interval](std::uint64_t round) {
    return checkpoints && step_due(pipe, round, rounds, interval);
  };
  accumulation.wants_parameters = [rank, checkpoint_due, pipe = plan.algo->pipe, rounds = plan.rounds,
                                   interval = plan.config.eval_interval](std::uint64_t round) {
    return rank == 0 && (step_due(pipe, round, rounds, interval) || checkpoint_due(round));
  };
  accumulation.wants_snapshot = checkpoint_due;
  if (spec.keeper && spec.keep_interval)
    accumulation.wants_kept = [pipe = plan.algo->pipe, rounds = plan.rounds,
                               interval = spec.keep_interval](std::uint64_t round) {
      return step_due(pipe, round, rounds, interval);
    };
  if (local.workers++ == 0) {
    accumulation.on_final_parameters = [&local](const std::vector<float>& p) { local.final_parameters = p; };
    accumulation.reports_shared_threads = true;
  }
  // DDP's gradient buckets (docs/algorithms.md, DDP): the model's finished gradients go to the
  // communicator from the compute thread, once it is spawned.
  auto bucket_receiver = std::make_shared<communicator_actor>();
  if (uses_gradient_buckets(plan, *compute, *communication->rule)) {
    accumulation.buckets = std::make_shared<bucket_feed>(
        bucket_elements(plan.config.bucket_cap_mb), communication->rule->bucket_prefix(),
        [bucket_receiver](std::uint64_t round, shard range, const tensor& buffer) {
          caf::anon_send(*bucket_receiver, gradient_bucket{round, range, buffer});
        });
    auto listener = [feed = accumulation.buckets](std::size_t begin) { feed->final_from(begin); };
    if (compute->app)  // the app's own backward reports its progress (worker::gradients_final_from)
      compute->app->listen_to_gradients(first_bucket_elements(bucket_elements(plan.config.bucket_cap_mb)),
                                        std::move(listener));
    else
      compute->net->listen_to_gradients(std::move(listener));
  }
  worker_handles handles;
  handles.rank = rank;
  const std::string of_rank = ", rank " + std::to_string(rank);  // the roles in the stall watchdog's report
  handles.compute = accumulation.compute =
      local.keep(spawn_compute_actor(system, std::move(compute)), "compute" + of_rank);
  handles.communicator = accumulation.communicator =
      local.keep(spawn_communicator_actor(system, std::move(communication)), "communicator" + of_rank);
  *bucket_receiver = handles.communicator;
  accumulation.coordinator = spec.coordinator;
  accumulation.meter = local.meter;
  handles.accumulator = local.keep(spawn_accumulator_actor(system, std::move(accumulation)), "accumulator" + of_rank);
  return handles;
}

void average_over_steps(job_result& r) {
  r.bits_per_parameter_per_step = r.hidden_fraction = 0;
  for (const auto& m : r.steps) {
    r.bits_per_parameter_per_step += m.bits_per_parameter / static_cast<double>(r.steps.size());
    r.hidden_fraction += m.hidden_fraction / static_cast<double>(r.steps.size());
  }
}

}  // namespace accord
