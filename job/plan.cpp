// Planning a job: configuration checks, optimizer and schedule, initial or resumed state.
#include "job/plan.hpp"

#include "cluster/fingerprint.hpp"
#include "gpu/compute_precision.hpp"
#include "models/memory.hpp"
#include "transport/link_model.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace accord {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}


namespace {

std::string hex(std::uint64_t value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

void validate(const job_config& c) {
  require(c.workers >= 1, "workers must be at least 1 (got " + std::to_string(c.workers) + ")");
  require(c.workers <= 65535, "workers must be at most 65535 (votes are counted in 16 bits; got " +
                                  std::to_string(c.workers) + ")");
  require(c.steps >= 1, "steps must be at least 1");
  require(c.micro_batch >= 1, "micro-batch must be at least 1");
  require(c.accumulation >= 1, "accumulation must be at least 1");
  require(c.max_accumulation == 0 || c.max_accumulation >= c.accumulation,
          "max-accumulation must be 0 (no cap) or at least accumulation");
  require(c.estimate_accumulation <= 1'000'000, "estimate accumulation must be at most 1000000 micro-batches (got " +
                                                    std::to_string(c.estimate_accumulation) + "; 0: as accumulation)");
  require(c.speed_factors.empty() || c.speed_factors.size() == static_cast<std::size_t>(c.workers),
          "speed factors: expected " + std::to_string(c.workers) + " values (one per worker), got " +
              std::to_string(c.speed_factors.size()));
  for (double f : c.speed_factors)
    require(f >= 1.0 && f <= 1000.0, "speed factors must be in [1, 1000] (a factor f makes a worker f times slower)");
  require(std::isfinite(c.learning_rate) && c.learning_rate >= 0,
          "learning_rate must be a finite number >= 0 (0: the optimizer's default)");
  for (const auto& [name, beta] : {std::pair{"beta1", c.beta1}, std::pair{"beta2", c.beta2}})
    require(!beta || (*beta >= 0 && *beta <= 1), std::string(name) + " must be in [0, 1] (unset: the optimizer's default)");
  require(std::isfinite(c.epsilon) && c.epsilon > 0, "epsilon must be a finite number > 0");
  require(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight_decay must be a finite number >= 0");
  require(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, "min_lr_ratio must be in [0, 1]");
  require(c.eval_examples >= 1, "eval examples must be at least 1");
}


void require_worker_memory(const model& prototype, int workers) {
  const double parameters = static_cast<double>(prototype.parameter_count());
  require_memory((4.0 * workers + 1) * sizeof(float) * parameters,
                 "workers: " + std::to_string(workers) + " of a model with " +
                     std::to_string(prototype.parameter_count()) + " parameters");
}

optimizer_config optimizer_for(const algorithm& algo, const job_config& c) {
  optimizer_config o;
  const bool votes = algo.aggregate == aggregation::sign_majority || algo.aggregate == aggregation::sign_average;
  o.kind = !votes && !c.optimizer.empty() ? c.optimizer : algo.default_optimizer;
  if (votes && !c.optimizer.empty() && c.optimizer != "lion")
    throw std::invalid_argument("algorithm " + algo.name + " votes on Lion directions; optimizer '" +
                                c.optimizer + "' does not apply");
  if (o.kind == "adamw") {
    o.learning_rate = 3e-3f, o.beta1 = 0.9f, o.beta2 = 0.95f;
  } else if (o.kind == "lion") {
    o.learning_rate = 3e-4f, o.beta1 = 0.9f, o.beta2 = 0.99f;
  } else if (o.kind == "sgd") {
    o.learning_rate = 0.05f, o.beta1 = 0.9f;
  } else {
    throw std::invalid_argument("unknown optimizer '" + o.kind + "' (expected adamw|lion|sgd)");
  }
  if (c.learning_rate > 0) o.learning_rate = c.learning_rate;
  o.beta1 = c.beta1.value_or(o.beta1);
  o.beta2 = c.beta2.value_or(o.beta2);
  // AdamW's bias correction divides by 1 - beta^t.
  require(o.kind != "adamw" || (o.beta1 < 1 && o.beta2 < 1), "beta1 and beta2 must be below 1 for adamw");
  o.epsilon = c.epsilon;
  o.weight_decay = c.weight_decay;
  return o;
}

std::shared_ptr<const topology> job_topology(const job_config& config, const algorithm& algo, const model& prototype,
                                             bool elastic) {
  return make_topology(config.topology,
                       {algo.name, algo.pipe == pipeline::synchronous, algo.aggregate == aggregation::sharded_optimizer,
                        config.workers, config.steps, config.seed, prototype.parameter_count(),
                        !config.checkpoint_path.empty() || !config.resume_path.empty(),
                        elastic || !config.membership.empty(), config.topology_settings});
}

job_plan plan_job(const model& prototype, const dataset& train, const job_config& config,
                  const checkpoint* state, bool elastic) {
  validate(config);
  job_plan plan;
  plan.data_hash = data_hash(train);
  plan.algo = &find_algorithm(config.algorithm);
  require(config.estimate_accumulation == 0 || plan.algo->pipe == pipeline::acco,
          "estimate accumulation: algorithm " + plan.algo->name +
              " has no estimate rounds (only ACCO's pipeline: acco, acco-dlion); leave it 0");
  plan.optimizer = optimizer_for(*plan.algo, config);
  make_optimizer(plan.optimizer, 0);  // its own checks (AdamW's betas below 1, ...) before any actor starts
  plan.schedule.kind = config.cosine ? "cosine" : "constant";
  plan.schedule.peak_learning_rate = plan.optimizer.learning_rate;
  plan.schedule.warmup_steps = config.warmup_steps;
  plan.schedule.total_steps = config.steps;
  plan.schedule.final_fraction = config.min_lr_ratio;
  learning_rate_at(plan.schedule, 0);  // validates the schedule before any actor starts
  link_model::parse(config.link);
  plan.precision.real = parse_wire_precision(config.wire_precision, "wire precision");
  plan.precision.estimate = config.estimate_precision.empty()
                                ? plan.precision.real
                                : parse_wire_precision(config.estimate_precision, "estimate precision");
  require_wire_precision(*plan.algo, plan.precision, config.topology);
  require(parse_compute_precision(config.compute_precision, "compute precision") == compute_precision::fp32 ||
              !prototype.memory().on_host(),
          "compute precision bf16 is for GPU workers; this model runs on the cpu, in fp32");
  plan.rounds = rounds_for_steps(plan.algo->pipe, config.steps);
  plan.topo = job_topology(config, *plan.algo, prototype, elastic || state);
  // Only ACCO's estimate rounds of a sharded optimizer send in the estimate precision.
  const bool sends_estimates = plan.algo->pipe == pipeline::acco && plan.algo->aggregate == aggregation::sharded_optimizer;
  require(plan.topo->group_size() == 1 || !sends_estimates || !block_quantized(plan.precision.estimate),
          "estimate precision: '" + config.estimate_precision + "' is not supported by the hierarchical topology, "
          "whose collectives take fp32|bf16|fp16");
  require(plan.algo->aggregate != aggregation::registered ||
              (!state && config.checkpoint_path.empty() && config.resume_path.empty() && config.membership.empty()),
          "algorithm " + plan.algo->name + " (a registered rule) keeps no checkpointable state: checkpoints, resumes "
          "and membership changes are not supported with it");
  if (!state && config.resume_path.empty()) {
    plan.initial.resize(prototype.parameter_count());
    prototype.initialize(plan.initial, config.seed);
    return plan;
  }
  plan.resume = state ? *state : read_checkpoint(config.resume_path);
  const checkpoint& c = *plan.resume;
  const std::string from = state ? "membership change" : config.resume_path;
  require(c.signature == prototype.signature(),
          from + ": the checkpoint's model " + c.signature + " is not " + prototype.signature());
  require(c.parameters.size() == prototype.parameter_count(), from + ": wrong parameter count");
  if (!state && c.steps == config.steps)
    throw job_already_finished(from + ": the checkpoint is at step " + std::to_string(c.steps) + " of " +
                               std::to_string(config.steps) + ": the job already finished, nothing to do");
  require(c.steps < config.steps, from + ": the checkpoint is at step " + std::to_string(c.steps) +
                                       ", beyond the job's " + std::to_string(config.steps) + " steps");
  require(state || c.data_hash == plan.data_hash,
          from + ": the checkpoint was written training on other data (content hash " + hex(c.data_hash) +
              ", this job's data has " + hex(plan.data_hash) + "): resume with the data it was written with");
  require((plan.algo->aggregate == aggregation::sharded_optimizer) == (c.slots > 0 || c.momenta.empty()),
          from + ": a " + c.algorithm + " checkpoint cannot resume a " + plan.algo->name + " job");
  if (plan.algo->aggregate == aggregation::sharded_optimizer) {
    const std::size_t slots = make_optimizer(plan.optimizer, 0)->state().slots;
    require(c.slots == slots, from + ": the checkpoint holds " + std::to_string(c.slots) + " optimizer slots (" +
                                  c.algorithm + "), " + plan.optimizer.kind + " needs " + std::to_string(slots));
  }
  plan.first_round = rounds_for_steps(plan.algo->pipe, c.steps);
  plan.data_position = c.data_position;
  require_feedback_precision(c, precision_name(plan.precision.real), from);
  plan.initial = c.feedback.empty() ? c.parameters : c.replica;  // error feedback: masters come with the shards
  return plan;
}

}  // namespace accord
