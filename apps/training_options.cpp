#include "apps/training_options.hpp"

#include "algorithms/algorithm.hpp"
#include "cluster/membership_log.hpp"
#include "data/fashion_mnist.hpp"
#include "data/text.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "models/memory.hpp"
#include "models/mlp.hpp"
#include "transport/link_model.hpp"
#include "transport/wire_precision.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace po = boost::program_options;

namespace accord {
namespace {

// Upper bounds of the job's numbers: far beyond any sensible run, low enough that nothing
// downstream overflows or allocates absurdly before the memory estimate speaks.
constexpr std::uint64_t most_steps = 1'000'000'000;
constexpr std::size_t most_examples = 1'000'000;
constexpr int most_workers = 65535;  // Distributed Lion counts votes in 16 bits
constexpr float most_learning_rate = 1e6f;
constexpr double slowest_speed = 1000;

// A comma-separated list for `flag`, each item parsed by `parse` (nullopt: not acceptable);
// the error names the flag, the item and what was `expected`.
template <class T, class Parse>
std::vector<T> parse_list(const std::string& flag, const std::string& list, const std::string& expected, Parse parse) {
  std::vector<T> values;
  for (const std::string& item : list_items(flag, list, expected)) {
    const std::optional<T> value = parse(item);
    if (!value) throw std::invalid_argument(flag + ": '" + item + "' is not " + expected);
    values.push_back(*value);
  }
  return values;
}

std::vector<double> parse_speed_factors(const std::string& list) {
  const number_range<double> factors{1, slowest_speed};
  return parse_list<double>("--speed", list, factors.describe() + " (e.g. 1,1,1,4)",
                            [&](const std::string& item) { return factors.parse(item); });
}

int parse_local_world_size(const std::string& text) {
  const number_range<int> sizes{1, most_workers};
  const std::optional<int> size = sizes.parse(text);
  if (!size) throw std::invalid_argument("LOCAL_WORLD_SIZE='" + text + "' is not " + sizes.describe());
  return *size;
}

std::vector<int> parse_sizes(const std::string& flag, const std::string& list) {
  const number_range<int> sizes{1, 1 << 30};
  return parse_list<int>(flag, list, sizes.describe(), [&](const std::string& item) { return sizes.parse(item); });
}

std::vector<membership_change> parse_membership(const std::string& list) {
  return parse_list<membership_change>(
      "--membership", list, "STEP:WORKERS or STEP:WORKERS:crash (STEP 1..steps-1, WORKERS 1.." +
                                std::to_string(most_workers) + ")",
      [](const std::string& item) -> std::optional<membership_change> {
        const auto colon = item.find(':');
        if (colon == std::string::npos) return std::nullopt;
        std::string workers = item.substr(colon + 1);
        membership_change change;
        if (workers.size() > 6 && workers.compare(workers.size() - 6, 6, ":crash") == 0) {
          change.crash = true;
          workers.resize(workers.size() - 6);
        }
        const auto step = number_range<std::uint64_t>{1, most_steps}.parse(item.substr(0, colon));
        const auto count = number_range<int>{1, most_workers}.parse(workers);
        if (!step || !count) return std::nullopt;
        change.step = *step;
        change.workers = *count;
        return change;
      });
}

// What decides the memory of a job in one process.
struct job_shape {
  bool language_model = true;
  bool activations_on_host = true;  // false: a GPU holds them
  gpt_config gpt;
  mlp_config mlp;
  double micro_batch = 1;
  double workers = 1;  // in this process
};

// The bulk of the bytes a job needs in one process: the workers' parameter-sized buffers
// (worker_buffer_bytes) and one model instance's activations each, plus the evaluator's;
// optimizer state and data come on top. (A 4-worker 3.3M-parameter GPT at micro-batch 64 x 128 tokens:
// 4.3 GB estimated, 3.6 GB resident before its first evaluation.)
double job_bytes(const job_shape& s) {
  const double parameters =
      s.language_model ? gpt_parameter_estimate(s.gpt) : mlp_parameter_estimate(s.mlp);
  const double activations = !s.activations_on_host ? 0
                             : s.language_model     ? gpt_activation_bytes(s.gpt, s.micro_batch)
                                                    : mlp_activation_bytes(s.mlp, s.micro_batch);
  return (s.workers + 1) * activations + worker_buffer_bytes(parameters, s.workers);
}

// Refuses a job that cannot fit in this machine's memory, naming the size flag whose smallest
// value would shrink the estimate most (the one that makes the job too big). `workers_flag`:
// what sets the number of workers in this process ("--workers 8"), empty when that is one.
void require_job_memory(const po::variables_map& flags, const job_shape& shape, const std::string& workers_flag) {
  const double needed = job_bytes(shape);
  if (needed <= available_memory_bytes()) return;
  auto given = [&](const char* flag) {
    const auto& value = flags[flag].value();
    return std::string("--") + flag + " " +
           (value.type() == typeid(int) ? std::to_string(flags[flag].as<int>()) : flags[flag].as<std::string>());
  };
  using shrink = void (*)(job_shape&);
  std::vector<std::pair<std::string, shrink>> candidates = {
      {"--micro-batch " + std::to_string(flags["micro-batch"].as<std::size_t>()),
       [](job_shape& s) { s.micro_batch = 1; }}};
  if (!workers_flag.empty()) candidates.emplace_back(workers_flag, [](job_shape& s) { s.workers = 1; });
  if (shape.language_model) {
    candidates.emplace_back(given("width"), [](job_shape& s) { s.gpt.width = s.gpt.heads; });
    candidates.emplace_back(given("layers"), [](job_shape& s) { s.gpt.layers = 1; });
    candidates.emplace_back(given("context"), [](job_shape& s) { s.gpt.context = 1; });
    candidates.emplace_back(given("heads"), [](job_shape& s) { s.gpt.heads = 1; });
  } else {
    candidates.emplace_back(given("hidden"), [](job_shape& s) { s.mlp.hidden.assign(1, 1); });
  }
  std::string culprit = candidates.front().first;
  double smallest = needed;
  for (const auto& [flag, shrink_it] : candidates) {
    job_shape smaller = shape;
    shrink_it(smaller);
    if (const double bytes = job_bytes(smaller); bytes < smallest) {
      smallest = bytes;
      culprit = flag;
    }
  }
  require_memory(needed, culprit);
}

// The value semantic of a declared setting's flag: parsed as declared, refused in one line
// ("--local-steps: '0' is not a whole number in 1..1000000000", or what the setting's check says).
class declared_value final : public po::typed_value<setting_value> {
public:
  explicit declared_value(setting_declaration setting)
      : po::typed_value<setting_value>(nullptr), setting_(std::move(setting)) {}

  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    po::validators::check_first_occurrence(store);
    const std::string& text = po::validators::get_single_string(tokens);
    setting_declaration unchecked = setting_;
    unchecked.check = nullptr;
    try {
      store = parse_setting(unchecked, text);
    } catch (const std::invalid_argument&) {
      throw po::error_with_option_name("%canonical_option%: '" + text + "' is not " + accepted(setting_));
    }
    if (!setting_.check) return;
    try {
      setting_.check(boost::any_cast<const setting_value&>(store));
    } catch (const std::invalid_argument& problem) {
      throw po::error(problem.what());
    }
  }

private:
  setting_declaration setting_;
};

// Each topology's declared settings as flags (a flag two topologies declare, once), the help
// line led by the topologies that read it: "local-sgd: inner optimizer steps ...".
void add_declared_flags(po::options_description& options,
                        const std::map<std::string, std::vector<setting_declaration>>& declared) {
  std::map<std::string, std::string> owners;  // flag -> "local-sgd, model-averaging"
  for (const auto& [topology, settings] : declared)
    for (const setting_declaration& s : settings) owners[s.flag] += (owners[s.flag].empty() ? "" : ", ") + topology;
  std::set<std::string> added;
  for (const auto& [topology, settings] : declared)
    for (const setting_declaration& s : settings) {
      if (!added.insert(s.flag).second) continue;
      const std::string help = owners[s.flag] + ": " + s.help;
      if (s.kind == setting_kind::boolean) {
        options.add_options()(s.flag.c_str(), po::bool_switch(), help.c_str());
        continue;
      }
      auto* value = new declared_value(s);
      if (const auto fallback = default_text(s)) value->default_value(*fallback, *fallback);
      options.add_options()(s.flag.c_str(), value, help.c_str());
    }
}

}  // namespace

