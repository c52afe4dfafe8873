// The membership state machine (membership/machine.hpp) driven event by event, no CAF: who
// forms each epoch, from which kept step, what a loss, a majority wait and a return do.
#include <doctest/doctest.h>

#include "membership/election.hpp"
#include "membership/machine.hpp"

#include <algorithm>
#include <chrono>

using namespace accord;
using namespace std::chrono_literals;

namespace {

using time_point = membership_machine::time_point;

// The actions of type A among `actions`.
template <class A>
std::vector<A> of(const membership_actions& actions) {
  std::vector<A> found;
  for (const membership_action& a : actions)
    if (const A* x = std::get_if<A>(&a)) found.push_back(*x);
  return found;
}

bool printed(const membership_actions& actions, const std::string& part) {
  const auto lines = of<membership_do::print>(actions);
  return std::any_of(lines.begin(), lines.end(), [&](const auto& p) { return p.line.find(part) != std::string::npos; });
}

member_hello starting_rank(int rank, int world) {
  member_hello hello;
  hello.rank = rank;
  hello.world = world;
  hello.host = "10.0.0." + std::to_string(rank + 1);
  hello.control = hello.host + ":7000";
  return hello;
}

// What rank `rank` of `world` keeps after `steps` in epoch `layout`: its own shard and a copy of
// the previous rank's.
kept_summary kept(std::uint64_t layout, std::uint64_t steps, int rank, int world) {
  kept_summary k;
  k.layout = layout;
  k.steps = steps;
  k.rank = rank;
  k.world = world;
  k.parameter_hash = 42;
  if (world > 1) {
    k.copies = {(rank + world - 1) % world};
    k.copy_checksums = {0};
  }
  return k;
}

// A job of `world` starting ranks, rank 0's process the coordinator's; epoch 1 formed.
struct started_job {
  time_point now{};
  membership_machine machine;
  std::vector<std::uint64_t> ids;
  membership_actions formed;

  static membership_rules rules(int world) {
    membership_rules r;
    r.initial_world = world;
    r.elastic = true;
    r.sharded = true;
    r.total_rounds = 1000;
    r.control = "10.0.0.1:7000";
    r.majority_wait = 30s;
    return r;
  }
  explicit started_job(int world, membership_rules r) : machine(std::move(r), now) {
    machine.take_actions();
    for (int rank = 0; rank < world; ++rank) {
      auto id = machine.on_hello(starting_rank(rank, world), rank != 0, now);
      REQUIRE(std::holds_alternative<std::uint64_t>(id));
      ids.push_back(std::get<std::uint64_t>(id));
    }
    for (int rank = 0; rank < world; ++rank) machine.on_epoch_request({ids[rank], "addr" + std::to_string(rank), {}}, now);
    formed = machine.take_actions();
  }
  explicit started_job(int world) : started_job(world, rules(world)) {}

  // Every worker kept `steps` in the running epoch.
  void keep(std::uint64_t steps) { machine.on_kept(machine.epoch(), steps, steps * 10); }
  // The members in `ranks` (of the running epoch) ask for the next epoch, holding what they kept.
  void ask(const std::vector<int>& ranks, std::uint64_t steps) {
    for (const int rank : ranks)
      machine.on_epoch_request(
          {ids[rank], "addr" + std::to_string(rank), {kept(machine.epoch(), steps, rank, machine.epoch_workers())}}, now);
  }
};

}  // namespace

TEST_CASE("membership machine: the starting ranks form epoch 1 in rank order from the job's origin") {
  started_job job(3);
  const auto answers = of<membership_do::answer>(job.formed);
  REQUIRE(answers.size() == 3);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK(answers[rank].member == job.ids[rank]);
    CHECK(answers[rank].plan.rank == rank);
    CHECK(answers[rank].plan.world == 3);
    CHECK(answers[rank].plan.from_origin);
  }
  REQUIRE(of<membership_do::spawn_coordinator>(job.formed).size() == 1);
  CHECK(of<membership_do::spawn_coordinator>(job.formed)[0].spec.epoch == 1);
  CHECK(job.machine.phase() == membership_phase::running);
  // A kept step is copied to every member's standby, the coordinator's own process's included
  // (a waiting side that asks it where the job is hears of this epoch).
  job.keep(5);
  const auto copies = of<membership_do::replicate>(job.machine.take_actions());
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].to == std::vector<std::uint64_t>{job.ids[0], job.ids[1], job.ids[2]});
  CHECK(copies[0].replica.kept.front().steps == 5);
}

