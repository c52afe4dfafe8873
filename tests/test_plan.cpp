// plan_job reads a job_config once: the links, the precisions and the topology's settings come
// out parsed and resolved, and a bad one is refused by plan_job itself, before any runner or
// actor, with the one line the runners have always given. Epochs derive their plans from it.
#include <doctest/doctest.h>

#include "cluster/fingerprint.hpp"
#include "job/plan.hpp"
#include "quadratic_model.hpp"

#include <accord/config_settings.hpp>
#include <accord/worker.hpp>

#include <stdexcept>
#include <string>

using namespace accord;
using accord::testing::quadratic;
using accord::testing::waves;

namespace {

constexpr std::size_t dim = 12;

job_config small_job(const std::string& algorithm) {
  job_config job;
  job.algorithm = algorithm;
  job.workers = 4;
  job.steps = 8;
  job.micro_batch = 2;
  return job;
}

const std::string link_examples = " (expected e.g. '1gbit,50us', '10gbit', '2GB,5us' or 'unlimited')";

}  // namespace

TEST_CASE("plan_job resolves the links, the precisions, the topology's settings and the splits") {
  const quadratic net(dim);
  const waves data(dim);

  job_config job = small_job("acco");
  job.topology = "hierarchical";
  job.topology_settings.set("group_size", 2);
  job.link = "1gbit,50us";
  job.topology_settings.set("inter_link", "100mbit,1ms");
  job.wire_precision = "bf16";
  job.estimate_precision = "fp16";
  job.accumulation = 2;
  job.max_accumulation = 5;
  job.estimate_accumulation = 3;
  const job_plan plan = plan_job(net, data, job);
  CHECK(plan.link.bandwidth_bytes_per_second == doctest::Approx(1.25e8));
  CHECK(plan.link.latency_seconds == doctest::Approx(50e-6));
  CHECK(plan.inter_link.bandwidth_bytes_per_second == doctest::Approx(1.25e7));
  CHECK(plan.inter_link.latency_seconds == doctest::Approx(1e-3));
  CHECK(plan.precision.real == wire_precision::bf16);
  CHECK(plan.precision.estimate == wire_precision::fp16);
  CHECK(plan.compute == compute_precision::fp32);
  CHECK(plan.topology_name == "hierarchical");
  CHECK(plan.topo->group_size() == 2);
  CHECK(plan.topology_request.options.whole("group_size") == 2);
  CHECK(plan.topology_request.workers == 4);
  CHECK(plan.workers == 4);
  CHECK(plan.rounds == 16);  // ACCO: two rounds a step
  CHECK(plan.accumulation == 2);
  CHECK(plan.max_accumulation == 5);
  CHECK(plan.estimate_accumulation == 3);
  CHECK(plan.estimate_max_accumulation == 6);  // the real rounds' headroom of 3 over the least

  // The defaults: no inter link is the link, no estimate precision the wire's, no estimate
  // accumulation the real rounds'; a topology's own settings reach its request.
  job = small_job("ddp");
  job.topology = "local-sgd";
  job.optimizer = "sgd";
  job.topology_settings.set("local_steps", 4);
  job.link = "10gbit";
  job.wire_precision = "fp16";
  job.accumulation = 3;
  const job_plan defaults = plan_job(net, data, job);
  CHECK(defaults.inter_link.bandwidth_bytes_per_second == doctest::Approx(1.25e9));
  CHECK(defaults.inter_link.latency_seconds == 0);
  CHECK(defaults.precision.estimate == wire_precision::fp16);
  CHECK(defaults.topology_request.options.whole("local_steps") == 4);
  CHECK(defaults.topo->group_size() == 1);
  CHECK(defaults.estimate_accumulation == 3);
  CHECK(defaults.estimate_max_accumulation == 0);

  job = small_job("acco");
  job.estimate_precision = "int8";  // ACCO's estimate rounds on the ring may travel quantized
  CHECK(plan_job(net, data, job).precision.estimate == wire_precision::int8);
}

