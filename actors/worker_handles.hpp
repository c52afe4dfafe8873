#pragma once
// The typed handles of one worker's three actors.
#include "actors/accumulator_actor.hpp"
#include "actors/communicator_actor.hpp"
#include "actors/compute_actor.hpp"

namespace accord {

// One worker's actors. Sending start_atom to the accumulator starts the worker.
struct worker_handles {
  int rank = 0;
  compute_actor compute;
  communicator_actor communicator;
  accumulator_actor accumulator;
};

}  // namespace accord