TEST_CASE("membership machine: a killed worker ends the epoch and the survivors go on from the newest kept step") {
  started_job job(3);
  job.keep(4);
  job.keep(5);
  job.machine.take_actions();
  job.machine.on_connection_closed(job.ids[2], job.now);
  auto lost = job.machine.take_actions();
  CHECK(printed(lost, "rank 2 (10.0.0.3), worker, lost at step"));
  CHECK(of<membership_do::abort>(lost).size() == 3);  // the epoch's members, the lost one told it was dropped
  REQUIRE(of<membership_do::fail_worker>(lost).size() == 1);
  CHECK(of<membership_do::fail_worker>(lost)[0].rank == 2);
  job.now += 100ms;
  job.machine.on_epoch_ended(1, std::string("rank 2 lost"), {5, false, 6}, job.now);
  job.ask({0, 1}, 5);
  const auto formed = job.machine.take_actions();
  const auto answers = of<membership_do::answer>(formed);
  REQUIRE(answers.size() == 2);
  CHECK(answers[0].plan.epoch == 2);
  CHECK(answers[0].plan.world == 2);
  CHECK(!answers[0].plan.from_origin);
  CHECK(answers[0].plan.source.steps == 5);
  // Rank 2's shard comes from rank 0's copy of it.
  CHECK(answers[0].plan.source.shard_senders == std::vector<int>{0, 1, 0});
  CHECK(printed(formed, "membership: epoch 2, 3 -> 2 workers from step 6 (rank 2 (10.0.0.3) lost)"));
  const auto records = of<membership_do::record>(formed);
  REQUIRE(records.size() == 2);
  CHECK(records[0].r.event == "lost");
  CHECK(records[1].r.event == "epoch");
}

TEST_CASE("membership machine: a side without a majority waits, a member that answers again makes one, a side "
          "that stays short stops when the wait runs out") {
  for (const bool comes_back : {true, false}) {
    CAPTURE(comes_back);
    membership_rules rules = started_job::rules(4);
    rules.detector = heartbeat_detector_settings{};
    started_job job(4, rules);
    job.keep(3);
    for (int i = 0; i < 30; ++i) {  // regular heartbeats from everyone
      job.now += 100ms;
      for (int rank = 1; rank < 4; ++rank) job.machine.on_heartbeat(job.ids[rank], i, 0, job.now);
      job.machine.on_timer(membership_timer::silence, 0, job.now);
    }
    job.machine.take_actions();
    // Ranks 2 and 3 go silent (a partition): after the detector's floor both are lost.
    for (int i = 0; i < 40; ++i) {
      job.now += 100ms;
      job.machine.on_heartbeat(job.ids[1], 100 + i, heartbeat_time(job.now - 100ms), job.now);
      job.machine.on_timer(membership_timer::silence, 0, job.now);
    }
    job.machine.on_epoch_ended(1, std::string("ranks 2, 3 lost"), {3, false, 3}, job.now);
    job.ask({0, 1}, 3);
    auto waiting = job.machine.take_actions();
    CHECK(printed(waiting, "waits for a majority at step 0: 2 of the last epoch's 4 members are reachable, 0 known dead"));
    CHECK(of<membership_do::answer>(waiting).empty());
    const auto timers = of<membership_do::timer>(waiting);
    CHECK(std::any_of(timers.begin(), timers.end(), [](const auto& t) {
      return t.kind == membership_timer::majority && t.after == 30s;
    }));
    if (comes_back) {
      // Rank 2 echoes a heartbeat the coordinator sent after its verdict: it is back, and with
      // 3 of 4 the next epoch forms once rank 3's moment to come back too has passed.
      job.now += 500ms;
      job.machine.on_heartbeat(job.ids[2], 500, heartbeat_time(job.now - 100ms), job.now);
      job.ask({2}, 3);
      CHECK(of<membership_do::answer>(job.machine.take_actions()).empty());
      job.now += returning_grace;
      job.machine.on_timer(membership_timer::majority, 1, job.now);
      // This process sent no heartbeats for 1.5 s (a stall): rank 1 may have followed another
      // coordinator meanwhile, so the epoch forms once ranks 1 and 2 echo one sent since.
      CHECK(of<membership_do::answer>(job.machine.take_actions()).empty());
      job.machine.on_timer(membership_timer::silence, 0, job.now);
      job.now += 100ms;
      job.machine.on_heartbeat(job.ids[1], 600, heartbeat_time(job.now - 100ms), job.now);
      CHECK(of<membership_do::answer>(job.machine.take_actions()).empty());
      job.machine.on_heartbeat(job.ids[2], 600, heartbeat_time(job.now - 100ms), job.now);
      const auto formed = of<membership_do::answer>(job.machine.take_actions());
      REQUIRE(formed.size() == 3);
      CHECK(formed[0].plan.world == 3);
      CHECK(formed[0].plan.source.steps == 3);
    } else {
      job.now += 30s;
      job.machine.on_timer(membership_timer::majority, 1, job.now);
      const auto failed = job.machine.take_actions();
      CHECK(job.machine.phase() == membership_phase::failed);
      const auto refusals = of<membership_do::refuse>(failed);
      REQUIRE(refusals.size() == 2);
      CHECK(refusals[0].why.find("no majority: 2 of the last epoch's 4 members are reachable") != std::string::npos);
    }
  }
}

