#pragma once
// Communicator actors run one round at a time: all-reduce of the round's counts, then the
// algorithm's update rule over the transport (collectives + optimizer shard step). Spawned
// detached because collectives block their thread while bytes are on the wire; the compute
// and accumulator actors of the same worker keep running meanwhile.
#include "actors/messages.hpp"
#include "actors/update_rule.hpp"

namespace accord {

using communicator_actor = caf::typed_actor<caf::replies_to<round_request>::with<round_result>>;

struct communicator_setup {
  std::unique_ptr<transport> link;
  std::unique_ptr<update_rule> rule;
  std::uint64_t hash_interval = 1;  // rounds between parameter hashes (0: never)
  // Emulated crash (elastic tests and demos): at the start of `crash_round` this worker's
  // transport dies, mid-round for its peers.
  std::function<void()> crash;
  std::uint64_t crash_round = 0;
};

communicator_actor spawn_communicator_actor(caf::actor_system& system,
                                            std::shared_ptr<communicator_setup> setup);

}  // namespace accord
