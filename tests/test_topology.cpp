// Topologies behind include/accord/topology.hpp: the registry, the ring as today's rounds, an
// app's own topology, local SGD (DiLoCo) against DDP.
#include <doctest/doctest.h>

#include <accord/job.hpp>
#include <accord/topology.hpp>

#include "algorithms/collective_channel.hpp"
#include "recovery/checkpoint.hpp"
#include "algorithms/transport_peers.hpp"
#include "topologies/gossip/arithmetic.hpp"
#include "transport/inproc.hpp"
#include "transport/shard.hpp"
#include "topologies/gossip/rules.hpp"
#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <span>
#include <stdexcept>
#include <set>
#include <string>
#include <thread>
#include <type_traits>

using namespace accord;
using accord::testing::test_job;
using accord::testing::run_quadratic;

namespace {

constexpr std::size_t dim = 64;

// Plain synchronous SGD with momentum on a quadratic, a fixed number of micro-batches per round.
job_config sgd_job(int workers, std::uint64_t steps) {
  job_config job = test_job("ddp", workers, steps).micro_batches_per_round(2).sgd(0.05f, 0.9f).evaluate(0, 3);
  job.weight_decay = 0.01f;
  return job;
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

std::string refusal(const job_config& job) {
  try {
    run_quadratic(job, {}, dim);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

// An app's topology that calls the algorithm's own round: the ring, written outside the library.
class app_ring_worker final : public worker_topology {
public:
  void round(std::span<float> buffer, const round_view&, round_peers&, algorithm_rules& rules,
             topology_report&) override {
    rules.aggregate(buffer);
  }
  bool replicas_agree(std::uint64_t) const override { return true; }
};

// An app's topology that all-reduces the gradients itself and steps the optimizer on a full
// copy everywhere (unsharded DDP).
class app_allreduce_worker final : public worker_topology {
public:
  explicit app_allreduce_worker(std::span<const float> initial) : parameters_(initial.begin(), initial.end()) {}
  void round(std::span<float> buffer, const round_view& round, round_peers& peers, algorithm_rules& rules,
             topology_report&) override {
    peers.all_reduce(buffer);
    for (float& g : buffer) g /= static_cast<float>(round.global_micro_batches);
    rules.local_step(parameters_, buffer);
    std::copy(parameters_.begin(), parameters_.end(), buffer.begin());
  }
  bool replicas_agree(std::uint64_t) const override { return true; }

private:
  std::vector<float> parameters_;
};

template <class Worker>
class app_topology final : public topology {
public:
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float> initial) const override {
    if constexpr (std::is_constructible_v<Worker, std::span<const float>>)
      return std::make_unique<Worker>(initial);
    else
      return std::make_unique<Worker>();
  }
};

}  // namespace

TEST_CASE("topologies are registered by name, an unknown name is refused listing them") {
  const auto names = topology_names();
  for (const char* builtin : {"ring", "local-sgd", "hierarchical", "parameter-server", "gossip"})
    CHECK(std::find(names.begin(), names.end(), builtin) != names.end());
  CHECK(job_config{}.topology == "ring");
  job_config job = sgd_job(2, 2);
  job.topology = "star";
  const std::string why = refusal(job);
  CHECK(why.find("unknown topology 'star'") != std::string::npos);
  CHECK(why.find("gossip|hierarchical|local-sgd|parameter-server|ring") != std::string::npos);
  CHECK_THROWS_AS(register_topology("", [](const topology_job&) { return std::unique_ptr<topology>(); }),
                  std::invalid_argument);
}

TEST_CASE("an app's own topology plugs in through register_topology") {
  register_topology("app-ring", [](const topology_job&) { return std::make_unique<app_topology<app_ring_worker>>(); });
  register_topology("app-allreduce",
                    [](const topology_job&) { return std::make_unique<app_topology<app_allreduce_worker>>(); });
  const job_result ring = run_quadratic(sgd_job(3, 6), {}, dim);
  job_config job = sgd_job(3, 6);
  job.topology = "app-ring";
  CHECK(run_quadratic(job, {}, dim).parameters == ring.parameters);  // the same round, bit for bit
  job.topology = "app-allreduce";
  const job_result mine = run_quadratic(job, {}, dim);
  CHECK(worst_difference(mine.parameters, ring.parameters) < 1e-6);
  CHECK(mine.replicas_identical);
}

TEST_CASE("local SGD with one inner step and an outer SGD of rate 1 without momentum is DDP") {
  const job_result ddp = run_quadratic(sgd_job(3, 8), {}, dim);
  job_config job = sgd_job(3, 8);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 1);
  job.topology_settings.set("outer_learning_rate", 1.0f);
  job.topology_settings.set("outer_momentum", 0.0f);
  const job_result local = run_quadratic(job, {}, dim);
  CHECK(worst_difference(local.parameters, ddp.parameters) < 1e-5);
  for (std::size_t s = 0; s < ddp.steps.size(); ++s)
    CHECK(local.steps[s].train_loss == doctest::Approx(ddp.steps[s].train_loss).epsilon(1e-5));
  CHECK(local.replicas_identical);
}

TEST_CASE("local SGD: replicas drift between outer steps, agree after each, and the spread is reported") {
  const std::string metrics = "test_topology_local_sgd.jsonl";
  job_config job = sgd_job(4, 9);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 4);
  job.replica_check_interval = 1;  // checked only where replicas agree (steps 4, 8 and the last)
  job.metrics_path = metrics;
  const job_result result = run_quadratic(job, {}, dim);
  CHECK(result.replicas_identical);
  REQUIRE(result.steps.size() == 9);
  for (const auto& m : result.steps) {
    CAPTURE(m.step);
    const bool outer = m.step % 4 == 0 || m.step == 9;
    CHECK((m.consensus_distance > 0) == outer);  // the workers' data differ, so their copies do
    CHECK(m.bytes_sent > 0);  // the round's counts travel every step
  }
  std::ifstream in(metrics);
  std::string line;
  int with_distance = 0;
  while (std::getline(in, line)) with_distance += line.find("\"consensus_distance\"") != std::string::npos;
  CHECK(with_distance == 3);
  std::remove(metrics.c_str());
}

TEST_CASE("Streaming DiLoCo: one fragment without overlap is plain local SGD bit for bit, fragments stagger") {
  job_config job = sgd_job(4, 9);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 4);
  job.replica_check_interval = 1;
  const job_result plain = run_quadratic(job, {}, dim);
  job.topology_settings.set("fragments", 1);
  job.topology_settings.set("overlap_steps", "0");
  job.topology_settings.set("overlap_mix", 0.0f);
  const job_result streamed = run_quadratic(job, {}, dim);
  CHECK(streamed.parameters == plain.parameters);
  for (std::size_t s = 0; s < plain.steps.size(); ++s)
    CHECK(streamed.steps[s].consensus_distance == plain.steps[s].consensus_distance);
  // Two fragments: the second's outer steps come H/2 = 2 steps after the first's (steps 2, 6),
  // the first's at 4, 8, both at the last; merged one step late, half the worker's own. Their
  // all-reduces land (and the spread is measured) in the round that merges them.
  job.topology_settings.set("fragments", 2);
  job.topology_settings.set("overlap_steps", "1");
  job.topology_settings.set("overlap_mix", 0.5f);
  const job_result fragmented = run_quadratic(job, {}, dim);
  CHECK(fragmented.replicas_identical);  // the last step merges every fragment fully
  REQUIRE(fragmented.steps.size() == 9);
  for (const auto& m : fragmented.steps) {
    CAPTURE(m.step);
    CHECK((m.consensus_distance > 0) == (m.step % 2 == 1 && m.step > 1));
  }
  CHECK(worst_difference(fragmented.parameters, plain.parameters) > 0);
  for (float p : fragmented.parameters) CHECK(std::isfinite(p));
  job.topology_settings.set("fragments", 5);
  CHECK(refusal(job).find("--topology local-sgd: --fragments must be in 1..--local-steps") == 0);
  job.topology_settings.set("fragments", 2);
  job.topology_settings.set("overlap_steps", "4");
  CHECK(refusal(job).find("--overlap-steps must be below --local-steps") != std::string::npos);
}

// Plain SGD on this worker's own copy; the topology's rounds never aggregate.
class sgd_rules final : public algorithm_rules {
public:
  void aggregate(std::span<float>) override { throw std::logic_error("local SGD does not aggregate"); }
  void local_step(std::span<float> parameters, std::span<const float> mean_gradient) override {
    for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i] -= 0.1f * mean_gradient[i];
  }
};

// A local-sgd worker's target in a round (two micro-batches' gradient of ‖θ − target‖² pull it
// there): a rank's own, moving with the step.
float local_sgd_target(int rank, std::size_t i, std::uint64_t step) {
  return static_cast<float>(rank) * std::sin(static_cast<float>(i + step));
}

// Each rank's parameters after each of `steps` rounds of a local-sgd worker ([step][rank]),
// its outer all-reduces in flight on a channel (else run at once); `agree[step]`: whether the
// worker said the replicas agree then.
struct local_sgd_run {
  std::vector<std::vector<std::vector<float>>> copies;
  std::vector<bool> agree;
  const std::vector<float>& last(int rank) const { return copies.back()[rank]; }
};

using target_of = std::function<float(int rank, std::size_t i, std::uint64_t step)>;

