// The membership actor: CAF wiring of the membership state machine (membership/machine.hpp). It
// feeds the machine its events (messages, closed connections, timers, probe answers) with the
// time they came, and performs the actions the machine returns: messages to the members' agents,
// the epochs' coordinators, replies, timers, probes off this actor's thread.
#include "actors/membership_actor.hpp"

#include "observe/trace.hpp"

#include <csignal>
#include <map>
#include <type_traits>

namespace accord {
namespace {

struct membership_state {
  membership_setup setup;
  std::optional<membership_machine> machine;
  std::map<std::uint64_t, member_agent> agents;
  std::map<std::uint64_t, caf::typed_response_promise<epoch_plan>> plans;  // open epoch requests
  std::vector<caf::typed_response_promise<bool>> waiters;  // for every member's release
  coordinator_actor coordinator;
  std::shared_ptr<job_result> epoch_result;
};

using self_pointer = membership_actor::stateful_pointer<membership_state>;

// How long a lost member's control port is given to refuse; a partitioned one never answers.
constexpr auto death_probe_timeout = std::chrono::milliseconds(2000);
// How long a member's agent has to answer for a copy of the coordinator's state: a hung member
// must not keep the requests open.
constexpr auto replica_answer_wait = std::chrono::seconds(10);

membership_rules rules_of(const membership_setup& setup) {
  membership_rules rules = setup;
  rules.stop_polled = setup.stop_requested != nullptr;
  rules.asks_standbys = static_cast<bool>(setup.ask_standby);
  return rules;
}

void perform(self_pointer self);

// The ended epoch's result as the machine needs it, then the machine's verdict.
void epoch_ended(self_pointer self, std::uint64_t epoch, std::optional<std::string> failure) {
  auto& s = self->state;
  epoch_outcome outcome;
  outcome.rounds = s.epoch_result->rounds;
  outcome.data_ended = s.setup.result->data_ended || s.epoch_result->data_ended;
  outcome.last_step = s.epoch_result->steps.empty() ? s.machine->epoch_start() : s.epoch_result->steps.back().step;
  s.machine->on_epoch_ended(epoch, std::move(failure), outcome, std::chrono::steady_clock::now());
  perform(self);
}

void send_timer(self_pointer self, const membership_do::timer& t) {
  auto send = [&](auto... message) {
    if (t.after.count() == 0)
      self->send(self, message...);
    else
      self->delayed_send(self, t.after, message...);
  };
  switch (t.kind) {
    case membership_timer::rendezvous: return send(rendezvous_atom::value);
    case membership_timer::silence: return send(silence_atom::value);
    case membership_timer::grace: return send(grace_atom::value, t.epoch);
    case membership_timer::majority: return send(majority_atom::value, t.epoch);
    case membership_timer::probe: return send(yield_atom::value);
    case membership_timer::reconnect: return send(reconnect_atom::value);
  }
}

void spawn_coordinator(self_pointer self, membership_do::spawn_coordinator& a) {
  auto& s = self->state;
  // Steps after the restart point are redone: drop them from the merged metrics.
  auto& steps = s.setup.result->steps;
  while (!steps.empty() && steps.back().step > a.spec.start_steps) steps.pop_back();
  s.epoch_result = std::make_shared<job_result>();
  s.coordinator = s.setup.spawn_coordinator(
      a.spec, s.epoch_result,
      [membership = caf::actor_cast<membership_actor>(self), epoch = a.spec.epoch](std::uint64_t steps,
                                                                                  std::uint64_t position) {
        caf::anon_send(membership, kept_atom::value, epoch, steps, position);
      });
}

void watch_epoch(self_pointer self, const membership_do::watch_epoch& a) {
  if (trace_recorder* trace = trace_recorder::active()) {
    const auto wall_now = trace_clock::now();
    trace->span(membership_track, "epoch forming",
                wall_now - std::chrono::duration_cast<trace_clock::duration>(a.forming), wall_now,
                static_cast<std::int64_t>(a.epoch));
  }
  self->request(self->state.coordinator, caf::infinite, wait_atom::value)
      .then([self, epoch = a.epoch](bool) { epoch_ended(self, epoch, std::nullopt); },
            [self, epoch = a.epoch](caf::error& e) { epoch_ended(self, epoch, describe(self->system(), e)); });
}

// Copies the replica to the members' standbys; once each agent handed it on (or failed to), a
// departing process goes away.
void replicate(self_pointer self, membership_do::replicate& a) {
  auto& s = self->state;
  std::vector<member_agent> agents;
  for (const std::uint64_t id : a.to)
    if (const auto found = s.agents.find(id); found != s.agents.end()) agents.push_back(found->second);
  const auto depart = [self, then_depart = a.then_depart] {
    if (then_depart) self->send(self, leave_atom::value);
  };
  if (agents.empty()) depart();
  auto waiting = std::make_shared<std::size_t>(agents.size());
  const auto answered = [waiting, depart] {
    if (--*waiting == 0) depart();
  };
  for (const member_agent& agent : agents)
    self->request(agent, replica_answer_wait, replica_atom::value, a.replica)
        .then([answered](bool) { answered(); }, [answered](caf::error&) { answered(); });
}

void reply(self_pointer self, std::uint64_t member, auto&& value) {
  auto& plans = self->state.plans;
  const auto found = plans.find(member);
  if (found == plans.end()) return;
  found->second.deliver(std::forward<decltype(value)>(value));
  plans.erase(found);
}

void perform(self_pointer self, membership_action& action) {
  auto& s = self->state;
  const auto agent = [&](std::uint64_t member) {
    const auto found = s.agents.find(member);
    return found == s.agents.end() ? member_agent() : found->second;
  };
  std::visit(
      [&](auto& a) {
        using A = std::decay_t<decltype(a)>;
        namespace act = membership_do;
        if constexpr (std::is_same_v<A, act::print>) {
          if (s.setup.on_event) s.setup.on_event(a.line);
        } else if constexpr (std::is_same_v<A, act::record>) {
          if (s.setup.on_record) s.setup.on_record(a.r);
        } else if constexpr (std::is_same_v<A, act::tell>) {
          self->send(agent(a.member), lost_atom::value, a.line);
        } else if constexpr (std::is_same_v<A, act::change>) {
          self->send(agent(a.member), change_atom::value, a.epoch);
        } else if constexpr (std::is_same_v<A, act::abort>) {
          self->send(agent(a.member), abort_atom::value, a.epoch, a.why);
        } else if constexpr (std::is_same_v<A, act::drop>) {
          self->send(agent(a.member), dropped_atom::value, a.why);
        } else if constexpr (std::is_same_v<A, act::heartbeat>) {
          self->send(agent(a.member), alive_atom::value, a.sent, a.echo);
        } else if constexpr (std::is_same_v<A, act::answer>) {
          epoch_plan plan;
          static_cast<epoch_assignment&>(plan) = std::move(a.plan);
          if (!plan.finished && plan.rejoin.empty()) plan.coordinator = s.coordinator;
          reply(self, a.member, std::move(plan));
        } else if constexpr (std::is_same_v<A, act::refuse>) {
          reply(self, a.member, caf::make_error(caf::sec::runtime_error, a.why));
        } else if constexpr (std::is_same_v<A, act::merge_result>) {
          s.setup.result->steps.insert(s.setup.result->steps.end(), s.epoch_result->steps.begin(),
                                       s.epoch_result->steps.end());
          add_epoch_result(*s.setup.result, std::move(*s.epoch_result));
        } else if constexpr (std::is_same_v<A, act::spawn_coordinator>) {
          spawn_coordinator(self, a);
        } else if constexpr (std::is_same_v<A, act::watch_epoch>) {
          watch_epoch(self, a);
        } else if constexpr (std::is_same_v<A, act::fail_worker>) {
          if (s.coordinator) self->send(s.coordinator, worker_failure{a.rank, a.why});
        } else if constexpr (std::is_same_v<A, act::replicate>) {
          replicate(self, a);
        } else if constexpr (std::is_same_v<A, act::timer>) {
          send_timer(self, a);
        } else if constexpr (std::is_same_v<A, act::probe_death>) {
          self->home_system().spawn([membership = caf::actor_cast<membership_actor>(self), id = a.member,
                                     control = a.control](caf::blocking_actor*) {
            caf::anon_send(membership, dead_atom::value, id, port_refuses_connection(control, death_probe_timeout));
          });
        } else if constexpr (std::is_same_v<A, act::probe_standbys>) {
          self->home_system().spawn([membership = caf::actor_cast<membership_actor>(self), controls = a.controls,
                                     ask = s.setup.ask_standby](caf::blocking_actor*) {
            for (const std::string& control : controls)
              if (const auto answer = ask(control))
                caf::anon_send(membership, yield_atom::value, control, answer->first, answer->second);
            caf::anon_send(membership, yield_atom::value, std::string(), std::uint64_t{0}, false);
          });
        } else if constexpr (std::is_same_v<A, act::unwritten_events>) {
          if (s.setup.on_unwritten_events) s.setup.on_unwritten_events(a.lines);
        } else if constexpr (std::is_same_v<A, act::finished>) {
          if (s.setup.on_finished) s.setup.on_finished();
        } else if constexpr (std::is_same_v<A, act::release_waiters>) {
          for (auto& w : s.waiters) w.deliver(true);
          s.waiters.clear();
        }
      },
      action);
}

// Performs what the machine asked for, in order.
void perform(self_pointer self) {
  for (membership_action& action : self->state.machine->take_actions()) perform(self, action);
}

// Feeds the machine an event at the present time, then performs its actions.
template <class Event>
void feed(self_pointer self, Event event) {
  event(*self->state.machine, std::chrono::steady_clock::now());
  perform(self);
}

membership_actor::behavior_type membership_behavior(self_pointer self, membership_setup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.machine.emplace(rules_of(s.setup), std::chrono::steady_clock::now());
  perform(self);
  self->set_down_handler([self](const caf::down_msg& down) {
    for (const auto& [id, agent] : self->state.agents)
      if (agent.address() == down.source)
        feed(self, [id = id](membership_machine& m, auto now) { m.on_connection_closed(id, now); });
  });
  using time_point = membership_machine::time_point;
  const auto timer = [self](membership_timer kind, std::uint64_t epoch) {
    feed(self, [=](membership_machine& m, time_point now) { m.on_timer(kind, epoch, now); });
  };
  return {
      [self](hello_atom, const member_hello& hello, member_agent agent) -> caf::result<std::uint64_t> {
        auto& s = self->state;
        auto admitted = s.machine->on_hello(hello, agent.node() != self->node(), std::chrono::steady_clock::now());
        if (const std::string* refusal = std::get_if<std::string>(&admitted)) {
          perform(self);
          return caf::make_error(caf::sec::runtime_error, *refusal);
        }
        const std::uint64_t id = std::get<std::uint64_t>(admitted);
        s.agents[id] = agent;
        s.plans.erase(id);
        self->monitor(agent);
        perform(self);
        return id;
      },
      [self](epoch_atom, epoch_request& request) -> caf::result<epoch_plan> {
        auto promise = self->make_response_promise<epoch_plan>();
        self->state.plans[request.member] = promise;
        feed(self, [&](membership_machine& m, time_point now) { m.on_epoch_request(std::move(request), now); });
        return promise;
      },
      [self](leave_atom, std::uint64_t id) {
        feed(self, [id](membership_machine& m, time_point now) { m.on_leave(id, now); });
      },
      [self](restored_atom, const restored_report& report) {
        feed(self, [&](membership_machine& m, time_point) { m.on_restored(report); });
      },
      [self](kept_atom, std::uint64_t epoch, std::uint64_t steps, std::uint64_t position) {
        feed(self, [=](membership_machine& m, time_point) { m.on_kept(epoch, steps, position); });
      },
      [timer](grace_atom, std::uint64_t epoch) { timer(membership_timer::grace, epoch); },
      [self](rendezvous_atom) {
        const bool stop = self->state.setup.stop_requested && self->state.setup.stop_requested->load();
        feed(self, [stop](membership_machine& m, time_point now) {
          m.on_timer(membership_timer::rendezvous, 0, now, stop);
        });
      },
      [self](heartbeat_atom, std::uint64_t id, std::int64_t sent, std::int64_t echo) {
        feed(self, [=](membership_machine& m, time_point now) { m.on_heartbeat(id, sent, echo, now); });
      },
      [self](dead_atom, std::uint64_t id, bool refused) {
        feed(self, [=](membership_machine& m, time_point now) { m.on_death_probe(id, refused, now); });
      },
      [timer](silence_atom) { timer(membership_timer::silence, 0); },
      [timer](majority_atom, std::uint64_t epoch) { timer(membership_timer::majority, epoch); },
      [timer](yield_atom) { timer(membership_timer::probe, 0); },
      [self](yield_atom, const std::string& control, std::uint64_t epoch, bool coordinates) {
        feed(self, [&](membership_machine& m, time_point now) { m.on_standby_answer(control, epoch, coordinates, now); });
      },
      [timer](reconnect_atom) { timer(membership_timer::reconnect, 0); },
      [self](dropped_atom, std::uint64_t id) -> std::string { return self->state.machine->dropped_reason(id); },
      [](clock_atom) -> std::int64_t {
        return std::chrono::duration_cast<std::chrono::microseconds>(trace_clock::now().time_since_epoch()).count();
      },
      [self](wait_atom) -> caf::result<bool> {
        self->state.waiters.push_back(self->make_response_promise<bool>());
        auto promise = self->state.waiters.back();
        feed(self, [](membership_machine& m, time_point) { m.on_waiter(); });
        return promise;
      },
      // Sent by this actor to itself; from anyone else (the master port is unauthenticated) it does nothing.
      [self](leave_atom) {
        if (self->state.machine->departing()) std::raise(SIGKILL);
      },
  };
}

}  // namespace

membership_actor spawn_membership_actor(caf::actor_system& system, membership_setup setup) {
  return system.spawn(membership_behavior, std::move(setup));
}

}  // namespace accord
