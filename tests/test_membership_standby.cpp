// The standby's election rule (actors/standby_actor.hpp), in one process: it takes over from the
// coordinator only once its own process judged that coordinator lost. A member cut off from a
// live coordinator (the chaos run's partitioned member) once made a healthy member start a
// second coordinator from a copy that then went stale; the survivors later reconnected to it
// and the job was lost ("the newest state kept by a survivor ... was never completed").
#include <doctest/doctest.h>

#include "loopback_port.hpp"

#include "actors/standby_actor.hpp"
#include "cluster/certain_death.hpp"
#include "job/worker_spawn.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

using namespace accord;
using accord::testing::loopback_port;

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

// A standby's takeover that starts a real membership actor, counting takeovers and keeping the
// cause the last one started with.
struct counted_takeovers {
  std::atomic<int> count{0};
  std::string cause;
  take_over_function in(caf::actor_system& system) {
    return [this, &system](const coordination_replica& replica, const std::string& why) {
      ++count;
      cause = why;
      membership_setup setup;
      setup.elastic = true;
      setup.takeover = replica;
      setup.takeover_cause = why;
      setup.reconnect_grace = std::chrono::minutes(10);  // the test ends first
      setup.result = std::make_shared<job_result>();
      return spawn_membership_actor(system, std::move(setup));
    };
  }
};

}  // namespace

TEST_CASE("membership: a standby takes over from the coordinator only once its own process judged it lost") {
  caf::actor_system_config config;
  configure_system(config);
  config.load<caf::io::middleman>();
  caf::actor_system system{config};
  counted_takeovers take_overs;
  const standby_actor standby = spawn_standby_actor(system, take_overs.in(system), std::chrono::milliseconds(300));
  caf::scoped_actor self{system};
  // Epoch 18: the coordinator (member 6) and members 8 and 11; member 10 was dropped in it.
  coordination_replica replica;
  replica.epoch = 18;
  replica.sequence = 1;
  replica.coordinator = 6;
  replica.epoch_workers = 3;
  // Control ports on loopback: the takeover tries the lost coordinator's (cluster/certain_death.hpp).
  replica.members = {{6, -1, "10.0.0.2", "127.0.0.1:1", 0, false},
                     {8, -1, "10.0.0.1", "127.0.0.1:1", 1, false},
                     {11, -1, "10.0.0.3", "127.0.0.1:1", 2, false}};
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
  CHECK(take_overs.count == 0);

  // The coordinator dies: this process's agent says so while an election waits; it is answered.
  auto waiting = self->request(standby, std::chrono::seconds(10), elect_atom::value, std::uint64_t{18},
                               std::string("hung (as the asker saw it)"));
  caf::anon_send(standby, lost_atom::value, std::string("connection closed (killed, or its host went away)"));
  std::optional<membership_actor> first;
  std::move(waiting).receive([&](membership_actor& m) { first = std::move(m); },
                             [&](caf::error& e) { FAIL("the waiting election was refused: " << system.render(e)); });
  REQUIRE(first);
  CHECK(take_overs.count == 1);
  CHECK(take_overs.cause == "connection closed (killed, or its host went away)");  // its own verdict
  // Every later election gets the same coordinator, also from a stale asker.
  const election later = elect(self, standby, 17);
  REQUIRE(later.elected);
  CHECK(*later.elected == *first);
  CHECK(take_overs.count == 1);
  self->send_exit(*first, caf::exit_reason::user_shutdown);
  self->send_exit(standby, caf::exit_reason::user_shutdown);
}

