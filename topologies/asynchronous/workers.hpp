#pragma once
// Workers without a global barrier, the loop the asynchronous topologies share (the parameter
// server: pull, compute, push; asynchronous gossip: compute, step its own copy, exchange). Each
// worker thread claims the job's next gradient, gets the parameters to compute it with from
// the topology (`asynchronous_use::fetch`), computes its micro-batches (slowed by its --speed
// factor) and hands the gradient to the topology (`deliver`), which applies it and calls
// `asynchronous_workers::applied`. A step of the job is as many applied gradients as workers;
// a reporter thread turns them into one report per worker and step for the ordinary
// coordinator, with the step's staleness histogram, gradients per worker, bytes per edge,
// consensus distance and, where an evaluation is due, the model the topology says (`observe`).
// Membership changes (job_config::membership) are followed as the gradients of each changing
// step are claimed: workers from the new count on stop taking gradients (a crash also loses
// the gradient each is computing: another worker computes it again), new ranks start.
// In one process the emulated link costs each transfer its wire time and latency; between
// processes (asynchronous_setup::peers) each process runs one worker, its rank's.
#include <accord/job.hpp>

#include "actors/coordinator_actor.hpp"
#include "recovery/elastic_state.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "transport/link_model.hpp"
#include "transport/transport.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>

