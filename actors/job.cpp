// run_job: builds the actors of a job for one process and waits for the coordinator.
#include <accord/job.hpp>

#include <accord/blas_threads.hpp>

#include "actors/accumulator_actor.hpp"
#include "actors/algorithm.hpp"
#include "actors/checkpoint.hpp"
#include "actors/communicator_actor.hpp"
#include "actors/compute_actor.hpp"
#include "actors/coordinator_actor.hpp"
#include "actors/elastic_state.hpp"
#include "actors/fingerprint.hpp"
#include "actors/master_port_guard.hpp"
#include "actors/membership_actor.hpp"
#include "actors/update_rule.hpp"
#include "models/memory.hpp"
#include "optim/schedule.hpp"
#include "transport/inproc.hpp"
#include "transport/link_model.hpp"
#include "transport/ucx/ucx_transport.hpp"
#if ACCORD_HAVE_CUDA
#include "gpu/nccl_transport.hpp"
#endif

#include <caf/io/all.hpp>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace accord {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

std::string hex(std::uint64_t value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Every field of a job, before any actor system exists: an exception while actors run must
// stay the exception, not the rule.
void validate(const job_config& c) {
  require(c.workers >= 1, "workers must be at least 1 (got " + std::to_string(c.workers) + ")");
  require(c.workers <= 65535, "workers must be at most 65535 (votes are counted in 16 bits; got " +
                                  std::to_string(c.workers) + ")");
  require(c.steps >= 1, "steps must be at least 1");
  require(c.micro_batch >= 1, "micro-batch must be at least 1");
  require(c.accumulation >= 1, "accumulation must be at least 1");
  require(c.max_accumulation == 0 || c.max_accumulation >= c.accumulation,
          "max-accumulation must be 0 (no cap) or at least accumulation");
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

// Each in-process worker runs two threads (its compute and communicator actors).
constexpr int max_workers_in_process = 1024;

// The floor of what `workers` workers of `prototype` hold in this process: four parameter-sized
// buffers each (replica, gradient being filled, gradient on the wire, a spare) and the initial
// parameters. Checked before any of it is allocated.
void require_worker_memory(const model& prototype, int workers) {
  const double parameters = static_cast<double>(prototype.parameter_count());
  require_memory((4.0 * workers + 1) * sizeof(float) * parameters,
                 "workers: " + std::to_string(workers) + " of a model with " +
                     std::to_string(prototype.parameter_count()) + " parameters");
}

// Runs `stop(unwinding)` when the scope ends, by an exception too. Actor handles held outside
// an actor system's scope keep their actors running, and the system's destructor waits for
// every running actor: an exception that skipped their shutdown used to hang the process there.
template <class Stop>
class scope_exit {
public:
  explicit scope_exit(Stop stop) : stop_(std::move(stop)) {}
  scope_exit(const scope_exit&) = delete;
  scope_exit& operator=(const scope_exit&) = delete;
  ~scope_exit() {
    try {
      stop_(std::uncaught_exceptions() > exceptions_);
    } catch (...) {  // cleaning up after a failure must not replace it (or terminate the process)
    }
  }

private:
  Stop stop_;
  int exceptions_ = std::uncaught_exceptions();
};

optimizer_config optimizer_for(const algorithm& algo, const job_config& c) {
  optimizer_config o;
  o.kind = algo.aggregate == aggregation::sharded_optimizer && !c.optimizer.empty() ? c.optimizer
                                                                                     : algo.default_optimizer;
  if (algo.aggregate != aggregation::sharded_optimizer && !c.optimizer.empty() && c.optimizer != "lion")
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

// Everything about a job that every process derives identically from the configuration.
struct job_plan {
  const algorithm* algo = nullptr;
  optimizer_config optimizer;
  schedule_config schedule;
  std::uint64_t first_round = 0;           // > 0 when resuming
  std::uint64_t rounds = 0;
  std::uint64_t data_position = 0;         // stream positions consumed before the first round
  std::vector<float> initial;
  std::optional<checkpoint> resume;        // where the optimizer state comes from, when resuming
  std::uint64_t data_hash = 0;             // of the training data, recorded in checkpoints
  round_precision precision;

  bool sharded() const { return algo->aggregate == aggregation::sharded_optimizer; }
  // The same job continued from `parameters` after `steps` steps, at `position` in the data
  // (an elastic epoch's plan; its optimizer state comes separately).
  job_plan continued(std::uint64_t steps, std::uint64_t position, std::vector<float> parameters) const {
    job_plan next;
    next.algo = algo;
    next.optimizer = optimizer;
    next.schedule = schedule;
    next.precision = precision;
    next.rounds = rounds;
    next.first_round = rounds_for_steps(algo->pipe, steps);
    next.data_position = position;
    next.initial = std::move(parameters);
    next.data_hash = data_hash;
    return next;
  }
  // The job's clock at the first step: a resumed job goes on from its checkpoint's.
  std::chrono::steady_clock::duration clock_before() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(resume ? resume->seconds : 0));
  }
  // How every process describes what it resumes from (in the fingerprint).
  std::string resumed_from() const {
    if (!resume) return {};
    char text[64];
    std::snprintf(text, sizeof text, "step %llu, crc32 %08x", static_cast<unsigned long long>(resume->steps),
                  static_cast<unsigned>(resume->crc));
    return text;
  }
  // Rank `rank` of `world`'s share of the resumed optimizer state (none when starting afresh).
  std::optional<rule_state> state_of(int world, int rank) const {
    if (!resume) return std::nullopt;
    return slice_checkpoint(*resume, sharded(), world, rank);
  }
};

// `state`: continue from this in-memory checkpoint (a membership change) instead of
// config.resume_path.
job_plan plan_job(const model& prototype, const dataset& train, const job_config& config,
                  const checkpoint* state = nullptr) {
  validate(config);
  job_plan plan;
  plan.data_hash = data_hash(train);
  plan.algo = &find_algorithm(config.algorithm);
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
  plan.rounds = rounds_for_steps(plan.algo->pipe, config.steps);
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
  plan.initial = c.parameters;
  return plan;
}

// Each compute actor stands for one device: BLAS threads share the cores among them, and among
// the other processes on this machine (include/accord/blas_threads.hpp).
void size_blas(const job_config& config, int local_workers) {
  openblas_set_num_threads(choose_blas_threads(config.blas_threads, local_workers).threads);
}

// Rank 0's master port: a client handshake is a few hundred bytes; the largest later message
// is a report carrying a worker's optimizer state (at most two slots of the parameters).
master_port_limits master_limits(const process_group& group, std::size_t parameter_count) {
  master_port_limits limits;
  const std::uint64_t state_bytes = 2 * std::uint64_t{parameter_count} * sizeof(float);
  limits.message_payload =
      static_cast<std::uint32_t>(std::min<std::uint64_t>((1u << 20) + state_bytes, UINT32_MAX));
  limits.max_pending = group.world_size + 16;
  limits.max_connections = 2 * group.world_size + 16;  // elastic jobs admit joiners
  limits.idle_timeout = std::max(2 * group.heartbeat_timeout, std::chrono::milliseconds(10'000));
  return limits;
}

void configure_system(caf::actor_system_config& system_config) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  system_config.set("scheduler.max-threads", std::max(2, cores));
  add_control_message_types(system_config);
  add_membership_message_types(system_config);
}

// The actors one process runs for a job, and what they account for.
struct local_actors {
  std::vector<caf::actor> everyone;
  std::shared_ptr<memory_meter> meter = std::make_shared<memory_meter>();
  std::size_t state_bytes = 0;
  int workers = 0;
  std::vector<float> final_parameters;  // written by the lowest local rank's accumulator

  template <class Handle>
  Handle keep(Handle h) {
    everyone.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }
  // Handles keep actors alive, and the actor system's destructor waits for detached actors:
  // drop them all once the exits are sent.
  void shut_down(caf::scoped_actor& self) {
    for (auto& a : everyone) self->send_exit(a, caf::exit_reason::user_shutdown);
    everyone.clear();
  }
  void account(job_result& result, std::size_t parameter_count) const {
    result.parameters = final_parameters;
    result.state_bytes_per_worker = state_bytes / static_cast<std::size_t>(workers);
    result.peak_bytes_per_worker = meter->peak / static_cast<std::size_t>(workers) + result.state_bytes_per_worker;
    result.minimum_bytes_per_worker = 3 * parameter_count * sizeof(float) + result.state_bytes_per_worker;
  }
};

// The coordinator of a job (or of an elastic job's epoch) as the plan and configuration say;
// callers add what they observe (on_step, result, ...).
coordinator_setup coordination_for(const job_plan& plan, const model& prototype, const job_config& config,
                                   evaluator_actor evaluator) {
  coordinator_setup setup;
  setup.workers = config.workers;
  setup.pipe = plan.algo->pipe;
  setup.first_round = plan.first_round;
  setup.rounds = plan.rounds;
  setup.parameter_count = plan.initial.size();
  setup.micro_batch = config.micro_batch;
  setup.data_offset = plan.data_position;
  setup.checkpoint_path = config.checkpoint_path;
  setup.checkpoint_interval = config.checkpoint_interval;
  setup.algorithm = plan.algo->name;
  setup.signature = prototype.signature();
  setup.eval_interval = config.eval_interval;
  setup.evaluator = std::move(evaluator);
  setup.defer_evaluation = config.defer_evaluation;
  setup.metrics_path = config.metrics_path;
  setup.append_metrics = plan.resume.has_value();  // a resumed job's file goes on
  setup.data_hash = plan.data_hash;
  setup.started = std::chrono::steady_clock::now() - plan.clock_before();
  return setup;
}

evaluator_actor spawn_evaluation(caf::actor_system& system, local_actors& local, const model& prototype,
                                 std::shared_ptr<const dataset> eval, const job_config& config) {
  return local.keep(
      spawn_evaluator_actor(system, prototype.clone(), std::move(eval), config.eval_examples));
}

// One worker of an epoch: where it sits and what it starts from.
struct worker_spec {
  int rank = 0;
  std::shared_ptr<transport> link;
  coordinator_actor coordinator;
  std::optional<rule_state> state;  // its restored optimizer shard or momentum
  // Snapshot the optimizer state at checkpoint steps even without a file (in-process elastic).
  bool keeps_state = false;
  // Emulated crash: this worker dies at the start of round `crash_round`.
  std::function<void()> crash;
  std::uint64_t crash_round = 0;
  // Elastic between processes: keep every `keep_interval`-th step's state in `keeper` (layout:
  // this epoch), and vote for ending the epoch once `change_epoch` names this epoch.
  std::shared_ptr<state_keeper> keeper;
  std::uint64_t layout = 0;
  std::uint64_t keep_interval = 0;
  std::shared_ptr<const std::atomic<std::uint64_t>> change_epoch;
};

// Spawns one worker's compute, communicator and accumulator actors.
accumulator_actor spawn_worker(caf::actor_system& system, local_actors& local, const job_plan& plan,
                               const model& prototype, std::shared_ptr<const dataset> train,
                               const job_config& config, worker_spec spec) {
  const int workers = config.workers;
  const int rank = spec.rank;
  auto compute = std::make_shared<compute_setup>();
  compute->net = prototype.clone();
  compute->data = std::move(train);
  compute->stream = {rank, workers, config.micro_batch, plan.data_position};
  compute->parameters = make_tensor(plan.initial, local.meter);
  // A resumed 16-bit job computes with the rounded copy of its masters, as it did before.
  if (plan.resume && plan.algo->aggregate == aggregation::sharded_optimizer)
    round_to_wire(plan.precision.real, *compute->parameters);
  compute->speed_factor = config.speed_factors.empty() ? 1.0 : config.speed_factors[static_cast<std::size_t>(rank)];
  auto communication = std::make_shared<communicator_setup>();
  communication->link = std::move(spec.link);
  communication->rule = make_update_rule(plan.algo->aggregate, plan.optimizer, plan.initial, workers, rank,
                                         plan.precision, spec.state ? &*spec.state : nullptr);
  communication->hash_interval = config.replica_check_interval;
  communication->crash = std::move(spec.crash);
  communication->crash_round = spec.crash_round;
  communication->keeper = spec.keeper;
  communication->pipe = plan.algo->pipe;
  communication->layout = spec.layout;
  communication->replicate = plan.sharded();
  communication->change_epoch = spec.change_epoch;
  communication->stop_requested = config.stop_requested;
  local.state_bytes += communication->rule->state_bytes();

  accumulator_setup accumulation;
  accumulation.rank = rank;
  accumulation.pipe = plan.algo->pipe;
  accumulation.first_round = plan.first_round;
  accumulation.rounds = plan.rounds;
  accumulation.dpu_warmup = config.dpu_warmup;
  accumulation.accumulation = config.accumulation;
  accumulation.max_accumulation = config.max_accumulation;
  accumulation.parameter_count = plan.initial.size();
  accumulation.learning_rate = [schedule = plan.schedule](std::uint64_t step) {
    return learning_rate_at(schedule, step);
  };
  const bool checkpoints = !config.checkpoint_path.empty() || spec.keeps_state;
  auto checkpoint_due = [checkpoints, pipe = plan.algo->pipe, rounds = plan.rounds,
                         interval = config.checkpoint_interval](std::uint64_t round) {
    return checkpoints && step_due(pipe, round, rounds, interval);
  };
  accumulation.wants_parameters = [rank, checkpoint_due, pipe = plan.algo->pipe, rounds = plan.rounds,
                                   interval = config.eval_interval](std::uint64_t round) {
    return rank == 0 && (step_due(pipe, round, rounds, interval) || checkpoint_due(round));
  };
  accumulation.wants_snapshot = checkpoint_due;
  if (spec.keeper && spec.keep_interval)
    accumulation.wants_kept = [pipe = plan.algo->pipe, rounds = plan.rounds,
                               interval = spec.keep_interval](std::uint64_t round) {
      return step_due(pipe, round, rounds, interval);
    };
  if (local.workers++ == 0)
    accumulation.on_final_parameters = [&local](const std::vector<float>& p) { local.final_parameters = p; };
  accumulation.compute = local.keep(spawn_compute_actor(system, std::move(compute)));
  accumulation.communicator = local.keep(spawn_communicator_actor(system, std::move(communication)));
  accumulation.coordinator = spec.coordinator;
  accumulation.meter = local.meter;
  return local.keep(spawn_accumulator_actor(system, std::move(accumulation)));
}

// Starts the accumulators and waits for the verdict of `judge` (the coordinator, or the agent
// relaying it): empty, or what failed.
template <class Judge, class... Ts>
std::optional<std::string> run_to_end(caf::actor_system& system, caf::scoped_actor& self,
                                      const std::vector<accumulator_actor>& accumulators, Judge judge,
                                      Ts... about) {
  std::optional<std::string> failure;
  for (auto& a : accumulators) self->send(a, start_atom::value);
  self->request(judge, caf::infinite, wait_atom::value, about...)
      .receive([](bool) {}, [&](caf::error& e) { failure = describe(system, e); });
  return failure;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Rank 0's membership actor at host:port. Unlike middleman::remote_actor, gives up after
// `timeout` when the port accepts the connection but never answers CAF's handshake.
caf::expected<membership_actor> find_membership(caf::actor_system& system, const std::string& host, int port,
                                                std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  caf::expected<membership_actor> result{caf::sec::request_timeout};
  self->request(system.middleman().actor_handle(), timeout, caf::connect_atom::value, host,
                static_cast<std::uint16_t>(port))
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& found, const std::set<std::string>& interface) {
            if (!found)
              result = caf::make_error(caf::sec::no_actor_published_at_port, "no actor published at the port");
            else if (!system.assignable<membership_actor>(interface))
              result = caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                                       "the actor at the port is not an accord membership actor");
            else
              result = caf::actor_cast<membership_actor>(std::move(found));
          },
          [&](caf::error& e) { result = std::move(e); });
  return result;
}