TEST_CASE("wire precision auto is the measured best: fp8 on ACCO's ring rounds, exact rounds everywhere else") {
  const quadratic net(dim);
  const waves data(dim);
  const auto precision_of = [&](const std::string& algorithm, const std::string& topology, const std::string& wire,
                                const std::string& estimate) {
    job_config job = small_job(algorithm);
    job.topology = topology;
    if (topology == "hierarchical") job.topology_settings.set("group_size", 2);
    job.wire_precision = wire;
    job.estimate_precision = estimate;
    return plan_job(net, data, job).precision;
  };
  CHECK(job_config{}.wire_precision == "auto");
  CHECK(precision_of("acco", "ring", "auto", "").real == wire_precision::fp8);
  CHECK(precision_of("acco", "ring", "auto", "").estimate == wire_precision::fp8);
  CHECK(precision_of("ddp", "ring", "auto", "").real == wire_precision::fp32);
  CHECK(precision_of("ddp", "ring", "auto", "").estimate == wire_precision::fp32);
  CHECK(precision_of("dlion-mavo", "ring", "auto", "").real == wire_precision::fp32);
  // The block codes are the ring's sharded optimizer's: ACCO elsewhere stays exact.
  CHECK(precision_of("acco", "hierarchical", "auto", "").real == wire_precision::fp32);
  // Exact rounds are one setting away, and auto fills only what is left to it.
  CHECK(precision_of("acco", "ring", "fp32", "").estimate == wire_precision::fp32);
  CHECK(precision_of("acco", "ring", "fp32", "auto").estimate == wire_precision::fp8);
  CHECK(precision_of("acco", "ring", "auto", "bf16").real == wire_precision::fp8);
  CHECK(precision_of("acco", "ring", "auto", "bf16").estimate == wire_precision::bf16);
  // Values the app keeps (BatchNorm's statistics) need exact or 16-bit rounds: auto gives fp32.
  job_config kept = small_job("acco");
  kept.parameter_groups = {parameter_group{.begin = 0, .end = 4}, parameter_group{.begin = 4, .end = dim, .role = "averaged"}};
  CHECK(plan_job(net, data, kept).precision.real == wire_precision::fp32);
  kept.parameter_groups.back().role = "trained";
  CHECK(plan_job(net, data, kept).precision.real == wire_precision::fp8);
}

