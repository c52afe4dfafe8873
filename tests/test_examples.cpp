// The programs in examples/, built in this tree, run as a user would run them.
#include <doctest/doctest.h>

#include "run_command.hpp"

#include <regex>
#include <string>

using accord::testing::run;

namespace {

// The line "final parameters hash H" of a run (empty when missing).
std::string parameters_hash(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex("final parameters hash ([0-9a-f]{16})")) ? m[1].str() : "";
}

}  // namespace

TEST_CASE("own loop: the app's gradients train with every pipeline, in one process and in 2 over UCX alike") {
  for (const char* algorithm : {"ddp", "acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    const auto here = run(std::string(ACCORD_EXAMPLE_OWN_LOOP) + " " + algorithm);
    CAPTURE(here.text);
    REQUIRE(here.status == 0);
    CHECK(here.text.find("eval loss") != std::string::npos);
    const auto launched = run(std::string(ACCORD_LAUNCH_BINARY) + " --timeout 120 -n 2 -- " +
                              ACCORD_EXAMPLE_OWN_LOOP + " " + algorithm);
    CAPTURE(launched.text);
    REQUIRE(launched.status == 0);
    // Every rank prints the same parameters, and they are the in-process run's.
    const std::string hash = parameters_hash(here.text);
    REQUIRE(!hash.empty());
    CHECK(parameters_hash(launched.text) == hash);
    CHECK(launched.text.find("[rank 1] final parameters hash " + hash) != std::string::npos);
  }
}

TEST_CASE("own loop's benchmark: the app's loop and accord's train the same model to the same loss") {
  const auto bench = run(std::string(ACCORD_BENCH_OWN_LOOP_BINARY) +
                         " --algos ddp,acco --steps 4 --repetitions 1 --width 32 --layers 1 --context 16 --micro-batch 2");
  CAPTURE(bench.text);
  REQUIRE(bench.status == 0);
  for (const char* algorithm : {"ddp", "acco"}) {
    CAPTURE(algorithm);
    // algorithm, accord ms, own loop ms, ratio, final loss both ways, then the breakdown.
    std::smatch row;
    REQUIRE(std::regex_search(bench.text, row,
                              std::regex(std::string("\\n") + algorithm +
                                         " +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+) +([0-9.]+) +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+\\n")));
    CHECK(std::stod(row[1].str()) == doctest::Approx(std::stod(row[2].str())).epsilon(1e-3));
  }
}

TEST_CASE("custom rule: signSGD with error feedback, registered by name, trains on two pipelines") {
  const auto out = run(ACCORD_EXAMPLE_CUSTOM_RULE);
  CAPTURE(out.text);
  CHECK(out.status == 0);
  CHECK(out.text.find("signsgd-ef:") != std::string::npos);
  CHECK(out.text.find("acco-signsgd-ef:") != std::string::npos);
}

TEST_CASE("custom topology: periodic model averaging, registered by name, trains and ends with one model") {
  const auto out = run(ACCORD_EXAMPLE_CUSTOM_TOPOLOGY);
  CAPTURE(out.text);
  CHECK(out.status == 0);
  CHECK(out.text.find("model-averaging every 5 steps: train loss") != std::string::npos);  // its own setting
  CHECK(out.text.find("replicas identical: yes") != std::string::npos);
}

TEST_CASE("caf actors: a job's actors in the app's own actor system, awaited and asked through typed handles") {
  const auto out = run(ACCORD_EXAMPLE_CAF_ACTORS);
  CAPTURE(out.text);
  CHECK(out.status == 0);
  CHECK(out.text.find("2 workers (compute, communicator, accumulator)") != std::string::npos);
}
