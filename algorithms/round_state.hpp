#pragma once
// What one round of an algorithm takes and gives, as plain data: the tensors the actors hand
// each other (shared buffers whose ownership moves with the message: inside a process a
// gradient or a parameter vector is never copied or serialised), the totals summed over
// workers, and the reports the coordinator adds up. No CAF: the actors' wire formats for these
// are in actors/messages.hpp.
#include "recovery/parameter_hash.hpp"
#include "recovery/rule_state.hpp"
#include "transport/transport.hpp"

#include <accord/job.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace accord {

using tensor = std::shared_ptr<std::vector<float>>;

// Counts the bytes of a job's tensors alive at once, so benchmarks can print the peak memory
// per worker beside the theoretical minimum.
struct memory_meter {
  std::atomic<std::size_t> live{0};
  std::atomic<std::size_t> peak{0};
  void add(std::size_t bytes) {
    const std::size_t now = live.fetch_add(bytes) + bytes;
    std::size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
};

// A tensor of `size` zeros (or a copy of `from`) whose bytes count on `meter` while alive.
tensor make_tensor(std::size_t size, const std::shared_ptr<memory_meter>& meter);
tensor make_tensor(const std::vector<float>& from, const std::shared_ptr<memory_meter>& meter);

// A compute actor's answer: the accumulator's gradient sum, with one more micro-batch added.
struct gradient_result {
  tensor sum;
  double loss = 0;
  double items = 0;
  double seconds = 0;            // compute time including any emulated slowdown
  std::uint64_t position = 0;    // data stream counter after this micro-batch
  bool ended = false;            // no micro-batch: the app's data ran out (worker::end)
};

// Contributions summed over workers by the communicator before the update.
struct round_totals {
  double micro_batches = 0;
  double loss_sum = 0;
  double items = 0;
  // Workers that know of a membership change waiting for the next epoch: summed in the same
  // all-reduce, so every worker agrees on which step is the epoch's last.
  double changes = 0;
  // Workers whose app's data ran out (worker::end): the round steps nothing (no update on a
  // partial gradient) and ends the job, every worker keeping the last completed step.
  double ended = 0;
};

// What a round's update saw on one worker, for the metrics (the coordinator adds up workers).
struct round_observations {
  double gradient_square_sum = 0;  // this worker's share of the squared norm of the round's gradient
  double vote_agreement = -1;      // sign votes: fraction of this worker's signs the outcome took (-1: no vote)
  double learning_rate = -1;       // the app's optimizer's own (a scheduler's; -1: the job's schedule)
  // Seconds a topology's collectives in flight (round_peers::start_all_reduce) ran since the
  // last round without the round waiting for them: communication that no step waited for.
  double unwaited_seconds = 0;
};

// A worker's accumulated gradient handed to its communicator for round `round`.
struct round_request {
  std::uint64_t round = 0;
  bool estimate = false;        // ACCO's estimate round: compute θ̃, commit no state
  tensor buffer;                // gradient sum in, parameters out
  tensor current;               // the compute stage's parameters (θ_t; θ̃ in ACCO's real rounds), only read meanwhile
  round_totals local;
  float learning_rate = 0;
  bool snapshot = false;        // return the update rule's state (a checkpoint is due)
  bool keep = false;            // elastic: keep this step's state in the process (and its buddy)
};

struct round_result {
  std::uint64_t round = 0;
  tensor parameters;
  round_totals global;
  double seconds = 0;           // wall time the communicator spent on the round
  std::uint64_t parameter_hash = 0;
  transfer_stats traffic;       // cumulative bytes of this worker's transport
  rule_state state;             // present when the request asked for a snapshot
  bool kept = false;            // this step's state was kept (elastic jobs)
  bool last_of_epoch = false;   // a membership change ends the epoch after this round
  double consensus_distance = -1;  // the topology's, when it measured one this round
  round_observations observations;
};

// What the accumulator tells the coordinator after each round.
struct round_report {
  int rank = 0;
  std::uint64_t round = 0;
  bool estimate = false;
  round_totals global;
  double compute_seconds = 0;   // cumulative
  double communication_seconds = 0;  // cumulative
  double wait_seconds = 0;      // cumulative: compute idle while waiting for a round
  // Cumulative CPU seconds of this worker's threads by role, and of its process's shared
  // threads when it is the process's first worker (so that summing over reports counts each once).
  thread_cpu cpu;
  std::uint64_t parameter_hash = 0;
  transfer_stats traffic;
  std::uint64_t consumed = 0;   // micro-batches of its stream this worker has taken
  rule_state state;             // present when a checkpoint is due
  bool kept = false;            // the worker kept this step's state (elastic jobs)
  round_observations observations;
  float learning_rate = -1;     // what the round's update used (the schedule's, by steps or examples)
  tensor parameters;            // set by rank 0 for evaluations, checkpoints and the end
  double consensus_distance = -1;  // the topology's, when it measured one this round
  std::vector<std::uint64_t> staleness;  // parameter server: histogram of the step's applied gradients
  std::vector<std::uint64_t> worker_gradients;  // asynchronous topologies: the step's gradients by worker
  std::vector<edge_traffic> edge_bytes;         // asynchronous gossip: the step's bytes by edge
};


}  // namespace accord