// Over `endpoints` (one per worker), each rank pulled to `target`.
local_sgd_run run_local_sgd_over(const topology& local_sgd, std::uint64_t steps, bool in_flight,
                                 std::vector<std::unique_ptr<transport>> endpoints,
                                 const target_of& target = local_sgd_target) {
  const int workers = static_cast<int>(endpoints.size());
  local_sgd_run run{std::vector<std::vector<std::vector<float>>>(steps, std::vector<std::vector<float>>(workers)),
                    std::vector<bool>(steps)};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < workers; ++rank)
    ranks.emplace_back([&, rank] {
      std::vector<float> parameters(dim, 1.f), buffer(dim);
      const std::unique_ptr<worker_topology> worker = local_sgd.make_worker(rank, parameters);
      std::unique_ptr<collective_channel> channel;  // closes before the worker, whose buffers it fills
      sgd_rules rules;
      for (std::uint64_t step = 0; step < steps; ++step) {
        for (std::size_t i = 0; i < dim; ++i) buffer[i] = 4 * (parameters[i] - target(rank, i, step));
        transport_peers peers(*endpoints[rank], in_flight ? &channel : nullptr);
        topology_report report;
        worker->round(buffer, round_view{step, 0.1f, 2, 2.0 * workers, false}, peers, rules, report);
        parameters.assign(buffer.begin(), buffer.end());
        run.copies[step][rank] = parameters;
        if (rank == 0) run.agree[step] = worker->replicas_agree(step);
      }
    });
  for (auto& rank : ranks) rank.join();
  return run;
}

// A local-sgd job of DDP inner steps over `workers` workers and the quadratic's `dim` parameters.
topology_job local_sgd_job(int workers, std::uint64_t steps) {
  topology_job job;
  job.algorithm = "ddp";
  job.workers = workers;
  job.steps = steps;
  job.parameter_count = dim;
  return job;
}

// Over 3 workers linked by `link`.
local_sgd_run run_local_sgd(const topology& local_sgd, std::uint64_t steps, bool in_flight, const char* link) {
  return run_local_sgd_over(local_sgd, steps, in_flight, inproc_fabric(3, link_model::parse(link)).endpoints());
}

TEST_CASE("Streaming DiLoCo: outer all-reduces in flight over a slow link give the bits of running them at once") {
  topology_job job = local_sgd_job(3, 23);
  job.options.set("local_steps", 6).set("fragments", 3).set("overlap_steps", "5").set("overlap_mix", 0.25);
  for (const std::string update : {"delayed", "eager"}) {
    CAPTURE(update);
    job.options.set("outer_update", update).set("outer_precision", "fp4");
    const std::unique_ptr<topology> local_sgd = make_topology("local-sgd", job);
    const local_sgd_run at_once = run_local_sgd(*local_sgd, job.steps, false, "unlimited");
    // 1 ms per message: every outer round is still out for several of the (instant) inner steps.
    const local_sgd_run in_flight = run_local_sgd(*local_sgd, job.steps, true, "1gbit,1ms");
    for (int rank = 0; rank < 3; ++rank) {
      CAPTURE(rank);
      CHECK(in_flight.last(rank) == at_once.last(rank));
      CHECK(in_flight.last(rank) == in_flight.last(0));  // the last step merges every fragment fully
    }
    CHECK(worst_difference(at_once.last(0), std::vector<float>(dim, 1.f)) > 0);
  }
}

// Streaming DiLoCo written out from docs/topologies.md, one coordinate at a time in double, for
// 3 workers under run_local_sgd's rounds. Eager's correction is the closed form −η(1 + μ)(Δ̄ − Δ_i)
// (the code recomputes the proxy instead).
struct streaming_reference {
  std::uint64_t local_steps, fragments, overlap, steps;
  double mix, rate, momentum;
  bool eager;

  std::vector<std::vector<std::vector<double>>> copies() const {
    constexpr int workers = 3;
    std::vector<std::vector<std::vector<double>>> out(steps, std::vector<std::vector<double>>(workers, std::vector<double>(dim)));
    for (std::size_t i = 0; i < dim; ++i) {
      std::uint64_t f = 0;
      while (shard_of(dim, static_cast<int>(fragments), static_cast<int>(f)).end <= i) ++f;
      const std::uint64_t offset = f * local_steps / fragments;
      double global = 1, velocity = 0;
      std::vector<double> copy(workers, 1.0);
      struct outer_round {
        std::uint64_t merge_at;
        std::vector<double> delta;  // each worker's θ_global − θ_i
        bool landed = false;
      };
      std::deque<outer_round> pending;
      const auto land = [&](outer_round& round) {
        double mean = 0;
        for (const double d : round.delta) mean += d / workers;
        velocity = momentum * velocity + mean;
        global -= rate * (mean + momentum * velocity);
        if (eager)
          for (int w = 0; w < workers; ++w) copy[w] -= rate * (1 + momentum) * (mean - round.delta[w]);
        round.landed = true;
      };
      for (std::uint64_t step = 0; step < steps; ++step) {
        const bool last = step + 1 == steps;
        for (int w = 0; w < workers; ++w) copy[w] -= 0.1 * 2 * (copy[w] - local_sgd_target(w, i, step));
        if (last || (step + 1 + offset) % local_steps == 0) {
          for (outer_round& earlier : pending)
            if (!earlier.landed) land(earlier);
          outer_round round{last ? step : step + overlap, std::vector<double>(workers)};
          for (int w = 0; w < workers; ++w) {
            round.delta[w] = global - copy[w];
            // The proxy: the outer step with the worker's own Δ_i, the velocity left as it is.
            if (eager) copy[w] = global - rate * (round.delta[w] + momentum * (momentum * velocity + round.delta[w]));
          }
          pending.push_back(round);
        }
        while (!pending.empty() && (last || pending.front().merge_at <= step)) {
          if (!pending.front().landed) land(pending.front());
          for (double& c : copy) c = mix == 0 || last ? global : mix * c + (1 - mix) * global;
          pending.pop_front();
        }
        for (int w = 0; w < workers; ++w) out[step][w][i] = copy[w];
      }
    }
    return out;
  }
};

TEST_CASE("Streaming DiLoCo, delayed and eager outer updates: the arithmetic of the reference written out by hand") {
  topology_job job = local_sgd_job(3, 15);
  job.options.set("local_steps", 4).set("fragments", 2).set("overlap_steps", "2").set("overlap_mix", 0.5);
  job.options.set("outer_learning_rate", 0.7).set("outer_momentum", 0.9);
  std::vector<std::vector<float>> last_copies;
  for (const bool eager : {false, true}) {
    CAPTURE(eager);
    job.options.set("outer_update", eager ? "eager" : "delayed");
    const local_sgd_run run = run_local_sgd(*make_topology("local-sgd", job), job.steps, true, "unlimited");
    const auto expected = streaming_reference{4, 2, 2, job.steps, 0.5, 0.7, 0.9, eager}.copies();
    double worst = 0;
    for (std::uint64_t step = 0; step < job.steps; ++step)
      for (int rank = 0; rank < 3; ++rank)
        for (std::size_t i = 0; i < dim; ++i)
          worst = std::max(worst, std::fabs(run.copies[step][rank][i] - expected[step][rank][i]));
    MESSAGE(std::string(eager ? "eager" : "delayed") << ": largest difference from the reference " << worst);
    CHECK(worst < 1e-5);
    last_copies.push_back(run.last(0));
  }
  CHECK(worst_difference(last_copies[0], last_copies[1]) > 1e-3);  // eager is not delayed
}

TEST_CASE("Streaming DiLoCo: eager and compressed outer rounds leave every replica the same bits after each merge") {
  // One fragment, merged wholly τ = 2 steps after its outer round starts (steps 5 and 9; 13 is
  // past the last step, 12, where everything merges).
  topology_job job = local_sgd_job(3, 13);
  job.options.set("local_steps", 4).set("overlap_steps", "2").set("outer_learning_rate", 0.7).set("outer_momentum", 0.9);
  job.options.set("outer_update", "delayed");
  const local_sgd_run delayed = run_local_sgd(*make_topology("local-sgd", job), job.steps, true, "unlimited");
  for (const std::string precision : {"fp32", "fp4", "bf16"}) {
    CAPTURE(precision);
    job.options.set("outer_update", "eager").set("outer_precision", precision);
    const local_sgd_run eager = run_local_sgd(*make_topology("local-sgd", job), job.steps, true, "unlimited");
    for (std::uint64_t step = 0; step < job.steps; ++step) {
      CAPTURE(step);
      const bool merged = step == 5 || step == 9 || step == 12;
      CHECK(eager.agree[step] == merged);
      CHECK(delayed.agree[step] == merged);
      const bool same = eager.copies[step][1] == eager.copies[step][0] && eager.copies[step][2] == eager.copies[step][0];
      CHECK(same == merged);
      // With the whole copy taking θ_global at each merge and an inner step without state
      // (sgd_rules), eager differs from delayed only while an outer round is out (steps 3-4, 7-8, 11-12: from the proxy; the last step's outer round
      // starts before the one out lands), so fp32 rounds give the same bits after every merge and
      // until the next round starts.
      if (precision == "fp32") {
        const bool out = (step >= 3 && step <= 4) || (step >= 7 && step <= 8) || step >= 11;
        CHECK((eager.copies[step] == delayed.copies[step]) == !out);
      }
    }
  }
}

