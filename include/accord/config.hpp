#pragma once
// Public embedder API: the settings of a job (run_job, run_job_process, app_job). Plain data,
// no CAF: every field has a default, an app sets the ones it cares about.
// <accord/config_fields.hpp> lists the fields by name (the Python binding is made from it).
#include <accord/app_optimizer.hpp>
#include <accord/settings.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
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
  // The ranks of the epoch before that depart (ascending); the survivors keep their order, and
  // joiners come after them. Empty: the last ranks depart. Matters for per-worker state only
  // (Distributed Lion's momenta); a replayed log names them.
  std::vector<int> departing = {};
};

// A range of the flat parameters the optimizer treats apart (job_config::parameter_groups), as
// torch's param groups: no weight decay on norms and biases, a smaller learning rate for some.
struct parameter_group {
  std::uint64_t begin = 0, end = 0;  // the flat parameters [begin, end)
  float learning_rate_scale = 1.0f;  // the schedule's learning rate times this
  float weight_decay_scale = 1.0f;   // job_config::weight_decay times this (0: no decay)
  // "trained" by the optimizer, or values the app keeps itself (a module's buffers, e.g.
  // BatchNorm's running statistics), submitted in place of gradients and not trained: every
  // round sets them to their mean over the round's micro-batches of all workers ("averaged")
  // or of rank 0 only ("broadcast").
  std::string role = "trained";
};

struct job_config {
  // ddp | dpu | acco | lion | dlion-mavo | dlion-avg | acco-dlion, or a registered one
  // (include/accord/update_rule.hpp; algorithm_names() lists them).
  std::string algorithm = "acco";
  // Who exchanges with whom, when, and how results merge (include/accord/topology.hpp):
  // ring | local-sgd | hierarchical, or a name an app registered. ring: the algorithm's rounds
  // over every worker.
  std::string topology = "ring";
  // The topologies' own settings by name, as each declared them (register_topology; docs/flags.md
  // lists the built-ins'): topology_settings.set("local_steps", 4). Another topology's are ignored.
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
  // How a step's micro-batches are counted. "fixed": every step takes exactly `accumulation`
  // micro-batches per worker, as torch DDP's gradient accumulation, so N micro-batches make
  // N / accumulation steps on every run (ACCO splits them between its stages: estimate_accumulation
  // at the estimate stage, default half rounded down, the rest at the real stage; at least 2;
  // max_accumulation 0 or equal to accumulation). "growing": overlapped schedules keep computing
  // while a round is in flight, at least `accumulation` per round (ACCO: per stage) and at most
  // max_accumulation, so how many micro-batches a step takes depends on timing; its
  // learning-rate schedule counts examples: a step's rate is the schedule's at the micro-batches
  // applied so far (all workers) over a nominal step's (accumulation, ACCO: both stages', per
  // worker). "growing-steps": growing, the schedule counting steps (run_job's, accord-train's and
  // accord.torch.train's way). Empty: "fixed" for an app-driven job (<accord/worker.hpp>,
  // accord.torch.Job), "growing-steps" when accord runs the loop (run_job).
  std::string accumulation_mode;
  // Examples per optimizer step over all workers, kept when workers come and go (as DeepSpeed's
  // elasticity keeps train_batch_size): it fixes the worker count W0 the batch is sized for
  // (global_batch / (micro_batch × micro-batches per step)), and an epoch of W workers shares
  // W0 workers' micro-batches among its own, the last ranks taking one more where they do not
  // divide, each at least one. 0: every worker takes `accumulation`, so the batch follows the
  // worker count (torchrun's and torchft's habit). Not for asynchronous topologies.
  std::uint64_t global_batch = 0;
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
  // Sharded-optimizer and sign-vote algorithms (ddp, dpu, acco, dlion-*, acco-dlion) on the ring
  // only: ranges treated apart, in order and disjoint (the rest: scales 1, trained); and gradient
  // clipping: the round's mean gradient (over the trained parameters, all workers) is scaled to
  // at most this L2 norm first, as torch's clip_grad_norm_ (0: no clipping). Sign votes clip
  // each worker's own mean gradient, the one its Lion momentum sees (the mean over workers is
  // never formed).
  std::vector<parameter_group> parameter_groups;
  float max_gradient_norm = 0.0f;
  // The app's own optimizer instead of `optimizer` (<accord/app_optimizer.hpp>; sharded-optimizer
  // algorithms on the ring): its own settings replace beta1, beta2, epsilon, weight_decay and the
  // groups' scales (parameter_groups may only name values the app keeps), and learning_rate is
  // the peak its rates are scaled from by the schedule (0: 1). May be null; it must outlive the
  // job. `optimizer` must be its name (processes check that they agree on it).
  const elementwise_optimizer* app_optimizer = nullptr;

  std::string link = "unlimited";    // in-process link model, e.g. "1gbit,50us"
  // What gradients and parameters travel as in every collective: fp32 | bf16 | fp16, the block
  // codes int8 | fp8 | fp4 | sign | sign2 | sign3 or P,Q (sharded optimizers on the ring), or
  // auto: the measured best, fp8 on both of ACCO's rounds on the ring and fp32 everywhere else
  // (DDP exact, as torch DDP). Sums are taken in fp32 and master weights and optimizer state stay
  // fp32 on the shard; the compute copy of the parameters every worker uses is the rounded one.
  // Sign votes (Distributed Lion) are 1 bit whatever this says. fp32: exact rounds.
  std::string wire_precision = "auto";
  // DDP's gradient buckets, as torch DDP's bucket_cap_mb: on a round's last micro-batch, each
  // run of about this many MB (float32 gradients) that backward has finished starts its
  // reduce-scatter at once, while backward goes on with the earlier layers (0: off, the round
  // starts after backward). Synchronous sharded-optimizer rounds on the ring over fp32 or
  // 16-bit wires on the host only; anything else keeps the whole-buffer round
  // (docs/algorithms.md, DDP). Models report their finished gradients: model::listen_to_gradients.
  double bucket_cap_mb = 25;
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
  // Writes every membership event (JSON lines with their steps: cluster/membership_log.hpp) to
  // this file, in one process or in the coordinator's (a successor after a failover appends);
  // replayed in one process as `membership`, between processes by process_group::membership_replay.
  std::string membership_log;
  // Elastic jobs between processes: every this many steps each worker keeps the step's state
  // in memory and sends its optimizer shard to its buddy, so a crash loses at most the steps
  // since (redone by the survivors). Each keep costs one more optimizer shard on the wire.
  std::uint64_t keep_interval = 1;
  int blas_threads = 0;              // per compute actor; 0: cores / workers
  // When no step's work completes in a process for this long (after its first), it writes every
  // thread's stack and its actors to stderr, once per stall, before anyone kills it
  // (observe/stall_watchdog.hpp). 0: no watchdog.
  double watchdog_seconds = 120.0;
  // Set it (from a SIGTERM/SIGINT handler, say) and every worker stops after the same step:
  // the coordinator writes the checkpoint (when checkpoint_path is set) and run_job /
  // run_job_process return the steps done so far. May be null. Not for elastic jobs between
  // processes, whose workers leave instead (process_group::leave_requested).
  const std::atomic<bool>* stop_requested = nullptr;
  // Called (from the coordinator; do not block in it) after each checkpoint file is written
  // and synced, with its path and the step it holds. Between processes: on rank 0.
  std::function<void(const std::string& path, std::uint64_t step)> on_checkpoint_written;
};

}  // namespace accord
