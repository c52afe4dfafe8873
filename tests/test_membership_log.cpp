// The membership log (cluster/membership_log.hpp): its lines, and the replay they make.
#include <doctest/doctest.h>

#include "cluster/membership_log.hpp"
#include "recovery/checkpoint.hpp"
#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <cstdio>
#include <stdexcept>

using namespace accord;

namespace {

std::string error_of(const std::string& text, int workers = 4, std::uint64_t steps = 800) {
  try {
    replay_of(parse_membership_log(text, "churn.log"), "churn.log", workers, steps);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

const std::string churned_log =
    R"log({"event":"job","workers":4,"steps":800}
{"event":"lost","epoch":1,"step":61,"rank":2,"host":"127.0.0.1","role":"worker","cause":"hung (silent for 1.62 s)"}
{"event":"epoch","epoch":2,"step":54,"workers":3,"after_loss":true}
{"event":"left","epoch":2,"step":124,"rank":3,"host":"127.0.0.1","role":"worker","cause":"asked to leave"}
{"event":"epoch","epoch":3,"step":124,"workers":2,"after_loss":false}

{"event":"joined","epoch":3,"step":338,"rank":-1,"host":"127.0.0.1","role":"worker","cause":"said hello"}
{"event":"epoch","epoch":4,"step":338,"workers":3,"after_loss":false}
)log";

// The churned run, then its coordinator killed (after step 401, kept 400).
const std::string coordinator_lost_log = churned_log +
                                         R"log({"event":"lost","epoch":4,"step":401,"rank":0,"host":"127.0.0.1","role":"coordinator","cause":"connection closed"}
{"event":"epoch","epoch":5,"step":400,"workers":2,"after_loss":true}
)log";

}  // namespace

TEST_CASE("every record survives its JSON line") {
  for (const membership_record& r : parse_membership_log(churned_log, "churn.log")) {
    const membership_record back = parse_membership_log(to_json_line(r), "again").front();
    CHECK(back.event == r.event);
    CHECK(back.epoch == r.epoch);
    CHECK(back.step == r.step);
    CHECK(back.workers == r.workers);
    CHECK(back.after_loss == r.after_loss);
    CHECK(back.rank == r.rank);
    CHECK(back.host == r.host);
    CHECK(back.cause == r.cause);
  }
}

TEST_CASE("a churned run's epochs become the changes of a replay in one process") {
  const membership_replay replay = replay_of(parse_membership_log(churned_log, "churn.log"), "churn.log", 4, 800);
  CHECK(replay.workers == 4);
  REQUIRE(replay.changes.size() == 3);
  CHECK(replay.changes[0].step == 54);
  CHECK(replay.changes[0].workers == 3);
  CHECK(replay.changes[0].crash);  // a member was lost and the set shrank
  CHECK(replay.changes[1].step == 124);
  CHECK(replay.changes[1].workers == 2);
  CHECK(!replay.changes[1].crash);
  CHECK(replay.changes[2].step == 338);
  CHECK(replay.changes[2].workers == 3);
}

TEST_CASE("an epoch restarting from an earlier step undoes the changes after it, one from step 0 sets the start") {
  const std::string text = R"log({"event":"job","workers":4,"steps":100}
{"event":"epoch","epoch":2,"step":30,"workers":3,"after_loss":true}
{"event":"epoch","epoch":3,"step":20,"workers":2,"after_loss":true}
)log";
  const membership_replay replay = replay_of(parse_membership_log(text, "x"), "x", 4, 100);
  REQUIRE(replay.changes.size() == 1);
  CHECK(replay.changes[0].step == 20);
  CHECK(replay.changes[0].workers == 2);
  CHECK(replay.changes[0].crash);

  const std::string from_origin = R"log({"event":"job","workers":4,"steps":100}
{"event":"epoch","epoch":2,"step":0,"workers":3,"after_loss":true}
)log";
  const membership_replay start = replay_of(parse_membership_log(from_origin, "x"), "x", 4, 100);
  CHECK(start.workers == 3);
  CHECK(start.changes.empty());
}

