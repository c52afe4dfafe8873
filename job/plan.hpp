#pragma once
// A job's plan: its configuration checked and parsed once (job_settings), and where it starts
// (the initial or resumed parameters and optimizer state). Every process derives it identically
// before any actor starts; the runners, the spawning of actors and the asynchronous topologies'
// setup read the plan, never the job_config.
#include "algorithms/algorithm.hpp"
#include "recovery/checkpoint.hpp"
#include "recovery/elastic_state.hpp"
#include "algorithms/update_rule.hpp"
#include "algorithms/topology_rule.hpp"
#include "cluster/membership_log.hpp"
#include "gpu/compute_precision.hpp"
#include "optim/schedule.hpp"
#include "transport/link_model.hpp"

#include <accord/job.hpp>
#include <accord/topology.hpp>
#include <accord/worker.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accord {

// Throws std::invalid_argument(what) unless ok.
void require(bool ok, const std::string& what);

// Every field of a job, before any actor system exists: an exception while actors run must
// stay the exception, not the rule.
void validate(const job_config& c);

// Each in-process worker runs two threads (its compute and communicator actors).
constexpr int max_workers_in_process = 1024;

// The floor of what `workers` workers of `prototype` hold in this process: four parameter-sized
// buffers each (replica, gradient being filled, gradient on the wire, a spare) and the initial
// parameters. Checked before any of it is allocated.
void require_worker_memory(const model& prototype, int workers);

// The optimizer the algorithm runs with, as the configuration adjusts its defaults.
optimizer_config optimizer_for(const algorithm& algo, const job_config& c);

// A job's configuration, checked and parsed: everything of a job_config that the runners and
// the actors use, as typed values (the hooks, job_config's callbacks and pointers, travel apart:
// job_hooks).
struct job_settings {
  const algorithm* algo = nullptr;
  optimizer_config optimizer;
  schedule_config schedule;                // the learning rate of each step
  round_precision precision;               // wire_precision; estimate_precision (empty: as wire)
  compute_precision compute = compute_precision::fp32;

  // Who exchanges with whom: job_config::topology by name, what it was asked to run (the job's
  // workers, steps, topology_settings, ...) and what it made of that.
  std::string topology_name;
  topology_job topology_request;
  std::shared_ptr<const topology> topo;

  // The emulated links of a job in one process: job_config::link, and between the groups of a
  // grouped topology topology_settings::inter_link (as `link` when that is empty).
  link_model link;
  link_model inter_link;

  // The configuration as given, checked; the job reads its settings from here where it uses
  // them as they are (config.eval_interval, config.micro_batch, ...). Its hooks are not kept (they
  // travel apart: job_hooks). An epoch of a job in one process changes its own copy
  // (plan_epoch: no membership changes, a checkpoint every step).
  job_config config;

  // What an epoch changes or the job resolves: its worker count and end step, ...
  int workers = 1;
  std::uint64_t steps = 0;
  std::uint64_t rounds = 0;                // of the job's last step (ACCO: two per step)

  // Micro-batches (of config.micro_batch examples): how many a round takes at least and at most
  // (0: no cap), and the same for ACCO's estimate rounds (resolved: job_config's 0 means as
  // accumulation, and the estimate cap keeps the real rounds' headroom).
  std::size_t accumulation = 1;
  std::size_t max_accumulation = 0;
  std::size_t estimate_accumulation = 1;
  std::size_t estimate_max_accumulation = 0;
  // job_config::accumulation_mode "fixed": every round takes exactly its stage's count (the caps
  // equal the leasts), and the first overlapped round waits for a full stage too.
  bool fixed_steps = false;
  // job_config::accumulation_mode "growing" (asked for): the learning-rate schedule counts the
  // micro-batches applied (all workers) in nominal steps of this many, instead of steps; 0: steps.
  std::uint64_t schedule_micro_batches = 0;
  // The worker count the global batch is sized for (job_config::global_batch; 0: none, each
  // worker takes the counts above whatever the worker count).
  int batch_workers = 0;