TEST_CASE("membership machine: a majority whose newest kept step lacks a shard of members only lost waits for "
          "them, forms when one comes back, and stops when the wait runs out") {
  for (const bool comes_back : {true, false}) {
    CAPTURE(comes_back);
    started_job job(5);
    job.keep(3);
    job.machine.take_actions();
    // Ranks 3 and 4 go away out of contact (maybe stopped, maybe cut off): rank 3's shard was on
    // them only (rank 4 copies it).
    for (const int rank : {3, 4}) job.machine.on_connection_closed(job.ids[rank], job.now);
    job.machine.on_epoch_ended(1, std::string("ranks 3, 4 lost"), {3, false, 3}, job.now);
    job.ask({0, 1, 2}, 3);
    const auto waiting = job.machine.take_actions();
    CHECK(printed(waiting, "lacks the optimizer shard of rank 3"));
    CHECK(printed(waiting, "but a member that may hold it is lost, not known dead"));
    CHECK(of<membership_do::answer>(waiting).empty());
    CHECK(job.machine.phase() == membership_phase::forming);
    if (comes_back) {
      member_hello again = starting_rank(3, 5);
      again.rejoin = true;
      again.member = job.ids[3];
      job.now += 5s;
      CHECK(std::holds_alternative<std::uint64_t>(job.machine.on_hello(again, true, job.now)));
      job.ask({3}, 3);
      const auto formed = of<membership_do::answer>(job.machine.take_actions());
      REQUIRE(formed.size() == 4);
      CHECK(formed[0].plan.world == 4);
      CHECK(formed[0].plan.source.steps == 3);
    } else {
      job.now += 30s;
      job.machine.on_timer(membership_timer::majority, 1, job.now);
      const auto refusals = of<membership_do::refuse>(job.machine.take_actions());
      CHECK(job.machine.phase() == membership_phase::failed);
      REQUIRE(refusals.size() == 3);
      CHECK(refusals[0].why.find("the training state cannot be rebuilt") == 0);
      CHECK(refusals[0].why.find("(it waited 30.0 s for the members that may hold it: --majority-wait)") !=
            std::string::npos);
    }
  }
}