// How the ranks of an epoch find each other's transport: each member publishes an address
// with its epoch request, then connects knowing everyone's.
class transport_rendezvous {
public:
  virtual ~transport_rendezvous() = default;
  virtual std::string address() const = 0;
  virtual std::unique_ptr<transport> connect(int rank, const std::vector<std::string>& addresses,
                                             std::uint64_t epoch) = 0;
  // From another thread: a connect() waiting for a peer that died gives up.
  virtual void interrupt(const std::string& why) = 0;
};

class ucx_rendezvous final : public transport_rendezvous {
public:
  ucx_rendezvous(const process_group& group, const std::string& host) : listener_(listen(group, host)) {}
  std::string address() const override { return listener_.address(); }
  std::unique_ptr<transport> connect(int rank, const std::vector<std::string>& addresses,
                                     std::uint64_t epoch) override {
    return std::move(listener_).connect(rank, addresses, epoch);
  }
  void interrupt(const std::string& why) override { listener_.interrupt(why); }

private:
  static ucx_listener listen(const process_group& group, const std::string& host) {
    ucx_options options;
    options.connect_timeout = group.connect_timeout;
    if (is_loopback(host) && !std::getenv("UCX_NET_DEVICES")) options.net_devices = "lo";
    return ucx_listener(host + ":0", options);
  }
  ucx_listener listener_;
};

