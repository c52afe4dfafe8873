// run_job: a job's workers as actors of one process, over the in-process transport, and the
// in-process emulation of membership changes (one epoch per worker set).
#include <accord/job.hpp>

#include "job/plan.hpp"
#include "job/runners.hpp"
#include "job/asynchronous_setup.hpp"
#include "job/scope_exit.hpp"
#include "observe/trace.hpp"
#include "job/worker_spawn.hpp"
#include "transport/inproc.hpp"
#include "transport/link_model.hpp"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace accord {
namespace {

// One epoch of an in-process job: a fixed worker set from `state` (or the start, or
// config.resume_path) to config.steps. With `keep_state`, every step's state is handed to it;
// with `crash_after_step`, the last worker dies in the round after that step, once the state
// after that step has been kept. `epoch` numbers it in the metrics. `apps`: app-driven workers.
job_result run_epoch(const model& prototype, std::shared_ptr<const dataset> train,
                     std::shared_ptr<const dataset> eval, const job_config& config,
                     std::function<void(const step_metrics&)> on_step, const app_workers& apps,
                     const checkpoint* state = nullptr,
                     std::function<void(const checkpoint&)> keep_state = {},
                     std::optional<std::uint64_t> crash_after_step = {}, std::uint64_t epoch = 1) {
  const job_plan plan = plan_job(prototype, *train, config, state);
  const int workers = config.workers;
  size_blas(config, workers);
  const link_model inside = link_model::parse(config.link);
  const std::string& across = config.topology_settings.inter_link;
  inproc_fabric fabric(workers, link_layout{inside, across.empty() ? inside : link_model::parse(across),
                                            plan.topo->group_size() > 1 ? plan.topo->group_size() : 0});
  // After a failure every transport throws, so no communicator stays blocked in a collective.
  auto fail_everyone = [&fabric, workers] {
    for (int rank = 0; rank < workers; ++rank) fabric.fail(rank);
  };
  // A compute actor waiting for the app would keep the actor system's destructor waiting.
  auto release_apps = [&apps] {
    for (const auto& app : apps) app->release();
  };
  auto result = std::make_shared<job_result>();
  caf::actor_system_config system_config;
  configure_system(system_config);
  local_actors local;
  std::optional<std::string> failure;
  {
    caf::actor_system system{system_config};
    caf::scoped_actor self{system};
    std::unique_ptr<asynchronous_run> servers;  // an asynchronous topology's own workers, instead of rounds
    const scope_exit stop_on_exception([&](bool unwinding) {
      if (!unwinding) return;
      fail_everyone();  // no communicator may stay blocked in a collective
      if (servers) servers->stop();
      release_apps();
      local.shut_down(self);
    });
    const bool keeps_state = static_cast<bool>(keep_state);
    // The emulated crash waits until the state after `crash_after_step` is kept: the workers
    // run ahead of the coordinator, and a death noticed first would fail the epoch before it.
    struct {
      std::mutex mutex;
      std::condition_variable changed;
      bool kept = false;
    } crash_gate;
    auto keep = [&, keep_state = std::move(keep_state)](const checkpoint& c) {
      keep_state(c);
      if (crash_after_step && c.steps == *crash_after_step) {
        std::lock_guard lock(crash_gate.mutex);
        crash_gate.kept = true;
        crash_gate.changed.notify_all();
      }
    };
    coordinator_setup setup =
        coordination_for(plan, prototype, config, spawn_evaluation(system, local, prototype, eval ? eval : train, config));
    setup.on_step = std::move(on_step);
    setup.epoch = epoch;
    setup.append_metrics = setup.append_metrics || epoch > 1;  // the file continues the earlier epochs'
    setup.abort = [&] {
      fail_everyone();
      if (servers) servers->stop();
    };
    setup.result = result;
    if (keeps_state) setup.on_checkpoint = keep;
    auto coordinator = local.keep(spawn_coordinator_actor(system, std::move(setup)));
    std::vector<accumulator_actor> accumulators;
    if (const auto* asynchronous = as_asynchronous(*plan.topo))
      servers = asynchronous->start(system, asynchronous_for(plan, prototype, train, config, coordinator));
    for (int rank = 0; rank < workers && !servers; ++rank) {
      std::function<void()> crash;
      if (crash_after_step && rank == workers - 1)
        crash = [&fabric, &crash_gate, rank] {
          std::unique_lock lock(crash_gate.mutex);
          crash_gate.changed.wait_for(lock, std::chrono::minutes(2), [&] { return crash_gate.kept; });
          fabric.fail(rank);
        };
      worker_spec spec;
      spec.rank = rank;
      spec.link = fabric.endpoint(rank);
      spec.coordinator = coordinator;
      spec.state = plan.state_of(workers, rank);
      spec.keeps_state = keeps_state;
      spec.crash = std::move(crash);
      spec.crash_round = crash_after_step ? rounds_for_steps(plan.algo->pipe, *crash_after_step) : 0;
      if (!apps.empty()) spec.app = apps[static_cast<std::size_t>(rank)];
      accumulators.push_back(spawn_worker(system, local, plan, prototype, train, config, std::move(spec)).accumulator);
    }
    failure = run_to_end(system, self, accumulators, coordinator);
    if (servers) {
      if (failure) servers->stop();
      else local.final_parameters = servers->finish();
      local.state_bytes = servers->state_bytes();
      local.workers = workers;
      servers.reset();
    }
    if (failure) fail_everyone();
    release_apps();
    local.shut_down(self);
  }
  if (failure) throw std::runtime_error(*failure);
  local.account(*result, plan.initial.size());
  return std::move(*result);
}

}  // namespace

