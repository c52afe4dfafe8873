// The standby's election rule (actors/standby_actor.hpp), in one process: it takes over from the
// coordinator only once its own process judged that coordinator lost. A member cut off from a
// live coordinator (the chaos run's partitioned member) once made a healthy member start a
// second coordinator from a copy that then went stale; the survivors later reconnected to it
// and the job was lost ("the newest state kept by a survivor ... was never completed").
#include <doctest/doctest.h>

#include "actors/standby_actor.hpp"
#include "job/worker_spawn.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

using namespace accord;

namespace {

struct election {
  std::optional<membership_actor> elected;
  std::string refusal;
};

election elect(caf::scoped_actor& self, const standby_actor& standby, std::uint64_t epoch) {
  election out;
  self->request(standby, std::chrono::seconds(10), elect_atom::value, epoch, std::string("hung (as the asker saw it)"))
      .receive([&](membership_actor& m) { out.elected = std::move(m); },
               [&](caf::error& e) { out.refusal = self->system().render(e); });
  return out;
}

}  // namespace

TEST_CASE("membership: a standby takes over from the coordinator only once its own process judged it lost") {
  caf::actor_system_config config;
  configure_system(config);
  config.load<caf::io::middleman>();
  caf::actor_system system{config};
  std::atomic<int> take_overs{0};
  std::string started_with;  // the cause the takeover started with
  const auto take_over = [&](const coordination_replica& replica, const std::string& cause) {
    ++take_overs;
    started_with = cause;
    membership_setup setup;
    setup.elastic = true;
    setup.takeover = replica;
    setup.takeover_cause = cause;
    setup.reconnect_grace = std::chrono::minutes(10);  // the test ends first
    setup.result = std::make_shared<job_result>();
    return spawn_membership_actor(system, std::move(setup));
  };
  const standby_actor standby = spawn_standby_actor(system, take_over, std::chrono::milliseconds(300));
  caf::scoped_actor self{system};
  // Epoch 18: the coordinator (member 6) and members 8 and 11; member 10 was dropped in it.
  coordination_replica replica;
  replica.epoch = 18;
  replica.sequence = 1;
  replica.coordinator = 6;
  replica.epoch_workers = 3;
  replica.members = {{6, -1, "10.0.0.2", "10.0.0.2:1", 0, false},
                     {8, -1, "10.0.0.1", "10.0.0.1:1", 1, false},
                     {11, -1, "10.0.0.3", "10.0.0.3:1", 2, false}};
  self->send(standby, replica_atom::value, replica);

  // The dropped member, cut off and still at epoch 17, is refused at once.
  const election dropped = elect(self, standby, 17);
  CHECK(!dropped.elected);
  CHECK(dropped.refusal.find(coordinator_still_heard) != std::string::npos);
  CHECK(dropped.refusal.find("formed epoch 18 without the asker") != std::string::npos);
  // A member of epoch 18 cut off from the coordinator: refused once the wait shows it alive here.
  const election cut_off = elect(self, standby, 18);
  CHECK(!cut_off.elected);
  CHECK(cut_off.refusal.find(coordinator_still_heard) != std::string::npos);
  CHECK(take_overs == 0);

  // The coordinator dies: this process's agent says so while an election waits; it is answered.
  auto waiting = self->request(standby, std::chrono::seconds(10), elect_atom::value, std::uint64_t{18},
                               std::string("hung (as the asker saw it)"));
  caf::anon_send(standby, lost_atom::value, std::string("connection closed (killed, or its host went away)"));
  std::optional<membership_actor> first;
  std::move(waiting).receive([&](membership_actor& m) { first = std::move(m); },
                             [&](caf::error& e) { FAIL("the waiting election was refused: " << system.render(e)); });
  REQUIRE(first);
  CHECK(take_overs == 1);
  CHECK(started_with == "connection closed (killed, or its host went away)");  // its own verdict
  // Every later election gets the same coordinator, also from a stale asker.
  const election later = elect(self, standby, 17);
  REQUIRE(later.elected);
  CHECK(*later.elected == *first);
  CHECK(take_overs == 1);
  self->send_exit(*first, caf::exit_reason::user_shutdown);
  self->send_exit(standby, caf::exit_reason::user_shutdown);
}