TEST_CASE("local SGD refuses what it cannot run with one line") {
  job_config job = sgd_job(2, 2);
  job.topology = "local-sgd";
  job.algorithm = "acco";
  CHECK(refusal(job).find("--topology local-sgd: its inner steps use the optimizer of a synchronous") == 0);
  job.algorithm = "dlion-mavo";
  job.optimizer = "";
  CHECK(refusal(job).find("not --algo dlion-mavo") != std::string::npos);
  job = sgd_job(2, 2);
  job.topology = "local-sgd";
  job.topology_settings.set("inner_group", 2);
  job.checkpoint_path = "test_topology_never.ckpt";
  CHECK(refusal(job) == "--topology local-sgd: --inner-group 2 keeps no state yet: checkpoints and workers coming and "
                        "going need --inner-group 1");
  job.checkpoint_path.clear();
  job.membership = {{1, 1, false}};
  CHECK(refusal(job).find("--topology local-sgd: --inner-group 2 keeps no state yet") == 0);
  job.membership.clear();
  job.topology_settings.set("inner_group", 1);
  job.topology_settings.set("outer_momentum", 1.0f);
  CHECK(refusal(job).find("--outer-momentum") != std::string::npos);
  job.topology_settings.set("outer_momentum", 0.9f);
  job.topology_settings.set("outer_update", "soon");
  CHECK(refusal(job) == "--topology local-sgd: --outer-update must be delayed or eager, not 'soon'");
  job.topology_settings.set("outer_update", "eager");
  job.topology_settings.set("outer_precision", "fp5");
  CHECK(refusal(job).find("--topology local-sgd: --outer-precision: 'fp5' (expected fp32|bf16|fp16|") == 0);
  job.topology_settings.set("outer_precision", "fp32");
  for (const int group : {3, 0, -1}) {
    CAPTURE(group);
    job.topology_settings.set("inner_group", group);
    const std::string refused = refusal(job);
    CHECK(refused.find('\n') == std::string::npos);
    CHECK(refused == "--topology local-sgd: --inner-group must be a whole number of workers dividing the 2 workers, "
                     "not " + std::to_string(group));
  }
}

namespace {

// A local-sgd job of 3 workers and AdamW inner steps (two optimizer slots of each worker's own),
// H = 4, outer Nesterov momentum, fp4 outer rounds with error feedback, a constant rate (a job
// cut short keeps the schedule of the whole).
job_config kept_local_sgd_job(std::uint64_t steps) {
  job_config job = test_job("ddp", 3, steps).micro_batches_per_round(2).adamw(0.02f).constant_rate().evaluate(0, 3);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 4).set("outer_precision", "fp4");
  job.replica_check_interval = 1;  // every outer step's copies compared
  return job;
}

}  // namespace

TEST_CASE("local-sgd: a checkpoint at an outer step holds θ_global, the outer momentum, each worker's fp4 residuals "
          "and inner optimizer, and resumes bit for bit") {
  job_config job = kept_local_sgd_job(12);
  job.checkpoint_interval = 4;  // the run to compare with snapshots at the same steps
  job.checkpoint_path = "test_topology_local_sgd_all.ckpt";
  const job_result uninterrupted = run_quadratic(job, {}, dim);
  CHECK(uninterrupted.replicas_identical);

  const std::string path = "test_topology_local_sgd.ckpt";
  job.checkpoint_path = path;
  job.steps = 8;
  const job_result first = run_quadratic(job, {}, dim);
  const checkpoint saved = read_checkpoint(path);
  CHECK(saved.steps == 8);
  CHECK(saved.parameters == first.parameters);  // an outer step: every copy is θ_global
  CHECK(saved.topology_shared.size() == dim);    // the outer momentum
  REQUIRE(saved.topology_workers.size() == 3);
  for (const checkpoint_topology_worker& worker : saved.topology_workers) {
    CHECK(worker.local_step == 8);
    CHECK(worker.local_slots == 2);
    CHECK(worker.own.size() == dim);  // its residuals
  }
  CHECK(saved.topology_workers[0].local_values != saved.topology_workers[1].local_values);
  CHECK(std::any_of(saved.topology_workers[0].own.begin(), saved.topology_workers[0].own.end(),
                    [](float r) { return r != 0.f; }));

  job.checkpoint_path.clear();
  job.resume_path = path;
  job.steps = 12;
  const job_result resumed = run_quadratic(job, {}, dim);
  CHECK(resumed.parameters == uninterrupted.parameters);
  CHECK(resumed.replicas_identical);

  // A kept state that does not fit the job, or resumed under another topology (the outer state
  // would be lost): refused with one line.
  job.topology_settings.set("outer_momentum", 0.0);
  CHECK_THROWS_WITH(run_quadratic(job, {}, dim),
                    "--topology local-sgd: the kept state's outer momentum (--outer-momentum 0 keeps none) holds 64 "
                    "values, this job's 0 (of 64 parameters)");
  job.topology_settings.set("outer_momentum", 0.9).set("outer_precision", "fp32");
  CHECK_THROWS_WITH(run_quadratic(job, {}, dim), doctest::Contains("the kept state's residuals (--outer-precision fp32 "
                                                                   "keeps none) holds 64 values, this job's 0"));
  job.topology = "ring";
  CHECK_THROWS_WITH(run_quadratic(job, {}, dim),
                    doctest::Contains("holds a topology's own state (local-sgd's), which this job's --topology does not keep"));
}

TEST_CASE("Streaming DiLoCo: a checkpoint between outer steps lands the rounds in flight, and every copy restarts "
          "from θ_global") {
  job_config job = kept_local_sgd_job(12);
  job.topology_settings.set("fragments", 2).set("overlap_steps", "1").set("overlap_mix", 0.5);
  job.checkpoint_interval = 1;
  job.checkpoint_path = "test_topology_streaming.ckpt";
  // Step 6 (0-based 5): fragment 1's outer round issued then is still in flight, and the copies differ.
  const std::string at_six = "test_topology_streaming_6.ckpt";
  job.on_checkpoint_written = [&](const std::string& written, std::uint64_t steps) {
    if (steps == 6) std::filesystem::copy_file(written, at_six, std::filesystem::copy_options::overwrite_existing);
  };
  const job_result uninterrupted = run_quadratic(job, {}, dim);
  const checkpoint saved = read_checkpoint(at_six);
  REQUIRE(saved.topology_workers.size() == 3);

  job.on_checkpoint_written = nullptr;
  job.checkpoint_path.clear();
  job.resume_path = at_six;
  const job_result resumed = run_quadratic(job, {}, dim);
  CHECK(resumed.replicas_identical);  // the last step merges every fragment fully
  // The restart dropped each copy's inner steps since its fragments' outer rounds: not the same
  // bits, the same training.
  CHECK(resumed.parameters != uninterrupted.parameters);
  CHECK(resumed.final_eval_loss == doctest::Approx(uninterrupted.final_eval_loss).epsilon(0.05));
}

TEST_CASE("an elastic local-sgd job in one process: workers leave, join and crash, every copy equal after each outer "
          "step, the loss as undisturbed") {
  job_config job = kept_local_sgd_job(24);
  const job_result undisturbed = run_quadratic(job, {}, dim);
  // Rank 0 leaves at an outer step (8), a joiner comes mid-window (10: the copies restart from
  // θ_global), and a worker crashes during step 18.
  job.membership = {{8, 2, false, {0}}, {10, 3, false}, {17, 2, true}};
  const job_result churned = run_quadratic(job, {}, dim);
  CHECK(churned.replicas_identical);
  REQUIRE(churned.steps.size() == 24);
  MESSAGE("final eval loss " << churned.final_eval_loss << " with churn, " << undisturbed.final_eval_loss
                             << " undisturbed");
  CHECK(churned.final_eval_loss == doctest::Approx(undisturbed.final_eval_loss).epsilon(0.02));
}

TEST_CASE("round_peers::among: subgroups name their ranks within them, and bad members are refused with one line") {
  auto endpoints = inproc_fabric(4).endpoints();
  transport_peers peers(*endpoints[1]);
  for (const std::vector<int>& members : {std::vector<int>{}, {0, 2}, {2, 1}, {1, 4}, {-1, 1}, {1, 1}}) {
    CAPTURE(members.size());
    CHECK_THROWS_WITH_AS(peers.among(members),
                         "round_peers::among: the members are not ascending ranks of the 4 holding this worker's, 1",
                         std::invalid_argument);
  }
  const std::unique_ptr<round_peers> column = peers.among({1, 3});
  CHECK(column->rank() == 0);
  CHECK(column->size() == 2);
  CHECK(column->among({0})->size() == 1);
  CHECK_THROWS_AS(column->among({1}), std::invalid_argument);  // the column's rank 1 is rank 3
}

// A rank's endpoint that counts the bytes it sends to each peer, its channel's included; the
// in-process transport underneath does the sending.
class counting_transport final : public transport {
public:
  using counts = std::vector<std::atomic<std::uint64_t>>;
  counting_transport(std::shared_ptr<transport> inner, std::shared_ptr<counts> sent)
      : inner_(std::move(inner)), sent_(std::move(sent)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void send(int peer, std::uint64_t tag, std::span<const std::byte> data) override {
    count(peer, data);
    inner_->send(peer, tag, data);
  }
  void recv(int peer, std::uint64_t tag, std::span<std::byte> data) override { inner_->recv(peer, tag, data); }
  void send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                 std::uint64_t tag) override {
    count(to, out);
    inner_->send_recv(to, out, from, in, tag);
  }
  request post_send(int peer, std::uint64_t tag, std::span<const std::byte> data) override {
    count(peer, data);
    return inner_->post_send(peer, tag, data);
  }
  request post_recv(int peer, std::uint64_t tag, std::span<std::byte> data) override {
    return inner_->post_recv(peer, tag, data);
  }
  void wait(request handle) override { inner_->wait(handle); }
  transfer_stats stats() const override { return inner_->stats(); }
  void interrupt(const std::string& why) override {
    transport::interrupt(why);
    inner_->interrupt(why);
  }

protected:
  std::shared_ptr<transport> make_channel() override {
    std::shared_ptr<transport> channel = inner_->open_channel();
    return channel ? std::make_shared<counting_transport>(std::move(channel), sent_) : nullptr;
  }

private:
  void count(int peer, std::span<const std::byte> data) { (*sent_)[static_cast<std::size_t>(peer)] += data.size(); }
  std::shared_ptr<transport> inner_;
  std::shared_ptr<counts> sent_;
};

