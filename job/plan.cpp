// Planning a job: configuration checks, optimizer and schedule, initial or resumed state.
#include "job/plan.hpp"

#include <accord/config_settings.hpp>

#include "cluster/fingerprint.hpp"
#include "gpu/compute_precision.hpp"
#include "models/memory.hpp"
#include "topologies/asynchronous/workers.hpp"
#include "transport/link_model.hpp"

#include <algorithm>
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
  check_topology_options(c.topology_settings);
}


void require_worker_memory(const model& prototype, int workers) {
  require_memory(worker_buffer_bytes(static_cast<double>(prototype.parameter_count()), workers),
                 "workers: " + std::to_string(workers) + " of a model with " +
                     std::to_string(prototype.parameter_count()) + " parameters");
}

namespace {

// job_config::app_optimizer steps the shards of `o` with its own settings.
void use_app_optimizer(optimizer_config& o, const algorithm& algo, const job_config& c) {
  const elementwise_optimizer& app = *c.app_optimizer;
  require(algo.aggregate == aggregation::sharded_optimizer && c.topology == "ring",
          "app optimizer " + app.name + ": it steps the shards of a sharded-optimizer algorithm (ddp, dpu, acco) on "
          "the ring topology, not " + algo.name + " on " + c.topology);
  require(!app.name.empty() && c.optimizer == app.name,
          "app optimizer '" + app.name + "': job_config::optimizer must be its name (not '" + c.optimizer + "')");
  for (const parameter_group& g : c.parameter_groups)
    require(g.role != "trained", "app optimizer " + app.name + " sets its own rates and decays: parameter_groups "
                                 "may only name values the app keeps (roles averaged, broadcast)");
  o.kind = app.name;
  o.app = &app;
  o.learning_rate = c.learning_rate > 0 ? c.learning_rate : 1.0f;
}

}  // namespace

optimizer_config optimizer_for(const algorithm& algo, const job_config& c) {
  optimizer_config o;
  const bool votes = algo.aggregate == aggregation::sign_majority || algo.aggregate == aggregation::sign_average;
  o.kind = c.app_optimizer || votes || c.optimizer.empty() ? algo.default_optimizer : c.optimizer;
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
  if (!c.parameter_groups.empty() || c.max_gradient_norm != 0) {
    // Only the ring's sharded-optimizer and sign-vote rules know the groups and clip.
    require((algo.aggregate == aggregation::sharded_optimizer || votes) && c.topology == "ring",
            "parameter_groups and max_gradient_norm need a sharded-optimizer or sign-vote algorithm (ddp, dpu, "
            "acco, dlion-mavo, dlion-avg, acco-dlion) on the ring topology, not " + algo.name + " on " + c.topology);
    o.groups = c.parameter_groups;
    o.max_gradient_norm = c.max_gradient_norm;
  }
  if (c.app_optimizer) use_app_optimizer(o, algo, c);
  return o;
}

job_hooks hooks_of(const job_config& config, std::function<void(const step_metrics&)> on_step) {
  job_hooks hooks;
  hooks.on_step = std::move(on_step);
  hooks.stop_requested = config.stop_requested;
  hooks.on_checkpoint_written = config.on_checkpoint_written;
  return hooks;
}

topology_job topology_request_for(const job_config& config, const algorithm& algo, const model& prototype,
                                  bool elastic) {
  return {algo.name, algo.pipe == pipeline::synchronous, algo.aggregate == aggregation::sharded_optimizer,
          config.workers, config.steps, config.seed, prototype.parameter_count(),
          !config.checkpoint_path.empty() || !config.resume_path.empty(),
          elastic || !config.membership.empty(), config.topology_settings};
}

std::shared_ptr<const topology> job_topology(const job_config& config, const algorithm& algo, const model& prototype,
                                             bool elastic) {
  return make_topology(config.topology, topology_request_for(config, algo, prototype, elastic));
}

