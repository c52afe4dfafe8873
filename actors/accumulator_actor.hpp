#pragma once
// Accumulator actors own a worker's gradient buffers and drive its pipeline: they lend the
// gradient sum to the compute actor with each micro-batch request (the model adds into it, so
// no other gradient buffer exists), count micro-batches (so a fast worker weighs more), hand a
// full buffer to the communicator and keep filling the other one while the round is in flight —
// or wait, for synchronous algorithms. A worker holds at most three parameter-sized buffers. When a round's parameters come
// back they are swapped into the compute actor between two micro-batches.
#include "algorithms/algorithm.hpp"
#include "actors/communicator_actor.hpp"
#include "actors/compute_actor.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/gradient_buckets.hpp"

#include <functional>

namespace accord {

using accumulator_actor = caf::typed_actor<caf::reacts_to<start_atom>>;

struct accumulator_setup {
  int rank = 0;
  pipeline pipe = pipeline::synchronous;
  std::uint64_t first_round = 0;      // > 0 when resuming from a checkpoint
  std::uint64_t rounds = 0;           // the round to stop before (or earlier, when an epoch ends)
  std::uint64_t dpu_warmup = 0;
  std::size_t accumulation = 1;       // micro-batches per round at least
  std::size_t max_accumulation = 0;   // overlapped rounds: at most (0: no cap)
  // ACCO's estimate rounds count their own micro-batches (job_config::estimate_accumulation).
  std::size_t estimate_accumulation = 1;
  std::size_t estimate_max_accumulation = 0;
  // job_settings::fixed_steps: the first overlapped round waits for a full stage as later ones do.
  bool fixed_steps = false;
  // The app computes the micro-batches and may end (worker::end): the accumulator keeps the last
  // completed step's parameters (ACCO: θ_t while θ̃ computes), which the ending round hands back.
  bool app_driven = false;
  std::size_t parameter_count = 0;
  tensor parameters;                  // what the compute actor starts with
  // The compute actor is resident (compute_setup::resident): a lent sum's host values are stale
  // until fetched, which happens right before its round goes out.
  bool fetch_sums = false;
  // Rounds run on the device (compute_setup::memory): buffers are zeroed and copied there.
  std::shared_ptr<resident_memory> memory;
  std::function<float(std::uint64_t)> learning_rate;  // per optimizer step
  // job_settings::schedule_micro_batches: the schedule's step is the micro-batches applied so far
  // (all workers; `applied` of them before the first round) over this; 0: the optimizer step.
  std::uint64_t schedule_micro_batches = 0;
  std::uint64_t applied = 0;
  std::function<bool(std::uint64_t)> wants_parameters;  // round → attach a copy to the report
  std::function<bool(std::uint64_t)> wants_snapshot;    // round → attach the optimizer state
  std::function<bool(std::uint64_t)> wants_kept;        // round → keep the step's state (elastic)
  std::function<void(const std::vector<float>&)> on_final_parameters;  // optional
  bool reports_shared_threads = false;  // the process's first worker: reports its shared threads' CPU
  compute_actor compute;
  communicator_actor communicator;
  coordinator_actor coordinator;
  std::shared_ptr<memory_meter> meter;
  // DDP's gradient buckets (null: off): armed for each synchronous round's last micro-batch,
  // whose model reports its finished gradients to it.
  std::shared_ptr<bucket_feed> buckets;
};

accumulator_actor spawn_accumulator_actor(caf::actor_system& system, accumulator_setup setup);

}  // namespace accord
