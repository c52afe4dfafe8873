#pragma once
// Public embedder API: run a data-parallel training job made of actors (compute, accumulator,
// communicator per worker; one coordinator). No CAF type appears here: an embedding app
// supplies a model and data sets, picks an algorithm and a link, and gets metrics back.
#include <accord/model.hpp>
#include <accord/topology.hpp>
#include <accord/update_rule.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord {

// Elastic training in one process: at a step boundary the worker set changes. A leave or a
// join ends the epoch cleanly; a crash kills a worker during the next round, and the survivors
// redo that round from the state after `step` (kept at every step, so nothing is lost).
struct membership_change {
  std::uint64_t step = 0;  // after this many optimizer steps
  int workers = 0;         // the worker count from then on
  bool crash = false;      // a worker dies mid-round instead of leaving (workers must shrink)
};

struct job_config {
  // ddp | dpu | acco | lion | dlion-mavo | dlion-avg | acco-dlion, or a registered one
  // (include/accord/update_rule.hpp; algorithm_names() lists them).
  std::string algorithm = "acco";
  // Who exchanges with whom, when, and how results merge (include/accord/topology.hpp):
  // ring | local-sgd | hierarchical, or a name an app registered. ring: the algorithm's rounds
  // over every worker.
  std::string topology = "ring";
  topology_options topology_settings;
  int workers = 4;
  // Per worker slowdown: a factor f makes a worker take f times its measured compute time
  // (emulates heterogeneous hardware). Empty: all 1.
  std::vector<double> speed_factors;  // each in [1, 1000]
  // A worker whose model computes on a GPU (model::memory()) keeps its parameters and gradient
  // sum in the GPU's memory and copies no tensor per micro-batch. This runs that same data
  // path on copies in host memory, for a host model: results are bitwise the default's (tests).
  bool resident_on_host = false;
  // A resident worker runs its rounds on the device where it can (NCCL on the ring, a built-in
  // rule but SGD; README "GPU data path"); false keeps them on the host (tests compare the two).
  bool device_rounds = true;

  std::uint64_t steps = 100;         // optimizer steps (ACCO: each takes two rounds)
  std::size_t micro_batch = 8;       // examples per micro-batch
  std::size_t accumulation = 1;      // micro-batches per round at least (ACCO: per stage)
  std::size_t max_accumulation = 0;  // overlapped schedules: at most this many (0: no cap)
  // ACCO: micro-batches (at θ_t) while an estimate round is in flight, at least; `accumulation`
  // (at θ̃) then counts those while a real round is. 0: as accumulation. A cheap estimate round
  // hides behind fewer, the real round behind more: step max(e·c, M_e) + max(a·c, M). The cap
  // keeps its headroom: at most max_accumulation − accumulation + this (when capped).
  std::size_t estimate_accumulation = 0;
  std::uint64_t dpu_warmup = 0;      // DPU: synchronous rounds before overlapping
  std::uint64_t seed = 1;

  // Optimizer (kind: adamw | lion | sgd; the algorithm may impose one, e.g. dlion → lion).
  std::string optimizer = "";        // empty: the algorithm's default
  float learning_rate = 0;           // 0: the optimizer's default for this algorithm
  std::optional<float> beta1, beta2; // unset: the optimizer's default; in [0, 1]
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  std::uint64_t warmup_steps = 0;    // linear warm-up, then cosine to min_lr_ratio * lr
  float min_lr_ratio = 0.1f;         // in [0, 1]
  bool cosine = true;

  std::string link = "unlimited";    // in-process link model, e.g. "1gbit,50us"
  // What gradients and parameters travel as in every collective: fp32 | bf16 | fp16. Sums are
  // taken in fp32 and master weights and optimizer state stay fp32 on the shard; the compute
  // copy of the parameters every worker uses is the rounded one. Sign votes (Distributed Lion)
  // are 1 bit whatever this says.
  std::string wire_precision = "fp32";
  // ACCO's estimate rounds, which commit no state, may travel with fewer bits (empty: as
  // wire_precision).
  std::string estimate_precision;
  // What a GPU worker's matrix products compute in: fp32 | bf16 (bf16 operands on a bf16 copy
  // of the parameters, fp32 accumulation, fp32 gradients; README "GPU data path"). The model
  // is the embedder's: accord-train builds its CUDA gpt with it, and refuses bf16 for a cpu
  // model. Every process of a job must agree (it is in the settings fingerprint).
  std::string compute_precision = "fp32";

  std::uint64_t eval_interval = 50;  // eval loss every this many steps (0: only at the end)
  // Held-out examples per evaluation: the first ones of the eval stream, the same set every
  // time and for any micro-batch size (the GPT's 1024 windows of 64 are 65,536 tokens); a
  // smaller eval split is evaluated whole.
  std::uint64_t eval_examples = 1024;
  // Evaluations wait until the last round, so they take no compute from training (for
  // benchmarks that time a run; step metrics still carry their eval loss, once known).
  bool defer_evaluation = false;
  std::uint64_t replica_check_interval = 1;  // rounds between parameter-hash comparisons
  std::string metrics_path;          // JSON lines, one record per step (empty: none; CSV if it ends in .csv)
  // Chrome / Perfetto trace of every actor's spans (empty: none, and no cost); between
  // processes each rank writes its own, "trace.json" -> "trace.rank2.json", on one clock.
  std::string trace_path;
  // Checkpoints (format in recovery/checkpoint.hpp): written every checkpoint_interval steps and
  // at the end when checkpoint_path is set; resume_path continues a job with any worker count.
  std::string checkpoint_path;
  std::uint64_t checkpoint_interval = 0;  // 0: only at the end
  std::string resume_path;
  std::vector<membership_change> membership;  // in step order; empty: a fixed worker set
  // Elastic jobs between processes: every this many steps each worker keeps the step's state
  // in memory and sends its optimizer shard to its buddy, so a crash loses at most the steps
  // since (redone by the survivors). Each keep costs one more optimizer shard on the wire.
  std::uint64_t keep_interval = 1;
  int blas_threads = 0;              // per compute actor; 0: cores / workers
  // Set it (from a SIGTERM/SIGINT handler, say) and every worker stops after the same step:
  // the coordinator writes the checkpoint (when checkpoint_path is set) and run_job /
  // run_job_process return the steps done so far. May be null. Not for elastic jobs between
  // processes, whose workers leave instead (process_group::leave_requested).
  const std::atomic<bool>* stop_requested = nullptr;
  // Called (from the coordinator; do not block in it) after each checkpoint file is written
  // and synced, with its path and the step it holds. Between processes: on rank 0.
  std::function<void(const std::string& path, std::uint64_t step)> on_checkpoint_written;
};