namespace {

// Makes the topology the settings ask for (it refuses a job it cannot run), and checks what
// depends on it.
void make_topology_of(job_settings& s) {
  s.topo = make_topology(s.topology_name, s.topology_request);
  // Only ACCO's estimate rounds of a sharded optimizer send in the estimate precision.
  const bool sends_estimates = s.algo->pipe == pipeline::acco && s.algo->aggregate == aggregation::sharded_optimizer;
  require(s.topo->group_size() == 1 || !sends_estimates || !block_quantized(s.precision.estimate.gradients),
          "estimate precision: '" + round_wires_name(s.precision.estimate) +
              "' is not supported by the hierarchical topology, whose collectives take fp32|bf16|fp16");
}

// Starts `plan` from checkpoint `c`, which `from` names in errors: a file, or (`kept`) the state
// an in-process membership change kept.
void start_from(job_plan& plan, const model& prototype, checkpoint c, const std::string& from, bool kept) {
  plan.resume = std::move(c);
  const checkpoint& r = *plan.resume;
  require(r.signature == prototype.signature(),
          from + ": the checkpoint's model " + r.signature + " is not " + prototype.signature());
  require(r.parameters.size() == prototype.parameter_count(), from + ": wrong parameter count");
  if (!kept && r.steps == plan.steps)
    throw job_already_finished(from + ": the checkpoint is at step " + std::to_string(r.steps) + " of " +
                               std::to_string(plan.steps) + ": the job already finished, nothing to do");
  require(r.steps < plan.steps, from + ": the checkpoint is at step " + std::to_string(r.steps) +
                                    ", beyond the job's " + std::to_string(plan.steps) + " steps");
  require(kept || r.data_hash == plan.data_hash,
          from + ": the checkpoint was written training on other data (content hash " + hex(r.data_hash) +
              ", this job's data has " + hex(plan.data_hash) + "): resume with the data it was written with");
  require(plan.sharded() == (r.slots > 0 || r.momenta.empty()),
          from + ": a " + r.algorithm + " checkpoint cannot resume a " + plan.algo->name + " job");
  if (plan.sharded()) {
    const std::size_t slots = make_optimizer(plan.optimizer, 0)->state().slots;
    require(r.slots == slots, from + ": the checkpoint holds " + std::to_string(r.slots) + " optimizer slots (" +
                                  r.algorithm + "), " + plan.optimizer.kind + " needs " + std::to_string(slots));
  }
  plan.first_round = rounds_for_steps(plan.algo->pipe, r.steps);
  plan.data_position = r.data_position;
  require_feedback_precision(r, precision_name(plan.precision.real.gradients), from);
  plan.initial = r.feedback.empty() ? r.parameters : r.replica;  // error feedback: masters come with the shards
}

// A cap on micro-batches (0: none) set over `cap_least` keeps its headroom over `least`.
std::size_t keep_headroom(std::size_t cap, std::size_t cap_least, std::size_t least) {
  return cap ? cap - cap_least + least : 0;
}

// job_config's micro-batch counts per round, as job_config::accumulation_mode counts them.
void plan_micro_batches(job_plan& plan, const job_config& config) {
  const std::string& mode = config.accumulation_mode;
  require(mode.empty() || mode == "fixed" || mode == "growing" || mode == "growing-steps",
          "accumulation mode '" + mode + "' is not one of fixed, growing, growing-steps");
  plan.fixed_steps = mode == "fixed";
  if (!plan.fixed_steps) {
    plan.accumulation = config.accumulation;
    plan.max_accumulation = config.max_accumulation;
    plan.estimate_accumulation = config.estimate_accumulation ? config.estimate_accumulation : config.accumulation;
    plan.estimate_max_accumulation = keep_headroom(config.max_accumulation, config.accumulation, plan.estimate_accumulation);
    return;
  }
  const std::string fixed = "accumulation mode fixed: ";
  require(config.max_accumulation == 0 || config.max_accumulation == config.accumulation,
          fixed + "a step takes exactly accumulation (" + std::to_string(config.accumulation) +
              ") micro-batches; max_accumulation (" + std::to_string(config.max_accumulation) +
              ") caps a growing one (accumulation mode growing)");
  if (plan.algo->pipe != pipeline::acco) {
    plan.accumulation = plan.max_accumulation = config.accumulation;
    plan.estimate_accumulation = plan.estimate_max_accumulation = config.accumulation;  // unused
    return;
  }
  // ACCO's step: E micro-batches at θ_t while its estimate round is in flight, A at θ̃ while its
  // real round is; together the step's accumulation.
  require(config.accumulation >= 2, fixed + plan.algo->name + " splits a step's micro-batches between its " +
                                        "estimate and real stages: accumulation must be at least 2 (got " +
                                        std::to_string(config.accumulation) + ")");
  const std::size_t estimates = config.estimate_accumulation ? config.estimate_accumulation : config.accumulation / 2;
  require(estimates < config.accumulation, fixed + "estimate accumulation (" + std::to_string(estimates) +
                                               ") must leave the real stage a micro-batch of the step's " +
                                               std::to_string(config.accumulation));
  plan.estimate_accumulation = plan.estimate_max_accumulation = estimates;
  plan.accumulation = plan.max_accumulation = config.accumulation - estimates;
}

// The worker count a global batch is sized for: it must be a whole number of workers' batches.
int batch_workers_of(const job_config& config, const job_plan& plan) {
  if (config.global_batch == 0) return 0;
  const std::uint64_t per_step = plan.accumulation + (plan.algo->pipe == pipeline::acco ? plan.estimate_accumulation : 0);
  const std::uint64_t per_worker = per_step * config.micro_batch;
  const std::string batch = "global batch " + std::to_string(config.global_batch) + ": ";
  require(config.global_batch % per_worker == 0,
          batch + "not a whole number of workers' batches of " + std::to_string(per_worker) +
              " examples (--micro-batch " + std::to_string(config.micro_batch) + " x " + std::to_string(per_step) +
              " micro-batches per step)");
  require(config.global_batch / per_worker <= 65535, batch + "more than 65535 workers' batches of " +
                                                        std::to_string(per_worker) + " examples");
  require(!as_asynchronous(*plan.topo), batch + "--topology " + config.topology +
                                            " has no global batch (its workers apply gradients on their own)");
  return static_cast<int>(config.global_batch / per_worker);
}

}  // namespace