#if ACCORD_HAVE_CUDA
// NCCL needs one unique id for the whole communicator: rank 0 of the epoch (always rank 0's
// process) makes it and publishes it as its "address" (hex); every rank then joins the
// communicator on its own GPU.
class nccl_rendezvous final : public transport_rendezvous {
public:
  nccl_rendezvous(const process_group& group, bool makes_id) : local_rank_(group.local_rank) {
    if (!makes_id) return;
    const nccl_unique_id id = make_nccl_unique_id();
    static const char digits[] = "0123456789abcdef";
    for (std::byte b : id) {
      hex_ += digits[std::to_integer<int>(b) >> 4];
      hex_ += digits[std::to_integer<int>(b) & 15];
    }
  }
  std::string address() const override { return hex_; }
  std::unique_ptr<transport> connect(int rank, const std::vector<std::string>& addresses, std::uint64_t) override {
    const std::string& hex = addresses.at(0);
    nccl_unique_id id{};
    if (hex.size() != 2 * id.size()) throw transport_error("rank 0 published a malformed NCCL unique id");
    for (std::size_t i = 0; i < id.size(); ++i)
      id[i] = static_cast<std::byte>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    return std::make_unique<nccl_transport>(id, rank, static_cast<int>(addresses.size()), local_rank_);
  }
  // ncclCommInitRank blocks on the host and cannot be interrupted (gpu/nccl_transport.hpp).
  void interrupt(const std::string&) override {}

private:
  int local_rank_;
  std::string hex_;
};
#endif

