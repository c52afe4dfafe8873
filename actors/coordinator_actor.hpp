#pragma once
// The coordinator owns the round bookkeeping of a job: it collects every worker's round
// report, compares replica hashes, turns rounds into step metrics (loss, throughput, bits per
// parameter, hidden communication), asks the evaluator for held-out loss, writes the metrics
// file and tells the waiting caller when the last round is done or a worker failed.
#include "actors/algorithm.hpp"
#include "actors/compute_actor.hpp"
#include "actors/messages.hpp"

#include "actors/checkpoint.hpp"

#include <accord/job.hpp>

#include <functional>

namespace accord {

using coordinator_actor = caf::typed_actor<
    caf::reacts_to<round_report>, caf::reacts_to<worker_failure>,
    // A worker process joins the job; the reply, once every rank has registered, lists the
    // transport addresses of all ranks. A mismatching registration gets an error naming it.
    caf::replies_to<register_atom, worker_registration>::with<std::vector<std::string>>,
    // Replies once the job is over (an error if it failed); any number of waiters.
    caf::replies_to<wait_atom>::with<bool>>;

struct coordinator_setup {
  int workers = 0;
  pipeline pipe = pipeline::synchronous;
  std::uint64_t first_round = 0;         // > 0 when resuming
  std::uint64_t rounds = 0;
  std::size_t parameter_count = 0;
  std::size_t micro_batch = 0;
  std::uint64_t data_offset = 0;         // stream positions consumed before this job
  std::string checkpoint_path;           // written when set
  std::uint64_t checkpoint_interval = 0;
  std::function<void(const checkpoint&)> on_checkpoint;  // in-memory copy, when set
  std::string algorithm;
  std::string signature;
  std::uint64_t eval_interval = 0;
  evaluator_actor evaluator;
  std::string metrics_path;
  std::function<void(const step_metrics&)> on_step;
  std::function<void()> abort;           // unblocks every transport after a failure
  std::shared_ptr<job_result> result;    // filled in as the job runs
  std::string fingerprint;               // what registering worker processes must match
};

// Whether `round` ends a step that is a multiple of `interval`, or the job's last step (the
// rounds after which evaluations and checkpoints happen).
bool step_due(pipeline pipe, std::uint64_t round, std::uint64_t rounds, std::uint64_t interval);

coordinator_actor spawn_coordinator_actor(caf::actor_system& system, coordinator_setup setup);

}  // namespace accord
