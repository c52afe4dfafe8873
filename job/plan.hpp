#pragma once
// What every process derives identically from a job's configuration before any actor starts:
// the checked configuration, the algorithm and optimizer, the schedule, the initial (or
// resumed) parameters and optimizer state.
#include "algorithms/algorithm.hpp"
#include "recovery/checkpoint.hpp"
#include "recovery/elastic_state.hpp"
#include "algorithms/update_rule.hpp"
#include "algorithms/topology_rule.hpp"
#include "optim/schedule.hpp"

#include <accord/job.hpp>

#include <chrono>
#include <cstdio>
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
  std::shared_ptr<const topology> topo;    // who exchanges with whom (job_config::topology)

  bool sharded() const { return algo->aggregate == aggregation::sharded_optimizer; }
  // The same job continued from `parameters` after `steps` steps, at `position` in the data
  // (an elastic epoch's plan; its optimizer state comes separately).
  job_plan continued(std::uint64_t steps, std::uint64_t position, std::vector<float> parameters) const {
    job_plan next;
    next.algo = algo;
    next.optimizer = optimizer;
    next.schedule = schedule;
    next.precision = precision;
    next.topo = topo;
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

// The job's topology (job_config::topology), which refuses a job it cannot run. `elastic`:
// workers may come and go.
std::shared_ptr<const topology> job_topology(const job_config& config, const algorithm& algo, const model& prototype,
                                             bool elastic);

// `state`: continue from this in-memory checkpoint (a membership change) instead of
// config.resume_path. `elastic`: workers may come and go between processes.
job_plan plan_job(const model& prototype, const dataset& train, const job_config& config,
                  const checkpoint* state = nullptr, bool elastic = false);

}  // namespace accord