void add_topology_options(po::options_description& options, const job_config& d) {
  std::string topologies;
  for (const std::string& name : topology_names()) topologies += (topologies.empty() ? "" : " | ") + name;
  options.add_options()
      ("topology", po::value<std::string>()->default_value(d.topology),
       ("who exchanges with whom, when, and how results merge: " + topologies +
        " (ring: the algorithm's rounds over every worker; docs/topologies.md)").c_str());
  add_declared_flags(options, declared_topology_settings());
}

void add_training_options(flag_sections& sections, const job_config& d) {
  static const std::string data_help =
      "gpt: a text file, an llm.c .bin token shard, a glob of either ('shards/train_*.bin') or a directory of "
      "text files (default: the fortunes corpus); "
      "mlp: a Fashion-MNIST directory (default: " + std::string(default_fashion_mnist_directory) + ")";
  constexpr std::uint64_t most = most_steps;  // also the bound of intervals and warm-ups
  sections.model.add_options()
      ("model", po::value<std::string>()->default_value("gpt"), "gpt (byte-level transformer) | mlp (classifier)")
      ("device", po::value<std::string>()->default_value("auto"),
       "where compute actors run the gpt: cpu | cuda | auto (cuda when a GPU exists); the mlp runs on the cpu")
      ("blas-threads", number_flag(0, 1024, d.blas_threads), "BLAS threads per worker (0: OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else cores / (LOCAL_WORLD_SIZE x workers))")
      ("vocab", number_flag(1, 65536), "gpt: vocabulary size (default: from the data: 256 for text, the largest "
       "token + 1 for token shards)")
      ("context", number_flag(1, 1 << 20, 64), "gpt: context length")
      ("layers", number_flag(1, 1 << 20, 2), "gpt: transformer blocks")
      ("heads", number_flag(1, 1 << 20, 4), "gpt: attention heads")
      ("width", number_flag(1, 1 << 30, 128), "gpt: embedding width")
      ("untied-head", po::bool_switch(), "gpt: separate output head instead of the token embedding")
      ("hidden", po::value<std::string>()->default_value("256,128"), "mlp: hidden layer widths");
  sections.data.add_options()
      ("data", po::value<std::string>(), data_help.c_str())
      ("eval-data", po::value<std::string>(),
       "gpt: held-out data as --data takes it (default: the last tenth of --data)")
      ("seed", number_flag<std::uint64_t>(0, ~std::uint64_t{0}, d.seed), "initialisation and data order")
      ("eval-interval", number_flag<std::uint64_t>(0, most, d.eval_interval),
       "held-out loss every this many steps (0: only at the end)")
      ("eval-examples", number_flag<std::uint64_t>(1, 1'000'000'000, d.eval_examples),
       "held-out examples per evaluation, the same set every time (gpt: windows of --context tokens)")
      ("defer-evaluation", po::bool_switch(),
       "keep the parameters of every --eval-interval step and evaluate them after the last step, so "
       "evaluations take no time from the training clock (time-to-loss comparisons)");
  sections.algorithm.add_options()
      ("algo", po::value<std::string>()->default_value(d.algorithm),
       "ddp | dpu | acco | lion | dlion-mavo | dlion-avg | acco-dlion")
      ("workers", number_flag(1, most_workers, d.workers), "data-parallel workers")
      ("steps", number_flag<std::uint64_t>(1, most, d.steps), "optimizer steps")
      ("micro-batch", number_flag<std::size_t>(1, most_examples, d.micro_batch), "examples per micro-batch")
      ("accumulation", number_flag<std::size_t>(1, most_examples, d.accumulation),
       "micro-batches per round at least (ACCO: per stage)")
      ("max-accumulation", number_flag<std::size_t>(0, most_examples, d.max_accumulation),
       "overlapped algorithms: at most this many micro-batches per round (0: no cap)")
      ("estimate-accumulation", number_flag<std::size_t>(0, most_examples, d.estimate_accumulation),
       "acco, acco-dlion: micro-batches at least while an estimate round is in flight (--accumulation then "
       "counts those while a real round is; a cap keeps --max-accumulation's headroom) (0: as --accumulation)")
      ("global-batch", number_flag<std::uint64_t>(0, most, d.global_batch),
       "examples per step over all workers, kept when workers come and go: a smaller or larger epoch "
       "shares that many among its workers (each at least one micro-batch; DeepSpeed elasticity's habit). "
       "A whole number of workers' --micro-batch x micro-batches per step (0: follows the worker count)")
      ("dpu-warmup", number_flag<std::uint64_t>(0, most, d.dpu_warmup), "DPU: synchronous rounds before overlapping")
      ("optimizer", po::value<std::string>(), "adamw | lion | sgd (default: the algorithm's)")
      ("lr", number_flag(number_range<float>{0, most_learning_rate, true}), "peak learning rate (default: adamw 3e-3, lion 3e-4, sgd 0.05)")
      ("beta1", number_flag(0.0f, 1.0f), "first moment / momentum coefficient (default: the optimizer's)")
      ("beta2", number_flag(0.0f, 1.0f), "second moment coefficient (Lion: momentum update; default: the optimizer's)")
      ("weight-decay", number_flag(0.0f, most_learning_rate, d.weight_decay), "decoupled weight decay")
      ("warmup", number_flag<std::uint64_t>(0, most, d.warmup_steps), "linear warm-up steps")
      ("schedule", po::value<std::string>()->default_value(d.cosine ? "cosine" : "constant"),
       "cosine (to --min-lr-ratio x lr) | constant")
      ("min-lr-ratio", number_flag(0.0f, 1.0f, d.min_lr_ratio), "cosine floor as a fraction of lr")
      ("replica-check", number_flag<std::uint64_t>(0, most, d.replica_check_interval),
       "compare parameter hashes of all replicas every this many rounds (0: never)");
  add_topology_options(sections.topology, d);
  sections.topology.add_options()
      ("speed", po::value<std::string>(),
       "per-worker slowdown factors in [1, 1000], e.g. 1,1,1,4 (emulates heterogeneous hardware)")
      ("link", po::value<std::string>()->default_value(d.link),
       "emulated link between workers: bandwidth and/or latency, e.g. 1gbit,50us | 100mbit | unlimited");
  sections.precision.add_options()
      ("wire-precision", po::value<std::string>()->default_value(d.wire_precision),
       "what gradients and parameters travel as: auto (fp8 on both of ACCO's rounds on the ring, the measured "
       "best; fp32 otherwise) | fp32 (exact) | bf16 | fp16 | int8 | fp8 | fp4 | sign | sign2 | sign3, "
       "or P,Q for gradients P and parameters Q among the block codes (e.g. fp4,sign3); sums in fp32, fp32 "
       "master weights and optimizer state; int8, fp8, fp4, sign, sign2 and sign3: blocks of 256 with error "
       "feedback, for ddp, dpu, acco and lion on the ring; fp8 and fp4 keep small values' relative precision, "
       "which AdamW needs; Distributed Lion's votes are 1 bit regardless")
      ("estimate-precision", po::value<std::string>()->default_value(d.estimate_precision),
       "ACCO's estimate rounds (they commit no state), as --wire-precision: fp32 | bf16 | fp16 | int8 | fp8 | "
       "fp4 | sign | sign2 | sign3 or P,Q (blocks of 256 values with an fp32 scale each: int8 codes, 8- or "
       "4-bit logarithmic codes, 1-bit signs scaled by the block's mean |x|, or a sign and 1 (sign2) or 2 "
       "(sign3) bits of magnitude from splits at means, with 2 or 4 bf16 levels; parameters travel as the "
       "difference from the current ones) (empty: as --wire-precision)")
      ("bucket-cap-mb", number_flag(0.0, 10000.0, d.bucket_cap_mb),
       "DDP's gradient buckets, as torch DDP's bucket_cap_mb: on a round's last micro-batch each run of about "
       "this many MB of gradients that backward has finished starts its reduce-scatter while backward goes on "
       "(0: off, the round starts after backward; synchronous sharded rounds on the ring over fp32 or 16-bit "
       "wires on the host)")
      ("compute-precision", po::value<std::string>()->default_value(d.compute_precision),
       "GPU workers' matrix products: fp32 | bf16 (bf16 operands, fp32 accumulation, fp32 master weights "
       "and gradients; --device cuda only)");
  sections.elastic.add_options()
      ("membership", po::value<std::string>(),
       "elastic run in one process: STEP:WORKERS[:crash],... e.g. 50:3,100:5,150:2:crash "
       "(after STEP the job goes on with WORKERS; crash: a worker dies mid-round and the survivors redo it)")
      ("record-membership", po::value<std::string>(),
       "write every membership event (epochs, members lost, leaving, joining, each with its step) to this "
       "file as JSON lines; between processes the coordinator's process writes it (a new coordinator goes on "
       "with it after a failover)")
      ("replay-membership", po::value<std::string>(),
       "the membership changes a --record-membership file tells, at the same steps: in one process through "
       "the emulation; between processes (elastic; accord-launch --replay-membership starts the joiners too) "
       "real workers leave, join and the coordinator's process goes away at the recorded steps. With "
       "--max-accumulation 1 --blas-threads 1 in both runs the replay ends with the recorded parameters and "
       "optimizer state, bit for bit")
      ("checkpoint", po::value<std::string>(),
       "write parameters, optimizer state and data position to this file (at the end, and every --checkpoint-interval steps)")
      ("checkpoint-interval", number_flag<std::uint64_t>(0, most, d.checkpoint_interval),
       "steps between checkpoints (0: only at the end)")
      ("resume", po::value<std::string>(), "continue from a checkpoint, with any number of workers, up to --steps");
  sections.output.add_options()
      ("metrics", po::value<std::string>(), "write one JSON line per step to this file (CSV when it ends in .csv)")
      ("trace", po::value<std::string>(),
       "write a Chrome / Perfetto timeline of every actor (ui.perfetto.dev, chrome://tracing) to this file; "
       "between processes each rank writes FILE with .rankR before the extension");
}

void add_training_options(po::options_description& options, const job_config& d) {
  flag_sections sections;
  add_training_options(sections, d);
  sections.add_to(options);
}

void flag_sections::add_to(po::options_description& options) const {
  options.add_options()
      ("config", po::value<std::string>(),
       "read options from this file: 'name = value' lines, names as the flags without '--', '#' comments "
       "(the command line wins)");
  for (const po::options_description* section : {&model, &data, &algorithm, &topology, &precision, &distributed, &elastic, &output})
    if (!section->options().empty()) options.add(*section);
}

std::vector<std::pair<std::string, std::string>> topology_flags_ignored_by(const std::string& topology) {
  const auto declared = declared_topology_settings();
  std::set<std::string> read;  // the flags `topology` declares
  if (const auto mine = declared.find(topology); mine != declared.end())
    for (const setting_declaration& s : mine->second) read.insert(s.flag);
  std::vector<std::pair<std::string, std::string>> ignored;
  for (const auto& [owner, settings] : declared)
    if (owner != topology)
      for (const setting_declaration& s : settings)
        if (read.insert(s.flag).second) ignored.emplace_back(s.flag, "without --topology " + owner);
  return ignored;
}

void read_topology_options(const po::variables_map& flags, job_config& job, int local_workers) {
  job.topology = flags["topology"].as<std::string>();
  if (const auto names = topology_names(); std::find(names.begin(), names.end(), job.topology) == names.end()) {
    std::string known;
    for (const auto& name : names) known += (known.empty() ? "" : "|") + name;
    throw std::invalid_argument("--topology: '" + job.topology + "' (expected " + known + ")");
  }
  // The settings given (on the command line or in a --config file), each parsed as declared.
  std::set<std::string> read;
  for (const auto& [topology, settings] : declared_topology_settings())
    for (const setting_declaration& s : settings)
      if (read.insert(s.flag).second && flags.count(s.flag) && !flags[s.flag].defaulted()) {
        if (s.kind == setting_kind::boolean) job.topology_settings.set(s.name, flags[s.flag].as<bool>());
        else job.topology_settings.set(s.name, flags[s.flag].as<setting_value>());
      }
  if (!job.topology_settings.given("group_size") && job.topology == "hierarchical" && local_workers > 0) {
    // Between processes a group is one machine's workers.
    if (const char* local = std::getenv("LOCAL_WORLD_SIZE"); local && *local)
      job.topology_settings.set("group_size", parse_local_world_size(local));
  }
}

training_setup make_training_setup(const po::variables_map& flags, int local_workers) {
  training_setup setup;
  job_config& job = setup.job;
  job.algorithm = flags["algo"].as<std::string>();
  job.workers = flags["workers"].as<int>();
  read_topology_options(flags, job, local_workers);
  if (flags.count("speed")) job.speed_factors = parse_speed_factors(flags["speed"].as<std::string>());
  job.steps = flags["steps"].as<std::uint64_t>();
  job.micro_batch = flags["micro-batch"].as<std::size_t>();
  job.accumulation = flags["accumulation"].as<std::size_t>();
  job.max_accumulation = flags["max-accumulation"].as<std::size_t>();
  job.estimate_accumulation = flags["estimate-accumulation"].as<std::size_t>();
  job.global_batch = flags["global-batch"].as<std::uint64_t>();
  job.dpu_warmup = flags["dpu-warmup"].as<std::uint64_t>();
  job.seed = flags["seed"].as<std::uint64_t>();
  if (flags.count("optimizer")) job.optimizer = flags["optimizer"].as<std::string>();
  if (flags.count("lr")) job.learning_rate = flags["lr"].as<float>();
  if (flags.count("beta1")) job.beta1 = flags["beta1"].as<float>();
  if (flags.count("beta2")) job.beta2 = flags["beta2"].as<float>();
  job.weight_decay = flags["weight-decay"].as<float>();
  job.warmup_steps = flags["warmup"].as<std::uint64_t>();
  const std::string schedule = flags["schedule"].as<std::string>();
  if (schedule != "cosine" && schedule != "constant")
    throw std::invalid_argument("--schedule: '" + schedule + "' (expected cosine|constant)");
  job.cosine = schedule == "cosine";
  job.min_lr_ratio = flags["min-lr-ratio"].as<float>();
  job.link = flags["link"].as<std::string>();
  job.wire_precision = flags["wire-precision"].as<std::string>();
  job.estimate_precision = flags["estimate-precision"].as<std::string>();
  // The algorithm and topology resolve "auto" (job/plan.cpp); the names are checked here.
  parse_wires_or_auto(job.wire_precision, "--wire-precision");
  if (!job.estimate_precision.empty()) parse_wires_or_auto(job.estimate_precision, "--estimate-precision");
  job.bucket_cap_mb = flags["bucket-cap-mb"].as<double>();
  job.compute_precision = flags["compute-precision"].as<std::string>();
  const compute_precision precision = parse_compute_precision(job.compute_precision, "--compute-precision");
  job.eval_interval = flags["eval-interval"].as<std::uint64_t>();
  job.eval_examples = flags["eval-examples"].as<std::uint64_t>();
  if (job.eval_examples < 1) throw std::invalid_argument("--eval-examples must be at least 1");
  job.defer_evaluation = flags["defer-evaluation"].as<bool>();
  job.replica_check_interval = flags["replica-check"].as<std::uint64_t>();
  if (flags.count("metrics")) job.metrics_path = flags["metrics"].as<std::string>();
  if (flags.count("trace")) {
    job.trace_path = flags["trace"].as<std::string>();
    // Refused before anything starts; between processes each rank writes a file beside it.
    const std::filesystem::path parent = std::filesystem::path(job.trace_path).parent_path();
    const std::string directory = parent.empty() ? "." : parent.string();
    if (!std::filesystem::is_directory(directory) || ::access(directory.c_str(), W_OK) != 0)
      throw std::invalid_argument("--trace: " + job.trace_path + ": cannot write into " + directory);
  }
  if (flags.count("checkpoint")) job.checkpoint_path = flags["checkpoint"].as<std::string>();
  job.checkpoint_interval = flags["checkpoint-interval"].as<std::uint64_t>();
  if (flags.count("resume")) job.resume_path = flags["resume"].as<std::string>();
  if (flags.count("membership")) job.membership = parse_membership(flags["membership"].as<std::string>());
  if (flags.count("record-membership")) job.membership_log = flags["record-membership"].as<std::string>();
  if (flags.count("replay-membership")) {
    if (flags.count("membership"))
      throw std::invalid_argument("--replay-membership and --membership both give the membership changes: give one");
    const std::string log = flags["replay-membership"].as<std::string>();
    if (log == job.membership_log)
      throw std::invalid_argument("--record-membership " + log + " would overwrite the log --replay-membership reads");
    // Between processes the job itself replays the log (process_group::membership_replay).
    if (local_workers == 0) {
      const membership_replay replay = replay_of(read_membership_log(log), log, job.workers, job.steps);
      job.workers = replay.workers;
      job.membership = replay.changes;
    }
  }
  job.blas_threads = flags["blas-threads"].as<int>();

  const std::string kind = flags["model"].as<std::string>();
  if (kind != "gpt" && kind != "mlp") throw std::invalid_argument("--model: '" + kind + "' (expected gpt|mlp)");
  const std::string device_name = flags["device"].as<std::string>();
  // The MLP has no CUDA path: auto means the cpu for it, and cuda is a mistake.
  if (kind == "mlp" && device_name == "cuda")
    throw std::invalid_argument("--device cuda: --model mlp runs on the cpu only");
  device_kind device = parse_device(device_name);  // also refuses an unknown name for the mlp
  if (kind == "mlp") device = device_kind::cpu;
  if (device == device_kind::cpu && precision != compute_precision::fp32)
    throw std::invalid_argument("--compute-precision " + job.compute_precision + ": bf16 compute is for GPU workers "
                                "(--device cuda, --model gpt); cpu models compute in fp32");
  setup.device_description = describe_device(device);

  job_shape shape;
  shape.language_model = kind == "gpt";
  shape.activations_on_host = device == device_kind::cpu;
  shape.micro_batch = static_cast<double>(job.micro_batch);
  int most_at_once = job.workers;
  for (const auto& change : job.membership) most_at_once = std::max(most_at_once, change.workers);
  shape.workers = local_workers > 0 ? local_workers : most_at_once;
  const auto membership_flag = [&flags] {
    return flags.count("membership") ? "--membership " + flags["membership"].as<std::string>()
                                     : "--replay-membership " + flags["replay-membership"].as<std::string>();
  };
  const std::string workers_flag = shape.workers == 1           ? ""
                                   : most_at_once > job.workers ? membership_flag()
                                                                : "--workers " + std::to_string(job.workers);
  const std::string data = flags.count("data") ? flags["data"].as<std::string>() : "";
  if (kind == "gpt") {
    gpt_config& config = shape.gpt;
    config.context = flags["context"].as<int>();
    config.layers = flags["layers"].as<int>();
    config.heads = flags["heads"].as<int>();
    config.width = flags["width"].as<int>();
    config.tied_head = !flags["untied-head"].as<bool>();
    // Checked before the data are opened (a job too big for any data is refused at once) and
    // again with the vocabulary the data give.
    config.vocab = flags.count("vocab") ? flags["vocab"].as<int>() : 256;
    require_job_memory(flags, shape, workers_flag);
    const auto load_tokens = [data, eval_data = flags.count("eval-data") ? flags["eval-data"].as<std::string>() : "",
                              vocab = flags.count("vocab") ? flags["vocab"].as<int>() : 0,
                              context = config.context](std::uint64_t seed) {
      return load_token_data(data, eval_data, vocab, context, seed);
    };
    const token_data tokens = load_tokens(job.seed);
    config.vocab = tokens.train->vocab_size();
    require_job_memory(flags, shape, workers_flag);
    setup.net = make_gpt_on(device, config, precision);
    setup.train = tokens.train;
    setup.eval = tokens.eval;
    setup.load_data = [load_tokens](std::uint64_t seed) {
      const token_data reloaded = load_tokens(seed);
      return seeded_data{reloaded.train, reloaded.eval};
    };
  } else {
    mlp_config& config = shape.mlp;
    config.hidden = parse_sizes("--hidden", flags["hidden"].as<std::string>());
    require_job_memory(flags, shape, workers_flag);
    const std::string directory = data.empty() ? default_fashion_mnist_directory : data;
    setup.net = std::make_unique<mlp>(config);
    setup.load_data = [directory](std::uint64_t seed) {
      return seeded_data{load_fashion_mnist(directory, true, seed), load_fashion_mnist(directory, false, seed)};
    };
    seeded_data loaded = setup.load_data(job.seed);
    setup.train = std::move(loaded.train);
    setup.eval = std::move(loaded.eval);
  }
  setup.data_description = setup.train->describe();
  return setup;
}

seeded_data data_for_seed(const training_setup& setup, std::uint64_t seed) {
  return seed == setup.job.seed ? seeded_data{setup.train, setup.eval} : setup.load_data(seed);
}

void warn_ignored_training_flags(const po::variables_map& flags, const std::string& program) {
  if (flags["model"].as<std::string>() == "gpt") {
    warn_ignored(flags, program, {{"hidden", "with --model gpt"}});
  } else {
    for (const char* flag : {"eval-data", "vocab", "context", "layers", "heads", "width", "untied-head"})
      warn_ignored(flags, program, {{flag, "with --model mlp"}});
  }
  if (flags["algo"].as<std::string>() != "dpu") warn_ignored(flags, program, {{"dpu-warmup", "without --algo dpu"}});
  warn_ignored(flags, program, topology_flags_ignored_by(flags["topology"].as<std::string>()));
  if (flags["schedule"].as<std::string>() != "cosine")
    warn_ignored(flags, program, {{"min-lr-ratio", "without --schedule cosine"}});
}

}  // namespace accord