TEST_CASE("a log that does not fit the job, or is not a log, is one line naming the file and line") {
  CHECK(error_of(churned_log, 3) == "churn.log:1: the log is of a job of 4 workers, this one has 3");
  CHECK(error_of(churned_log, 4, 300) == "churn.log:8: epoch 4 starts after step 338, at or beyond --steps 300");
  CHECK(error_of("{\"event\":\"job\",\"workers\":4,\"steps\":800}\n{\"event\":\"epoch\",\"epoch\":2}\n") ==
        "churn.log:2: not a membership event (no \"step\")");
  CHECK(error_of("{\"event\":\"job\",\"workers\":4,\"steps\":800}\nnot json\n").rfind("churn.log:2: not a membership "
                                                                                       "event (",
                                                                                       0) == 0);
  CHECK(error_of("{\"event\":\"job\",\"workers\":-4,\"steps\":800}\n") ==
        "churn.log:1: not a membership event (\"workers\" must be at least 1)");
  CHECK(error_of("{\"event\":\"crash\"}\n") ==
        "churn.log:1: not a membership event (unknown event \"crash\" (expected job, epoch, lost, left or joined))");
  CHECK(error_of("{\"event\":\"epoch\",\"epoch\":2,\"step\":5,\"workers\":2}\n") ==
        "churn.log:1: the log does not start with a \"job\" line");
  CHECK(error_of("") == "churn.log:1: the log does not start with a \"job\" line");
  CHECK(error_of("{\"event\":\"job\",\"workers\":4,\"steps\":800}\n"
                 "{\"event\":\"epoch\",\"epoch\":3,\"step\":5,\"workers\":2}\n"
                 "{\"event\":\"epoch\",\"epoch\":2,\"step\":9,\"workers\":2}\n") ==
        "churn.log:3: epoch 2 comes after epoch 3");
  CHECK(error_of("[1,2]\n") == "churn.log:1: not a membership event (not a JSON object)");
}

TEST_CASE("a churned run's member events become the departures and joins of a replay between processes") {
  const process_replay replay = process_replay_of(parse_membership_log(coordinator_lost_log, "churn.log"), "churn.log", 4, 800);
  CHECK(replay.workers == 4);
  CHECK(replay.joiners() == 1);
  REQUIRE(replay.changes.size() == 4);
  const auto departure = [&](std::size_t change) {
    REQUIRE(replay.changes[change].departures.size() == 1);
    return replay.changes[change].departures.front();
  };
  CHECK(replay.changes[0].step == 54);  // the crash replays as a departure at the step restored
  CHECK(replay.changes[0].workers == 3);
  CHECK(departure(0).rank == 2);
  CHECK(!departure(0).coordinator);
  CHECK(replay.changes[1].step == 124);
  CHECK(departure(1).rank == 3);
  CHECK(replay.changes[2].step == 338);
  CHECK(replay.changes[2].joiners == 1);
  CHECK(replay.changes[2].departures.empty());
  CHECK(replay.changes[3].step == 400);
  CHECK(replay.changes[3].workers == 2);
  CHECK(departure(3).coordinator);
  CHECK(replay.first_from(55) == &replay.changes[1]);
  CHECK(replay.first_from(124) == &replay.changes[1]);
  CHECK(replay.first_from(401) == nullptr);
}

TEST_CASE("a replay between processes merges an undone epoch's events into the restart and defers a leaver that "
          "stayed for its shard") {
  const std::string undone = R"log({"event":"job","workers":4,"steps":100}
{"event":"lost","epoch":1,"step":31,"rank":2,"role":"worker"}
{"event":"epoch","epoch":2,"step":30,"workers":3,"after_loss":true}
{"event":"joined","epoch":2,"step":30,"rank":-1}
{"event":"lost","epoch":2,"step":30,"rank":-1,"role":"worker"}
{"event":"lost","epoch":2,"step":30,"rank":3,"role":"standby"}
{"event":"epoch","epoch":3,"step":20,"workers":2,"after_loss":true}
)log";
  const process_replay merged = process_replay_of(parse_membership_log(undone, "x"), "x", 4, 100);
  REQUIRE(merged.changes.size() == 1);
  CHECK(merged.changes[0].step == 20);
  CHECK(merged.changes[0].workers == 2);
  CHECK(merged.changes[0].joiners == 0);  // the joiner lost before its epoch is not started
  REQUIRE(merged.changes[0].departures.size() == 2);
  CHECK(merged.changes[0].departures[0].rank == 2);
  CHECK(merged.changes[0].departures[1].rank == 3);

  const std::string stayed = R"log({"event":"job","workers":4,"steps":100}
{"event":"left","epoch":1,"step":10,"rank":3,"role":"worker"}
{"event":"left","epoch":1,"step":10,"rank":2,"role":"worker"}
{"event":"epoch","epoch":2,"step":10,"workers":3,"after_loss":false}
{"event":"epoch","epoch":3,"step":12,"workers":2,"after_loss":false}
)log";
  const process_replay deferred = process_replay_of(parse_membership_log(stayed, "x"), "x", 4, 100);
  REQUIRE(deferred.changes.size() == 2);
  REQUIRE(deferred.changes[1].departures.size() == 1);
  CHECK(deferred.changes[1].departures[0].rank == 2);
  CHECK(deferred.changes[1].step == 12);

  const std::string uncounted = R"log({"event":"job","workers":4,"steps":100}
{"event":"epoch","epoch":2,"step":10,"workers":3,"after_loss":true}
)log";
  try {
    process_replay_of(parse_membership_log(uncounted, "churn.log"), "churn.log", 4, 100);
    FAIL("a log whose epochs the events do not explain was taken");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "churn.log:2: epoch 2 has 3 workers, but the epoch before had 4, and since then 0 joined and 0 went");
  }
  // The one-process checks come first: the same line for another world size.
  CHECK_THROWS_WITH_AS(process_replay_of(parse_membership_log(churned_log, "churn.log"), "churn.log", 3, 800),
                       "churn.log:1: the log is of a job of 4 workers, this one has 3", std::invalid_argument);
}