namespace accord {

struct asynchronous_setup {
  int workers = 1;
  const model* prototype = nullptr;  // each worker computes with a clone
  std::shared_ptr<const dataset> train;
  std::size_t micro_batch = 1;
  std::size_t accumulation = 1;      // micro-batches per gradient
  std::uint64_t steps = 0;           // of `workers` applied gradients each: the job's last step
  std::uint64_t first_step = 0;      // steps done before (an elastic epoch's start)
  std::uint64_t data_position = 0;   // of first_step
  std::vector<double> speed_factors;
  // Followed only without lockstep; a step stays `workers` (the initial count) gradients.
  std::vector<membership_change> membership;
  // 0: lockstep, worker w computes gradients w, w + workers, ... (round k's after round k − 1's
  // are applied, as the topology's fetch waits); else how many gradients a worker may compute
  // ahead of the slowest (stale synchronous parallel).
  std::uint64_t max_ahead = 0;
  link_model link;
  optimizer_config optimizer;
  schedule_config schedule;
  std::vector<float> initial;
  std::uint64_t eval_interval = 0;
  coordinator_actor coordinator;     // gets one report per worker and step
  // job_config::stop_requested: once set, the job ends after the step being computed.
  const std::atomic<bool>* stop_requested = nullptr;
  // Between processes: the transport to the other processes; this process runs only worker
  // peers->rank() (lockstep tickets, or claim_next's), and the topology keeps its workers in
  // bounds itself.
  std::shared_ptr<transport> peers;
  // Between processes, without lockstep: the job's next gradient for this process's worker,
  // from wherever the topology keeps the count (nothing once all are handed out).
  std::function<std::optional<std::uint64_t>()> claim_next;
  // An elastic job between processes: this rank's share of the restored optimizer state
  // (its shard), and how the epoch keeps its state (topologies/asynchronous/gradient_tickets.hpp).
  std::optional<rule_state> initial_state;
  struct keeping {
    std::shared_ptr<state_keeper> keeper;
    std::uint64_t interval = 0;  // keep after every job step that is a multiple
    std::uint64_t layout = 0;    // the epoch
    std::function<bool()> change_waiting;  // rank 0: a membership change waits for the epoch's end
  };
  std::optional<keeping> keep;
};

// One applied gradient, in the order the topology applied them.
struct applied_gradient {
  int worker = 0;
  std::uint64_t staleness = 0;  // updates applied between its parameters and its apply
  double micro_batches = 0, loss_sum = 0, items = 0;
};

// A worker's cumulative figures, as its reports carry them.
struct worker_figures {
  std::uint64_t bytes = 0;
  double compute = 0, communication = 0, wait = 0;
};

// One computed gradient, handed to the topology.
struct computed_gradient {
  std::uint64_t ticket = 0;  // which of the job's steps × workers gradients
  std::shared_ptr<std::vector<float>> sum;  // over its micro-batches
  double micro_batches = 0, loss_sum = 0, items = 0;
};

// What the reporter shows of the topology after a step.
struct asynchronous_view {
  bool stopped = false;
  tensor parameters;              // when asked for
  double consensus_distance = -1; // where the topology measures one
  bool kept = false;              // every process kept the state after this step (elastic)
};

// One asynchronous topology around the shared loop. fetch and deliver run on worker threads
// (each worker's calls in order), observe on the reporter's, rest and wake inside the loop's
// bookkeeping (they must not wait on workers).
class asynchronous_use {
public:
  virtual ~asynchronous_use() = default;
  // The parameters worker `w` computes its gradient number `k` (its own count) with; nothing
  // once stopped.
  virtual std::optional<std::vector<float>> fetch(int w, std::uint64_t k, caf::scoped_actor& self) = 0;
  // Applies the gradient (or sends it to be applied); every applied one reaches `applied`.
  virtual void deliver(int w, computed_gradient gradient, caf::scoped_actor& self) = 0;
  // After step `step` (0-based) is complete; the parameters only when `with_parameters`.
  virtual asynchronous_view observe(std::uint64_t step, bool with_parameters, caf::scoped_actor& self) = 0;
  // Whether applied_gradient::staleness means anything (else no histogram is reported).
  virtual bool measures_staleness() const { return false; }
  // Worker `w` stops taking gradients (`crashed`: it died), or starts (again).
  virtual void rest(int, bool) {}
  virtual void wake(int) {}
};

class asynchronous_workers {
public:
  asynchronous_workers(caf::actor_system& system, asynchronous_setup setup);
  ~asynchronous_workers();
  // Starts the workers and the reporter, around `use` (which outlives them).
  void start(asynchronous_use& use);
  // Any thread, in the order the gradients are applied.
  void applied(const applied_gradient& g);
  // The emulated link: worker `w` sends `bytes` (sleeping their wire time and latency), to
  // worker `to` where given (the step's edge_bytes count them).
  void cross_link(int w, std::size_t bytes, int to = -1);
  // Counts `bytes` sent by worker `w` (to `to`) without taking time (the other side of an exchange).
  void count_sent(int w, std::size_t bytes, int to = -1);
  // Only the step's edge_bytes: `bytes` of a transfer from `from` to `to` whose time and total
  // were counted already (the parameter server: each shard's slice of one push or pull).
  void count_edge(int from, int to, std::size_t bytes);
  // Worker `w`'s bytes to each of ranks 0..ranks-1 so far; a worker of another process's, as
  // it sent them (set_edges_from replaces its counts, as set_figures its figures).
  std::vector<std::uint64_t> edges_from(int w, int ranks) const;
  void set_edges_from(int w, std::span<const std::uint64_t> bytes);
  // Worker `w`'s figures so far; a worker of another process's, as it sent them (its reports
  // are sent where its gradients are applied).
  worker_figures figures_of(int w) const;
  void set_figures(int w, const worker_figures& f);
  // After a failure: every worker stops. Any thread.
  void stop();
  // The epoch ends after job step `steps` (a membership change), sooner than planned. Any thread.
  void end_after(std::uint64_t steps);
  // Waits for the workers and the reporter.
  void join();
  bool stopping() const;
  // The steps the job runs (fewer than setup.steps once a stop was asked for).
  std::uint64_t step_limit() const;
  // The most workers the membership schedule has at once (threads run for each).
  int most_workers() const;
  const asynchronous_setup& setup() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// A running asynchronous topology, as run_job sees it.
class asynchronous_run {
public:
  virtual ~asynchronous_run() = default;
  // After a failure: every worker stops. Any thread.
  virtual void stop() = 0;
  // Once the coordinator saw the last step: waits for the workers, returns the final model.
  virtual std::vector<float> finish() = 0;
  // Parameters and optimizer state it holds, all together.
  virtual std::size_t state_bytes() const = 0;
};

// A topology that runs its own workers instead of rounds (make_worker is never called).
class asynchronous_topology : public topology {
public:
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float>) const override;
  // Starts the workers at once; they report to setup.coordinator.
  virtual std::unique_ptr<asynchronous_run> start(caf::actor_system& system, asynchronous_setup setup) const = 0;
  // Whether it follows membership changes itself (in one epoch).
  virtual bool follows_membership() const = 0;
  // Whether it runs between processes (asynchronous_setup::peers), one worker per process.
  virtual bool runs_between_processes() const { return false; }
  // Whether, between processes, workers may leave, join or die (asynchronous_setup::keep).
  virtual bool elastic_between_processes() const { return false; }
};

// `t` as an asynchronous topology, or null.
const asynchronous_topology* as_asynchronous(const topology& t);

}  // namespace accord
