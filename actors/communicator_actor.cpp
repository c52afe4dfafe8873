#include "actors/communicator_actor.hpp"

#include <chrono>

namespace accord {
namespace {

struct communicator_state {
  std::shared_ptr<communicator_setup> setup;
};

communicator_actor::behavior_type communicator_behavior(
    communicator_actor::stateful_pointer<communicator_state> self,
    std::shared_ptr<communicator_setup> setup) {
  self->state.setup = std::move(setup);
  return {
      [self](round_request& request) -> caf::result<round_result> {
        auto& s = *self->state.setup;
        if (s.crash && request.round == s.crash_round) {
          s.crash();
          return caf::make_error(caf::sec::runtime_error, "rank " + std::to_string(s.link->rank()) +
                                                              " crashed (emulated) in round " +
                                                              std::to_string(request.round));
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          double totals[3] = {request.local.micro_batches, request.local.loss_sum, request.local.items};
          s.link->all_reduce(std::span<double>(totals));
          const round_totals global{totals[0], totals[1], totals[2]};
          s.rule->apply(*s.link, *request.buffer, request.local, global, request.learning_rate,
                        request.round, request.estimate);
          round_result result;
          result.round = request.round;
          result.global = global;
          if (s.hash_interval && request.round % s.hash_interval == 0)
            result.parameter_hash = hash_parameters(*request.buffer);
          if (request.snapshot) result.state = s.rule->snapshot();
          result.parameters = std::move(request.buffer);
          result.traffic = s.link->stats();
          result.seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          return result;
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error,
                                 "rank " + std::to_string(s.link->rank()) + " round " +
                                     std::to_string(request.round) + ": " + e.what());
        }
      },
  };
}

}  // namespace

communicator_actor spawn_communicator_actor(caf::actor_system& system,
                                            std::shared_ptr<communicator_setup> setup) {
  return system.spawn<caf::detached>(communicator_behavior, std::move(setup));
}

}  // namespace accord