// In-process endpoints over `link`, each counting what it sends to each peer (sent[rank][peer]).
struct counted_world {
  std::vector<std::unique_ptr<transport>> endpoints;
  std::vector<std::shared_ptr<counting_transport::counts>> sent;
};

counted_world counted_endpoints(int workers, const char* link) {
  counted_world world;
  inproc_fabric fabric(workers, link_model::parse(link));
  for (int rank = 0; rank < workers; ++rank) {
    world.sent.push_back(std::make_shared<counting_transport::counts>(static_cast<std::size_t>(workers)));
    world.endpoints.push_back(std::make_unique<counting_transport>(fabric.endpoint(rank), world.sent.back()));
  }
  return world;
}

TEST_CASE("hierarchical DiLoCo, 2 groups of 2: a group's replicas are the same bits after every inner step, all "
          "of them after each merge, and only the outer rounds cross between groups") {
  // One fragment merged wholly τ = 2 steps after its outer round starts (steps 5 and 9; the last
  // step, 12, merges everything). Outer rounds start after steps 3, 7, 11 and 12.
  topology_job job = local_sgd_job(4, 13);
  job.options.set("local_steps", 4).set("overlap_steps", "2").set("outer_learning_rate", 0.7).set("outer_momentum", 0.9);
  job.options.set("inner_group", 2);
  for (const auto& [update, precision] : {std::pair{"delayed", "fp32"}, {"eager", "fp32"}, {"eager", "fp4"}}) {
    CAPTURE(update);
    CAPTURE(precision);
    job.options.set("outer_update", update).set("outer_precision", precision);
    // 1 ms per message: the outer rounds are out over several (instant) inner steps.
    counted_world world = counted_endpoints(4, "1gbit,1ms");
    const local_sgd_run run = run_local_sgd_over(*make_topology("local-sgd", job), job.steps, true,
                                                 std::move(world.endpoints));
    for (std::uint64_t step = 0; step < job.steps; ++step) {
      CAPTURE(step);
      CHECK(run.copies[step][1] == run.copies[step][0]);
      CHECK(run.copies[step][3] == run.copies[step][2]);
      const bool merged = step == 5 || step == 9 || step == 12;
      CHECK(run.agree[step] == merged);
      CHECK((run.copies[step][2] == run.copies[step][0]) == merged);  // the groups' targets differ
    }
    // Rank r's sends: to its group's other member every inner step (the gradient sum and its
    // micro-batch count) and at each landing (the shares); across only to its column (r ± 2),
    // its share of each of the 4 outer rounds and the squared norm beside it.
    for (int rank = 0; rank < 4; ++rank) {
      CAPTURE(rank);
      const auto& sent = *world.sent[static_cast<std::size_t>(rank)];
      const int partner = rank ^ 1, column = rank ^ 2, other = rank ^ 3;
      CHECK(sent[partner] >= job.steps * (dim * sizeof(float) + sizeof(double)));
      CHECK(sent[other] == 0);
      if (std::string(precision) == "fp32") {
        // Two ranks each send the other's half of a ring all-reduce and their own back: its share, once.
        CHECK(sent[column] == 4 * (dim / 2 * sizeof(float) + sizeof(double)));
      } else {
        CHECK(sent[column] > 0);  // (fp4's block codes cost more than fp32 on 32 values: their bytes are another test's)
      }
    }
  }
}

TEST_CASE("hierarchical DiLoCo: 2 groups of 2 are flat DiLoCo over 2 workers pulled to each group's mean target") {
  topology_job job = local_sgd_job(4, 15);
  job.options.set("local_steps", 4).set("fragments", 2).set("overlap_steps", "2").set("overlap_mix", 0.5);
  job.options.set("outer_learning_rate", 0.7).set("outer_momentum", 0.9).set("outer_update", "eager");
  job.options.set("inner_group", 2);
  const local_sgd_run grouped =
      run_local_sgd_over(*make_topology("local-sgd", job), job.steps, true, inproc_fabric(4, {}).endpoints());
  job.workers = 2;
  job.options.set("inner_group", 1);
  // A group's mean gradient, (4(θ − t_a) + 4(θ − t_b)) / 4 micro-batches, is one worker's at (t_a + t_b) / 2.
  const target_of group_mean = [](int group, std::size_t i, std::uint64_t step) {
    return (local_sgd_target(2 * group, i, step) + local_sgd_target(2 * group + 1, i, step)) / 2;
  };
  const local_sgd_run flat = run_local_sgd_over(*make_topology("local-sgd", job), job.steps, true,
                                                inproc_fabric(2, {}).endpoints(), group_mean);
  double worst = 0;
  for (std::uint64_t step = 0; step < job.steps; ++step)
    for (int rank = 0; rank < 4; ++rank)
      worst = std::max(worst, worst_difference(grouped.copies[step][rank], flat.copies[step][rank / 2]));
  MESSAGE("largest difference from flat DiLoCo over the groups' mean targets: " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("hierarchical DiLoCo in a job: --inner-group 1 is today's local SGD bit for bit, and 2 groups of 2 over a "
          "slow link between them agree after each merge") {
  job_config job = sgd_job(4, 13);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 4);
  job.topology_settings.set("fragments", 2);
  job.topology_settings.set("overlap_steps", "1");
  job.topology_settings.set("outer_update", "eager");
  job.topology_settings.set("outer_precision", "fp4");
  job.replica_check_interval = 1;
  const job_result today = run_quadratic(job, {}, dim);
  job.topology_settings.set("inner_group", 1);
  const job_result alone = run_quadratic(job, {}, dim);
  CHECK(alone.parameters == today.parameters);
  REQUIRE(alone.steps.size() == today.steps.size());
  for (std::size_t s = 0; s < today.steps.size(); ++s) {
    CHECK(alone.steps[s].train_loss == today.steps[s].train_loss);
    CHECK(alone.steps[s].consensus_distance == today.steps[s].consensus_distance);
  }
  job.topology_settings.set("inner_group", 2);
  job.link = "10gbit,5us";
  job.topology_settings.set("inter_link", "100mbit,1ms");
  const job_result grouped = run_quadratic(job, {}, dim);
  CHECK(grouped.replicas_identical);
  CHECK(worst_difference(grouped.parameters, today.parameters) > 0);
  for (float p : grouped.parameters) CHECK(std::isfinite(p));
}

TEST_CASE("Streaming DiLoCo with eager fp4 outer rounds: a job's replicas agree wherever checked, for a seventh of "
          "fp32's bytes") {
  job_config job = sgd_job(4, 13);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 4);
  job.topology_settings.set("overlap_steps", "2");
  job.replica_check_interval = 1;  // checked after each merge (steps 6, 10) and the last
  const job_result fp32 = run_quadratic(job, {}, dim * 64);
  job.topology_settings.set("outer_update", "eager");
  job.topology_settings.set("outer_precision", "fp4");
  const job_result fp4 = run_quadratic(job, {}, dim * 64);
  CHECK(fp4.replicas_identical);
  // fp4's 4.125 bits per value make the outer rounds 7.8x cheaper; the round's counts travel
  // every step beside them.
  MESSAGE("bits/param/step: fp32 outer rounds " << fp32.bits_per_parameter_per_step << ", eager fp4 "
                                                << fp4.bits_per_parameter_per_step);
  CHECK(fp4.bytes_sent * 7 < fp32.bytes_sent);
}

TEST_CASE("hierarchical is the flat ring within float tolerance, and its votes are the flat votes exactly") {
  job_config flat = sgd_job(5, 6);  // groups {0, 1}, {2, 3}, {4}
  flat.link = "2gbit,20us";
  job_config grouped = flat;
  grouped.topology = "hierarchical";
  grouped.topology_settings.set("group_size", 2);
  grouped.topology_settings.set("inter_link", "1gbit,100us");
  const job_result ring = run_quadratic(flat, {}, dim);
  const job_result tree = run_quadratic(grouped, {}, dim);
  CHECK(worst_difference(tree.parameters, ring.parameters) < 1e-5);
  CHECK(tree.replicas_identical);
  CHECK(tree.bytes_sent != ring.bytes_sent);  // other messages went: the collectives were grouped
  for (const char* vote : {"dlion-mavo", "dlion-avg"}) {
    CAPTURE(vote);
    flat.algorithm = grouped.algorithm = vote;
    flat.optimizer = grouped.optimizer = "";
    flat.learning_rate = grouped.learning_rate = 0;
    flat.beta1 = grouped.beta1 = std::nullopt;
    CHECK(run_quadratic(grouped, {}, dim).parameters == run_quadratic(flat, {}, dim).parameters);
  }
  grouped.algorithm = "acco";  // overlapped pipelines' rounds go through the same collectives
  CHECK(run_quadratic(grouped, {}, dim).replicas_identical);
}