job_result run_job(const model& prototype, std::shared_ptr<const dataset> train,
                   std::shared_ptr<const dataset> eval, const job_config& config,
                   std::function<void(const step_metrics&)> on_step) {
  return run_job_in_process(prototype, std::move(train), std::move(eval), config, std::move(on_step), {});
}

job_result run_job_in_process(const model& prototype, std::shared_ptr<const dataset> train,
                              std::shared_ptr<const dataset> eval, const job_config& config,
                              std::function<void(const step_metrics&)> on_step, const app_workers& apps) {
  if (!train) throw std::invalid_argument("no training data set");
  validate(config);
  if (!config.checkpoint_path.empty()) check_checkpoint_path(config.checkpoint_path);
  const std::string in_process_limit =
      " in one process exceed " + std::to_string(max_workers_in_process) + " (each runs two threads)";
  require(config.workers <= max_workers_in_process, "workers: " + std::to_string(config.workers) + in_process_limit);
  // Membership changes, all checked before the first epoch starts.
  require(config.membership.empty() || config.speed_factors.empty(),
          "speed factors cannot be combined with membership changes");
  int workers = config.workers, most_at_once = config.workers;
  std::uint64_t last = 0;
  for (const auto& change : config.membership) {
    require(change.step > last && change.step < config.steps,
            "membership changes must come at increasing steps inside 1.." + std::to_string(config.steps - 1));
    require(change.workers >= 1, "a membership change must leave at least 1 worker");
    require(change.workers <= max_workers_in_process,
            "membership: " + std::to_string(change.workers) + " workers" + in_process_limit);
    require(!change.crash || change.workers < workers, "a crash must leave fewer workers");
    last = change.step;
    workers = change.workers;
    most_at_once = std::max(most_at_once, workers);
  }
  require_worker_memory(prototype, most_at_once);
  require(apps.empty() || (apps.size() == static_cast<std::size_t>(config.workers) && config.membership.empty()),
          "an app-driven job in one process has a fixed worker set (no membership changes)");
  const auto topo = job_topology(config, find_algorithm(config.algorithm), prototype, false);  // before the first epoch
  const trace_session trace(config.trace_path);
  require(apps.empty() || !as_asynchronous(*topo),
          "--topology " + config.topology + " runs its own workers (not app-driven ones)");
  // Asynchronous topologies follow membership changes themselves: their workers come and go.
  if (config.membership.empty() || as_asynchronous(*topo))
    return run_epoch(prototype, train, eval, config, std::move(on_step), apps);

  // Elastic: one epoch per worker set, each continuing from the state the previous one left.
  job_result total;
  std::optional<checkpoint> state;
  auto keep = [&state](const checkpoint& c) { state = c; };
  const auto started = std::chrono::steady_clock::now();
  auto record = [&](step_metrics m) {
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    total.steps.push_back(m);
    if (on_step) on_step(m);
  };
  job_config epoch = config;
  epoch.membership.clear();
  epoch.checkpoint_interval = 1;  // every step's state survives a crash in the next one
  for (std::size_t e = 0; e <= config.membership.size(); ++e) {
    const bool last_epoch = e == config.membership.size();
    const membership_change* change = last_epoch ? nullptr : &config.membership[e];
    epoch.steps = last_epoch ? config.steps : change->step;
    std::optional<std::uint64_t> crash_after;
    if (change && change->crash) {  // run into the next step and lose a worker during it
      epoch.steps = change->step + 1;
      crash_after = change->step;
    }
    const checkpoint* from = state ? &*state : nullptr;
    std::string crash_report;
    try {
      add_epoch_result(total, run_epoch(prototype, train, eval, epoch, record, {}, from, keep, crash_after, e + 1));
    } catch (const std::runtime_error& e) {
      if (!crash_after) throw;  // only the scripted crash is survivable here
      crash_report = e.what();
      while (!total.steps.empty() && total.steps.back().step > change->step) total.steps.pop_back();
    }
    if (config.stop_requested && config.stop_requested->load()) break;
    if (change) {
      if (!state || state->steps != change->step)
        throw std::runtime_error("no state was kept at step " + std::to_string(change->step) +
                                 (crash_report.empty() ? "" : " (the epoch failed: " + crash_report + ")"));
      epoch.workers = change->workers;
      epoch.resume_path.clear();
    }
  }
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  average_over_steps(total);
  return total;
}

}  // namespace accord
