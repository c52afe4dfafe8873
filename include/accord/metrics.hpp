#pragma once
// Public embedder API: what a job reports, per step (on_step, the metrics file) and at its end.
// Plain data, no CAF.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace accord {

// Where one worker's time went during a step (seconds; ACCO: both rounds).
struct worker_seconds {
  double compute = 0;        // forward/backward
  double communication = 0;  // its communicator busy with the step's rounds
  double wait = 0;           // compute idle, waiting for a round
};

// CPU seconds by the role of the thread that spent them (a step's, summed over the job's
// processes), so that what communication costs the compute it overlaps shows.
struct thread_cpu {
  double compute = 0;       // compute threads: forward and backward (asynchronous workers too)
  double communicator = 0;  // communicator threads: encoding, collectives, driving UCX
  double evaluator = 0;     // the held-out evaluation
  double actors = 0;        // CAF's scheduler and clock: accumulators, the coordinator, membership
  double transport = 0;     // UCX's own threads (its async thread)
  double other = 0;         // main threads, OpenBLAS's pool, the status server, the rest
};

// Bytes worker `from` sent worker `to` (ranks) during a step.
struct edge_traffic {
  int from = 0, to = 0;
  std::uint64_t bytes = 0;
};

// One optimizer step as the coordinator saw it (also one line of the metrics file).
struct step_metrics {
  std::uint64_t step = 0;
  double train_loss = 0;           // mean micro-batch loss of the step, over all workers
  double eval_loss = -1;           // at this step's parameters, when evaluated (else -1)
  double seconds = 0;              // wall time since the job started
  double items = 0;                // tokens (language model) or examples in the step, all workers
  double items_per_second = 0;
  double bits_per_parameter = 0;   // sent per worker for this step, averaged over workers
  double hidden_fraction = 0;      // of communication time that compute kept busy
  std::uint64_t micro_batches = 0; // summed over workers for this step
  int workers = 0;
  std::uint64_t epoch = 0;         // membership epoch (elastic jobs between processes)
  double learning_rate = 0;        // of this step's update, after warm-up and schedule
  std::uint64_t bytes_sent = 0;    // by all workers for this step
  // Of the mean gradient the step applied (sharded optimizers: the reduced gradient; sign votes,
  // where none is formed: the root mean square of the workers' own mean gradients' norms).
  double gradient_norm = 0;
  // Sign votes: fraction of the workers' signs that the outcome took, averaged (-1: no vote).
  double vote_agreement = -1;
  std::vector<worker_seconds> per_worker;  // by rank
  thread_cpu cpu;                          // the step's CPU seconds by thread role, all processes
  // Topologies whose replicas differ (local-sgd between outer steps): sqrt(mean_i ‖θ_i − θ̄‖²)
  // where measured this step (before merging), else -1.
  double consensus_distance = -1;
  // parameter-server: of the gradients applied in this step, how many were k updates stale
  // (index k; empty for the other topologies).
  std::vector<std::uint64_t> staleness;
  // Asynchronous topologies (parameter-server, gossip): how many of the step's gradients each
  // worker computed (index: worker; empty for the others).
  std::vector<std::uint64_t> worker_gradients;
  // Asynchronous gossip: the step's bytes by edge, each direction apart (an exchange sends one
  // copy each way); empty for the others.
  std::vector<edge_traffic> edge_bytes;
};

struct job_result {
  std::vector<float> parameters;   // final parameters (identical on every worker)
  std::vector<step_metrics> steps;
  double final_eval_loss = -1;
  double seconds = 0;
  double compute_seconds = 0;      // per worker, averaged
  double communication_seconds = 0;// per worker, averaged: time its communicator was busy
  double wait_seconds = 0;         // per worker, averaged: compute idle waiting for a round
  thread_cpu cpu;                  // CPU seconds by thread role over the run, all processes
  double bits_per_parameter_per_step = 0;
  double hidden_fraction = 0;
  std::uint64_t bytes_sent = 0;    // all workers
  std::uint64_t rounds = 0;
  bool replicas_identical = true;  // every replica check agreed
  // An app-driven worker's data ran out (worker::end): the job ended at its last full step,
  // before its `steps`.
  bool data_ended = false;
  // Memory per worker: what the optimizer keeps (master weights + state, sharded where the
  // algorithm allows), the peak of parameter/gradient buffers plus that state, and the
  // theoretical minimum: parameters + the pipeline's gradient buffers (one for DDP, two where
  // compute overlaps a round) + that state.
  int gradient_buffers = 2;
  std::size_t state_bytes_per_worker = 0;
  std::size_t peak_bytes_per_worker = 0;
  std::size_t minimum_bytes_per_worker = 0;
  // Elastic jobs between processes: what this worker keeps so that a crash loses nothing (two
  // generations of parameters, its optimizer shard and its buddy's copy), beyond the above.
  std::size_t kept_bytes_per_worker = 0;
  // Between processes: this process hosted the coordinator at the end (rank 0's, or the one that
  // took over when it was lost), so `steps` holds the job's step metrics since then.
  bool coordinated = false;
};

}  // namespace accord
