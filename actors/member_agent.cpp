// The member agent of a worker process (actors/membership_actor.hpp): it relays the main
// thread's requests to the coordinator's process, sends heartbeats, judges the coordinator's, and
// names a lost coordinator. And the membership's message types.
#include "actors/membership_actor.hpp"
#include "actors/standby_actor.hpp"

#include <map>

namespace accord {
namespace {

// Promises of requests the agent relays, answered by the relayed reply or by the loss of rank
// 0's process, whichever comes first.
template <class T>
struct relayed {
  std::map<std::uint64_t, caf::typed_response_promise<T>> open;
  std::uint64_t next = 0;
};

struct agent_state {
  member_agent_setup setup;
  std::optional<heartbeat_detector> coordinator_heartbeats;
  coordination_replica replica;  // the newest, for the line naming a lost coordinator
  std::optional<std::uint64_t> member;
  bool asked_to_leave = false;
  std::optional<std::string> master_lost;
  // The coordinator said the job is over: its process may exit before this one, which is no loss.
  bool job_over = false;
  bool planned = false;  // an epoch plan came: the rendezvous is over
  heartbeat_contact coordinator_contact;  // the coordinator's heartbeats and this agent's, echoed
  relayed<std::uint64_t> hellos;
  relayed<epoch_plan> plans;
  relayed<bool> waits;
};

using agent_pointer = member_agent::stateful_pointer<agent_state>;

constexpr auto leave_poll = std::chrono::milliseconds(100);
// Well under the adaptive detector's floor (1.5 s): it learns the gaps from many heartbeats.
constexpr auto heartbeat_interval = std::chrono::milliseconds(100);

// Relays `request` (already sent) and answers `promise` with its outcome, once.
template <class T, class Request, class OnValue>
caf::typed_response_promise<T> relay(agent_pointer self, relayed<T>& table, Request request, OnValue on_value) {
  auto promise = self->template make_response_promise<T>();
  if (self->state.master_lost) {
    promise.deliver(caf::make_error(caf::sec::runtime_error, *self->state.master_lost));
    return promise;
  }
  const std::uint64_t key = table.next++;
  table.open.emplace(key, promise);
  request.then(
      [self, &table, key, on_value](T& value) {
        auto found = table.open.find(key);
        if (found == table.open.end()) return;
        on_value(value);
        found->second.deliver(std::move(value));
        table.open.erase(found);
      },
      [&table, key](caf::error& e) {
        auto found = table.open.find(key);
        if (found == table.open.end()) return;
        found->second.deliver(std::move(e));
        table.open.erase(found);
      });
  return promise;
}

template <class T>
void fail_all(relayed<T>& table, const std::string& why) {
  for (auto& [key, promise] : table.open) promise.deliver(caf::make_error(caf::sec::runtime_error, why));
  table.open.clear();
}

// From now on every request relayed to the coordinator's process fails with `why`.
void stop_relaying(agent_pointer self, const std::string& why) {
  auto& s = self->state;
  if (s.master_lost) return;
  s.master_lost = why;
  fail_all(s.hellos, why);
  fail_all(s.plans, why);
  fail_all(s.waits, why);
}

// The coordinator's process died or hung (`cause`). An elastic job's member names it and
// interrupts its epoch (its peers may wait on the dead one); its main thread then elects the
// next coordinator (job/between_processes.cpp).
void coordinator_gone(agent_pointer self, const std::string& cause) {
  auto& s = self->state;
  if (s.master_lost || s.job_over) return;
  if (s.setup.standby && s.replica.epoch > 0) {
    for (const replica_member& m : s.replica.members)
      if (m.id == s.replica.coordinator && s.setup.on_event)
        s.setup.on_event(member_event_line(
            member_name(m.initial_rank, m.id, m.host),
            member_record("lost", s.replica.epoch, s.replica.steps_done, m.initial_rank, m.host, "coordinator", cause)));
    s.setup.link->interrupt_current(std::string(coordinator_lost) + ": " + cause);
  }
  // The standby may take over from now on (it refuses while this process still hears the coordinator).
  if (s.setup.standby) caf::anon_send(s.setup.standby, lost_atom::value, cause);
  stop_relaying(self, std::string(coordinator_lost) + ": " + cause);
}

member_agent::behavior_type agent_behavior(agent_pointer self, member_agent_setup setup) {
  self->state.setup = std::move(setup);
  self->monitor(self->state.setup.membership);
  self->set_down_handler([self](const caf::down_msg&) {
    coordinator_gone(self, closed_cause(self->state.setup.detector, self->state.coordinator_contact,
                                        std::chrono::steady_clock::now()));
  });
  return {
      [self](change_atom, std::uint64_t epoch) {
        auto& current = *self->state.setup.change_epoch;
        if (epoch > current.load()) current.store(epoch);
      },
      [self](abort_atom, std::uint64_t epoch, const std::string& why) {
        self->state.setup.link->interrupt(epoch, why);
      },
      [self](leave_atom) {
        auto& s = self->state;
        if (s.asked_to_leave || s.master_lost) return;
        if (s.setup.leave_requested->load()) {
          s.asked_to_leave = true;
          self->send(s.setup.membership, leave_atom::value, *s.member);
          return;
        }
        self->delayed_send(self, leave_poll, leave_atom::value);
      },
      [self](heartbeat_atom) {
        auto& s = self->state;
        if (s.master_lost || s.job_over) return;
        if (!s.planned && s.setup.stop_requested && s.setup.stop_requested->load()) {
          stop_relaying(self, "asked to stop while waiting for the job's other ranks (rendezvous)");
          return;
        }
        self->send(s.setup.membership, heartbeat_atom::value, *s.member,
                   heartbeat_time(std::chrono::steady_clock::now()), s.coordinator_contact.heard_sent);
        // The coordinator's heartbeats are judged as it judges the members'.
        if (s.coordinator_heartbeats)
          for (const heartbeat_detector::suspicion& silent : s.coordinator_heartbeats->check(std::chrono::steady_clock::now())) {
            coordinator_gone(self, hung_cause(silent));
            return;
          }
        self->delayed_send(self, heartbeat_interval, heartbeat_atom::value);
      },
      [self](alive_atom, std::int64_t sent, std::int64_t echo) {
        auto& s = self->state;
        if (!s.setup.detector || s.master_lost) return;
        if (!s.coordinator_heartbeats) s.coordinator_heartbeats.emplace(*s.setup.detector);
        s.coordinator_heartbeats->heard(0, std::chrono::steady_clock::now());
        s.coordinator_contact.heard(sent, echo);
      },
      [self](replica_atom, coordination_replica& replica) {
        auto& s = self->state;
        // After the loss, a hung coordinator that wakes must not refresh the copy a successor starts from.
        if (s.master_lost || !newer(replica, s.replica)) return true;
        s.replica = replica;
        // The standby is in this process and hears this agent in order: passed on is held.
        caf::anon_send(s.setup.standby, replica_atom::value, std::move(replica));
        return true;
      },
      [self](lost_atom, const std::string& line) {
        if (self->state.setup.on_event) self->state.setup.on_event(line);
      },
      [self](dropped_atom, const std::string& why) { stop_relaying(self, why); },
      [self](hello_atom, member_hello& hello) {
        auto& s = self->state;
        return relay(self, s.hellos,
                     self->request(s.setup.membership, caf::infinite, hello_atom::value, std::move(hello),
                                   caf::actor_cast<member_agent>(self)),
                     [self](std::uint64_t id) {
                       self->state.member = id;
                       self->send(self, heartbeat_atom::value);
                       if (self->state.setup.leave_requested) self->send(self, leave_atom::value);
                     });
      },
      [self](epoch_atom, epoch_request& request) {
        auto& s = self->state;
        return relay(self, s.plans,
                     self->request(s.setup.membership, caf::infinite, epoch_atom::value, std::move(request)),
                     [self](const epoch_plan& plan) {
                       self->state.planned = true;
                       self->state.job_over = self->state.job_over || plan.finished;
                     });
      },
      [self](wait_atom, coordinator_actor coordinator) {
        return relay(self, self->state.waits, self->request(coordinator, caf::infinite, wait_atom::value),
                     [](bool) {});
      },
  };
}

}  // namespace

member_agent spawn_member_agent(caf::actor_system& system, member_agent_setup setup) {
  return system.spawn(agent_behavior, std::move(setup));
}

void epoch_link::set(std::uint64_t epoch, interrupter interrupt) {
  std::lock_guard lock(mutex_);
  epoch_ = epoch;
  interrupt_ = std::move(interrupt);
}

void epoch_link::interrupt(std::uint64_t epoch, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (interrupt_ && epoch_ == epoch) interrupt_(why);
}

void epoch_link::interrupt_current(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (interrupt_) interrupt_(why);
}

void add_membership_message_types(caf::actor_system_config& config) {
  config.add_message_type<kept_summary>("accord::kept_summary");
  config.add_message_type<state_source>("accord::state_source");
  config.add_message_type<member_hello>("accord::member_hello");
  config.add_message_type<epoch_request>("accord::epoch_request");
  config.add_message_type<epoch_plan>("accord::epoch_plan");
  config.add_message_type<restored_report>("accord::restored_report");
  config.add_message_type<member_agent>("accord::member_agent");
  config.add_message_type<coordinator_actor>("accord::coordinator_actor");
  config.add_message_type<replica_member>("accord::replica_member");
  config.add_message_type<kept_position>("accord::kept_position");
  config.add_message_type<coordination_replica>("accord::coordination_replica");
  config.add_message_type<membership_actor>("accord::membership_actor");
  config.add_message_type<standby_actor>("accord::standby_actor");
}

}  // namespace accord