TEST_CASE("plan_job itself refuses a bad link, precision or topology setting with one line") {
  const quadratic net(dim);
  const waves data(dim);
  struct bad_case {
    const char* algorithm;
    void (*spoil)(job_config&);
    std::string message;
  };
  const bad_case cases[] = {
      {"acco", [](job_config& j) { j.link = "3parsecs"; },
       "link spec '3parsecs': unknown unit 'parsecs' (bandwidth: bit, kbit, mbit, gbit, tbit, B, KB, MB, GB, TB per "
       "second; latency: ns, us, ms, s)" + link_examples},
      {"acco",
       [](job_config& j) {
         j.topology = "hierarchical";
         j.topology_settings.set("group_size", 2);
         j.topology_settings.set("inter_link", "1gbit,");
       },
       "link spec '1gbit,': trailing comma" + link_examples},
      {"acco", [](job_config& j) { j.wire_precision = "fp2"; },
       "wire precision: 'fp2' (expected fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3) or auto"},
      {"acco", [](job_config& j) { j.estimate_precision = "fp2"; },
       "estimate precision: 'fp2' (expected fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3) or auto"},
      {"dlion-mavo", [](job_config& j) { j.wire_precision = "int8"; },
       "wire precision: 'int8' means nothing for dlion-mavo, whose votes travel as 1 bit whatever the wire (leave it fp32)"},
      {"acco",
       [](job_config& j) {
         j.topology = "hierarchical";
         j.topology_settings.set("group_size", 2);
         j.estimate_precision = "sign";
       },
       "estimate precision: 'sign' is not supported by the hierarchical topology, whose collectives take "
       "fp32|bf16|fp16"},
      {"acco", [](job_config& j) { j.compute_precision = "fp64"; }, "compute precision: 'fp64' (expected fp32|bf16)"},
      {"acco", [](job_config& j) { j.compute_precision = "bf16"; },
       "compute precision bf16 is for GPU workers; this model runs on the cpu, in fp32"},
      {"acco", [](job_config& j) { j.topology = "hierarchical"; },
       "--topology hierarchical: needs a group size (--group-size in one process; between processes "
       "LOCAL_WORLD_SIZE, the workers of one machine)"},
      {"ddp",
       [](job_config& j) {
         j.topology = "local-sgd";
         j.topology_settings.set("outer_momentum", 1.0f);
       },
       "--topology local-sgd: --outer-momentum must be in [0, 1)"},
      {"ddp",
       [](job_config& j) {
         j.topology = "gossip";
         j.topology_settings.set("gossip_graph", "star");
       },
       "--gossip-graph: 'star' (expected ring|exponential|complete)"},
      {"acco", [](job_config& j) { j.global_batch = 6; },
       "global batch 6: not a whole number of workers' batches of 4 examples (--micro-batch 2 x 2 micro-batches "
       "per step)"},
      {"ddp", [](job_config& j) { j.global_batch = 2 * 65536; },
       "global batch 131072: more than 65535 workers' batches of 2 examples"},
      {"ddp",
       [](job_config& j) {
         j.topology = "parameter-server";
         j.global_batch = 8;
       },
       "global batch 8: --topology parameter-server has no global batch (its workers apply gradients on their own)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.message);
    job_config job = small_job(c.algorithm);
    plan_job(net, data, job);  // fine until spoilt
    c.spoil(job);
    CHECK_THROWS_WITH_AS(plan_job(net, data, job), c.message.c_str(), std::invalid_argument);
  }
}

TEST_CASE("an epoch's plan derives from the job's plan") {
  const quadratic net(dim);
  const waves data(dim);
  job_config job = small_job("ddp");
  job.link = "1gbit";
  job.wire_precision = "bf16";
  job.membership = {{3, 2, false}};
  const job_plan plan = plan_job(net, data, job);

  // In one process: the first epoch runs the job's start up to its change, every step kept.
  const job_plan first = plan_epoch(plan, net, 4, 3, nullptr);
  CHECK(first.workers == 4);
  CHECK(first.steps == 3);
  CHECK(first.rounds == 3);
  CHECK(first.config.checkpoint_interval == 1);
  CHECK(first.config.membership.empty());
  CHECK(first.initial == plan.initial);
  CHECK(first.first_round == 0);
  CHECK(first.link.bandwidth_bytes_per_second == plan.link.bandwidth_bytes_per_second);
  CHECK(first.precision.real == wire_precision::bf16);

  // The next continues from the state the first kept.
  checkpoint kept;
  kept.steps = 3;
  kept.data_position = 48;
  kept.signature = net.signature();
  kept.algorithm = "ddp";
  kept.parameters.assign(dim, 0.5f);
  kept.slots = 2;  // AdamW's
  kept.optimizer.assign(2 * dim, 0.0f);
  const job_plan second = plan_epoch(plan, net, 2, 8, &kept);
  CHECK(second.workers == 2);
  CHECK(second.first_round == 3);
  CHECK(second.data_position == 48);
  CHECK(second.initial == kept.parameters);
  CHECK(second.resume.has_value());
  CHECK(second.topology_request.workers == 2);
  kept.steps = 9;
  CHECK_THROWS_WITH_AS(plan_epoch(plan, net, 2, 8, &kept),
                       "membership change: the checkpoint is at step 9, beyond the job's 8 steps", std::invalid_argument);

  // Between processes: the same settings for another worker count, from where the epoch starts.
  const job_plan continued = plan.continued(5, 80, std::vector<float>(dim, 0.25f), 3);
  CHECK(continued.workers == 3);
  CHECK(continued.first_round == 5);
  CHECK(continued.data_position == 80);
  CHECK(continued.rounds == plan.rounds);
  CHECK(continued.initial == std::vector<float>(dim, 0.25f));
  CHECK_FALSE(continued.resume.has_value());
  CHECK(continued.precision.real == wire_precision::bf16);
  CHECK(continued.topo == plan.topo);
}

TEST_CASE("a global batch is shared among an epoch's workers, the last ranks taking the remainder") {
  const quadratic net(dim);
  const waves data(dim);
  job_config job = small_job("acco");
  job.accumulation = 2;
  job.max_accumulation = 3;
  job.estimate_accumulation = 1;
  job.global_batch = 4 * 2 * 3;  // 4 workers' micro-batch of 2 x (1 + 2) per step
  const job_plan plan = plan_job(net, data, job);
  CHECK(plan.batch_workers == 4);
  const auto counts = [&](int workers, int rank) { return plan.continued(0, 0, plan.initial, workers).micro_batches_of(rank); };
  // 4 workers: as configured.
  CHECK(counts(4, 0).least == 2);
  CHECK(counts(4, 3).most == 3);
  CHECK(counts(4, 3).estimate_least == 1);
  CHECK(counts(4, 3).estimate_most == 2);
  // 3 workers share 8 real and 4 estimate micro-batches; caps keep their headroom of one.
  std::size_t real = 0, estimate = 0;
  for (int rank = 0; rank < 3; ++rank) {
    real += counts(3, rank).least;
    estimate += counts(3, rank).estimate_least;
    CHECK(counts(3, rank).most == counts(3, rank).least + 1);
    CHECK(counts(3, rank).estimate_most == counts(3, rank).estimate_least + 1);
  }
  CHECK(real == 8);
  CHECK(estimate == 4);
  CHECK(counts(3, 0).least == 2);
  CHECK(counts(3, 2).least == 3);
  CHECK(counts(3, 0).estimate_least == 1);
  CHECK(counts(3, 2).estimate_least == 2);
  // 6 workers: 4 estimate micro-batches cannot go round, each takes one at least.
  CHECK(counts(6, 0).estimate_least == 1);
  CHECK(counts(6, 5).least == 2);
  CHECK(counts(6, 0).least == 1);
  // Without a global batch every worker keeps the configured counts.
  job.global_batch = 0;
  const job_plan following = plan_job(net, data, job);
  CHECK(following.batch_workers == 0);
  CHECK(following.continued(0, 0, following.initial, 3).micro_batches_of(2).least == 2);
}

TEST_CASE("app_job plans where it starts: what the job's place refuses fails start(), before any thread") {
  app_model m;
  m.signature = "six zeros";
  m.initial_parameters.assign(6, 0.0f);
  job_config job = small_job("ddp");
  job.membership = {{2, 2, false}};
  CHECK_THROWS_WITH_AS(app_job::start(m, job),
                       "an app-driven job in one process has a fixed worker set (no membership changes)",
                       std::invalid_argument);
  job.membership.clear();
  process_group group;  // one process
  CHECK_THROWS_WITH_AS(app_job::start_process(m, job, group), "workers (4) must equal the world size (1)",
                       std::invalid_argument);
  // Planned for an elastic job: a topology that cannot follow workers coming and going says so.
  group.world_size = 4;
  group.elastic = true;
  job.topology = "local-sgd";
  job.topology_settings.set("inner_group", 2);
  CHECK_THROWS_WITH_AS(app_job::start_process(m, job, group),
                       "--topology local-sgd: --inner-group 2 keeps no state yet: checkpoints and workers coming and "
                       "going need --inner-group 1",
                       std::invalid_argument);
}

TEST_CASE("the fingerprint states every declared setting that enters it, a topology's own where its topology reads it") {
  const quadratic net(dim);
  const waves data(dim);
  job_config job = small_job("ddp");
  job.topology = "local-sgd";
  job.topology_settings.set("local_steps", 4);
  const std::string fingerprint = job_fingerprint(net, data, job, "ucx", "");
  for (const job_setting& s : declared_job_settings()) {
    INFO(s.declared.flag);
    // --resume is stated as what the job resumes from (a step and a checksum), not the path.
    if (s.declared.flag != "resume")
      CHECK((fingerprint.find("\n--" + s.declared.flag + "=") != std::string::npos) == s.declared.fingerprint);
  }
  for (const char* row : {"\n--local-steps=4\n", "\n--outer-lr=0.5\n", "\n--gossip-rate=(unused)\n",
                          "\n--group-size=(unused)\n", "\n--optimizer=(the algorithm's)\n", "\n--resume=none\n"})
    CHECK_MESSAGE(fingerprint.find(row) != std::string::npos, row);
  CHECK(fingerprint.find("--max-staleness=") == std::string::npos);  // declared out of the fingerprint
  job_config other = job;
  other.topology_settings.set("local_steps", 5);
  CHECK(fingerprint_difference(fingerprint, job_fingerprint(net, data, other, "ucx", "")) ==
        "--local-steps differs: rank 0 has 4, this worker has 5");
  other = job;
  other.topology_settings.set("gossip_rate", 3.0);  // another topology's: not read, not compared
  CHECK(fingerprint_difference(fingerprint, job_fingerprint(net, data, other, "ucx", "")).empty());
}
