// job_config's settings, declared once (include/accord/config_settings.hpp).
#include <accord/config_settings.hpp>

#include "gpu/compute_precision.hpp"
#include "transport/wire_precision.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace accord {
namespace {

// Upper bounds of the job's numbers: far beyond any sensible run, low enough that nothing
// downstream overflows or allocates absurdly before the memory estimate speaks.
constexpr double most_steps = 1e9;     // also the bound of intervals and warm-ups
constexpr double most_examples = 1e6;  // micro-batch sizes and counts
constexpr double most_workers = 65535; // Distributed Lion counts votes in 16 bits
constexpr double most_learning_rate = 1e6;

template <class T>
setting_kind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return setting_kind::boolean;
  else if constexpr (std::is_integral_v<T>) return setting_kind::whole;
  else if constexpr (std::is_floating_point_v<T>) return setting_kind::number;
  else return setting_kind::text;
}

template <class T>
setting_value value_of(const T& value) {
  if constexpr (std::is_same_v<T, bool>) return value;
  else if constexpr (std::is_integral_v<T>) return static_cast<std::int64_t>(value);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(value);
  else return value;
}

double number_of(const setting_value& value) {
  return std::holds_alternative<double>(value) ? std::get<double>(value)
                                               : static_cast<double>(std::get<std::int64_t>(value));
}

// job_config's field `member`, declared by `d` (its kind and default come from the field).
template <class T>
job_setting field(T job_config::*member, setting_declaration d) {
  job_setting s;
  s.get = [member](const job_config& c) { return value_of(c.*member); };
  s.set = [member](job_config& c, const setting_value& v) {
    if constexpr (std::is_same_v<T, bool>) c.*member = std::get<bool>(v);
    else if constexpr (std::is_integral_v<T>) c.*member = static_cast<T>(std::get<std::int64_t>(v));
    else if constexpr (std::is_floating_point_v<T>) c.*member = static_cast<T>(number_of(v));
    else c.*member = std::get<std::string>(v);
  };
  d.kind = kind_of<T>();
  d.fallback = s.get(job_config{});
  if (d.owner.empty()) d.owner = "job";
  s.declared = std::move(d);
  return s;
}

// An optional number (beta1, beta2): unset reads as NaN, which no range holds (no default shown).
job_setting optional_field(std::optional<float> job_config::*member, setting_declaration d) {
  job_setting s;
  s.get = [member](const job_config& c) -> setting_value {
    return (c.*member) ? static_cast<double>(*(c.*member)) : std::numeric_limits<double>::quiet_NaN();
  };
  s.set = [member](job_config& c, const setting_value& v) {
    const double value = number_of(v);
    if (std::isnan(value)) (c.*member).reset();
    else c.*member = static_cast<float>(value);
  };
  s.fingerprint_text = [member](const job_config& c) -> std::string {
    if (!(c.*member)) return "(the optimizer's)";
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", static_cast<double>(*(c.*member)));
    return text;
  };
  d.kind = setting_kind::number;
  d.fallback = std::numeric_limits<double>::quiet_NaN();
  if (d.owner.empty()) d.owner = "algorithm";
  s.declared = std::move(d);
  return s;
}

job_setting text_resolved(job_setting s, std::function<std::string(const job_config&)> resolved) {
  s.fingerprint_text = std::move(resolved);
  return s;
}

job_setting only_in_config(job_setting s) {
  s.command_line = false;
  return s;
}

// "none", or each group as "[begin,end) lr*s wd*s role".
std::string describe_groups(const std::vector<parameter_group>& groups) {
  if (groups.empty()) return "none";
  const auto number = [](double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", value);
    return std::string(text);
  };
  std::string out;
  for (const parameter_group& g : groups)
    out += (out.empty() ? "[" : " [") + std::to_string(g.begin) + "," + std::to_string(g.end) + ") lr*" +
           number(g.learning_rate_scale) + " wd*" + number(g.weight_decay_scale) + " " + g.role;
  return out;
}

void check_wires(const setting_value& value, const char* flag) {
  parse_wires_or_auto(std::get<std::string>(value), flag);  // the algorithm and topology resolve "auto"
}