TEST_CASE("hierarchical without a group size is refused with one line") {
  job_config job = sgd_job(4, 2);
  job.topology = "hierarchical";
  CHECK(refusal(job).find("--topology hierarchical: needs a group size") == 0);
}

TEST_CASE("a parameter server with staleness 0 is DDP on the same data order") {
  const job_result ddp = run_quadratic(sgd_job(3, 6), {}, dim);
  job_config job = sgd_job(3, 6);
  job.topology = "parameter-server";
  job.eval_interval = 2;
  const job_result served = run_quadratic(job, {}, dim);
  CHECK(worst_difference(served.parameters, ddp.parameters) < 1e-5);
  REQUIRE(served.steps.size() == ddp.steps.size());
  for (std::size_t s = 0; s < ddp.steps.size(); ++s) {
    CAPTURE(s);
    CHECK(served.steps[s].train_loss == doctest::Approx(ddp.steps[s].train_loss).epsilon(1e-5));
    CHECK(served.steps[s].staleness == std::vector<std::uint64_t>{3});  // every gradient fresh
  }
  CHECK(std::isfinite(served.final_eval_loss));
}

TEST_CASE("an asynchronous parameter server records every applied gradient's staleness") {
  job_config job = sgd_job(3, 12);
  job.topology = "parameter-server";
  job.topology_settings.set("max_staleness", 2);
  job.speed_factors = {1.0, 1.0, 3.0};
  job.link = "1gbit,100us";
  const job_result served = run_quadratic(job, {}, dim);
  REQUIRE(served.steps.size() == 12);
  std::uint64_t applied = 0;
  for (const auto& m : served.steps)
    for (std::uint64_t count : m.staleness) applied += count;
  CHECK(applied == 12 * 3);  // a step is as many gradients as workers
  CHECK(served.steps.back().train_loss < served.steps.front().train_loss);
  for (float p : served.parameters) CHECK(std::isfinite(p));
  // Every worker pushes to and pulls from every shard's server (hosted beside its worker):
  // the edges carry all of the bytes, each a whole number of shard slices.
  std::uint64_t edge_total = 0;
  std::set<std::pair<int, int>> edges;
  for (const auto& m : served.steps)
    for (const edge_traffic& e : m.edge_bytes) {
      edge_total += e.bytes;
      edges.insert({e.from, e.to});
    }
  CHECK(edge_total == served.bytes_sent);
  CHECK(edges.size() == 3 * 3);
}

TEST_CASE("an asynchronous parameter server keeps going when workers die, leave and join") {
  job_config job = sgd_job(3, 12);
  job.topology = "parameter-server";
  job.topology_settings.set("max_staleness", 2);
  job.link = "1gbit,100us";
  // After step 3 one worker dies mid-gradient (another redoes it), after 6 one more leaves,
  // after 9 three join: every gradient of the 12 steps is still applied once.
  job.membership = {{3, 2, true}, {6, 1, false}, {9, 4, false}};
  const job_result served = run_quadratic(job, {}, dim);
  REQUIRE(served.steps.size() == 12);
  std::uint64_t applied = 0;
  for (const auto& m : served.steps)
    for (std::uint64_t count : m.staleness) applied += count;
  CHECK(applied == 12 * 3);  // a step stays as many gradients as the job started with
  CHECK(served.steps.back().train_loss < served.steps.front().train_loss);
  for (float p : served.parameters) CHECK(std::isfinite(p));
  job.topology_settings.set("max_staleness", 0);
  CHECK(refusal(job).find("--topology parameter-server: workers coming and going need --max-staleness >= 1") == 0);
}

TEST_CASE("a stop asked for (SIGTERM in accord-train) ends a parameter-server job after the step being computed") {
  for (std::uint64_t staleness : {0, 2}) {
    CAPTURE(staleness);
    job_config job = sgd_job(3, 1000);
    job.topology = "parameter-server";
    job.topology_settings.set("max_staleness", staleness);
    job.link = "1gbit,100us";
    std::atomic<bool> stop{false};
    job.stop_requested = &stop;
    const job_result served = run_quadratic(job, [&](const step_metrics& m) {
      if (m.step == 3) stop = true;
    }, dim);
    REQUIRE(served.steps.size() >= 3);
    CHECK(served.steps.size() < 1000);
    CHECK(served.steps.back().step == served.steps.size());
    REQUIRE(served.parameters.size() == dim);
    for (float p : served.parameters) CHECK(std::isfinite(p));
  }
}

TEST_CASE("the parameter server refuses what it cannot run with one line") {
  job_config job = sgd_job(2, 2);
  job.topology = "parameter-server";
  job.algorithm = "acco";
  CHECK(refusal(job).find("--topology parameter-server: servers step a sharded optimizer") == 0);
  job.algorithm = "ddp";
  job.checkpoint_path = "test_topology_never.ckpt";
  CHECK(refusal(job).find("checkpoints are not supported") != std::string::npos);
}

TEST_CASE("lockstep gossip on a quadratic: averaging pulls the copies together, and the job ends at their mean") {
  job_config job = sgd_job(4, 20);
  job.topology = "gossip";
  job.topology_settings.set("gossip_lockstep", true);
  job.replica_check_interval = 1;
  const auto spread_at_end = [&](const char* graph, double rate) {
    job.topology_settings.set("gossip_graph", graph);
    job.topology_settings.set("gossip_rate", rate);
    const job_result result = run_quadratic(job, {}, dim);
    CHECK(result.replicas_identical);  // the final average: one model
    REQUIRE(result.steps.size() == 20);
    for (std::size_t s = 0; s + 1 < result.steps.size(); ++s) CHECK(result.steps[s].consensus_distance < 0);
    return result.steps.back().consensus_distance;
  };
  const double apart = spread_at_end("ring", 0.0);  // no gossip: local SGD without outer steps
  CHECK(apart > 0);
  for (const char* graph : {"ring", "complete"}) {
    CAPTURE(graph);
    const double together = spread_at_end(graph, 2.0);
    MESSAGE(std::string(graph) << ": spread at the end " << together << " with gossip at rate 2, " << apart << " without");
    CHECK(together < 0.5 * apart);
    CHECK(spread_at_end(graph, 2.0) == together);  // the seed decides who gossips: deterministic
  }
  job.topology_settings.set("gossip_graph", "star");
  CHECK(refusal(job).find("--gossip-graph: 'star'") == 0);
  job.topology_settings.set("gossip_graph", "exponential");
  CHECK(refusal(job).find("with --gossip-lockstep") != std::string::npos);
  job.topology_settings.set("gossip_graph", "ring");
  job.algorithm = "acco";
  CHECK(refusal(job).find("--topology gossip: its inner steps") == 0);
}

namespace {

// Enough parameters that a gradient takes measurable time, so every asynchronous worker gets
// gradients and --speed shows.
constexpr std::size_t busy_dim = std::size_t{1} << 16;

// Every gradient of the job counted once, by the workers that computed them.
std::uint64_t gradients_applied(const job_result& r, std::vector<std::uint64_t>* by_worker = nullptr) {
  std::uint64_t total = 0;
  for (const auto& m : r.steps) {
    for (std::size_t w = 0; w < m.worker_gradients.size(); ++w) {
      total += m.worker_gradients[w];
      if (by_worker) {
        if (by_worker->size() <= w) by_worker->resize(w + 1);
        (*by_worker)[w] += m.worker_gradients[w];
      }
    }
  }
  return total;
}

}  // namespace

TEST_CASE("asynchronous gossip on a quadratic reaches consensus at the mean of the copies, with and without A2CiD2") {
  job_config job = sgd_job(4, 30);
  job.topology = "gossip";
  job.eval_interval = 10;
  const std::uint64_t copy_bytes = busy_dim * sizeof(float);
  const auto run = [&](const char* graph, double rate) {
    job.topology_settings.set("gossip_graph", graph);
    job.topology_settings.set("gossip_rate", rate);
    const job_result result = run_quadratic(job, {}, busy_dim);
    REQUIRE(result.steps.size() == 30);
    CHECK(gradients_applied(result) == 30 * 4);  // a step is as many gradients as workers
    std::uint64_t edge_total = 0;
    for (const auto& m : result.steps) {
      CHECK(m.consensus_distance >= 0);  // measured every step
      for (const edge_traffic& e : m.edge_bytes) {  // one copy each way per exchange, between neighbours only
        CHECK(e.bytes % copy_bytes == 0);
        const int hop = (e.to - e.from + 4) % 4;
        CHECK((std::string(graph) != "ring" || hop == 1 || hop == 3));
        edge_total += e.bytes;
      }
    }
    CHECK(edge_total <= result.bytes_sent);
    CHECK((rate == 0) == (edge_total == 0));
    CHECK(std::all_of(result.parameters.begin(), result.parameters.end(), [](float p) { return std::isfinite(p); }));
    CHECK(result.steps.back().train_loss < result.steps.front().train_loss);
    double late = 0;  // the spread over the last 10 steps (one step's depends on when pairs last met)
    for (std::size_t s = 20; s < 30; ++s) late += result.steps[s].consensus_distance / 10;
    return late;
  };
  // The copies of a quadratic spread apart only as far as their workers' progress differs, so a
  // 4x slower worker makes the spread without gossip large whatever the scheduler does (with
  // equal speeds it depends on thread timing: 150 instead of ~1e5 in 1 of 12 runs here).
  job.speed_factors = {1, 1, 1, 4};
  const double apart = run("ring", 0.0);
  CHECK(apart > 0);
  for (const std::string momentum : {"none", "a2cid2"}) {
    job.topology_settings.set("gossip_momentum", momentum);
    for (const std::string graph : {"ring", "exponential", "complete"}) {
      CAPTURE(momentum);
      CAPTURE(graph);
      const double together = run(graph.c_str(), 4.0);
      MESSAGE(momentum << ", " << graph << ": spread over the last 10 steps " << together << " with gossip at rate 4, "
                       << apart << " without");
      CHECK(together < 0.5 * apart);
    }
  }
  job.topology_settings.set("gossip_graph", "star");
  CHECK(refusal(job).find("--gossip-graph: 'star' (expected ring|exponential|complete)") == 0);
  job.topology_settings.set("gossip_graph", "ring");
  job.topology_settings.set("gossip_momentum", "nesterov");
  CHECK(refusal(job).find("--gossip-momentum: 'nesterov' (expected none|a2cid2)") == 0);
  job.topology_settings.set("gossip_momentum", "a2cid2");
  job.topology_settings.set("gossip_lockstep", true);
  CHECK(refusal(job).find("--gossip-momentum a2cid2: a continuous momentum between asynchronous events") == 0);
  job.topology_settings.set("gossip_lockstep", false);
  job.topology_settings.set("gossip_momentum", "none");
  job.topology_settings.set("gossip_graph", "ring");
  job.checkpoint_path = "test_topology_never.ckpt";
  CHECK(refusal(job).find("--topology gossip: checkpoints are not supported") == 0);
  job.checkpoint_path.clear();
  job.algorithm = "acco";
  CHECK(refusal(job).find("--topology gossip: its workers step the optimizer") == 0);
}

