#pragma once
// Compute actors run forward/backward for one micro-batch at a time on their worker's current
// parameters; they never block on communication. Spawned detached: a compute actor is the
// stand-in for a device and keeps its own thread. The evaluator is the same kind of worker
// computing held-out loss for the coordinator.
#include "actors/app_bridge.hpp"
#include "actors/messages.hpp"
#include "actors/resident_memory.hpp"

#include <accord/model.hpp>

namespace accord {

using compute_actor = caf::typed_actor<
    // Next micro-batch of this worker's stream, at the current parameters: its gradient is
    // added straight into the accumulator's sum, which comes back in the result.
    caf::replies_to<compute_atom, tensor>::with<gradient_result>,
    // Swap in new parameters; the old buffer comes back for reuse.
    caf::replies_to<params_atom, tensor>::with<tensor>,
    // A resident worker's gradient sum is on its device: this brings the sum of the tensor
    // lent with compute_atom back into it (the tensor comes back unchanged otherwise).
    caf::replies_to<fetch_atom, tensor>::with<tensor>>;

struct compute_setup {
  std::unique_ptr<model> net;
  std::shared_ptr<const dataset> data;
  micro_batch_stream stream;
  std::uint64_t position = 0;  // micro-batches of the stream already consumed
  tensor parameters;
  double speed_factor = 1.0;   // > 1 emulates slower hardware
  // An app-driven worker: the app computes each micro-batch (net and data are not used).
  std::shared_ptr<worker::state> app;
  // The worker is resident on net's memory() (a GPU): the compute actor keeps the parameters
  // and the gradient sum there, and micro-batches copy no tensor between host and device. The
  // parameters go up once per swap; a lent sum goes up at its first micro-batch and comes
  // back on fetch_atom, once per round. Until then the lent tensor's host values are stale.
  bool resident = false;
  // A resident worker whose rounds run on the device: its tensors are handles into `memory`
  // (shared with its accumulator and communicator), so the compute actor neither uploads new
  // parameters nor is asked to fetch sums; the initial parameters go up at the first micro-batch.
  std::shared_ptr<resident_memory> memory;
};

compute_actor spawn_compute_actor(caf::actor_system& system, std::shared_ptr<compute_setup> setup);

using evaluator_actor =
    caf::typed_actor<caf::replies_to<evaluate_atom, tensor>::with<double>>;

// Mean loss over the first `examples` of `data` (all of them if it holds fewer): the same set
// at every evaluation, whatever the training's micro-batch size.
evaluator_actor spawn_evaluator_actor(caf::actor_system& system, std::unique_ptr<model> net,
                                      std::shared_ptr<const dataset> data, std::uint64_t examples);

}  // namespace accord