std::vector<job_setting> declare() {
  using d = setting_declaration;
  std::vector<job_setting> settings = {
      field(&job_config::algorithm,
            d{.name = "algorithm", .flag = "algo", .help = "ddp | dpu | acco | lion | dlion-mavo | dlion-avg | acco-dlion",
              .group = "algorithm", .owner = "algorithm"}),
      field(&job_config::topology,
            d{.name = "topology", .flag = "topology",
              .help = "who exchanges with whom, when, and how results merge (ring: the algorithm's rounds over every "
                      "worker; docs/topologies.md)",
              .group = "topology", .choices = [] {
                // Every registered topology declared its settings, none perhaps (register_topology).
                std::vector<std::string> names;
                for (const auto& [name, settings] : declared_topology_settings()) names.push_back(name);
                return names;
              }}),
      field(&job_config::workers,
            d{.name = "workers", .flag = "workers", .low = 1, .high = most_workers, .unit = "workers",
              .help = "data-parallel workers", .group = "algorithm", .fingerprint = false}),
      field(&job_config::steps, d{.name = "steps", .flag = "steps", .low = 1, .high = most_steps, .unit = "steps",
                                  .help = "optimizer steps", .group = "algorithm"}),
      field(&job_config::micro_batch, d{.name = "micro_batch", .flag = "micro-batch", .low = 1, .high = most_examples,
                                        .unit = "examples", .help = "examples per micro-batch", .group = "algorithm"}),
      field(&job_config::accumulation,
            d{.name = "accumulation", .flag = "accumulation", .low = 1, .high = most_examples, .unit = "micro-batches",
              .help = "micro-batches per round at least (ACCO: per stage)", .group = "algorithm"}),
      field(&job_config::max_accumulation,
            d{.name = "max_accumulation", .flag = "max-accumulation", .low = 0, .high = most_examples,
              .unit = "micro-batches", .help = "overlapped algorithms: at most this many micro-batches per round (0: no cap)",
              .group = "algorithm"}),
      text_resolved(
          field(&job_config::estimate_accumulation,
                d{.name = "estimate_accumulation", .flag = "estimate-accumulation", .low = 0, .high = most_examples,
                  .unit = "micro-batches",
                  .help = "acco, acco-dlion: micro-batches at least while an estimate round is in flight (--accumulation "
                          "then counts those while a real round is; a cap keeps --max-accumulation's headroom) (0: as "
                          "--accumulation)",
                  .group = "algorithm", .owner = "algorithm"}),
          [](const job_config& c) {
            return std::to_string(c.estimate_accumulation ? c.estimate_accumulation : c.accumulation);
          }),
      only_in_config(text_resolved(
          field(&job_config::accumulation_mode,
                d{.name = "accumulation_mode", .flag = "accumulation-mode",
                  .help = "fixed | growing | growing-steps (empty: growing-steps where accord runs the loop)",
                  .group = "algorithm"}),
          [](const job_config& c) { return c.accumulation_mode.empty() ? "growing-steps" : c.accumulation_mode; })),
      text_resolved(
          field(&job_config::global_batch,
                d{.name = "global_batch", .flag = "global-batch", .low = 0, .high = most_steps, .unit = "examples",
                  .help = "examples per step over all workers, kept when workers come and go: a smaller or larger epoch "
                          "shares that many among its workers (each at least one micro-batch; DeepSpeed elasticity's "
                          "habit). A whole number of workers' --micro-batch x micro-batches per step (0: follows the "
                          "worker count)",
                  .group = "algorithm"}),
          [](const job_config& c) {
            return c.global_batch ? std::to_string(c.global_batch) : std::string("none (follows the workers)");
          }),
      field(&job_config::dpu_warmup,
            d{.name = "dpu_warmup", .flag = "dpu-warmup", .low = 0, .high = most_steps, .unit = "rounds",
              .help = "DPU: synchronous rounds before overlapping", .group = "algorithm", .owner = "algorithm dpu"}),
      field(&job_config::seed, d{.name = "seed", .flag = "seed", .low = 0, .high = 0x1p63,  // to 2^63-1
                                 .help = "initialisation and data order", .group = "data"}),
      text_resolved(field(&job_config::optimizer,
                          d{.name = "optimizer", .flag = "optimizer",
                            .help = "adamw | lion | sgd (default: the algorithm's)", .group = "algorithm",
                            .owner = "algorithm"}),
                    [](const job_config& c) { return c.optimizer.empty() ? "(the algorithm's)" : c.optimizer; }),
      field(&job_config::learning_rate,
            d{.name = "learning_rate", .flag = "lr", .low = 0, .high = most_learning_rate, .above_low = true,
              .help = "peak learning rate (default: adamw 3e-3, lion 3e-4, sgd 0.05)", .group = "algorithm",
              .owner = "algorithm"}),
      optional_field(&job_config::beta1, d{.name = "beta1", .flag = "beta1", .low = 0, .high = 1,
                                           .help = "first moment / momentum coefficient (default: the optimizer's)",
                                           .group = "algorithm"}),
      optional_field(&job_config::beta2,
                     d{.name = "beta2", .flag = "beta2", .low = 0, .high = 1,
                       .help = "second moment coefficient (Lion: momentum update; default: the optimizer's)",
                       .group = "algorithm"}),
      only_in_config(field(&job_config::epsilon, d{.name = "epsilon", .flag = "epsilon", .low = 0, .high = 1,
                                                   .above_low = true, .help = "the optimizer's epsilon",
                                                   .group = "algorithm", .owner = "algorithm"})),
      field(&job_config::weight_decay, d{.name = "weight_decay", .flag = "weight-decay", .low = 0,
                                         .high = most_learning_rate, .help = "decoupled weight decay",
                                         .group = "algorithm", .owner = "algorithm"}),
      [] {
        job_setting groups;
        groups.declared = d{.name = "parameter_groups", .flag = "parameter-groups", .kind = setting_kind::text,
                            .fallback = std::string("none"),
                            .help = "ranges of the parameters with their own scales or roles", .group = "algorithm",
                            .owner = "algorithm"};
        groups.command_line = false;
        groups.get = [](const job_config& c) -> setting_value { return describe_groups(c.parameter_groups); };
        return groups;
      }(),
      only_in_config(field(&job_config::max_gradient_norm,
                           d{.name = "max_gradient_norm", .flag = "max-gradient-norm", .low = 0,
                             .high = std::numeric_limits<float>::max(), .help = "gradient clipping (0: none)",
                             .group = "algorithm", .owner = "algorithm"})),
      field(&job_config::warmup_steps, d{.name = "warmup_steps", .flag = "warmup", .low = 0, .high = most_steps,
                                         .unit = "steps", .help = "linear warm-up steps", .group = "algorithm"}),
      [] {
        job_setting schedule;
        schedule.declared = d{.name = "cosine", .flag = "schedule", .kind = setting_kind::text,
                              .fallback = std::string("cosine"), .help = "cosine (to --min-lr-ratio x lr) | constant",
                              .group = "algorithm", .owner = "job", .check = [](const setting_value& v) {
                                const std::string& text = std::get<std::string>(v);
                                if (text != "cosine" && text != "constant")
                                  throw std::invalid_argument("--schedule: '" + text + "' (expected cosine|constant)");
                              }};
        schedule.get = [](const job_config& c) -> setting_value {
          return std::string(c.cosine ? "cosine" : "constant");
        };
        schedule.set = [](job_config& c, const setting_value& v) { c.cosine = std::get<std::string>(v) == "cosine"; };
        return schedule;
      }(),
      field(&job_config::min_lr_ratio, d{.name = "min_lr_ratio", .flag = "min-lr-ratio", .low = 0, .high = 1,
                                         .help = "cosine floor as a fraction of lr", .group = "algorithm",
                                         .owner = "schedule cosine"}),
      field(&job_config::eval_interval,
            d{.name = "eval_interval", .flag = "eval-interval", .low = 0, .high = most_steps, .unit = "steps",
              .help = "held-out loss every this many steps (0: only at the end)", .group = "data"}),
      field(&job_config::eval_examples,
            d{.name = "eval_examples", .flag = "eval-examples", .low = 1, .high = 1e9, .unit = "examples",
              .help = "held-out examples per evaluation, the same set every time (gpt: windows of --context tokens)",
              .group = "data"}),
      field(&job_config::wire_precision,
            d{.name = "wire_precision", .flag = "wire-precision",
              .help = "what gradients and parameters travel as: auto (fp8 on both of ACCO's rounds on the ring, the "
                      "measured best; fp32 otherwise) | fp32 (exact) | bf16 | fp16 | int8 | fp8 | fp4 | sign | sign2 | "
                      "sign3, or P,Q for gradients P and parameters Q among the block codes (e.g. fp4,sign3); sums in "
                      "fp32, fp32 master weights and optimizer state; int8, fp8, fp4, sign, sign2 and sign3: blocks of "
                      "256 with error feedback, for ddp, dpu, acco and lion on the ring; fp8 and fp4 keep small values' "
                      "relative precision, which AdamW needs; Distributed Lion's votes are 1 bit regardless",
              .group = "precision",
              .check = [](const setting_value& v) { check_wires(v, "--wire-precision"); }}),
      text_resolved(
          field(&job_config::estimate_precision,
                d{.name = "estimate_precision", .flag = "estimate-precision",
                  .help = "ACCO's estimate rounds (they commit no state), as --wire-precision: fp32 | bf16 | fp16 | int8 "
                          "| fp8 | fp4 | sign | sign2 | sign3 or P,Q (blocks of 256 values with an fp32 scale each: int8 "
                          "codes, 8- or 4-bit logarithmic codes, 1-bit signs scaled by the block's mean |x|, or a sign and "
                          "1 (sign2) or 2 (sign3) bits of magnitude from splits at means, with 2 or 4 bf16 levels; "
                          "parameters travel as the difference from the current ones) (empty: as --wire-precision)",
                  .group = "precision", .owner = "algorithm", .check = [](const setting_value& v) {
                    if (!std::get<std::string>(v).empty()) check_wires(v, "--estimate-precision");
                  }}),
          [](const job_config& c) { return c.estimate_precision.empty() ? c.wire_precision : c.estimate_precision; }),
      field(&job_config::compute_precision,
            d{.name = "compute_precision", .flag = "compute-precision",
              .help = "GPU workers' matrix products: fp32 | bf16 (bf16 operands, fp32 accumulation, fp32 master "
                      "weights and gradients; --device cuda only)",
              .group = "precision", .check = [](const setting_value& v) {
                parse_compute_precision(std::get<std::string>(v), "--compute-precision");
              }}),
      // Every worker reduces the same buckets.
      field(&job_config::bucket_cap_mb,
            d{.name = "bucket_cap_mb", .flag = "bucket-cap-mb", .low = 0, .high = 10000, .unit = "MB",
              .help = "DDP's gradient buckets, as torch DDP's bucket_cap_mb: on a round's last micro-batch each run of "
                      "about this many MB of gradients that backward has finished starts its reduce-scatter while "
                      "backward goes on (0: off, the round starts after backward; synchronous sharded rounds on the "
                      "ring over fp32 or 16-bit wires on the host)",
              .group = "precision", .owner = "algorithm"}),
      // Checkpoints and kept states are snapshots every worker takes in the same round.
      text_resolved(field(&job_config::checkpoint_path,
                          d{.name = "checkpoint_path", .flag = "checkpoint",
                            .help = "write parameters, optimizer state and data position to this file (at the end, and "
                                    "every --checkpoint-interval steps)",
                            .group = "elastic"}),
                    [](const job_config& c) { return c.checkpoint_path.empty() ? "none" : "set"; }),
      field(&job_config::checkpoint_interval,
            d{.name = "checkpoint_interval", .flag = "checkpoint-interval", .low = 0, .high = most_steps,
              .unit = "steps", .help = "steps between checkpoints (0: only at the end)", .group = "elastic"}),
      field(&job_config::keep_interval,
            d{.name = "keep_interval", .flag = "keep-interval", .low = 1, .high = most_steps, .unit = "steps",
              .help = "elastic: steps between states kept in memory and replicated to a buddy (a crash redoes at "
                      "most these)",
              .group = "elastic", .owner = "elastic on"}),
      // The rest each process may set as it likes.
      field(&job_config::resume_path,
            d{.name = "resume_path", .flag = "resume",
              .help = "continue from a checkpoint, with any number of workers, up to --steps", .group = "elastic",
              .fingerprint = false}),
      field(&job_config::membership_log,
            d{.name = "membership_log", .flag = "record-membership",
              .help = "write every membership event (epochs, members lost, leaving, joining, each with its step) to "
                      "this file as JSON lines; between processes the coordinator's process writes it (a new "
                      "coordinator goes on with it after a failover)",
              .group = "elastic", .fingerprint = false}),
      field(&job_config::link,
            d{.name = "link", .flag = "link",
              .help = "emulated link between workers: bandwidth and/or latency, e.g. 1gbit,50us | 100mbit | unlimited",
              .group = "topology", .fingerprint = false, .owner = "run in one process"}),  // checked when the job is planned (benchmarks take auto)
      field(&job_config::defer_evaluation,
            d{.name = "defer_evaluation", .flag = "defer-evaluation",
              .help = "keep the parameters of every --eval-interval step and evaluate them after the last step, so "
                      "evaluations take no time from the training clock (time-to-loss comparisons)",
              .group = "data", .fingerprint = false}),
      field(&job_config::replica_check_interval,
            d{.name = "replica_check_interval", .flag = "replica-check", .low = 0, .high = most_steps,
              .unit = "rounds", .help = "compare parameter hashes of all replicas every this many rounds (0: never)",
              .group = "algorithm", .fingerprint = false}),
      field(&job_config::blas_threads,
            d{.name = "blas_threads", .flag = "blas-threads", .low = 0, .high = 1024, .unit = "threads",
              .help = "BLAS threads per worker (0: OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else cores / "
                      "(LOCAL_WORLD_SIZE x workers))",
              .group = "model", .fingerprint = false}),
      field(&job_config::watchdog_seconds,
            d{.name = "watchdog_seconds", .flag = "watchdog", .low = 0, .high = 1e6, .unit = "s",
              .help = "when no step completes in a process for this long, it writes every thread's stack and its "
                      "actors to stderr, once (0: off)",
              .group = "output", .fingerprint = false}),
      field(&job_config::metrics_path,
            d{.name = "metrics_path", .flag = "metrics",
              .help = "write one JSON line per step to this file (CSV when it ends in .csv)", .group = "output",
              .fingerprint = false}),
      field(&job_config::trace_path,
            d{.name = "trace_path", .flag = "trace",
              .help = "write a Chrome / Perfetto timeline of every actor (ui.perfetto.dev, chrome://tracing) to this "
                      "file; between processes each rank writes FILE with .rankR before the extension",
              .group = "output", .fingerprint = false, .check = [](const setting_value& v) {
                // Refused before anything starts; between processes each rank writes a file beside it.
                const std::string& path = std::get<std::string>(v);
                const std::filesystem::path parent = std::filesystem::path(path).parent_path();
                const std::string directory = parent.empty() ? "." : parent.string();
                if (!std::filesystem::is_directory(directory) || ::access(directory.c_str(), W_OK) != 0)
                  throw std::invalid_argument("--trace: " + path + ": cannot write into " + directory);
              }}),
  };
  return settings;
}

}  // namespace

const std::vector<job_setting>& declared_job_settings() {
  static const std::vector<job_setting> settings = declare();
  return settings;
}

void require_declared_ranges(const job_config& config) {
  for (const job_setting& s : declared_job_settings()) {
    const setting_declaration& d = s.declared;
    if (!s.command_line || (d.kind != setting_kind::whole && d.kind != setting_kind::number)) continue;
    const setting_value value = s.get(config);
    const double x = number_of(value);
    if (value == d.fallback || std::isnan(x)) continue;
    if (!(std::isfinite(x) && x >= d.low && x <= d.high && !(d.above_low && x == d.low)))
      throw std::invalid_argument(d.name + " = " + setting_text(value) + " is not " + accepted(d) + " (--" + d.flag +
                                  ")");
  }
}

}  // namespace accord