// Thrown by run_job / run_job_process when resume_path holds a checkpoint taken at the job's
// last step: there is nothing left to train (not an error).
class job_already_finished : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Where one worker's time went during a step (seconds; ACCO: both rounds).
struct worker_seconds {
  double compute = 0;        // forward/backward
  double communication = 0;  // its communicator busy with the step's rounds
  double wait = 0;           // compute idle, waiting for a round
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
  double bits_per_parameter_per_step = 0;
  double hidden_fraction = 0;
  std::uint64_t bytes_sent = 0;    // all workers
  std::uint64_t rounds = 0;
  bool replicas_identical = true;  // every replica check agreed
  // Memory per worker: what the optimizer keeps (master weights + state, sharded where the
  // algorithm allows), the peak of parameter/gradient buffers plus that state, and the
  // theoretical minimum: parameters + two gradient buffers + that state.
  std::size_t state_bytes_per_worker = 0;
  std::size_t peak_bytes_per_worker = 0;
  std::size_t minimum_bytes_per_worker = 0;
  // Elastic jobs between processes: what this worker keeps so that a crash loses nothing (two
  // generations of parameters, its optimizer shard and its buddy's copy), beyond the above.
  std::size_t kept_bytes_per_worker = 0;
};

// Runs the job to completion on this process's threads. Throws std::invalid_argument naming the
// field for a bad configuration (before any actor starts; also when the workers' buffers cannot
// fit in this machine's memory) and std::runtime_error when a worker fails, also when a training
// loss or the parameters stop being finite (the message names the step and the worker; the last
// checkpoint written stays the last good one). `on_step` is called from the
// coordinator for every step (do not block in it).
job_result run_job(const model& prototype, std::shared_ptr<const dataset> train,
                   std::shared_ptr<const dataset> eval, const job_config& config,
                   std::function<void(const step_metrics&)> on_step = {});

// Where this process sits in a job that spans processes or machines: one worker per process,
// rank 0 also hosts the coordinator (control messages over CAF's middleman at master_port)
// and bulk tensors travel over UCX between the ranks.
struct process_group {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Rank 0: the address its master port listens on (numeric or a name; "0.0.0.0": every
  // interface). Empty: master_addr's own address (loopback when every rank is local).
  std::string master_bind;
  // The address other ranks reach this one at (its UCX listener); empty: the local address
  // of the route to master_addr.
  std::string host;
  std::chrono::milliseconds connect_timeout{60'000};
  // Names the job in every hello: a process of another job that reaches this master port is
  // refused saying so. Empty: "MASTER_ADDR:MASTER_PORT". A joiner with an empty id is not
  // checked (it named the job by its address).
  std::string job_id;
  // Rank 0 gives up when the starting ranks have not all said hello within this time (and
  // prints whom it waits for every 10 s meanwhile).
  std::chrono::milliseconds rendezvous_timeout{300'000};
  // ucx: tensors over UCX (tcp, shared memory, RDMA where present); nccl: over NCCL between
  // GPUs, this process using CUDA device `local_rank` (builds with CUDA only).
  std::string transport = "ucx";
  int local_rank = 0;

  // Elastic (actors/membership_actor.hpp): the job goes on when a worker process dies or
  // leaves, and admits joiners; otherwise any lost process fails the job. Rank 0's process
  // must stay either way: it hosts the coordinator.
  bool elastic = false;
  // This process joins a running elastic job at master_addr:master_port (rank and world_size
  // are ignored): it gets the current parameters and its share of the optimizer state, and
  // contributes from the next epoch.
  bool join = false;
  // Set it (from a signal handler, say) and this worker leaves at the next step boundary,
  // handing its optimizer shard to the others; run_job_process then returns. May be null.
  const std::atomic<bool>* leave_requested = nullptr;
  // A process silent this long (hung, or its machine gone) counts as dead.
  std::chrono::milliseconds heartbeat_timeout{30'000};
  // Rank 0: one line per membership event (epochs formed, state restored and verified).
  std::function<void(const std::string&)> on_event;
};

// Runs this process's worker of a multi-process job; every process must pass the same model
// and configuration (checked when it says hello), and config.workers must equal world_size
// (except for a joiner). Rank 0's result holds the step metrics; every rank's holds the final
// parameters. After a failure it throws, and the calling process should exit.
job_result run_job_process(const model& prototype, std::shared_ptr<const dataset> train,
                           std::shared_ptr<const dataset> eval, const job_config& config,
                           const process_group& group,
                           std::function<void(const step_metrics&)> on_step = {});

}  // namespace accord
