// run_job: a job's workers as actors of one process, over the in-process transport, and the
// in-process emulation of membership changes (one epoch per worker set).
#include <accord/job.hpp>

#include "cluster/membership_log.hpp"
#include "job/plan.hpp"
#include "job/runners.hpp"
#include "job/asynchronous_setup.hpp"
#include "job/scope_exit.hpp"
#include "observe/stall_watchdog.hpp"
#include "observe/trace.hpp"
#include "job/worker_spawn.hpp"
#include "transport/inproc.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace accord {
namespace {

// The ranks that `change` makes depart from an epoch of `workers`: the named ones, else the last.
std::vector<int> departing_ranks(const membership_change& change, int workers) {
  if (!change.departing.empty()) return change.departing;
  std::vector<int> last;
  for (int rank = change.workers; rank < workers; ++rank) last.push_back(rank);
  return last;
}

// The scripted membership changes, as the membership log of a job between processes would tell
// them: an epoch per worker set, who departs (lost in a crash, else left) and how many join.
void record_membership(const job_plan& plan) {
  membership_log_writer log(plan.config.membership_log);
  log.write(job_record(plan.workers, plan.steps));
  const std::uint64_t start = plan.resume ? plan.resume->steps : 0;
  log.write(epoch_record(1, start, plan.workers, false));
  epoch_order order(plan.workers);
  std::uint64_t epoch = 1;
  for (const membership_change& change : plan.config.membership) {
    const std::vector<int> departing = departing_ranks(change, order.size());
    for (const int rank : departing)
      log.write(member_record(change.crash ? "lost" : "left", epoch, change.step, order.starting_rank(rank),
                              "this process", "worker", change.crash ? "crashed (scripted)" : "left (scripted)"));
    const int joiners = change.workers - (order.size() - static_cast<int>(departing.size()));
    for (int j = 0; j < joiners; ++j)
      log.write(member_record("joined", epoch, change.step, -1, "this process", "worker", "joined (scripted)"));
    log.write(epoch_record(++epoch, change.step, change.workers, change.crash));
    order.change(departing, joiners);
  }
}

// One epoch of an in-process job: `plan`'s fixed worker set from where it starts to its last
// step. With `keep_state`, every step's state is handed to it; with `crash_after_step`, the last
// worker dies in the round after that step, once the state after that step has been kept.
// `epoch` numbers it in the metrics.
job_result run_epoch(const model& prototype, std::shared_ptr<const dataset> train,
                     std::shared_ptr<const dataset> eval, const job_plan& plan, const job_hooks& hooks,
                     std::function<void(const checkpoint&)> keep_state = {},
                     std::optional<std::uint64_t> crash_after_step = {}, std::uint64_t epoch = 1) {
  const int workers = plan.workers;
  const app_workers& apps = hooks.apps;
  size_blas(plan, workers);
  const int linked_group = plan.topo->link_group_size();
  inproc_fabric fabric(workers, link_layout{plan.link, plan.inter_link, linked_group > 1 ? linked_group : 0});
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
        coordination_for(plan, prototype, hooks, spawn_evaluation(system, local, prototype, eval ? eval : train, plan));
    setup.on_step = hooks.on_step;
    setup.epoch = epoch;
    setup.append_metrics = setup.append_metrics || epoch > 1;  // the file continues the earlier epochs'
    setup.abort = [&] {
      fail_everyone();
      if (servers) servers->stop();
    };
    setup.result = result;
    if (keeps_state) setup.on_checkpoint = keep;
    auto coordinator = local.keep(spawn_coordinator_actor(system, std::move(setup)), "coordinator");
    std::vector<accumulator_actor> accumulators;
    if (const auto* asynchronous = as_asynchronous(*plan.topo))
      servers = asynchronous->start(system, asynchronous_for(plan, prototype, train, hooks, coordinator));
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
      accumulators.push_back(spawn_worker(system, local, plan, prototype, train, hooks, std::move(spec)).accumulator);
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
  local.account(*result, plan);
  return std::move(*result);
}

}  // namespace

job_result run_job(const model& prototype, std::shared_ptr<const dataset> train,
                   std::shared_ptr<const dataset> eval, const job_config& config,
                   std::function<void(const step_metrics&)> on_step) {
  const job_plan plan = plan_in_process(prototype, train, config, 0);
  return run_in_process(prototype, std::move(train), std::move(eval), plan, hooks_of(config, std::move(on_step)));
}