TEST_CASE("asynchronous gossip with one worker is DDP with one worker: same data order, schedule and steps") {
  const job_result ddp = run_quadratic(sgd_job(1, 8), {}, dim);
  job_config job = sgd_job(1, 8);
  job.topology = "gossip";
  for (const std::string momentum : {"none", "a2cid2"}) {  // alone, A2CiD2's θ̃ never leaves θ
    CAPTURE(momentum);
    job.topology_settings.set("gossip_momentum", momentum);
    const job_result alone = run_quadratic(job, {}, dim);
    CHECK(worst_difference(alone.parameters, ddp.parameters) < 1e-6);
    REQUIRE(alone.steps.size() == ddp.steps.size());
    for (std::size_t s = 0; s < ddp.steps.size(); ++s)
      CHECK(alone.steps[s].train_loss == doctest::Approx(ddp.steps[s].train_loss).epsilon(1e-6));
  }
}

namespace {

// The waves up to position `end`, zero vectors after.
class waves_until final : public dataset {
public:
  waves_until(std::size_t dim, std::uint64_t end) : waves_(dim), dim_(dim), end_(end) {}
  std::string describe() const override { return "waves until " + std::to_string(end_); }
  std::uint64_t size() const override { return waves_.size(); }
  batch examples(std::uint64_t first, std::size_t count) const override {
    batch b = waves_.examples(first, count);
    for (std::size_t e = 0; e < count; ++e)
      if (first + e >= end_) std::fill_n(b.features.begin() + static_cast<std::ptrdiff_t>(e * dim_), dim_, 0.0f);
    return b;
  }

private:
  accord::testing::waves waves_;
  std::size_t dim_;
  std::uint64_t end_;
};

// `job` on a linear model (gradients that do not depend on the parameters) of busy_dim
// parameters, on the waves until position `data_end`.
job_result run_linear(const job_config& job, std::uint64_t data_end = ~std::uint64_t{0}) {
  accord::testing::linear net(busy_dim);
  auto data = std::make_shared<waves_until>(busy_dim, data_end);
  return run_job(net, data, data, job);
}

// Plain SGD: each update on the linear model is the same whichever copy takes it.
job_config linear_sgd_job() {
  job_config job = sgd_job(3, 16);
  job.beta1 = 0.0f;
  job.weight_decay = 0.0f;
  return job;
}

}  // namespace

TEST_CASE("asynchronous gossip's mean of the copies is DDP's where updates add up alike, with and without A2CiD2") {
  // Plain SGD on a linear model: each gradient's update is the same whichever copy takes it,
  // and averages keep the sum of the copies, so their mean is DDP's parameters (to float
  // rounding) whatever the timing. A2CiD2 keeps that too: its events keep the sum of θ + θ̃,
  // and θ̃ − θ sums to zero over the workers at any one time.
  job_config job = linear_sgd_job();
  const job_result ddp = run_linear(job);
  job.topology = "gossip";
  job.topology_settings.set("gossip_rate", 2.0);
  for (const std::string momentum : {"none", "a2cid2"})
    for (const std::string graph : {"ring", "exponential"}) {
      CAPTURE(momentum);
      CAPTURE(graph);
      job.topology_settings.set("gossip_momentum", momentum);
      job.topology_settings.set("gossip_graph", graph);
      const job_result gossip = run_linear(job);
      REQUIRE(gossip.steps.size() == 16);
      CHECK(worst_difference(gossip.parameters, ddp.parameters) < 2e-5);
    }
}

TEST_CASE("asynchronous gossip: a clean leaver's copy stays in the mean of the copies, a joiner starts from it") {
  // Only step 0's three gradients move the linear model (the data are zero after them), with
  // three workers, so the copies' mean is DDP's step-0 update; later worker 2 leaves cleanly
  // (after step 12) and workers 2 and 3 join (after step 14). The mean must not move: the
  // leaver's copy (without averages at rate 0, it differs from the mean) is spread over the
  // others, and the joiners start from the mean.
  job_config job = linear_sgd_job();
  const std::uint64_t step_zero_end = 3 * job.accumulation * job.micro_batch;  // its micro-batches' positions
  const job_result ddp = run_linear(job, step_zero_end);
  job.topology = "gossip";
  job.membership = {{12, 2, false}, {14, 4, false}};
  for (const auto& [momentum, rate] : {std::pair<std::string, double>{"none", 0.0}, {"none", 2.0}, {"a2cid2", 2.0}}) {
    CAPTURE(momentum);
    CAPTURE(rate);
    job.topology_settings.set("gossip_momentum", momentum);
    job.topology_settings.set("gossip_rate", rate);
    const job_result gossip = run_linear(job, step_zero_end);
    REQUIRE(gossip.steps.size() == 16);
    CHECK(gradients_applied(gossip) == 16 * 3);
    CHECK(worst_difference(gossip.parameters, ddp.parameters) < 2e-5);
  }
}

TEST_CASE("gossip arithmetic: neighbour choices and A2CiD2's constants by hand") {
  const auto probabilities = [](const std::string& graph, std::size_t n) {
    std::vector<double> by_offset(n, 0.0);
    for (const neighbour_offset& choice : neighbour_offsets(graph, n)) by_offset[choice.offset] = choice.probability;
    return by_offset;
  };
  CHECK(probabilities("ring", 4) == std::vector<double>{0, 0.5, 0, 0.5});
  CHECK(probabilities("ring", 2) == std::vector<double>{0, 1});
  CHECK(probabilities("exponential", 4) == std::vector<double>{0, 0.25, 0.5, 0.25});  // ±1, ±2 (the same worker)
  CHECK(probabilities("complete", 3) == std::vector<double>{0, 0.5, 0.5});
  CHECK(neighbour_offsets("ring", 1).empty());

  // Ring of 4, each worker starting one event per unit of time: Λ = 2 (I − P) has eigenvalues
  // 2, 4, 2, so χ1 = 1/2; an edge's resistance (e_0 − e_1)ᵀ Λ⁺ (e_0 − e_1) = 3/4, so χ2 = 3/8.
  const a2cid2_constants ring = a2cid2_for(neighbour_offsets("ring", 4), 4, 1.0);
  CHECK(ring.chi1 == doctest::Approx(0.5));
  CHECK(ring.chi2 == doctest::Approx(0.375));
  CHECK(ring.eta == doctest::Approx(0.5 / std::sqrt(0.5 * 0.375)));
  CHECK(ring.alpha_tilde == doctest::Approx(0.5 * std::sqrt(0.5 / 0.375)));
  // Twice the rate: the same α̃, η twice as fast.
  const a2cid2_constants faster = a2cid2_for(neighbour_offsets("ring", 4), 4, 2.0);
  CHECK(faster.alpha_tilde == doctest::Approx(ring.alpha_tilde));
  CHECK(faster.eta == doctest::Approx(2 * ring.eta));
  // Complete graph: χ1 = χ2 = (n − 1) / (2n·rate), α̃ = ½ (θ̃ moves as θ: nothing to accelerate).
  const a2cid2_constants complete = a2cid2_for(neighbour_offsets("complete", 5), 5, 1.0);
  CHECK(complete.chi1 == doctest::Approx(0.4));
  CHECK(complete.chi2 == doctest::Approx(0.4));
  CHECK(complete.alpha_tilde == doctest::Approx(0.5));
  // A long ring is poorly connected (χ1 ≫ χ2): θ̃ steps further than the average.
  CHECK(a2cid2_for(neighbour_offsets("ring", 16), 16, 1.0).alpha_tilde > 1.5);
  CHECK(a2cid2_for(neighbour_offsets("ring", 1), 1, 1.0).eta == 0);
  CHECK(a2cid2_for(neighbour_offsets("ring", 4), 4, 0.0).eta == 0);

  // The mixing between events, in closed form: θ + θ̃ stays, θ − θ̃ shrinks by e^(−2η t).
  std::vector<float> theta = {1.0f, -2.0f}, tilde = {3.0f, 2.0f};
  a2cid2_mix(theta, tilde, 0.5, std::log(2.0));  // e^(−ln 2) = ½
  CHECK(theta[0] == doctest::Approx(1.5));
  CHECK(tilde[0] == doctest::Approx(2.5));
  CHECK(theta[1] == doctest::Approx(-1.0));
  CHECK(tilde[1] == doctest::Approx(1.0));
}

