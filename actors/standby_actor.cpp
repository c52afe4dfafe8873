#include "actors/standby_actor.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <optional>

namespace accord {

namespace {

struct standby_state {
  take_over_function take_over;
  std::chrono::milliseconds confirm_wait{0};
  coordination_replica replica;
  membership_actor hosted;  // set once this process coordinates
  // This process's own verdict on a coordinator: which one (by member id) and why it was lost.
  std::optional<std::uint64_t> lost_coordinator;
  std::string lost_cause;
  // Elections asked before this process judged the coordinator lost, by key.
  std::map<std::uint64_t, caf::typed_response_promise<membership_actor>> deferred;
  std::uint64_t next_key = 0;
};

using standby_pointer = standby_actor::stateful_pointer<standby_state>;

membership_actor take_over_once(standby_state& s) {
  if (!s.hosted) s.hosted = s.take_over(s.replica, s.lost_cause);
  return s.hosted;
}

caf::error refusal(const standby_state& s, const std::string& detail) {
  return caf::make_error(caf::sec::runtime_error, still_heard(s.replica.coordinator, detail));
}

standby_actor::behavior_type standby_behavior(standby_pointer self, take_over_function take_over,
                                              std::chrono::milliseconds confirm_wait) {
  self->state.take_over = std::move(take_over);
  self->state.confirm_wait = confirm_wait;
  return {
      [self](replica_atom, coordination_replica& replica) {
        if (newer(replica, self->state.replica)) self->state.replica = std::move(replica);
      },
      [self](replica_atom) { return self->state.replica; },
      [self](lost_atom, const std::string& cause) {
        auto& s = self->state;
        s.lost_coordinator = s.replica.coordinator;
        s.lost_cause = cause;
        if (s.replica.epoch == 0) return;  // nothing to take over from; the deferred ones time out
        auto deferred = std::move(s.deferred);
        s.deferred.clear();
        for (auto& [key, promise] : deferred) promise.deliver(take_over_once(s));
      },
      [self](membership_atom, membership_actor& hosted) { self->state.hosted = std::move(hosted); },
      [self](where_atom) { return self->state.hosted ? std::string() : self->state.replica.coordinator_control; },
      [self](membership_atom) -> caf::result<membership_actor> {
        if (self->state.hosted) return self->state.hosted;
        return caf::make_error(caf::sec::runtime_error,
                               "this worker does not host the coordinator; it is at " +
                                   self->state.replica.coordinator_control);
      },
      [self](elect_atom, std::uint64_t epoch, const std::string&) -> caf::result<membership_actor> {
        auto& s = self->state;
        switch (answer_election({s.replica, static_cast<bool>(s.hosted), s.lost_coordinator}, epoch)) {
          case election_answer::coordinates: return s.hosted;
          case election_answer::no_copy_yet:
            return caf::make_error(caf::sec::runtime_error, "this worker holds no copy of the coordinator's state yet");
          case election_answer::take_over: return take_over_once(s);
          case election_answer::formed_without_asker:  // it was dropped, not the coordinator
            return refusal(s, "which formed epoch " + std::to_string(s.replica.epoch) + " " + formed_without_asker +
                                      ", whose copy is of epoch " + std::to_string(epoch));
          case election_answer::wait_for_own_verdict: break;
        }
        const std::uint64_t key = s.next_key++;
        auto promise = self->make_response_promise<membership_actor>();
        s.deferred.emplace(key, promise);
        self->delayed_send(self, s.confirm_wait, unconfirmed_atom::value, key);
        return promise;
      },
      [self](unconfirmed_atom, std::uint64_t key) {
        auto& s = self->state;
        const auto found = s.deferred.find(key);
        if (found == s.deferred.end()) return;
        char waited[32];
        std::snprintf(waited, sizeof waited, "%.1f s after being asked",
                      std::chrono::duration<double>(s.confirm_wait).count());
        found->second.deliver(refusal(s, std::string("still heard ") + waited));
        s.deferred.erase(found);
      },
      [self](elected_atom) { self->state.lost_coordinator.reset(); },
      // Whether it follows the last coordinator (back) or another side's, the verdict is spent:
      // a later asker must not make it take over while its own member is elsewhere.
      [self](follow_atom, const std::string&) {
        auto& s = self->state;
        s.hosted = membership_actor{};
        s.lost_coordinator.reset();
      },
  };
}

}  // namespace

standby_actor spawn_standby_actor(caf::actor_system& system, take_over_function take_over,
                                  std::chrono::milliseconds confirm_wait) {
  return system.spawn(standby_behavior, std::move(take_over), confirm_wait);
}

}  // namespace accord