std::unique_ptr<transport_rendezvous> make_rendezvous(const process_group& group, const std::string& host,
                                                      bool master) {
  if (group.transport == "ucx") return std::make_unique<ucx_rendezvous>(group, host);
  if (group.transport == "nccl") {
#if ACCORD_HAVE_CUDA
    return std::make_unique<nccl_rendezvous>(group, master);
#else
    (void)master;
    throw std::invalid_argument("transport nccl: this build has no CUDA/NCCL (nvcc was not found at configure time)");
#endif
  }
  throw std::invalid_argument("unknown transport '" + group.transport + "' (expected ucx|nccl)");
}

// Averages of the per-step figures over a job's steps.
void average_over_steps(job_result& r) {
  r.bits_per_parameter_per_step = r.hidden_fraction = 0;
  for (const auto& m : r.steps) {
    r.bits_per_parameter_per_step += m.bits_per_parameter / static_cast<double>(r.steps.size());
    r.hidden_fraction += m.hidden_fraction / static_cast<double>(r.steps.size());
  }
}

// How long rank 0's process waits, at the end, for the other members to hear that the job is over.
constexpr auto release_timeout = std::chrono::seconds(30);

// What a worker process carries from epoch to epoch.
struct process_member {
  std::uint64_t id = 0;
  membership_actor membership;
  member_agent agent;
  std::shared_ptr<state_keeper> keeper = std::make_shared<state_keeper>();
  std::shared_ptr<std::atomic<std::uint64_t>> change_epoch = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::shared_ptr<epoch_link> link = std::make_shared<epoch_link>();
  std::vector<float> parameters;  // the latest epoch's final parameters
  local_actors last_epoch;        // for the memory figures
};