TEST_CASE("gossip arithmetic: A2CiD2 keeps the mean of the copies and reaches consensus sooner than plain averages on a ring of 16") {
  // Both from the same copies through the same Poisson events (each worker starts one per unit
  // of time with a ring neighbour) for 20 units of time.
  constexpr std::size_t n = 16, length = 8;
  constexpr double horizon = 20;
  std::mt19937_64 start(7);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> initial(n, std::vector<float>(length));
  for (auto& copy : initial)
    for (float& v : copy) v = normal(start);
  const std::vector<double> initial_mean = mean_in_double({initial.begin(), initial.end()});
  const std::vector<neighbour_offset> offsets = neighbour_offsets("ring", n);
  const a2cid2_constants constants = a2cid2_for(offsets, n, 1.0);
  const auto spread_after = [&](bool momentum) {
    std::vector<std::vector<float>> theta = initial, tilde = initial;
    std::vector<double> mixed_until(n, 0.0);
    const auto catch_up = [&](std::size_t k, double now) {
      if (momentum) a2cid2_mix(theta[k], tilde[k], constants.eta, now - mixed_until[k]);
      mixed_until[k] = now;
    };
    std::mt19937_64 events(11);
    for (double now = std::exponential_distribution<double>(n)(events); now < horizon;
         now += std::exponential_distribution<double>(n)(events)) {
      const std::size_t a = std::uniform_int_distribution<std::size_t>(0, n - 1)(events);
      const std::size_t b = (a + (std::bernoulli_distribution(0.5)(events) ? 1 : n - 1)) % n;
      catch_up(a, now);
      catch_up(b, now);
      if (momentum) average_pair(theta[a], theta[b], tilde[a], tilde[b], constants.alpha_tilde);
      else average_pair(theta[a], theta[b]);
    }
    for (std::size_t k = 0; k < n; ++k) catch_up(k, horizon);
    const std::vector<double> mean = mean_in_double({theta.begin(), theta.end()});
    double square = 0;
    for (std::size_t i = 0; i < length; ++i) {
      CHECK(mean[i] == doctest::Approx(initial_mean[i]).epsilon(1e-4));  // the average model is kept
      for (const auto& copy : theta) square += (copy[i] - mean[i]) * (copy[i] - mean[i]);
    }
    return std::sqrt(square / n);
  };
  const double plain = spread_after(false), accelerated = spread_after(true);
  MESSAGE("spread after 20 units of time on a ring of 16: " << plain << " plain, " << accelerated << " with A2CiD2");
  CHECK(accelerated < 0.5 * plain);
}

TEST_CASE("gossip arithmetic: A2CiD2 between processes, each side holding only its own θ̃, is one process's arithmetic bit for bit") {
  // A ring of 8 (α̃ ≈ 1, far from plain averaging's ½, so θ̃ matters) through the same events at
  // the same times: one process's pairs (average_pair, both mixed up to the event) against
  // process copies that exchange offers and answers, each side mixing on the times they name.
  constexpr std::size_t n = 8, length = 8;
  const a2cid2_constants constants = a2cid2_for(neighbour_offsets("ring", n), n, 1.0);
  REQUIRE(constants.alpha_tilde > 0.9);
  std::mt19937_64 start(5);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> theta(n, std::vector<float>(length));
  for (auto& copy : theta)
    for (float& v : copy) v = normal(start);
  std::vector<std::vector<float>> tilde = theta;
  std::vector<double> mixed_until(n, 0.0);
  std::vector<process_copy> processes, ignoring;  // `ignoring`: without θ̃ (plain averages)
  for (const auto& copy : theta) {
    processes.emplace_back(copy, true, constants);
    ignoring.emplace_back(copy, false, constants);
  }
  const auto exchange = [](process_copy& initiator, process_copy& neighbour, double now) {
    initiator.catch_up(now);
    const std::vector<float> sent = initiator.theta();
    const std::uint64_t at = initiator.version();
    const std::vector<float> answer = neighbour.answer(sent, now);
    initiator.take_answer(sent, at, answer, neighbour.time());
  };
  std::mt19937_64 events(3);
  double now = 0;
  for (int e = 0; e < 40; ++e) {  // 5 per worker: short of consensus, where both would agree
    now += std::exponential_distribution<double>(n)(events);
    const std::size_t a = std::uniform_int_distribution<std::size_t>(0, n - 1)(events);
    const std::size_t b = (a + (std::bernoulli_distribution(0.5)(events) ? 1 : n - 1)) % n;
    for (std::size_t k : {a, b}) {
      a2cid2_mix(theta[k], tilde[k], constants.eta, now - mixed_until[k]);
      mixed_until[k] = now;
    }
    average_pair(theta[a], theta[b], tilde[a], tilde[b], constants.alpha_tilde);
    exchange(processes[a], processes[b], now);
    exchange(ignoring[a], ignoring[b], now);
  }
  double ignored_gap = 0;
  for (std::size_t k = 0; k < n; ++k) {
    a2cid2_mix(theta[k], tilde[k], constants.eta, now - mixed_until[k]);
    processes[k].catch_up(now);
    CHECK(processes[k].theta() == theta[k]);
    CHECK(std::equal(tilde[k].begin(), tilde[k].end(), processes[k].tilde().begin()));
    ignored_gap = std::max(ignored_gap, worst_difference(ignoring[k].theta(), theta[k]));
  }
  MESSAGE("plain averages instead differ by up to " << ignored_gap);
  CHECK(ignored_gap > 1e-2);  // ignoring θ̃ would not pass for it
}

TEST_CASE("gossip arithmetic: exchanges overlapping on one process keep the sums of θ and θ̃") {
  // Process 0 offers to 1 at time 0.5; before 1's answer reaches it, 2's offer changes 0's
  // copy, so 0 then adds half the difference instead of taking the mean. θ̃ starts apart from θ
  // (as a gradient's past would leave it) with Σ(θ̃ − θ) = 0: the mixing up to 0.5 keeps it so.
  constexpr std::size_t length = 5;
  const a2cid2_constants constants = a2cid2_for(neighbour_offsets("ring", 8), 8, 1.0);
  std::vector<process_copy> processes;
  for (float start : {1.0f, -2.0f, 4.0f}) {
    std::vector<float> copy(length);
    for (std::size_t i = 0; i < length; ++i) copy[i] = start + 0.25f * static_cast<float>(i);
    processes.emplace_back(copy, true, constants);
  }
  processes[2].tilde()[0] += 3.0f;
  processes[0].tilde()[0] -= 3.0f;
  const auto sums = [&] {
    std::pair<double, double> total{0, 0};
    for (const process_copy& p : processes)
      for (std::size_t i = 0; i < length; ++i) {
        total.first += p.theta()[i];
        total.second += p.tilde()[i];
      }
    return total;
  };
  const auto before = sums();
  constexpr double now = 0.5;
  processes[0].catch_up(now);
  const std::vector<float> sent = processes[0].theta();
  const std::uint64_t at = processes[0].version();
  const std::vector<float> answer = processes[1].answer(sent, now);
  processes[2].catch_up(now);
  const std::vector<float> overlapping = processes[2].theta();
  const std::uint64_t overlapping_at = processes[2].version();
  const std::vector<float> returned = processes[0].answer(overlapping, now);
  processes[2].take_answer(overlapping, overlapping_at, returned, processes[0].time());
  processes[0].take_answer(sent, at, answer, processes[1].time());
  CHECK(processes[0].theta() != processes[1].theta());  // 0 added half the difference
  const auto after = sums();
  CHECK(after.first == doctest::Approx(before.first).epsilon(1e-6));
  CHECK(after.second == doctest::Approx(before.second).epsilon(1e-6));
}