job_settings::micro_batch_counts job_settings::micro_batches_of(int rank) const {
  if (batch_workers == 0) return {accumulation, max_accumulation, estimate_accumulation, estimate_max_accumulation};
  // rank's share of batch_workers × per_worker among `workers`; the last ranks take the
  // remainder (rank 0's process often coordinates too), and everyone at least one.
  const auto share = [&](std::size_t per_worker) {
    const std::uint64_t total = per_worker * static_cast<std::uint64_t>(batch_workers);
    const std::uint64_t n = static_cast<std::uint64_t>(workers), r = static_cast<std::uint64_t>(rank);
    return static_cast<std::size_t>(std::max<std::uint64_t>(1, total / n + (r >= n - total % n ? 1 : 0)));
  };
  micro_batch_counts counts;
  counts.least = share(accumulation);
  counts.most = keep_headroom(max_accumulation, accumulation, counts.least);
  counts.estimate_least = share(estimate_accumulation);
  counts.estimate_most = keep_headroom(estimate_max_accumulation, estimate_accumulation, counts.estimate_least);
  return counts;
}

std::string job_settings::step_counting() const {
  const bool acco = algo->pipe == pipeline::acco;
  const std::size_t per_step = accumulation + (acco ? estimate_accumulation : 0);
  const std::string examples = " micro-batch" + std::string(per_step == 1 ? "" : "es") + " of " +
                               std::to_string(config.micro_batch) + " examples per worker";
  const std::string stages = acco ? " (" + algo->name + ": " + std::to_string(estimate_accumulation) +
                                        " at the estimate stage, " + std::to_string(accumulation) + " at the real stage)"
                                  : "";
  if (fixed_steps || algo->pipe == pipeline::synchronous)
    return "accord: a step is " + std::to_string(per_step) + examples + stages + ", so N micro-batches make N / " +
           std::to_string(per_step) + " steps; " + std::to_string(steps) + " steps";
  return "accord: a step is at least " + std::to_string(per_step) + examples + stages +
         (max_accumulation ? ", at most " + std::to_string(max_accumulation) + " per stage" : "") +
         ", growing while a round is in flight; " + std::to_string(steps) + " steps, the learning-rate schedule counting " +
         (schedule_micro_batches ? "examples (a nominal step: " + std::to_string(schedule_micro_batches) +
                                       " micro-batches of all workers)"
                                 : std::string("steps"));
}