// Runs this process's worker for one epoch of `plan`. A failure (a peer lost, a transfer
// broken) is the epoch's coordinator's to report; the process then asks for the next epoch.
void run_process_epoch(caf::actor_system& system, caf::scoped_actor& self, const model& prototype,
                       std::shared_ptr<const dataset> train, const job_config& config, const job_plan& origin,
                       const epoch_plan& plan, transport_rendezvous& rendezvous, bool elastic,
                       process_member& me) {
  job_config epoch_config = config;
  epoch_config.workers = plan.world;
  const std::size_t n = origin.initial.size();
  std::shared_ptr<transport> link;
  std::vector<float> parameters;
  std::optional<rule_state> state;
  try {
    me.link->set(plan.epoch, [&rendezvous](const std::string& why) { rendezvous.interrupt(why); });
    link = rendezvous.connect(plan.rank, plan.addresses, plan.epoch);
    me.link->set(plan.epoch, [link](const std::string& why) { link->interrupt(why); });
    if (plan.from_origin) {
      parameters = origin.initial;
      state = origin.state_of(plan.world, plan.rank);
    } else {
      restored_state restored = transfer_state(*link, plan.source, me.keeper->find(plan.source.layout, plan.source.steps),
                                               n, origin.sharded());
      parameters = std::move(restored.parameters);
      if (restored.own.present) state = std::move(restored.own);
      self->send(me.membership, restored_atom::value,
                 restored_report{plan.epoch, plan.rank, hash_parameters(parameters),
                                 state ? state_checksum(*state, n) : 0});
    }
  } catch (const std::exception& e) {
    if (link) link->interrupt("epoch " + std::to_string(plan.epoch) + " failed to start");
    me.link->set(0, {});
    self->send(plan.coordinator, worker_failure{plan.rank, std::string("epoch start: ") + e.what()});
    return;
  }
  const job_plan epoch = origin.continued(plan.start_steps, plan.data_position, std::move(parameters));
  local_actors local;
  const scope_exit stop_on_exception([&](bool unwinding) {
    if (!unwinding) return;
    link->interrupt("epoch " + std::to_string(plan.epoch) + " failed");
    local.shut_down(self);
  });
  worker_spec spec;
  spec.rank = plan.rank;
  spec.link = link;
  spec.coordinator = plan.coordinator;
  spec.state = std::move(state);
  spec.keeper = me.keeper;
  spec.layout = plan.epoch;
  spec.keep_interval = elastic ? std::max<std::uint64_t>(1, config.keep_interval) : 0;
  spec.change_epoch = me.change_epoch;
  const std::vector<accumulator_actor> accumulators{
      spawn_worker(system, local, epoch, prototype, std::move(train), epoch_config, std::move(spec))};
  // After a failure the communicator may wait on a dead peer: unblock it before shutting down.
  if (const auto failure = run_to_end(system, self, accumulators, me.agent, plan.coordinator))
    link->interrupt("epoch " + std::to_string(plan.epoch) + " ended: " + *failure);
  local.shut_down(self);
  me.link->set(0, {});
  if (!local.final_parameters.empty()) me.parameters = std::move(local.final_parameters);
  me.last_epoch.meter = local.meter;
  me.last_epoch.state_bytes = local.state_bytes;
  me.last_epoch.workers = local.workers;
}

}  // namespace

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& a : algorithms()) names.push_back(a.name);
  return names;
}

namespace {

// One epoch of an in-process job: a fixed worker set from `state` (or the start, or
// config.resume_path) to config.steps. With `keep_state`, every step's state is handed to it;
// with `crash_after_step`, the last worker dies in the round after that step, once the state
// after that step has been kept. `epoch` numbers it in the metrics.
job_result run_epoch(const model& prototype, std::shared_ptr<const dataset> train,
                     std::shared_ptr<const dataset> eval, const job_config& config,
                     std::function<void(const step_metrics&)> on_step, const checkpoint* state = nullptr,
                     std::function<void(const checkpoint&)> keep_state = {},
                     std::optional<std::uint64_t> crash_after_step = {}, std::uint64_t epoch = 1) {
  const job_plan plan = plan_job(prototype, *train, config, state);
  const int workers = config.workers;
  size_blas(config, workers);
  inproc_fabric fabric(workers, link_model::parse(config.link));
  // After a failure every transport throws, so no communicator stays blocked in a collective.
  auto fail_everyone = [&fabric, workers] {
    for (int rank = 0; rank < workers; ++rank) fabric.fail(rank);
  };
  auto result = std::make_shared<job_result>();
  caf::actor_system_config system_config;
  configure_system(system_config);
  local_actors local;
  std::optional<std::string> failure;
  {
    caf::actor_system system{system_config};
    caf::scoped_actor self{system};
    const scope_exit stop_on_exception([&](bool unwinding) {
      if (!unwinding) return;
      fail_everyone();  // no communicator may stay blocked in a collective
      local.shut_down(self);
    });
    const bool keeps_state = static_cast<bool>(keep_state);
    // The emulated crash waits until the state after `crash_after_step` is kept: the workers
    // run ahead of the coordinator, and a death noticed first would fail the epoch before it.
    struct {
      std::mutex mutex;
      std::condition_variable changed;
      bool kept = false;
    } crash_gate;
    auto keep = [&, keep_state = std::move(keep_state)](const checkpoint& c) {
      keep_state(c);
      if (crash_after_step && c.steps == *crash_after_step) {
        std::lock_guard lock(crash_gate.mutex);
        crash_gate.kept = true;
        crash_gate.changed.notify_all();
      }
    };
    coordinator_setup setup =
        coordination_for(plan, prototype, config, spawn_evaluation(system, local, prototype, eval ? eval : train, config));
    setup.on_step = std::move(on_step);
    setup.epoch = epoch;
    setup.append_metrics = setup.append_metrics || epoch > 1;  // the file continues the earlier epochs'
    setup.abort = fail_everyone;
    setup.result = result;
    if (keeps_state) setup.on_checkpoint = keep;
    auto coordinator = local.keep(spawn_coordinator_actor(system, std::move(setup)));
    std::vector<accumulator_actor> accumulators;
    for (int rank = 0; rank < workers; ++rank) {
      std::function<void()> crash;
      if (crash_after_step && rank == workers - 1)
        crash = [&fabric, &crash_gate, rank] {
          std::unique_lock lock(crash_gate.mutex);
          crash_gate.changed.wait_for(lock, std::chrono::minutes(2), [&] { return crash_gate.kept; });
          fabric.fail(rank);
        };
      worker_spec spec;
      spec.rank = rank;
      spec.link = fabric.endpoint(rank);
      spec.coordinator = coordinator;
      spec.state = plan.state_of(workers, rank);
      spec.keeps_state = keeps_state;
      spec.crash = std::move(crash);
      spec.crash_round = crash_after_step ? rounds_for_steps(plan.algo->pipe, *crash_after_step) : 0;
      accumulators.push_back(spawn_worker(system, local, plan, prototype, train, config, std::move(spec)));
    }
    failure = run_to_end(system, self, accumulators, coordinator);
    if (failure) fail_everyone();
    local.shut_down(self);
  }
  if (failure) throw std::runtime_error(*failure);
  local.account(*result, plan.initial.size());
  return std::move(*result);
}

}  // namespace