TEST_CASE("membership: after a loss the majority is over the last epoch's members not known dead, and only a "
          "closed connection in contact followed by a refused port proves a death") {
  // A 2-member job whose other member died goes on; one whose other member is silent stops.
  CHECK(majority_remains(2, 1, 1));
  CHECK(!majority_remains(2, 1, 0));
  // Of 5, the coordinator killed with another that did not reconnect: 3 is more than half of 4.
  CHECK(majority_remains(5, 3, 1));
  CHECK(!majority_remains(4, 2, 0));
  CHECK(majority_remains(4, 2, 1));
  // Two sides of a partition of 5 with one known dead on each side's count: never both.
  for (int first = 0; first <= 4; ++first) CHECK(!(majority_remains(5, first, 1) && majority_remains(5, 4 - first, 1)));

  // In contact: it echoed a heartbeat sent less than the earliest verdict before the close.
  const heartbeat_detector_settings settings;
  CHECK(earliest_verdict(settings) == std::chrono::milliseconds(1500));
  heartbeat_detector_settings short_timeout;
  short_timeout.upper_bound = std::chrono::milliseconds(800);
  CHECK(earliest_verdict(short_timeout) == std::chrono::milliseconds(800));
  const auto now = std::chrono::steady_clock::now();
  CHECK(closed_in_contact(now, now - std::chrono::milliseconds(200), earliest_verdict(settings)));
  // It may have judged this process lost (and joined another side) before it died.
  CHECK(!closed_in_contact(now, now - std::chrono::milliseconds(1500), earliest_verdict(settings)));
  CHECK(!closed_in_contact(now, std::nullopt, earliest_verdict(settings)));
  CHECK(heartbeat_time_point(heartbeat_time(now)) == now);
  // Each side echoes the newest send time it heard; a late, older echo does not move it back.
  heartbeat_contact contact;
  contact.heard(42, 0);
  CHECK(contact.heard_sent == 42);
  CHECK(!contact.echoed);
  contact.heard(43, heartbeat_time(now));
  contact.heard(44, heartbeat_time(now - std::chrono::seconds(1)));
  CHECK(contact.heard_sent == 44);
  REQUIRE(contact.echoed);
  CHECK(*contact.echoed == now);

  // A port nobody listens on refuses (the process is gone); a listening one accepts even when
  // its owner never calls accept (a stopped process); a name that does not resolve proves nothing.
  {
    const loopback_port dead(false);
    CHECK(port_refuses_connection(dead.address(), std::chrono::milliseconds(2000)));
  }
  {
    const loopback_port stopped(true);
    CHECK(!port_refuses_connection(stopped.address(), std::chrono::milliseconds(300)));
  }
  CHECK(!port_refuses_connection("no-such-host.invalid:1", std::chrono::milliseconds(2000)));
  CHECK(!port_refuses_connection("127.0.0.1", std::chrono::milliseconds(2000)));
}

TEST_CASE("membership: a member that says hello again to the coordinator it judged lost withdraws its verdict, and "
          "the first coordinator's own standby leads to it") {
  caf::actor_system_config config;
  configure_system(config);
  config.load<caf::io::middleman>();
  caf::actor_system system{config};
  counted_takeovers take_overs;
  const standby_actor standby = spawn_standby_actor(system, take_overs.in(system), std::chrono::milliseconds(300));
  caf::scoped_actor self{system};
  coordination_replica replica;
  replica.epoch = 5;
  replica.sequence = 1;
  replica.coordinator = 0;
  replica.coordinator_control = "127.0.0.1:7";
  replica.epoch_workers = 3;
  replica.members = {{0, 0, "127.0.0.1", "127.0.0.1:7", 0, false},
                     {1, 1, "127.0.0.1", "127.0.0.1:8", 1, false},
                     {2, 2, "127.0.0.1", "127.0.0.1:9", 2, false}};
  self->send(standby, replica_atom::value, replica);
  // This process judged the coordinator lost (a flapping link), then reached it again and said
  // hello to it: a member asking this one to take over is refused, the coordinator lives.
  self->send(standby, lost_atom::value, std::string("hung (silent for 1.60 s)"));
  self->send(standby, follow_atom::value, std::string("127.0.0.1:7"));
  const election after_follow = elect(self, standby, 5);
  CHECK(!after_follow.elected);
  CHECK(after_follow.refusal.find(coordinator_still_heard) != std::string::npos);
  CHECK(take_overs.count == 0);
  // This process judged the coordinator lost, and its side gave way to another member's: a
  // takeover here would be a coordination without this process's member.
  self->send(standby, lost_atom::value, std::string("hung (silent for 1.60 s)"));
  self->send(standby, follow_atom::value, std::string("127.0.0.1:9"));
  const election after_giving_way = elect(self, standby, 5);
  CHECK(!after_giving_way.elected);
  CHECK(take_overs.count == 0);
  // This process judged the coordinator lost and followed a member elected elsewhere: a later
  // asker does not make it take over from that coordinator too.
  self->send(standby, lost_atom::value, std::string("hung (silent for 1.60 s)"));
  self->send(standby, elected_atom::value);
  const election after_elected = elect(self, standby, 5);
  CHECK(!after_elected.elected);
  CHECK(take_overs.count == 0);

  // Rank 0's process hosts the job's first coordinator without a takeover: its standby says so,
  // so that a member cut off from it finds it again through its control port.
  membership_setup first;
  first.result = std::make_shared<job_result>();
  const membership_actor hosted = spawn_membership_actor(system, std::move(first));
  self->send(standby, membership_atom::value, hosted);
  std::string where = "unanswered";
  self->request(standby, std::chrono::seconds(10), where_atom::value)
      .receive([&](std::string& at) { where = std::move(at); }, [&](caf::error& e) { where = system.render(e); });
  CHECK(where.empty());
  std::optional<membership_actor> found;
  self->request(standby, std::chrono::seconds(10), membership_atom::value)
      .receive([&](membership_actor& m) { found = std::move(m); }, [](caf::error&) {});
  REQUIRE(found);
  CHECK(*found == hosted);
  self->send_exit(hosted, caf::exit_reason::user_shutdown);
  self->send_exit(standby, caf::exit_reason::user_shutdown);
}
