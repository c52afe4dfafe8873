#pragma once
// The arithmetic of one parameter-server shard, shared by the server actors of one process
// (topologies/parameter_server/parameter_server.cpp) and the servers between processes
// (topologies/parameter_server/processes.cpp): the shard's parameters and optimizer state, and how
// pushed gradients are applied. Synchronous (S = 0): one optimizer step per round of every
// worker's gradient, summed in rank order and divided by the round's micro-batches (DDP's
// arithmetic). Asynchronous: each push is its own optimizer step on arrival.
#include "topologies/asynchronous/workers.hpp"
#include "recovery/elastic_state.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "transport/shard.hpp"

#include <memory>
#include <span>
#include <vector>

namespace accord {

// What a worker's push says besides the gradient slice.
struct push_summary {
  int worker = 0;
  std::uint64_t pulled_version = 0;  // of this shard, when the worker pulled the parameters
  double micro_batches = 0, loss_sum = 0, items = 0;
};

class server_shard {
public:
  // `first_step`: job steps before (an elastic epoch's start), for the schedule; `resume`: the
  // shard's restored optimizer state.
  server_shard(shard own, int workers, bool synchronous, std::span<const float> initial,
               const optimizer_config& optimizer, schedule_config schedule, std::uint64_t first_step = 0,
               const rule_state* resume = nullptr);
  // Takes worker push.worker's gradient sum over this shard; returns the gradients it applied
  // (none while a synchronous round still misses a worker's), in order, with their staleness.
  std::vector<applied_gradient> push(const push_summary& push, std::span<const float> slice);
  std::uint64_t version() const { return version_; }  // updates applied
  const std::vector<float>& values() const { return master_; }
  const shard& own() const { return own_; }
  // The optimizer state, as an elastic job keeps it.
  rule_state state() const;
  // Parameters and optimizer state.
  std::size_t state_bytes() const;

private:
  void step(double micro_batches, std::uint64_t optimizer_step);

  shard own_;
  int workers_;
  bool synchronous_;
  std::vector<float> master_;
  std::unique_ptr<optimizer> opt_;
  schedule_config schedule_;
  std::uint64_t first_step_;
  std::uint64_t version_ = 0;
  std::vector<float> sum_;
  // Synchronous: this round's pushes by worker, their slices kept until the round is whole.
  std::vector<std::optional<push_summary>> round_;
  std::vector<std::vector<float>> round_slices_;
};

}  // namespace accord