job_result run_job(const model& prototype, std::shared_ptr<const dataset> train,
                   std::shared_ptr<const dataset> eval, const job_config& config,
                   std::function<void(const step_metrics&)> on_step) {
  if (!train) throw std::invalid_argument("no training data set");
  validate(config);
  if (!config.checkpoint_path.empty()) check_checkpoint_path(config.checkpoint_path);
  const std::string in_process_limit =
      " in one process exceed " + std::to_string(max_workers_in_process) + " (each runs two threads)";
  require(config.workers <= max_workers_in_process, "workers: " + std::to_string(config.workers) + in_process_limit);
  // Membership changes, all checked before the first epoch starts.
  require(config.membership.empty() || config.speed_factors.empty(),
          "speed factors cannot be combined with membership changes");
  int workers = config.workers, most_at_once = config.workers;
  std::uint64_t last = 0;
  for (const auto& change : config.membership) {
    require(change.step > last && change.step < config.steps,
            "membership changes must come at increasing steps inside 1.." + std::to_string(config.steps - 1));
    require(change.workers >= 1, "a membership change must leave at least 1 worker");
    require(change.workers <= max_workers_in_process,
            "membership: " + std::to_string(change.workers) + " workers" + in_process_limit);
    require(!change.crash || change.workers < workers, "a crash must leave fewer workers");
    last = change.step;
    workers = change.workers;
    most_at_once = std::max(most_at_once, workers);
  }
  require_worker_memory(prototype, most_at_once);
  if (config.membership.empty()) return run_epoch(prototype, train, eval, config, std::move(on_step));

  // Elastic: one epoch per worker set, each continuing from the state the previous one left.
  job_result total;
  std::optional<checkpoint> state;
  auto keep = [&state](const checkpoint& c) { state = c; };
  const auto started = std::chrono::steady_clock::now();
  auto record = [&](step_metrics m) {
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    total.steps.push_back(m);
    if (on_step) on_step(m);
  };
  job_config epoch = config;
  epoch.membership.clear();
  epoch.checkpoint_interval = 1;  // every step's state survives a crash in the next one
  for (std::size_t e = 0; e <= config.membership.size(); ++e) {
    const bool last_epoch = e == config.membership.size();
    const membership_change* change = last_epoch ? nullptr : &config.membership[e];
    epoch.steps = last_epoch ? config.steps : change->step;
    std::optional<std::uint64_t> crash_after;
    if (change && change->crash) {  // run into the next step and lose a worker during it
      epoch.steps = change->step + 1;
      crash_after = change->step;
    }
    const checkpoint* from = state ? &*state : nullptr;
    std::string crash_report;
    try {
      add_epoch_result(total, run_epoch(prototype, train, eval, epoch, record, from, keep, crash_after, e + 1));
    } catch (const std::runtime_error& e) {
      if (!crash_after) throw;  // only the scripted crash is survivable here
      crash_report = e.what();
      while (!total.steps.empty() && total.steps.back().step > change->step) total.steps.pop_back();
    }
    if (config.stop_requested && config.stop_requested->load()) break;
    if (change) {
      if (!state || state->steps != change->step)
        throw std::runtime_error("no state was kept at step " + std::to_string(change->step) +
                                 (crash_report.empty() ? "" : " (the epoch failed: " + crash_report + ")"));
      epoch.workers = change->workers;
      epoch.resume_path.clear();
    }
  }
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  average_over_steps(total);
  return total;
}