job_plan plan_job(const model& prototype, const dataset& train, const job_config& config, bool elastic) {
  validate(config);
  job_plan plan;
  plan.data_hash = data_hash(train);
  plan.algo = &find_algorithm(config.algorithm);
  require(config.estimate_accumulation == 0 || plan.algo->pipe == pipeline::acco,
          "estimate accumulation: algorithm " + plan.algo->name +
              " has no estimate rounds (only ACCO's pipeline: acco, acco-dlion); leave it 0");
  plan.optimizer = optimizer_for(*plan.algo, config);
  shard_runs(plan.optimizer.groups, prototype.parameter_count(), 0, 0);  // refuses bad groups before any actor starts
  require(std::isfinite(config.max_gradient_norm) && config.max_gradient_norm >= 0,
          "max_gradient_norm must be finite and >= 0");
  require(std::isfinite(config.bucket_cap_mb) && config.bucket_cap_mb >= 0,
          "bucket_cap_mb must be finite and >= 0 (0: no gradient buckets)");
  make_optimizer(plan.optimizer, 0);  // its own checks (AdamW's betas below 1, ...) before any actor starts
  plan.schedule.kind = config.cosine ? "cosine" : "constant";
  plan.schedule.peak_learning_rate = plan.optimizer.learning_rate;
  plan.schedule.warmup_steps = config.warmup_steps;
  plan.schedule.total_steps = config.steps;
  plan.schedule.final_fraction = config.min_lr_ratio;
  learning_rate_at(plan.schedule, 0);  // validates the schedule before any actor starts
  plan.link = link_model::parse(config.link);
  const std::string inter_link = config.topology_settings.text("inter_link");
  plan.inter_link = inter_link.empty() ? plan.link : link_model::parse(inter_link);
  const bool app_kept_values = std::any_of(config.parameter_groups.begin(), config.parameter_groups.end(),
                                           [](const parameter_group& g) { return g.role != "trained"; });
  plan.precision = resolve_wire_precision(*plan.algo, config.topology, config.wire_precision, config.estimate_precision,
                                          app_kept_values);
  plan.compute = parse_compute_precision(config.compute_precision, "compute precision");
  require(plan.compute == compute_precision::fp32 || !prototype.memory().on_host(),
          "compute precision bf16 is for GPU workers; this model runs on the cpu, in fp32");
  plan.workers = config.workers;
  plan.steps = config.steps;
  plan.rounds = rounds_for_steps(plan.algo->pipe, config.steps);
  plan.topology_name = config.topology;
  plan.topology_request = topology_request_for(config, *plan.algo, prototype, elastic);
  make_topology_of(plan);
  require(plan.algo->aggregate != aggregation::registered ||
              (config.checkpoint_path.empty() && config.resume_path.empty() && config.membership.empty()),
          "algorithm " + plan.algo->name + " (a registered rule) keeps no checkpointable state: checkpoints, resumes "
          "and membership changes are not supported with it");

  require_declared_ranges(config);  // the rest of the flags' ranges, after the checks that say more
  plan.config = config;
  plan.config.stop_requested = nullptr;  // the hooks travel apart (job_hooks)
  plan.config.on_checkpoint_written = nullptr;
  plan_micro_batches(plan, config);
  plan.batch_workers = batch_workers_of(config, plan);
  if (config.accumulation_mode == "growing") {
    const std::uint64_t per_step = plan.accumulation + (plan.algo->pipe == pipeline::acco ? plan.estimate_accumulation : 0);
    plan.schedule_micro_batches = per_step * static_cast<std::uint64_t>(plan.batch_workers ? plan.batch_workers : plan.workers);
  }

  if (config.resume_path.empty()) {
    plan.initial.resize(prototype.parameter_count());
    prototype.initialize(plan.initial, config.seed);
  } else {
    start_from(plan, prototype, read_checkpoint(config.resume_path), config.resume_path, false);
  }
  return plan;
}

job_plan plan_epoch(const job_plan& job, const model& prototype, int workers, std::uint64_t steps,
                    const checkpoint* state) {
  job_plan epoch;
  static_cast<job_settings&>(epoch) = job;
  epoch.workers = workers;
  epoch.steps = steps;
  epoch.rounds = rounds_for_steps(epoch.algo->pipe, steps);
  epoch.config.membership.clear();
  epoch.config.checkpoint_interval = 1;  // every step's state survives a crash in the next one
  // The topology for this worker set: a later epoch continues from a kept state, not a file.
  epoch.topology_request.workers = workers;
  epoch.topology_request.steps = steps;
  epoch.topology_request.membership_changes = state != nullptr;
  if (state) epoch.config.resume_path.clear();
  epoch.topology_request.checkpoints = !epoch.config.checkpoint_path.empty() || !epoch.config.resume_path.empty();
  make_topology_of(epoch);
  if (state) {
    start_from(epoch, prototype, *state, "membership change", true);
  } else if (job.resume) {
    start_from(epoch, prototype, *job.resume, job.config.resume_path, false);
  } else {
    epoch.initial = job.initial;
  }
  return epoch;
}

}  // namespace accord