TEST_CASE("membership machine: a side waiting for a majority that hears of a later epoch gives way to it, and a "
          "hello that comes after is refused as to a coordination gone") {
  membership_rules rules = started_job::rules(4);
  rules.asks_standbys = true;
  started_job job(4, rules);
  job.keep(3);
  job.machine.on_connection_closed(job.ids[2], job.now);
  job.machine.on_connection_closed(job.ids[3], job.now);
  for (const auto& probe : of<membership_do::probe_death>(job.machine.take_actions()))
    job.machine.on_death_probe(probe.member, false, job.now);  // alive: cut off, not dead
  job.machine.on_epoch_ended(1, std::string("ranks 2, 3 lost"), {3, false, 3}, job.now);
  job.ask({0, 1}, 3);
  CHECK(printed(job.machine.take_actions(), "waits for a majority"));
  // Rank 2's standby holds epoch 2: a majority went on, and may have counted this side's members.
  job.machine.on_standby_answer("10.0.0.3:7000", 2, false, job.now);
  const membership_actions gave = job.machine.take_actions();
  CHECK(job.machine.phase() == membership_phase::yielded);
  CHECK(printed(gave, "the member at 10.0.0.3:7000 holds a later epoch, 2"));
  const auto answers = of<membership_do::answer>(gave);
  REQUIRE(answers.size() == 2);
  for (const auto& a : answers) CHECK(a.plan.rejoin == "10.0.0.3:7000");
  member_hello late = starting_rank(1, 4);
  late.rejoin = true;
  late.member = job.ids[1];
  const auto refused = job.machine.on_hello(late, true, job.now);
  REQUIRE(std::holds_alternative<std::string>(refused));
  CHECK(refused_as_gone(std::get<std::string>(refused)));
}

TEST_CASE("membership machine: a member lost in the running epoch that says hello again before the epoch's end "
          "is heard is taken back, not refused as dropped") {
  started_job job(3);
  job.keep(3);
  job.machine.on_connection_closed(job.ids[2], job.now);  // its old agent ended: it took over elsewhere
  member_hello again = starting_rank(2, 3);
  again.rejoin = true;
  again.member = job.ids[2];
  job.now += 100ms;
  // Another process with its id (a coordination that went on apart gave that id to a joiner of
  // its own) is not it: a member is its id and its control port.
  member_hello stranger = again;
  stranger.control = "10.0.0.9:7000";
  CHECK(std::holds_alternative<std::string>(job.machine.on_hello(stranger, true, job.now)));
  CHECK(std::holds_alternative<std::uint64_t>(job.machine.on_hello(again, true, job.now)));
  job.machine.on_epoch_ended(1, std::string("rank 2 lost"), {3, false, 3}, job.now);
  job.ask({0, 1, 2}, 3);
  const auto formed = of<membership_do::answer>(job.machine.take_actions());
  REQUIRE(formed.size() == 3);
  CHECK(formed[0].plan.world == 3);
  CHECK(formed[0].plan.source.steps == 3);
}

TEST_CASE("membership election: a standby takes over only on its own process's verdict, and the members ask in "
          "succession order without the lost coordinator") {
  coordination_replica replica;
  replica.epoch = 5;
  replica.coordinator = 0;
  replica.members = {{0, 0, "h0", "h0:1", 0, false}, {2, 2, "h2", "h2:1", 2, false}, {1, 1, "h1", "h1:1", 1, false},
                     {7, -1, "h7", "h7:1", -1, false}};
  CHECK(answer_election({replica, true, std::nullopt}, 5) == election_answer::coordinates);
  CHECK(answer_election({coordination_replica{}, false, std::nullopt}, 5) == election_answer::no_copy_yet);
  CHECK(answer_election({replica, false, std::uint64_t{0}}, 5) == election_answer::take_over);
  // A verdict on an earlier coordinator does not count for this one.
  CHECK(answer_election({replica, false, std::uint64_t{3}}, 5) == election_answer::wait_for_own_verdict);
  CHECK(answer_election({replica, false, std::nullopt}, 4) == election_answer::formed_without_asker);
  CHECK(answer_election({replica, false, std::nullopt}, 5) == election_answer::wait_for_own_verdict);
  // Refused as formed without it, an asker that this later epoch counted (a cut held its plan)
  // takes its replica and elects from it; a joiner waiting outside it, or a stranger, does not.
  CHECK(counted_in(replica, 2));
  CHECK(!counted_in(replica, 7));
  CHECK(!counted_in(replica, 9));
  // A hello refused by a coordination that gave way meanwhile: the one elected is gone.
  CHECK(refused_as_gone(std::string("rank 2 refused: ") + gave_way_refusal + "h0:1"));
  CHECK(!refused_as_gone("rank 2 refused: member 2 is not one this coordinator waits for after the last one's loss"));
  std::vector<std::uint64_t> order;
  for (const replica_member& m : election_candidates(replica)) order.push_back(m.id);
  CHECK(order == std::vector<std::uint64_t>{1, 2, 7});
  // A member that asked to leave is not asked: its process goes with the next epoch.
  replica.members[2].leaving = true;
  order.clear();
  for (const replica_member& m : election_candidates(replica)) order.push_back(m.id);
  CHECK(order == std::vector<std::uint64_t>{2, 7});
}

