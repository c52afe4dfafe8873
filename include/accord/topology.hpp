#pragma once
// Topologies: who exchanges with whom, when, and how the results merge. A topology is chosen
// by name (job_config::topology); the built-ins (ring, local-sgd, hierarchical, gossip and
// parameter-server; the last two run workers of their own instead of rounds, gossip unless
// lockstep) are registered
// through register_topology exactly as an embedding app registers its own. No CAF here.
//
// Per worker and round, a topology's worker gets its gradient sum and returns the parameters
// the worker computes with next. It may call the algorithm's own aggregation over every worker
// (`algorithm_rules::aggregate`, today's ring round), step the algorithm's optimizer on its own
// copy without communicating (`local_step`), and use collectives over its peers (round_peers,
// <accord/round.hpp>, as an aggregation rule does). Grouping (`topology::group_size`) reshapes
// every collective of the job: members of a group reduce among themselves, then the group
// leaders across groups.
#include <accord/config.hpp>
#include <accord/round.hpp>
#include <accord/settings.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

namespace accord {

// What a topology knows of the job it is asked to run.
struct topology_job {
  std::string algorithm;
  bool synchronous = true;         // the algorithm's pipeline waits for each round (ddp, lion, dlion-*)
  bool sharded_optimizer = true;   // its aggregation is reduce-scatter → optimizer → all-gather
  int workers = 1;
  std::uint64_t steps = 0;         // optimizer steps (round_view::step counts up to steps - 1)
  std::uint64_t seed = 0;          // the job's (topologies draw their random choices from it)
  std::size_t parameter_count = 0;
  bool checkpoints = false;        // the job writes or resumes checkpoints
  bool membership_changes = false; // workers come and go (elastic, in one process or between processes)
  // job_config::topology_settings: options.whole("local_steps") reads a declared setting (the
  // given value, else its default).
  topology_options options;
};

// The algorithm's own rules, offered to the topology for the current round.
class algorithm_rules {
public:
  virtual ~algorithm_rules() = default;
  // The algorithm's aggregation over every worker (the ring round): `buffer` holds this
  // worker's gradient sum on entry and the new shared parameters on exit.
  virtual void aggregate(std::span<float> buffer) = 0;
  // One step of the algorithm's optimizer (its kind and hyper-parameters, this round's
  // learning rate) on this worker's own full copy of the parameters, with its own state, from a
  // mean gradient. No communication.
  virtual void local_step(std::span<float> parameters, std::span<const float> mean_gradient) = 0;
};

// What a worker's topology reports for a round; the coordinator writes it to the metrics file.
struct topology_report {
  // sqrt(mean over workers of ‖θ_i − θ̄‖²) where the topology measured it this round, else -1.
  double consensus_distance = -1;
};

// What a worker's topology keeps beyond the algorithm's state (local-sgd's outer state), so that a
// job survives a restart and workers coming and going: taken after the round of a checkpoint or an
// elastic job's kept step (every worker after the same round), given back before the first round
// of the job that resumes from it or of the next epoch.
struct topology_state {
  std::vector<float> parameters;  // what every worker restarts from: the same bits on each
  std::vector<float> shared;      // the same bits on every worker
  std::vector<float> own;         // this worker's alone; empty for a worker that kept none (a joiner)
};

class worker_topology {
public:
  virtual ~worker_topology() = default;
  // `buffer`: this worker's gradient sum on entry, the parameters it computes with next on exit.
  // `round` and `peers` as an aggregation rule gets them (<accord/round.hpp>); the job's steps
  // are topology_job::steps.
  virtual void round(std::span<float> buffer, const round_view& round, round_peers& peers,
                     algorithm_rules& rules, topology_report& report) = 0;
  // Whether every worker holds the same parameters after step `step` (0-based): the replica
  // check compares parameter hashes only then.
  virtual bool replicas_agree(std::uint64_t step) const = 0;
  // A topology with state of its own returns it after the round just run (it may wait for its
  // collectives in flight, not start any); the others return nothing, and a checkpoint or kept
  // step holds the algorithm's state alone. A topology that returns nothing must refuse jobs
  // with checkpoints or membership changes when its workers' copies differ.
  virtual std::optional<topology_state> kept_state() const { return std::nullopt; }
  // Before the first round, in a job that resumes from a kept_state (`kept.own` empty where this
  // worker kept none). Throws std::invalid_argument naming what does not fit the job; by default,
  // that this topology keeps no state of its own.
  virtual void restore(const topology_state&) {
    throw std::invalid_argument("the state resumed holds a topology's own state (local-sgd's), which this job's "
                                "--topology does not keep: resume it with the topology that wrote it");
  }
};

// A topology for one job: made by its factory, which refuses a job it cannot run.
class topology {
public:
  virtual ~topology() = default;
  // Workers per group (consecutive ranks): every collective reduces inside groups first, then
  // across the group leaders. 1: one flat ring.
  virtual int group_size() const { return 1; }
  // Workers per group of fast-linked ranks (consecutive): in one process the links inside a group
  // emulate --link and those between groups --inter-link. group_size(), unless the topology
  // groups its workers itself over the flat transport (local-sgd's --inner-group).
  virtual int link_group_size() const { return group_size(); }
  // The worker of rank `rank`, starting from `initial` (every worker's initial parameters).
  virtual std::unique_ptr<worker_topology> make_worker(int rank, std::span<const float> initial) const = 0;
};

// Makes the topology of a job, or throws std::invalid_argument with one line naming what does
// not fit ("--topology local-sgd: ...").
using topology_factory = std::function<std::unique_ptr<topology>(const topology_job&)>;

// Adds (or replaces) a topology under `name` with the settings it reads from
// topology_job::options, declared once (<accord/settings.hpp>): accord-train gets a flag for
// each, --help shows them, describe prints them, the fingerprint compares those that enter it,
// Python's TopologyOptions has them. Safe to call from any thread before run_job.
void register_topology(const std::string& name, topology_factory factory,
                       std::vector<setting_declaration> settings = {});
// The registered names, sorted (the built-ins: gossip, hierarchical, local-sgd, parameter-server, ring).
std::vector<std::string> topology_names();
// The topology `name` for `job`; an unknown name throws std::invalid_argument listing the
// registered ones.
std::unique_ptr<topology> make_topology(const std::string& name, const topology_job& job);

}  // namespace accord