job_plan plan_in_process(const model& prototype, const std::shared_ptr<const dataset>& train,
                         const job_config& config, std::size_t app_workers) {
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
    const std::string departing = "membership change after step " + std::to_string(change.step) + ": the departing ranks ";
    require(std::is_sorted(change.departing.begin(), change.departing.end()) &&
                std::adjacent_find(change.departing.begin(), change.departing.end()) == change.departing.end(),
            departing + "must ascend, each once");
    require(std::all_of(change.departing.begin(), change.departing.end(), [&](int r) { return r >= 0 && r < workers; }),
            departing + "must be ranks of the " + std::to_string(workers) + " workers before it");
    require(change.departing.empty() ||
                static_cast<std::size_t>(change.workers) + change.departing.size() >= static_cast<std::size_t>(workers),
            departing + "are fewer than the change from " + std::to_string(workers) + " to " +
                std::to_string(change.workers) + " workers removes");
    last = change.step;
    workers = change.workers;
    most_at_once = std::max(most_at_once, workers);
  }
  require_worker_memory(prototype, most_at_once);
  require(app_workers == 0 || (app_workers == static_cast<std::size_t>(config.workers) && config.membership.empty()),
          "an app-driven job in one process has a fixed worker set (no membership changes)");
  job_plan plan = plan_job(prototype, *train, config);
  require(app_workers == 0 || !as_asynchronous(*plan.topo),
          "--topology " + plan.topology_name + " runs its own workers (not app-driven ones)");
  return plan;
}

job_result run_in_process(const model& prototype, std::shared_ptr<const dataset> train,
                          std::shared_ptr<const dataset> eval, const job_plan& plan, const job_hooks& hooks) {
  const trace_session trace(plan.config.trace_path);
  const stall_watchdog watchdog(std::chrono::duration<double>(plan.config.watchdog_seconds), census_report);
  if (!plan.config.membership_log.empty()) record_membership(plan);
  // Asynchronous topologies follow membership changes themselves: their workers come and go.
  if (plan.config.membership.empty() || as_asynchronous(*plan.topo)) return run_epoch(prototype, train, eval, plan, hooks);

  // Elastic: one epoch per worker set, each continuing from the state the previous one left.
  job_result total;
  std::optional<checkpoint> state;
  auto keep = [&state](const checkpoint& c) { state = c; };
  const auto started = std::chrono::steady_clock::now();
  job_hooks epoch_hooks = hooks;
  epoch_hooks.on_step = [&](step_metrics m) {
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    total.steps.push_back(m);
    if (hooks.on_step) hooks.on_step(m);
  };
  int workers = plan.workers;
  for (std::size_t e = 0; e <= plan.config.membership.size(); ++e) {
    const bool last_epoch = e == plan.config.membership.size();
    const membership_change* change = last_epoch ? nullptr : &plan.config.membership[e];
    std::uint64_t steps = last_epoch ? plan.steps : change->step;
    std::optional<std::uint64_t> crash_after;
    if (change && change->crash) {  // run into the next step and lose a worker during it
      steps = change->step + 1;
      crash_after = change->step;
    }
    const job_plan epoch = plan_epoch(plan, prototype, workers, steps, state ? &*state : nullptr);
    std::string crash_report;
    try {
      add_epoch_result(total, run_epoch(prototype, train, eval, epoch, epoch_hooks, keep, crash_after, e + 1));
    } catch (const std::runtime_error& e) {
      if (!crash_after) throw;  // only the scripted crash is survivable here
      crash_report = e.what();
      while (!total.steps.empty() && total.steps.back().step > change->step) total.steps.pop_back();
    }
    if (hooks.stop_requested && hooks.stop_requested->load()) break;
    if (change) {
      if (!state || state->steps != change->step)
        throw std::runtime_error("no state was kept at step " + std::to_string(change->step) +
                                 (crash_report.empty() ? "" : " (the epoch failed: " + crash_report + ")"));
      // The survivors keep their own momenta and topology shares in their order; joiners start
      // from the momenta's mean and a fresh topology share (elastic_state).
      const std::vector<int> departing = departing_ranks(*change, workers);
      for (auto rank = departing.rbegin(); rank != departing.rend(); ++rank) {
        if (static_cast<std::size_t>(*rank) < state->momenta.size()) state->momenta.erase(state->momenta.begin() + *rank);
        if (static_cast<std::size_t>(*rank) < state->topology_workers.size())
          state->topology_workers.erase(state->topology_workers.begin() + *rank);
      }
      workers = change->workers;
    }
  }
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  average_over_steps(total);
  return total;
}

}  // namespace accord
