#pragma once
// Optional, for applications with their own CAF actor system. Tied to CAF 0.17 (its typed_actor
// API and atoms); unlike the rest of <accord/...> this header exposes CAF and accord's actor
// interfaces (installed under include/accord/actors/), which may change with either.
//
// Spawns the actors of an in-process job — an evaluator, a coordinator and per worker its
// compute, communicator and accumulator actors — into the caller's caf::actor_system:
//
//   caf::actor_system_config cfg;
//   accord::configure_actor_system(cfg);
//   caf::actor_system system{cfg};
//   accord::job_actors job(system, model, train, eval, config);
//   job.start();                                        // every accumulator gets start_atom
//   self->request(job.coordinator(), caf::infinite, accord::wait_atom::value)
//       .receive([&](bool) { auto result = job.result(); }, [&](caf::error& e) { ... });
#include <accord/job.hpp>

#include "actors/coordinator_actor.hpp"
#include "actors/worker_handles.hpp"

#include <memory>
#include <vector>

namespace accord {

// accord's settings and message types, on a configuration before its actor system exists.
void configure_actor_system(caf::actor_system_config& config);

class job_actors {
public:
  // Spawns (does not start) the actors of `config` (config.workers workers over the in-process
  // transport, config.link). Throws std::invalid_argument for a bad configuration, as run_job;
  // membership changes are refused. The data sets and model are copied where needed.
  job_actors(caf::actor_system& system, const model& prototype, std::shared_ptr<const dataset> train,
             std::shared_ptr<const dataset> eval, const job_config& config,
             std::function<void(const step_metrics&)> on_step = {});
  // Unblocks every transport and sends every actor an exit: the system's destructor then does
  // not wait for them, also when the job is still running.
  ~job_actors();
  job_actors(const job_actors&) = delete;
  job_actors& operator=(const job_actors&) = delete;

  const std::vector<worker_handles>& workers() const;
  // Replies to wait_atom once the job is over (true), or with an error naming what failed.
  coordinator_actor coordinator() const;
  evaluator_actor evaluator() const;
  // Sends start_atom to every worker's accumulator.
  void start();
  // After the coordinator's reply: final parameters, step metrics, times, memory figures.
  job_result result() const;

private:
  struct parts;
  std::unique_ptr<parts> parts_;
};

}  // namespace accord
