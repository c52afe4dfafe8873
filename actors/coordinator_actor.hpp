#pragma once
// The coordinator owns the round bookkeeping of a job (or of one epoch of an elastic job): it
// collects every worker's round report, compares replica hashes, turns rounds into step
// metrics (loss, throughput, bits per parameter, hidden communication), asks the evaluator for
// held-out loss, writes the metrics file and checkpoints, and tells the waiting caller when the
// last round is done — the job's, or the one where the workers agreed to end the epoch — or a
// worker failed.
#include "algorithms/algorithm.hpp"
#include "actors/compute_actor.hpp"
#include "actors/messages.hpp"

#include "recovery/checkpoint.hpp"

#include <accord/job.hpp>

#include <chrono>
#include <functional>

namespace accord {

using coordinator_actor = caf::typed_actor<
    caf::reacts_to<round_report>, caf::reacts_to<worker_failure>,
    // Replies once the job (or the epoch) is over, an error if it failed; any number of waiters.
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
  std::uint64_t data_hash = 0;           // of the training data, recorded in checkpoints
  std::uint64_t eval_interval = 0;
  evaluator_actor evaluator;
  bool defer_evaluation = false;         // evaluate only once the last round is complete
  std::string metrics_path;
  std::function<float(std::uint64_t step)> learning_rate;  // of a step (0-based), for the metrics
  std::function<void(const step_metrics&)> on_step;
  std::function<void(const std::string&, std::uint64_t)> on_checkpoint_written;  // path, step
  std::function<void()> abort;           // unblocks every transport after a failure
  std::shared_ptr<job_result> result;    // filled in as the job runs
  // Elastic jobs: the epoch these rounds belong to (in the metrics), whether the metrics file
  // continues an earlier epoch's, and who hears of every step whose state the workers kept,
  // with the data position to restart from there.
  std::uint64_t epoch = 0;
  bool append_metrics = false;
  std::vector<std::string> metrics_events;  // membership events since the last epoch, written first
  // Of the job (earlier for a resumed one: its clock goes on from the checkpoint's).
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::function<void(std::uint64_t steps, std::uint64_t data_position)> on_kept;
};

// Whether `round` ends a step that is a multiple of `interval`, or the job's last step (the
// rounds after which evaluations and checkpoints happen).
bool step_due(pipeline pipe, std::uint64_t round, std::uint64_t rounds, std::uint64_t interval);

coordinator_actor spawn_coordinator_actor(caf::actor_system& system, coordinator_setup setup);

// Adds an epoch's result (everything but its steps) to an elastic job's: times and bytes add
// up, rounds and the latest parameters, eval loss and memory figures carry over.
void add_epoch_result(job_result& total, job_result&& epoch);

}  // namespace accord
