#pragma once
// Spawning a job's actors in one process: a worker's compute, communicator and accumulator
// actors, the evaluator, and the coordinator's setup, plus what the process accounts for them.
#include "actors/actor_census.hpp"
#include "actors/app_bridge.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/worker_handles.hpp"
#include "recovery/elastic_state.hpp"
#include "job/plan.hpp"

#include <accord/blas_threads.hpp>

#include <caf/all.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accord {

// Each compute actor stands for one device: BLAS threads share the cores among them, and among
// the other processes on this machine (include/accord/blas_threads.hpp).
void size_blas(const job_plan& plan, int local_workers);

// An epoch of a job between processes: this process's one worker shares the cores with the
// epoch's members on its host (the host parts of their transport `addresses`), so a joiner
// started by hand does not size itself as if alone; LOCAL_WORLD_SIZE, --blas-threads and the
// BLAS variables win over that count (choose_blas_threads). The choice when it changed the thread count.
std::optional<blas_threads_choice> size_blas_for_epoch(const job_plan& plan, const std::vector<std::string>& addresses,
                                                       int rank);

// CAF settings and message types every accord actor system needs.
void configure_system(caf::actor_system_config& system_config);

// The actors one process runs for a job, and what they account for.
struct local_actors {
  std::vector<caf::actor> everyone;
  std::shared_ptr<memory_meter> meter = std::make_shared<memory_meter>();
  std::size_t state_bytes = 0;
  int workers = 0;
  std::vector<float> final_parameters;  // written by the lowest local rank's accumulator

  // `role` names it in the stall watchdog's report (actors/actor_census.hpp).
  template <class Handle>
  Handle keep(Handle h, std::string role) {
    everyone.push_back(caf::actor_cast<caf::actor>(h));
    census_add(everyone.back(), std::move(role));
    return h;
  }
  // Handles keep actors alive, and the actor system's destructor waits for detached actors:
  // drop them all once the exits are sent.
  void shut_down(caf::scoped_actor& self) {
    for (auto& a : everyone) self->send_exit(a, caf::exit_reason::user_shutdown);
    everyone.clear();
  }
  // The minimum counts the gradient buffers the pipeline needs: one where compute waits for
  // the round (DDP), two where it accumulates the next round's gradients meanwhile.
  void account(job_result& result, const job_plan& plan) const {
    const std::size_t parameter_count = plan.initial.size();
    result.parameters = final_parameters;
    result.state_bytes_per_worker = state_bytes / static_cast<std::size_t>(workers);
    result.peak_bytes_per_worker = meter->peak / static_cast<std::size_t>(workers) + result.state_bytes_per_worker;
    result.gradient_buffers = plan.algo->pipe == pipeline::synchronous ? 1 : 2;
    result.minimum_bytes_per_worker =
        (1 + static_cast<std::size_t>(result.gradient_buffers)) * parameter_count * sizeof(float) +
        result.state_bytes_per_worker;
  }
};

// The coordinator of a job (or of an elastic job's epoch) as the plan says, calling the hooks'
// on_checkpoint_written; callers add what they observe (on_step, result, ...).
coordinator_setup coordination_for(const job_plan& plan, const model& prototype, const job_hooks& hooks,
                                   evaluator_actor evaluator);

evaluator_actor spawn_evaluation(caf::actor_system& system, local_actors& local, const model& prototype,
                                 std::shared_ptr<const dataset> eval, const job_plan& plan);

// One worker of an epoch: where it sits and what it starts from.
struct worker_spec {
  int rank = 0;
  std::shared_ptr<transport> link;
  coordinator_actor coordinator;
  std::optional<rule_state> state;  // its restored optimizer shard or momentum
  // Snapshot the optimizer state at checkpoint steps even without a file (in-process elastic).
  bool keeps_state = false;
  // Emulated crash: this worker dies at the start of round `crash_round`.
  std::function<void()> crash;
  std::uint64_t crash_round = 0;
  // Elastic between processes: keep every `keep_interval`-th step's state in `keeper` (layout:
  // this epoch), and vote for ending the epoch once `change_epoch` names this epoch.
  std::shared_ptr<state_keeper> keeper;
  std::uint64_t layout = 0;
  std::uint64_t keep_interval = 0;
  std::shared_ptr<const std::atomic<std::uint64_t>> change_epoch;
  std::uint64_t end_steps = 0;  // a replay's epoch: vote for ending it after this step (0: never)
  // An app-driven worker (include/accord/worker.hpp): the app computes its micro-batches.
  std::shared_ptr<worker::state> app;
};

// Spawns one worker's compute, communicator and accumulator actors (which stop when the hooks'
// stop_requested is set).
worker_handles spawn_worker(caf::actor_system& system, local_actors& local, const job_plan& plan,
                            const model& prototype, std::shared_ptr<const dataset> train, const job_hooks& hooks,
                            worker_spec spec);

// Starts the accumulators and waits for the verdict of `judge` (the coordinator, or the agent
// relaying it): empty, or what failed.
template <class Judge, class... Ts>
std::optional<std::string> run_to_end(caf::actor_system& system, caf::scoped_actor& self,
                                      const std::vector<accumulator_actor>& accumulators, Judge judge,
                                      Ts... about) {
  std::optional<std::string> failure;
  for (auto& a : accumulators) self->send(a, start_atom::value);
  self->request(judge, caf::infinite, wait_atom::value, about...)
      .receive([](bool) {}, [&](caf::error& e) { failure = describe(system, e); });
  return failure;
}

// Averages of the per-step figures over a job's steps.
void average_over_steps(job_result& r);

}  // namespace accord
