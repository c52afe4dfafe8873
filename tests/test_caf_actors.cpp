// job_actors (include/accord/caf/worker_actors.hpp): a job's actors in the caller's actor system
// train exactly as run_job's, and going away early leaves nothing for the system to wait on.
#include <doctest/doctest.h>

#include <accord/caf/worker_actors.hpp>

#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <caf/all.hpp>

using namespace accord;
using accord::testing::test_job;
using accord::testing::quadratic;
using accord::testing::waves;

namespace {

job_config small_job() { return test_job("acco", 3, 4).micro_batches_per_round(1).evaluate(50, 6); }

}  // namespace

TEST_CASE("a job's actors spawned into the caller's actor system give run_job's parameters") {
  quadratic net(5);
  auto data = std::make_shared<waves>(5);
  const job_result reference = run_job(net, data, data, small_job());

  caf::actor_system_config config;
  configure_actor_system(config);
  caf::actor_system system{config};
  job_actors job(system, net, data, data, small_job());
  REQUIRE(job.workers().size() == 3);
  for (const auto& w : job.workers()) CHECK((w.compute && w.communicator && w.accumulator));
  CHECK(job.coordinator());
  caf::scoped_actor self{system};
  job.start();
  bool done = false;
  self->request(job.coordinator(), caf::infinite, wait_atom::value)
      .receive([&](bool) { done = true; }, [&](caf::error& e) { FAIL(system.render(e)); });
  REQUIRE(done);
  const job_result result = job.result();
  CHECK(result.parameters == reference.parameters);
  CHECK(result.steps.size() == reference.steps.size());
  CHECK(result.final_eval_loss == reference.final_eval_loss);
}

TEST_CASE("job_actors refuse a bad configuration, and never started ones do not keep the system waiting") {
  quadratic net(5);
  auto data = std::make_shared<waves>(5);
  caf::actor_system_config config;
  configure_actor_system(config);
  caf::actor_system system{config};
  job_config bad = small_job();
  bad.algorithm = "nope";
  CHECK_THROWS_WITH_AS(job_actors(system, net, data, data, bad), doctest::Contains("nope"), std::invalid_argument);
  bad = small_job();
  bad.membership = {{2, 2, false}};
  CHECK_THROWS_WITH_AS(job_actors(system, net, data, data, bad), doctest::Contains("membership"),
                       std::invalid_argument);
  { job_actors unused(system, net, data, data, small_job()); }
}
