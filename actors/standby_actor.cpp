#include "actors/standby_actor.hpp"

#include <algorithm>
#include <climits>

namespace accord {

std::vector<replica_member> succession(const coordination_replica& replica) {
  std::vector<replica_member> order = replica.members;
  auto key = [](const replica_member& m) { return std::make_pair(m.rank >= 0 ? m.rank : INT_MAX, m.id); };
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  return order;
}

namespace {

struct standby_state {
  take_over_function take_over;
  coordination_replica replica;
  membership_actor hosted;  // set once this process coordinates
};

using standby_pointer = standby_actor::stateful_pointer<standby_state>;

standby_actor::behavior_type standby_behavior(standby_pointer self, take_over_function take_over) {
  self->state.take_over = std::move(take_over);
  return {
      [self](replica_atom, coordination_replica& replica) {
        if (newer(replica, self->state.replica)) self->state.replica = std::move(replica);
      },
      [self](replica_atom) { return self->state.replica; },
      [self](where_atom) { return self->state.hosted ? std::string() : self->state.replica.coordinator_control; },
      [self](membership_atom) -> caf::result<membership_actor> {
        if (self->state.hosted) return self->state.hosted;
        return caf::make_error(caf::sec::runtime_error,
                               "this worker does not host the coordinator; it is at " +
                                   self->state.replica.coordinator_control);
      },
      [self](elect_atom, std::uint64_t, const std::string& cause) -> caf::result<membership_actor> {
        auto& s = self->state;
        if (!s.hosted) {
          if (s.replica.epoch == 0)
            return caf::make_error(caf::sec::runtime_error, "this worker holds no copy of the coordinator's state yet");
          s.hosted = s.take_over(s.replica, cause);
        }
        return s.hosted;
      },
  };
}

}  // namespace

standby_actor spawn_standby_actor(caf::actor_system& system, take_over_function take_over) {
  return system.spawn(standby_behavior, std::move(take_over));
}

}  // namespace accord
