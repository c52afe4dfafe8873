#include "apps/training_options.hpp"

#include <accord/config_settings.hpp>

#include "cluster/membership_log.hpp"
#include "data/fashion_mnist.hpp"
#include "data/text.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "models/memory.hpp"
#include "models/mlp.hpp"

#include <algorithm>
#include <cstdlib>
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
constexpr int most_workers = 65535;  // Distributed Lion counts votes in 16 bits
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
      {"--micro-batch " + flags["micro-batch"].as<std::string>(),
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

// The value semantic of a declared setting's flag: its text, checked as declared as it is parsed
// (so a --config file's bad value is refused naming the file), refused in one line ("--local-steps:
// '0' is not a whole number in 1..1000000000", or what the setting's check says).
class declared_value final : public po::typed_value<std::string> {
public:
  explicit declared_value(setting_declaration setting)
      : po::typed_value<std::string>(nullptr), setting_(std::move(setting)) {}

  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    po::validators::check_first_occurrence(store);
    const std::string& text = po::validators::get_single_string(tokens);
    setting_declaration unchecked = setting_;
    unchecked.check = nullptr;
    setting_value value;
    try {
      value = parse_setting(unchecked, text);
    } catch (const std::invalid_argument&) {
      throw po::error_with_option_name("%canonical_option%: '" + text + "' is not " + accepted(setting_));
    }
    try {
      if (setting_.check) setting_.check(value);
    } catch (const std::invalid_argument& problem) {
      throw po::error(problem.what());
    }
    store = text;
  }

private:
  setting_declaration setting_;
};

// A declared setting's flag in `options`: a switch, or a value parsed as declared, with its
// default where it has one.
void add_declared_flag(po::options_description& options, const setting_declaration& s, const std::string& help) {
  if (s.kind == setting_kind::boolean) {
    options.add_options()(s.flag.c_str(), po::bool_switch(), help.c_str());
    return;
  }
  auto* value = new declared_value(s);
  if (const auto fallback = default_text(s)) value->default_value(*fallback, *fallback);
  options.add_options()(s.flag.c_str(), value, help.c_str());
}

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
      add_declared_flag(options, s, owners[s.flag] + ": " + s.help);
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
  // What builds the model and reads the data: accord-train's own, not job_config's.
  sections.model.add_options()
      ("model", po::value<std::string>()->default_value("gpt"), "gpt (byte-level transformer) | mlp (classifier)")
      ("device", po::value<std::string>()->default_value("auto"),
       "where compute actors run the gpt: cpu | cuda | auto (cuda when a GPU exists); the mlp runs on the cpu")
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
      // Any 64-bit seed, beyond a declared whole setting's range.
      ("seed", number_flag<std::uint64_t>(0, ~std::uint64_t{0}, d.seed), "initialisation and data order");
  add_topology_options(sections.topology, d);
  // Lists, and the replay of a log, parsed here (make_training_setup).
  sections.topology.add_options()
      ("speed", po::value<std::string>(),
       "per-worker slowdown factors in [1, 1000], e.g. 1,1,1,4 (emulates heterogeneous hardware)");
  sections.elastic.add_options()
      ("membership", po::value<std::string>(),
       "elastic run in one process: STEP:WORKERS[:crash],... e.g. 50:3,100:5,150:2:crash "
       "(after STEP the job goes on with WORKERS; crash: a worker dies mid-round and the survivors redo it)")
      ("replay-membership", po::value<std::string>(),
       "the membership changes a --record-membership file tells, at the same steps: in one process through "
       "the emulation; between processes (elastic; accord-launch --replay-membership starts the joiners too) "
       "real workers leave, join and the coordinator's process goes away at the recorded steps. With "
       "--max-accumulation 1 --blas-threads 1 in both runs the replay ends with the recorded parameters and "
       "optimizer state, bit for bit");
  // job_config's declared settings, each in its section, `d`'s value as the default.
  const std::map<std::string, po::options_description*> by_group = {
      {"model", &sections.model},         {"data", &sections.data},         {"algorithm", &sections.algorithm},
      {"topology", &sections.topology},   {"precision", &sections.precision},
      {"distributed", &sections.distributed}, {"elastic", &sections.elastic}, {"output", &sections.output}};
  for (const job_setting& s : declared_job_settings()) {
    if (!s.command_line) continue;
    setting_declaration declared = s.declared;
    declared.fallback = s.get(d);
    add_declared_flag(*by_group.at(declared.group), declared, declared.help);
  }
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
        else job.topology_settings.set(s.name, parse_setting(s, flags[s.flag].as<std::string>()));
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
  // job_config's declared settings, each flag parsed as declared (its check ran as it was parsed).
  for (const job_setting& s : declared_job_settings()) {
    if (!s.command_line || !flags.count(s.declared.flag)) continue;
    if (s.declared.kind == setting_kind::boolean) s.set(job, flags[s.declared.flag].as<bool>());
    else s.set(job, parse_setting(s.declared, flags[s.declared.flag].as<std::string>()));
  }
  job.seed = flags["seed"].as<std::uint64_t>();
  read_topology_options(flags, job, local_workers);
  if (flags.count("speed")) job.speed_factors = parse_speed_factors(flags["speed"].as<std::string>());
  const compute_precision precision = parse_compute_precision(job.compute_precision, "--compute-precision");
  if (flags.count("membership")) job.membership = parse_membership(flags["membership"].as<std::string>());
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