job_result run_job_process(const model& prototype, std::shared_ptr<const dataset> train,
                           std::shared_ptr<const dataset> eval, const job_config& config,
                           const process_group& group, std::function<void(const step_metrics&)> on_step) {
  if (!train) throw std::invalid_argument("no training data set");
  if (!group.join) {
    require(group.world_size >= 1, "world size must be at least 1");
    require(group.rank >= 0 && group.rank < group.world_size,
            "rank " + std::to_string(group.rank) + " outside 0.." + std::to_string(group.world_size - 1));
    require(config.workers == group.world_size, "workers (" + std::to_string(config.workers) +
                                                    ") must equal the world size (" +
                                                    std::to_string(group.world_size) + ")");
  }
  require(group.master_port > 0 && group.master_port < 65536, "master port must be in 1..65535");
  require(config.membership.empty(),
          "membership changes are emulated in one process only; between processes, start (--join) and stop workers");
  require(config.speed_factors.empty() || !(group.elastic || group.join),
          "speed factors cannot be combined with an elastic job");
  require(!config.stop_requested || !(group.elastic || group.join),
          "an elastic job's workers leave (process_group::leave_requested) rather than stop the job");
  std::string host = group.host;
  if (host.empty()) {
    require(is_loopback(group.master_addr),
            "process_group.host (this rank's reachable address) is required when the master is not on loopback");
    host = "127.0.0.1";
  }
  require(group.transport == "ucx" || group.transport == "nccl",
          "unknown transport '" + group.transport + "' (expected ucx|nccl)");
  require_worker_memory(prototype, 1);
  const job_plan origin = plan_job(prototype, *train, config);
  const bool master = !group.join && group.rank == 0;
  if (master && !config.checkpoint_path.empty()) check_checkpoint_path(config.checkpoint_path);
  size_blas(config, 1);
  auto system_config = std::make_unique<caf::actor_system_config>();
  configure_system(*system_config);
  system_config->load<caf::io::middleman>();
  // Every process sends heartbeats; a peer silent for the timeout (hung, or its machine gone)
  // loses its connection, and the membership actor hears of it as of a death.
  const auto heartbeat = std::max(group.heartbeat_timeout, std::chrono::milliseconds(100));
  system_config->set("middleman.heartbeat-interval", caf::timespan{heartbeat / 4});
  system_config->set("middleman.connection-timeout", caf::timespan{heartbeat});
  // Rank 0's master port; it outlives the actor system, relaying what CAF says last.
  std::unique_ptr<master_port_guard> guard;
  // On failure the system is abandoned rather than destroyed: its destructor would wait for a
  // communicator that may stay blocked in a collective with a dead peer. Its configuration goes
  // with it: the system's threads read it until the last one ends (thread hooks).
  auto system = std::make_unique<caf::actor_system>(*system_config);
  auto abandon_system = [&] {
    (void)system.release();
    (void)system_config.release();
  };
  const std::string job_id = !group.job_id.empty() || group.join
                                 ? group.job_id
                                 : group.master_addr + ":" + std::to_string(group.master_port);
  const std::string print = job_fingerprint(prototype, *train, config, group.transport, origin.resumed_from());
  auto merged = std::make_shared<job_result>();
  local_actors coordination;  // rank 0's process: the evaluator, the membership actor, the coordinators
  process_member me;
  std::optional<std::string> failure;
  bool failed_here = false;  // by this process's own fault, not the job's
  const auto started = std::chrono::steady_clock::now();
  {
    caf::scoped_actor self{*system};
    const scope_exit stop_on_exception([&](bool unwinding) {
      if (!unwinding) return;
      if (me.agent) self->send_exit(me.agent, caf::exit_reason::user_shutdown);
      coordination.shut_down(self);
      abandon_system();  // as after a failure: a communicator may be blocked on a peer
    });
    if (master) {
      const evaluator_actor evaluator = spawn_evaluation(*system, coordination, prototype, eval ? eval : train, config);
      membership_setup setup;
      setup.initial_world = group.world_size;
      setup.elastic = group.elastic;
      setup.sharded = origin.sharded();
      setup.fingerprint = print;
      setup.job_id = job_id;
      setup.rendezvous_timeout = group.rendezvous_timeout;
      setup.pipe = origin.algo->pipe;
      setup.total_rounds = origin.rounds;
      setup.origin_steps = origin.resume ? origin.resume->steps : 0;
      setup.origin_data_position = origin.data_position;
      setup.on_event = group.on_event;
      setup.result = merged;
      setup.spawn_coordinator = [&, evaluator](const epoch_spec& spec, std::shared_ptr<job_result> result,
                                              std::function<void(std::uint64_t, std::uint64_t)> on_kept) {
        job_config epoch_config = config;
        epoch_config.workers = spec.workers;
        coordinator_setup c = coordination_for(origin, prototype, epoch_config, evaluator);
        c.first_round = rounds_for_steps(origin.algo->pipe, spec.start_steps);
        c.data_offset = spec.data_position;
        c.on_step = on_step;
        c.result = std::move(result);
        c.epoch = spec.epoch;
        c.append_metrics = c.append_metrics || spec.epoch > 1;
        c.started = started - origin.clock_before();
        c.on_kept = std::move(on_kept);
        return coordination.keep(spawn_coordinator_actor(*system, std::move(c)));
      };
      me.membership = coordination.keep(spawn_membership_actor(*system, std::move(setup)));
      // CAF listens on loopback only; the guard faces the workers (actors/master_port_guard.hpp).
      auto port = system->middleman().publish(me.membership, 0, "127.0.0.1", true);
      try {
        if (!port) throw std::runtime_error(system->render(port.error()));
        guard = std::make_unique<master_port_guard>(
            master_bind_addresses(group.master_bind, group.master_addr), group.master_port, *port,
            master_limits(group, origin.initial.size()),
            [](const std::string& line) { std::fprintf(stderr, "rank 0: %s\n", line.c_str()); });
      } catch (const std::exception& e) {
        coordination.shut_down(self);
        const std::string why = e.what();
        if (why.find("Address already in use") != std::string::npos)
          throw std::runtime_error("rank 0: port " + std::to_string(group.master_port) +
                                   " is in use by another job or program (cannot listen for workers there: " + why +
                                   ")");
        throw std::runtime_error("rank 0: cannot listen for workers on port " + std::to_string(group.master_port) +
                                 ": " + why);
      }
    } else {
      const std::string who = group.join ? "joiner" : "rank " + std::to_string(group.rank);
      const std::string at = group.master_addr + ":" + std::to_string(group.master_port);
      const auto deadline = std::chrono::steady_clock::now() + group.connect_timeout;
      for (;;) {
        // A listening rank 0 answers CAF's handshake within milliseconds, however busy the job.
        const auto handshake = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              deadline - std::chrono::steady_clock::now()),
                                          std::chrono::milliseconds(1), std::chrono::milliseconds(10'000));
        auto found = find_membership(*system, group.master_addr, group.master_port, handshake);
        if (found) {
          me.membership = *found;
          break;
        }
        if (found.error() == caf::sec::request_timeout || found.error() == caf::sec::connection_timeout ||
            found.error() == caf::sec::disconnect_during_handshake) {
          const std::string why = system->render(found.error());
          // The middleman may still wait on that connection: leave the system to the exit.
          abandon_system();
          throw std::runtime_error(who + ": the master port " + at + " accepted the connection but did not answer "
                                   "the handshake (is an accord job's rank 0 listening there?): " + why);
        }
        if (config.stop_requested && config.stop_requested->load())
          throw std::runtime_error(who + ": asked to stop while waiting for rank 0 at " + at);
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error(who + ": no coordinator at " + at + " within " +
                                   std::to_string(group.connect_timeout.count()) + " ms: " +
                                   system->render(found.error()));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    me.agent = spawn_member_agent(*system, me.change_epoch, me.link, group.leave_requested, me.membership);
    self->request(me.agent, caf::infinite, hello_atom::value,
                  member_hello{group.join ? -1 : group.rank, group.world_size, print, host, job_id})
        .receive([&](std::uint64_t id) { me.id = id; }, [&](caf::error& e) { failure = describe(*system, e); });
    while (!failure) {
      // A throw here would leave the actors running and the system's destructor waiting on them.
      std::unique_ptr<transport_rendezvous> rendezvous;
      try {
        rendezvous = make_rendezvous(group, host, master);
      } catch (const std::exception& e) {
        failure = e.what();
        failed_here = true;
        break;
      }
      epoch_plan plan;
      self->request(me.agent, caf::infinite, epoch_atom::value,
                    epoch_request{me.id, rendezvous->address(), me.keeper->summaries()})
          .receive([&](epoch_plan& p) { plan = std::move(p); },
                   [&](caf::error& e) { failure = describe(*system, e); });
      if (failure || plan.finished) break;
      run_process_epoch(*system, self, prototype, train, config, origin, plan, *rendezvous,
                        group.elastic || group.join, me);
    }
    // Rank 0's process stays until every member has heard that the job is over (unless it failed
    // on its own, as every rank does with a broken UCX setup: nobody would hear of it).
    if (master && !failed_here)
      self->request(me.membership, release_timeout, wait_atom::value).receive([](bool) {}, [](caf::error&) {});
    self->send_exit(me.agent, caf::exit_reason::user_shutdown);
    coordination.shut_down(self);
  }
  if (failure && *failure == coordinator_lost && !master) {
    // Rank 0 may be fine and have dropped this worker: if it answers, it says why.
    auto found = find_membership(*system, group.master_addr, group.master_port, std::chrono::seconds(5));
    if (found) {
      caf::scoped_actor self{*system};
      self->request(*found, std::chrono::seconds(5), dropped_atom::value, me.id)
          .receive([&](std::string& why) { if (!why.empty()) failure = why; }, [](caf::error&) {});
    }
  }
  if (failure) {
    abandon_system();
    throw std::runtime_error(*failure);
  }
  job_result result = master ? std::move(*merged) : job_result{};
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  average_over_steps(result);
  if (me.last_epoch.workers) me.last_epoch.account(result, origin.initial.size());
  result.kept_bytes_per_worker = me.keeper->bytes();
  result.parameters = std::move(me.parameters);
  return result;
}

}  // namespace accord
