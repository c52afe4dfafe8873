// The membership log (cluster/membership_log.hpp): its lines, and the replay they make.
#include <doctest/doctest.h>

#include "cluster/membership_log.hpp"
#include "quadratic_model.hpp"

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

TEST_CASE("an epoch restarting from an earlier step undoes the changes after it; one from step 0 sets the start") {
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

TEST_CASE("a job in one process records its scripted changes; their replay is the same job, bit for bit") {
  const std::string path = "membership_log_in_process.log";
  std::remove(path.c_str());
  job_config job;
  job.algorithm = "acco";
  job.workers = 4;
  job.steps = 10;
  job.micro_batch = 2;
  job.max_accumulation = 1;
  job.eval_examples = 3;
  job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, true}};
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
  job.membership = replay.changes;
  job.membership_log.clear();
  CHECK(testing::run_quadratic(job).parameters == recorded.parameters);
}