  std::uint64_t data_hash = 0;             // of the training data, recorded in checkpoints
  // Between processes: the settings every process must agree on (cluster/fingerprint.hpp); empty
  // in one process.
  std::string fingerprint;

  // Worker `rank`'s micro-batch counts in an epoch of `workers`: the counts above, or with a
  // global batch its share of batch_workers workers' (caps keep their headroom over the least).
  struct micro_batch_counts {
    std::size_t least = 1, most = 0, estimate_least = 1, estimate_most = 0;
  };
  micro_batch_counts micro_batches_of(int rank) const;
  // One line saying how steps are counted ("a step is 4 micro-batches of 16 examples per worker ...").
  std::string step_counting() const;

  bool sharded() const { return algo->aggregate == aggregation::sharded_optimizer; }
  double speed_factor(int rank) const {
    return config.speed_factors.empty() ? 1.0 : config.speed_factors[static_cast<std::size_t>(rank)];
  }
};

// Everything about a job that every process derives identically from the configuration: its
// settings and where it starts.
struct job_plan : job_settings {
  std::uint64_t first_round = 0;           // > 0 when resuming
  std::uint64_t data_position = 0;         // stream positions consumed before the first round
  std::vector<float> initial;
  std::optional<checkpoint> resume;        // where the optimizer state comes from, when resuming
  std::optional<process_replay> membership_replay;  // between processes (process_group::membership_replay)

  // The same job continued by `world` workers from `parameters` after `steps` steps, at
  // `position` in the data (an elastic epoch's plan between processes; its optimizer state
  // comes separately).
  job_plan continued(std::uint64_t steps, std::uint64_t position, std::vector<float> parameters, int world) const {
    job_plan next;
    static_cast<job_settings&>(next) = *this;  // the settings, not where this plan starts
    next.workers = world;
    next.first_round = rounds_for_steps(algo->pipe, steps);
    next.data_position = position;
    next.initial = std::move(parameters);
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

// App-driven workers (include/accord/worker.hpp), one per worker of this process in rank order.
using app_workers = std::vector<std::shared_ptr<worker::state>>;

// What a runner gets beside the plan: the callers' callbacks and outside pointers.
struct job_hooks {
  std::function<void(const step_metrics&)> on_step;  // from the coordinator, for every step
  const std::atomic<bool>* stop_requested = nullptr;  // job_config::stop_requested
  std::function<void(const std::string& path, std::uint64_t step)> on_checkpoint_written;
  app_workers apps;                                   // empty: the workers run the model
};

// job_config's hooks, with `on_step`.
job_hooks hooks_of(const job_config& config, std::function<void(const step_metrics&)> on_step);

// What the job's topology (job_config::topology) is asked to run. `elastic`: workers may come
// and go.
topology_job topology_request_for(const job_config& config, const algorithm& algo, const model& prototype,
                                  bool elastic);

// The job's topology, which refuses a job it cannot run.
std::shared_ptr<const topology> job_topology(const job_config& config, const algorithm& algo, const model& prototype,
                                             bool elastic);

// Checks and parses the whole configuration (one line naming what is wrong, std::invalid_argument),
// then starts the job afresh or from config.resume_path. `elastic`: workers may come and go
// between processes.
job_plan plan_job(const model& prototype, const dataset& train, const job_config& config, bool elastic = false);

// One epoch of a job in one process whose worker set changes (job_config::membership): `workers`
// workers from `state` (null: where the job starts) up to step `steps`, every step's state kept
// (checkpoint interval 1). Its topology is made for that worker count and end step; the
// learning-rate schedule stays the job's, so the rate runs on across epochs as without changes.
job_plan plan_epoch(const job_plan& job, const model& prototype, int workers, std::uint64_t steps,
                    const checkpoint* state);

}  // namespace accord
