#pragma once
// Communicator actors run one round at a time: all-reduce of the round's counts, then the
// algorithm's update rule over the transport (collectives + optimizer shard step). Spawned
// detached because collectives block their thread while bytes are on the wire; the compute
// and accumulator actors of the same worker keep running meanwhile.
#include "recovery/elastic_state.hpp"
#include "actors/messages.hpp"
#include "algorithms/algorithm.hpp"
#include "actors/resident_memory.hpp"
#include "algorithms/topology_rule.hpp"
#include "algorithms/update_rule.hpp"

#include <atomic>

namespace accord {

// A DDP gradient bucket (actors/gradient_buckets.hpp): `range` of `buffer`, the gradient sum of
// real round `round`, is final and may be reduced before the round's request arrives. The
// compute thread sends it while backward writes other ranges of the same buffer; the request
// comes later (after the micro-batch's result), so every bucket is reduced before its round.
struct gradient_bucket {
  std::uint64_t round = 0;
  shard range;
  tensor buffer;
};

using communicator_actor = caf::typed_actor<caf::replies_to<round_request>::with<round_result>,
                                            caf::reacts_to<gradient_bucket>>;

struct communicator_setup {
  // Shared with the process that built it, which may interrupt() it from another thread.
  std::shared_ptr<transport> link;
  std::unique_ptr<update_rule> rule;
  // Rounds on the device (a resident worker whose rule has a device form, over collectives that
  // serve its memory): the rule runs on the device buffer of the request's tensor, and the new
  // parameters are mirrored to the host once per round. Both null: rounds on the host.
  std::shared_ptr<resident_memory> memory;
  std::unique_ptr<device_collectives> collectives;
  // What the rule's topology says after each round (null: replicas always agree).
  std::shared_ptr<const topology_status> topology;
  std::uint64_t hash_interval = 1;  // rounds between parameter hashes (0: never)
  // Emulated crash (elastic tests and demos): at the start of `crash_round` this worker's
  // transport dies, mid-round for its peers.
  std::function<void()> crash;
  std::uint64_t crash_round = 0;
  // Elastic jobs between processes: rounds whose request says `keep`, and the last round of an
  // epoch, leave their step's state in `keeper` (shards also replicated to the buddy when
  // `replicate`); once `change_epoch` (the latest epoch a membership change was announced to)
  // reaches this one, the worker votes for ending the epoch at the current step.
  std::shared_ptr<state_keeper> keeper;
  pipeline pipe = pipeline::synchronous;
  std::uint64_t layout = 0;  // this epoch, whose shard layout the kept state follows
  bool replicate = false;
  std::shared_ptr<const std::atomic<std::uint64_t>> change_epoch;
  std::uint64_t end_steps = 0;  // a replay's epoch: the worker votes for ending it after this step
  // Once set, the worker votes for ending the job at the current step (job_config::stop_requested).
  const std::atomic<bool>* stop_requested = nullptr;
};

communicator_actor spawn_communicator_actor(caf::actor_system& system,
                                            std::shared_ptr<communicator_setup> setup);

}  // namespace accord

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::gradient_bucket)