TEST_CASE("gossip arithmetic: an elastic job's kept step settles A2CiD2's θ̃ at the mean, where a restored or "
          "joining copy starts, and the settled copies stay together") {
  // A ring of 8 after 40 events on one clock: the θ̃ differ from their θ, but their mean is the
  // mean of the θ (Σ(θ̃ − θ) = 0), so settling θ̃ at the mean of the θ keeps the θ̃'s mean.
  constexpr std::size_t n = 8, length = 6;
  const a2cid2_constants constants = a2cid2_for(neighbour_offsets("ring", n), n, 1.0);
  std::mt19937_64 start(11);
  std::normal_distribution<float> normal;
  std::vector<process_copy> processes;
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<float> copy(length);
    for (float& v : copy) v = normal(start);
    processes.emplace_back(copy, true, constants);
  }
  std::mt19937_64 events(7);
  double now = 0;
  for (int e = 0; e < 40; ++e) {
    now += std::exponential_distribution<double>(n)(events);
    const std::size_t a = std::uniform_int_distribution<std::size_t>(0, n - 1)(events);
    const std::size_t b = (a + 1) % n;
    processes[a].catch_up(now);
    const std::vector<float> sent = processes[a].theta();
    const std::uint64_t at = processes[a].version();
    const std::vector<float> answer = processes[b].answer(sent, now);
    processes[a].take_answer(sent, at, answer, processes[b].time());
  }
  now += 0.5;  // the kept step's time: every copy mixes up to it first
  std::vector<std::span<const float>> thetas, tildes;
  double tilde_off_theta = 0;
  for (process_copy& p : processes) {
    p.catch_up(now);
    thetas.push_back(p.theta());
    tildes.push_back(p.tilde());
    for (std::size_t i = 0; i < length; ++i)
      tilde_off_theta = std::max(tilde_off_theta, std::abs(static_cast<double>(p.tilde()[i]) - p.theta()[i]));
  }
  REQUIRE(tilde_off_theta > 1e-2);  // θ̃ carries something before the kept step
  const std::vector<double> mean_theta = mean_in_double(thetas), mean_tilde = mean_in_double(tildes);
  for (std::size_t i = 0; i < length; ++i) CHECK(std::abs(mean_tilde[i] - mean_theta[i]) < 1e-5);
  const std::vector<float> mean(mean_theta.begin(), mean_theta.end());
  for (process_copy& p : processes) p.settle(mean);
  // A survivor, a restored copy of a new epoch and a joiner (all start from the kept parameters)
  // hold the same θ and θ̃.
  const process_copy restored(mean, true, constants);
  for (const process_copy& p : processes) {
    CHECK(p.theta() == mean);
    CHECK(std::equal(p.tilde().begin(), p.tilde().end(), mean.begin(), mean.end()));
    CHECK(std::equal(restored.tilde().begin(), restored.tilde().end(), p.tilde().begin(), p.tilde().end()));
  }
  // Mixing on from there moves nothing: the settled copies stay together until the next events.
  for (process_copy& p : processes) {
    p.catch_up(now + 3);
    CHECK(worst_difference(p.theta(), mean) < 1e-6);
  }
}

TEST_CASE("gossip arithmetic: the sketches' spread estimates the copies' without bias, within a few percent") {
  constexpr std::size_t n = 4, length = 5000, size = 256;
  std::mt19937_64 start(9);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> copies(n, std::vector<float>(length));
  for (std::size_t i = 0; i < length; ++i) {
    const float shared = 3 * normal(start);  // large common values, small differences: as copies near consensus
    for (auto& copy : copies) copy[i] = shared + 0.01f * normal(start);
  }
  const double exact = mean_and_spread(copies, false).second;
  double squares = 0, worst = 0;
  constexpr int seeds = 100;
  for (int seed = 0; seed < seeds; ++seed) {
    std::vector<std::vector<float>> sketches;
    for (const auto& copy : copies) sketches.push_back(sketch_of(copy, size, static_cast<std::uint64_t>(seed)));
    REQUIRE(sketches.front().size() == size);
    const double estimate = mean_and_spread(sketches, false).second;
    squares += estimate * estimate / seeds;
    worst = std::max(worst, std::fabs(estimate / exact - 1));
  }
  MESSAGE("sketch of " << size << " floats, " << n << " copies of " << length << ": worst relative error over "
                       << seeds << " seeds " << worst);
  CHECK(std::sqrt(squares) == doctest::Approx(exact).epsilon(0.02));  // unbiased in the square
  CHECK(worst < 0.15);  // each seed within √(2/256) ≈ 9% per difference, less over 4 of them
  CHECK(sketch_of(copies[0], size, 1) == sketch_of(copies[0], size, 1));  // the same projection everywhere
}

TEST_CASE("gossip arithmetic: a clean leaver's copy stays in the mean, a joiner from the mean keeps it") {
  // Copies of a quadratic that took different numbers of SGD steps on the waves.
  constexpr std::size_t length = 6;
  accord::testing::quadratic net(length);
  const accord::testing::waves data(length);
  std::vector<std::vector<float>> copies(4, std::vector<float>(length));
  for (std::size_t k = 0; k < copies.size(); ++k) {
    net.initialize(copies[k], 0);
    std::vector<float> gradient(length);
    for (std::size_t step = 0; step < 3 * k + 1; ++step) {
      net.forward_backward(copies[k], data.examples(7 * k + step, 2), gradient);
      for (std::size_t i = 0; i < length; ++i) copies[k][i] -= 0.3f * gradient[i];
    }
  }
  const std::vector<double> before = mean_in_double({copies.begin(), copies.end()});
  // Worker 1 leaves cleanly.
  spread_leaver({copies[0], copies[2], copies[3]}, copies[1]);
  const std::vector<double> after = mean_in_double({copies[0], copies[2], copies[3]});
  for (std::size_t i = 0; i < length; ++i) {
    CHECK(after[i] == doctest::Approx(before[i]).epsilon(1e-6));
    CHECK(std::fabs(copies[1][i] - before[i]) > 1e-3);  // it did differ from the mean
  }
  // A joiner starts from the mean: the mean stays.
  const std::vector<float> joiner(after.begin(), after.end());
  const std::vector<double> with_joiner = mean_in_double({copies[0], copies[2], copies[3], joiner});
  for (std::size_t i = 0; i < length; ++i) CHECK(with_joiner[i] == doctest::Approx(before[i]).epsilon(1e-6));
}

TEST_CASE("asynchronous gossip: with one slow worker the fast ones contribute more gradients") {
  job_config job = sgd_job(3, 24);
  job.topology = "gossip";
  job.speed_factors = {1.0, 1.0, 12.0};  // far apart: under load a fast thread waits in the run queue too
  job.link = "10gbit,10us";
  const job_result result = run_quadratic(job, {}, busy_dim);
  std::vector<std::uint64_t> by_worker;
  REQUIRE(gradients_applied(result, &by_worker) == 24 * 3);
  REQUIRE(by_worker.size() == 3);
  MESSAGE("gradients by worker: " << by_worker[0] << " / " << by_worker[1] << " / " << by_worker[2]);
  CHECK(by_worker[0] > by_worker[2]);
  CHECK(by_worker[1] > by_worker[2]);
  CHECK(result.steps.back().bytes_sent > 0);
}

TEST_CASE("asynchronous gossip keeps going when workers die, leave and join") {
  job_config job = sgd_job(3, 12);
  job.topology = "gossip";
  job.topology_settings.set("gossip_rate", 2.0);
  // After step 3 one worker dies mid-gradient (another redoes it), after 6 one more leaves,
  // after 9 three join: every gradient of the 12 steps is still applied once.
  job.membership = {{3, 2, true}, {6, 1, false}, {9, 4, false}};
  const job_result result = run_quadratic(job, {}, busy_dim);
  REQUIRE(result.steps.size() == 12);
  std::vector<std::uint64_t> by_worker;
  CHECK(gradients_applied(result, &by_worker) == 12 * 3);
  CHECK(by_worker.size() == 4);  // the joiner's rank counted too
  CHECK(result.steps.back().train_loss < result.steps.front().train_loss);
  CHECK(std::all_of(result.parameters.begin(), result.parameters.end(), [](float p) { return std::isfinite(p); }));
}

TEST_CASE("Streaming DiLoCo with --overlap-steps auto: every replica merges at the same step, the same bits after "
          "each merge, over a slow link") {
  // One fragment merged wholly: the replicas agree after each merge, which comes τ steps after
  // its outer round starts, τ chosen from the times (1 ms per message against instant inner
  // steps: near the bound, H − 1 = 5, whatever the machine does meanwhile).
  topology_job job = local_sgd_job(3, 40);
  job.options.set("local_steps", 6).set("overlap_steps", "auto").set("outer_learning_rate", 0.7);
  job.options.set("outer_momentum", 0.9);
  const local_sgd_run run = run_local_sgd(*make_topology("local-sgd", job), job.steps, true, "1gbit,1ms");
  int merges = 0;
  for (std::uint64_t step = 0; step + 1 < job.steps; ++step) {
    if (!run.agree[step]) continue;
    CAPTURE(step);
    ++merges;
    for (int rank = 1; rank < 3; ++rank) CHECK(run.copies[step][rank] == run.copies[step][0]);
  }
  CHECK(merges >= 5);  // outer rounds start at steps 5, 11, ..., 35: each merges before the next starts
  for (int rank = 1; rank < 3; ++rank) CHECK(run.last(rank) == run.last(0));
  job.options.set("overlap_steps", "soon");
  CHECK_THROWS_WITH(make_topology("local-sgd", job), "--overlap-steps: 'soon' is not auto or a whole number of steps");
}

TEST_CASE("Streaming DiLoCo with --overlap-steps auto in a job: fragments, and 2 groups of 2 over a slow link, "
          "replicas agree wherever checked") {
  job_config job = sgd_job(4, 25);
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 8);
  job.topology_settings.set("fragments", 2);
  job.topology_settings.set("overlap_steps", "auto");
  job.topology_settings.set("overlap_mix", 0.5f);
  job.replica_check_interval = 1;
  const job_result flat = run_quadratic(job, {}, dim);
  CHECK(flat.replicas_identical);
  for (float p : flat.parameters) CHECK(std::isfinite(p));
  // Grouped, every column sums the groups' times: the same τ on every member of every group.
  job.topology_settings.set("fragments", 1);
  job.topology_settings.set("overlap_mix", 0.0f);
  job.topology_settings.set("inner_group", 2);
  job.link = "10gbit,5us";
  job.topology_settings.set("inter_link", "100mbit,1ms");
  const job_result grouped = run_quadratic(job, {}, dim);
  CHECK(grouped.replicas_identical);
  for (float p : grouped.parameters) CHECK(std::isfinite(p));
}