TEST_CASE("membership machine: an epoch starts from the newest step the coordinator saw kept, and a leaver whose "
          "shard nobody else holds stays one more epoch") {
  started_job job(3);
  job.keep(4);  // step 5 was kept by the workers but never reported complete
  job.machine.take_actions();
  job.machine.on_connection_closed(job.ids[2], job.now);
  job.machine.on_epoch_ended(1, std::string("rank 2 lost"), {5, false, 5}, job.now);
  for (const int rank : {0, 1})
    job.machine.on_epoch_request({job.ids[rank], "addr", {kept(1, 4, rank, 3), kept(1, 5, rank, 3)}}, job.now);
  auto answers = of<membership_do::answer>(job.machine.take_actions());
  REQUIRE(answers.size() == 2);
  CHECK(answers[0].plan.source.steps == 4);

  // Epoch 2 of ranks 0 and 1, which keep no copies: rank 1 asks to leave.
  job.keep(7);
  job.machine.on_leave(job.ids[1], job.now);
  auto left = job.machine.take_actions();
  CHECK(printed(left, "rank 1 (10.0.0.2), standby, left at step"));
  CHECK(of<membership_do::change>(left).size() == 2);  // both ranks vote to end the epoch
  job.machine.on_epoch_ended(2, std::nullopt, {7, false, 7}, job.now);
  for (const int rank : {0, 1}) {
    kept_summary own = kept(2, 7, rank, 2);
    own.copies.clear();
    own.copy_checksums.clear();
    job.machine.on_epoch_request({job.ids[rank], "addr", {own}}, job.now);
  }
  const auto stays = job.machine.take_actions();
  answers = of<membership_do::answer>(stays);
  REQUIRE(answers.size() == 2);
  CHECK(answers[1].member == job.ids[1]);
  CHECK(!answers[1].plan.finished);  // it stays for its shard
  CHECK(answers[1].plan.world == 2);
  // and the change is announced again, so that it leaves after the next kept step
  CHECK(of<membership_do::change>(stays).size() == 2);
}

TEST_CASE("membership machine: without --elastic a vote to stop ends the job, and a lost member fails it") {
  membership_rules rules = started_job::rules(2);
  rules.elastic = false;
  started_job job(2, rules);
  job.machine.on_epoch_ended(1, std::nullopt, {3, false, 3}, job.now);  // the workers voted to stop early
  const auto stopped = job.machine.take_actions();
  CHECK(printed(stopped, "membership: the job stopped after step 3 (a worker was asked to stop)"));
  CHECK(job.machine.phase() == membership_phase::finished);
  CHECK(of<membership_do::finished>(stopped).size() == 1);

  started_job failing(2, rules);
  failing.machine.on_connection_closed(failing.ids[1], failing.now);
  const auto failed = failing.machine.take_actions();
  CHECK(failing.machine.phase() == membership_phase::failed);
  REQUIRE(failing.machine.failure());
  CHECK(failing.machine.failure()->find("the process of rank 1 (10.0.0.2) was lost before the job ended") == 0);
  CHECK(of<membership_do::fail_worker>(failed).size() == 1);  // the running coordinator hears the job failed
}