TEST_CASE("a job in one process records its scripted changes, their replay is the same job, bit for bit") {
  // Distributed Lion's momenta are each worker's own: its replay must make the same ranks depart.
  for (const char* algorithm : {"acco", "dlion-mavo"}) {
    INFO(algorithm);
    const std::string path = "membership_log_in_process.log";
    std::remove(path.c_str());
    job_config job = testing::test_job(algorithm, 4, 10).micro_batches_per_round(1);
    job.membership = {{2, 3, false, {1}}, {4, 5, false}, {7, 2, true}};
    job.membership_log = path;
    const job_result recorded = testing::run_quadratic(job);
    const membership_replay replay = replay_of(read_membership_log(path), path, job.workers, job.steps);
    CHECK(replay.workers == 4);
    REQUIRE(replay.changes.size() == job.membership.size());
    for (std::size_t i = 0; i < replay.changes.size(); ++i) {
      CHECK(replay.changes[i].step == job.membership[i].step);
      CHECK(replay.changes[i].workers == job.membership[i].workers);
      CHECK(replay.changes[i].crash == job.membership[i].crash);
    }
    CHECK(replay.changes[0].departing == std::vector<int>{1});
    CHECK(replay.changes[1].departing.empty());
    CHECK(replay.changes[2].departing == std::vector<int>{2, 3, 4});  // unnamed: the last ones
    job.membership = replay.changes;
    job.membership_log.clear();
    CHECK(testing::run_quadratic(job).parameters == recorded.parameters);
  }
}

TEST_CASE("in one process, Distributed Lion's survivors keep their own momenta in their order") {
  const std::string path = "membership_log_momenta.ck";
  job_config job = testing::test_job("dlion-mavo", 4, 4).micro_batches_per_round(1);
  job.checkpoint_path = path;
  const auto momenta_after = [&](std::vector<membership_change> changes) {
    job.membership = std::move(changes);
    testing::run_quadratic(job);
    return read_checkpoint(path).momenta;
  };
  // The momenta of the survivors of a change at step 3, where the state after step 3 (momenta
  // 0 1 2 3 of the fixed job) goes on for one step.
  job.steps = 3;
  const std::vector<std::vector<float>> before = momenta_after({});
  REQUIRE(before.size() == 4);
  REQUIRE(before[1] != before[2]);
  job.steps = 4;
  job.learning_rate = 0;  // momenta move, parameters stay: each survivor's next momentum follows its own
  const std::vector<std::vector<float>> without_1 = momenta_after({{3, 3, false, {1}}});
  const std::vector<std::vector<float>> without_3 = momenta_after({{3, 3, false}});
  REQUIRE(without_1.size() == 3);
  REQUIRE(without_3.size() == 3);
  CHECK(without_1[0] == without_3[0]);  // rank 0 is rank 0 either way
  CHECK(without_1[1] != without_3[1]);  // rank 1 of the next epoch: rank 2 before, or rank 1
  std::remove(path.c_str());
}

TEST_CASE("a replay in one process makes the members the log names depart, by their place in the epoch") {
  const membership_replay replay = replay_of(parse_membership_log(coordinator_lost_log, "churn.log"), "churn.log", 4, 800);
  REQUIRE(replay.changes.size() == 4);
  CHECK(replay.changes[0].departing == std::vector<int>{2});  // rank 2 of 0 1 2 3
  CHECK(replay.changes[1].departing == std::vector<int>{2});  // rank 3 of 0 1 3
  CHECK(replay.changes[2].departing.empty());                 // a joiner after 0 1
  CHECK(replay.changes[3].departing == std::vector<int>{0});  // the coordinator, rank 0 of 0 1 joiner
  // A log of epochs only says how many: the last ones depart.
  const membership_replay counted = replay_of(parse_membership_log(R"log({"event":"job","workers":4,"steps":100}
{"event":"epoch","epoch":2,"step":10,"workers":3,"after_loss":true}
)log", "x"), "x", 4, 100);
  REQUIRE(counted.changes.size() == 1);
  CHECK(counted.changes[0].departing.empty());
  // A member that departs twice is no member the second time.
  CHECK(error_of(churned_log + R"log({"event":"left","epoch":4,"step":401,"rank":2,"role":"worker"}
{"event":"epoch","epoch":5,"step":401,"workers":2,"after_loss":false}
)log") == "churn.log: rank 2 departs after step 401 but is no member then");
}
