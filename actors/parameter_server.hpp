#pragma once
// parameter-server: sharded server actors hold the parameters and the optimizer state; each
// worker pulls the parameters, computes a gradient and pushes it to every shard, with no global
// barrier. With max_staleness S = 0 the servers apply one synchronous round of every worker's
// gradient per step (DDP's arithmetic: summed in rank order, divided by the round's micro-batch
// count, the optimizer on each shard); with S >= 1 each shard applies every push on arrival, and
// a worker may run at most S pushes ahead of the slowest (stale synchronous parallel), so fast
// workers are not held back by slow ones. Every applied gradient's staleness (updates applied
// to the shard between the worker's pull and the gradient's apply) is recorded per step. The
// step metrics go through the ordinary coordinator (one step: as many gradients as workers).
// Asynchronous servers keep going when workers leave, join or die (job_config::membership).
// In one process, over the emulated link (each pull and push takes its wire time and latency).
#include <accord/job.hpp>
#include <accord/topology.hpp>

#include "actors/coordinator_actor.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "transport/link_model.hpp"

#include <atomic>
#include <memory>

namespace accord {

// The parameter server's registry entry: refuses what it cannot run (overlapped or
// sign-vote algorithms, checkpoints, membership changes of synchronous servers).
topology_factory parameter_server_topology();
// Whether `t` is the parameter server (run_job then calls run_parameter_server instead of
// running rounds).
bool is_parameter_server(const topology& t);

struct parameter_server_setup {
  int workers = 1;
  const model* prototype = nullptr;  // each worker computes with a clone
  std::shared_ptr<const dataset> train;
  std::size_t micro_batch = 1;
  std::size_t accumulation = 1;      // micro-batches per push
  std::uint64_t steps = 0;           // of `workers` applied gradients each
  std::uint64_t data_position = 0;
  std::vector<double> speed_factors;
  // Asynchronous only: from each change's step on (that many steps' gradients claimed), the
  // first `workers` ranks take gradients; a crash loses the gradients being computed by the
  // ranks it removes (others redo them). A step stays `workers` (the initial count) gradients.
  std::vector<membership_change> membership;
  std::uint64_t max_staleness = 0;
  link_model link;                   // each worker's link to the servers
  optimizer_config optimizer;
  schedule_config schedule;
  std::vector<float> initial;
  std::uint64_t eval_interval = 0;
  coordinator_actor coordinator;     // gets one report per worker and step
  // job_config::stop_requested: once set, the job ends after the step being computed.
  const std::atomic<bool>* stop_requested = nullptr;
};

// Starts the server shards (one per worker), the workers and the step reporter at once.
class parameter_server_run {
public:
  parameter_server_run(caf::actor_system& system, parameter_server_setup setup);
  ~parameter_server_run();
  // After a failure: the servers answer no more pulls and every worker stops. Any thread.
  void stop();
  // Once the coordinator saw the last step: waits for the workers, returns the parameters.
  std::vector<float> finish();
  // Parameters and optimizer state the servers hold, all shards together.
  std::size_t state_bytes() const { return state_bytes_; }

private:
  void join();
  struct impl;
  std::unique_ptr<impl> impl_;
  std::size_t state_bytes_ = 0;
};

}  // namespace accord
