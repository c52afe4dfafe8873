#include "apps/training_options.hpp"

#include <accord/config_settings.hpp>

#include "cluster/membership_log.hpp"
#include "data/fashion_mnist.hpp"
#include "data/text.hpp"
#include "gpu/device.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "models/memory.hpp"
#include "models/mlp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
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
  auto given = [&](const char* flag) { return std::string("--") + flag + " " + flags[flag].as<std::string>(); };
  using shrink = void (*)(job_shape&);
  std::vector<std::pair<std::string, shrink>> candidates = {{given("micro-batch"), [](job_shape& s) { s.micro_batch = 1; }}};
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
    unchecked.choices = nullptr;
    try {
      parse_setting(unchecked, text);
    } catch (const std::invalid_argument&) {
      throw po::error_with_option_name("%canonical_option%: '" + text + "' is not " + accepted(setting_));
    }
    try {
      parse_setting(setting_, text);  // its choices and its check
    } catch (const std::invalid_argument& problem) {
      throw po::error(problem.what());
    }
    store = text;
  }

private:
  setting_declaration setting_;
};

// A declared setting's flag in `options`: a switch, or a value parsed as declared, with its
// default where it has one; a text of choices, or one that says what it accepts, leads its help
// with them ("gpt | mlp: ...").
void add_declared_flag(po::options_description& options, const setting_declaration& s, const std::string& help) {
  const std::string line = s.choices || !s.accepts.empty() ? accepted(s) + ": " + help : help;
  if (s.kind == setting_kind::boolean) {
    options.add_options()(s.flag.c_str(), po::bool_switch(), line.c_str());
    return;
  }
  auto* value = new declared_value(s);
  if (const auto fallback = default_text(s)) value->default_value(*fallback, *fallback);
  options.add_options()(s.flag.c_str(), value, line.c_str());
}

// The value `flags` give declared setting `s`: a switch's, or its text parsed as declared.
setting_value flag_value(const po::variables_map& flags, const setting_declaration& s) {
  if (s.kind == setting_kind::boolean) return flags[s.flag].as<bool>();
  return parse_setting(s, flags[s.flag].as<std::string>());
}


// Every declared setting accord-train has a flag for: its own, job_config's, the topologies', the
// place's and its output's.
std::vector<setting_declaration> flag_declarations() {
  std::vector<setting_declaration> all = declared_training_settings();
  for (const job_setting& s : declared_job_settings())
    if (s.command_line) all.push_back(s.declared);
  for (const auto& [topology, settings] : declared_topology_settings()) all.insert(all.end(), settings.begin(), settings.end());
  for (const process_setting& s : declared_process_settings()) all.push_back(s.declared);
  all.insert(all.end(), declared_output_settings().begin(), declared_output_settings().end());
  return all;
}

// The mode of the settings owned by "run VALUE": where the job runs, "between processes" or "in
// one process" (job_place), which no flag chooses; and --elastic's, which the environment can
// choose too.
const std::string place_mode = "run";
const std::string elastic_mode = "elastic";
// The owners of the place's settings: read only between processes, only in an elastic job.
const std::string between_processes = place_mode + " between processes";
const std::string elastic_only = elastic_mode + " on";

// The flags of `declared` that the modes chosen leave unread, each with why ("without --topology
// gossip"), in declaration order. A setting owned by "WORD VALUE" is read only where the setting
// WORD (by key or flag: topology, algorithm, model, schedule, elastic) is VALUE, or, for WORD
// place_mode, where the job runs VALUE; `chosen` gives a mode's value by its flag or place_mode
// (nullopt: not chosen here, so read). A setting whose mode is itself unread is unread for the
// same reason. A flag that several settings declare (two topologies) is unread only where none of
// them is read.
std::vector<std::pair<std::string, std::string>> flags_ignored(
    const std::vector<setting_declaration>& declared,
    const std::function<std::optional<std::string>(const std::string& mode)>& chosen) {
  // Why `s` is unread, nullopt where it is read; `depth` bounds a chain of modes.
  const std::function<std::optional<std::string>(const setting_declaration&, std::size_t)> why_unread =
      [&](const setting_declaration& s, std::size_t depth) -> std::optional<std::string> {
    const auto space = s.owner.find(' ');
    if (space == std::string::npos || depth > declared.size()) return std::nullopt;
    const std::string word = s.owner.substr(0, space), value = s.owner.substr(space + 1);
    if (word == place_mode) {
      const std::optional<std::string> now = chosen(place_mode);
      if (!now || *now == value) return std::nullopt;
      return *now + " (it applies " + value + ")";
    }
    const auto mode = std::find_if(declared.begin(), declared.end(),
                                   [&](const setting_declaration& m) { return m.name == word || m.flag == word; });
    if (mode == declared.end()) return std::nullopt;
    if (auto mode_unread = why_unread(*mode, depth + 1)) return mode_unread;
    const std::optional<std::string> now = chosen(mode->flag);
    if (!now || *now == value) return std::nullopt;
    if (mode->kind == setting_kind::boolean) return (value == "on" ? "without --" : "with --") + mode->flag;
    return "without --" + mode->flag + " " + value;
  };
  std::set<std::string> read;
  std::vector<std::pair<std::string, std::string>> unread;
  for (const setting_declaration& s : declared) {
    if (auto why = why_unread(s, 0)) unread.emplace_back(s.flag, *why);
    else read.insert(s.flag);
  }
  std::set<std::string> listed;
  std::erase_if(unread, [&](const auto& flag_why) {
    return read.count(flag_why.first) || !listed.insert(flag_why.first).second;
  });
  return unread;
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

// job_config's declared setting `s` as a flag, `defaults`' value as its default.
void add_job_flag(po::options_description& options, const job_setting& s, const job_config& defaults) {
  setting_declaration declared = s.declared;
  declared.fallback = s.get(defaults);
  add_declared_flag(options, declared, declared.help);
}

const job_setting& topology_setting_of_job() {
  const auto& settings = declared_job_settings();
  return *std::find_if(settings.begin(), settings.end(),
                       [](const job_setting& s) { return s.declared.name == "topology"; });
}

}  // namespace

const std::vector<setting_declaration>& declared_training_settings() {
  using d = setting_declaration;
  using enum setting_kind;
  static const std::vector<setting_declaration> settings = {
      d{.name = "model", .flag = "model", .kind = text, .fallback = std::string("gpt"),
        .help = "the byte-level transformer (gpt) or a classifier of images (mlp)", .group = "model",
        .fingerprint = false, .owner = "job", .choices = [] { return std::vector<std::string>{"gpt", "mlp"}; }},
      d{.name = "device", .flag = "device", .kind = text, .fallback = std::string("auto"),
        .help = "where compute actors run the gpt: cuda:N on GPU N, cuda on GPU 0 (between processes GPU "
                "LOCAL_RANK), auto: cuda when a GPU exists; the mlp runs on the cpu",
        .group = "model", .fingerprint = false, .owner = "job",
        .check = [](const setting_value& v) { check_device_name(std::get<std::string>(v)); },
        .accepts = "cpu | cuda | cuda:N | auto"},
      d{.name = "vocab", .flag = "vocab", .kind = whole, .fallback = std::int64_t{0}, .low = 1, .high = 65536,
        .help = "gpt: vocabulary size (default: from the data: 256 for text, the largest token + 1 for token shards)",
        .group = "model", .fingerprint = false, .owner = "model gpt"},
      d{.name = "context", .flag = "context", .kind = whole, .fallback = std::int64_t{64}, .low = 1, .high = 1 << 20,
        .unit = "tokens", .help = "gpt: context length", .group = "model", .fingerprint = false, .owner = "model gpt"},
      d{.name = "layers", .flag = "layers", .kind = whole, .fallback = std::int64_t{2}, .low = 1, .high = 1 << 20,
        .help = "gpt: transformer blocks", .group = "model", .fingerprint = false, .owner = "model gpt"},
      d{.name = "heads", .flag = "heads", .kind = whole, .fallback = std::int64_t{4}, .low = 1, .high = 1 << 20,
        .help = "gpt: attention heads", .group = "model", .fingerprint = false, .owner = "model gpt"},
      d{.name = "width", .flag = "width", .kind = whole, .fallback = std::int64_t{128}, .low = 1, .high = 1 << 30,
        .help = "gpt: embedding width", .group = "model", .fingerprint = false, .owner = "model gpt"},
      d{.name = "untied_head", .flag = "untied-head", .kind = boolean, .fallback = false,
        .help = "gpt: separate output head instead of the token embedding", .group = "model", .fingerprint = false,
        .owner = "model gpt"},
      d{.name = "hidden", .flag = "hidden", .kind = text, .fallback = std::string("256,128"),
        .help = "mlp: hidden layer widths", .group = "model", .fingerprint = false, .owner = "model mlp"},
      d{.name = "data", .flag = "data", .kind = text, .fallback = std::string(),
        .help = "gpt: a text file, an llm.c .bin token shard, a glob of either ('shards/train_*.bin') or a directory "
                "of text files (default: the fortunes corpus); mlp: a Fashion-MNIST directory (default: " +
                std::string(default_fashion_mnist_directory) + ")",
        .group = "data", .fingerprint = false, .owner = "job"},
      d{.name = "eval_data", .flag = "eval-data", .kind = text, .fallback = std::string(),
        .help = "gpt: held-out data as --data takes it (default: the last tenth of --data)", .group = "data",
        .fingerprint = false, .owner = "model gpt"},
      d{.name = "speed_factors", .flag = "speed", .kind = text, .fallback = std::string(),
        .help = "per-worker slowdown factors, e.g. 1,1,1,4 (emulates heterogeneous hardware)", .group = "topology",
        .fingerprint = false, .owner = "job",
        .check = [](const setting_value& v) { parse_speed_factors(std::get<std::string>(v)); },
        .accepts = "factors in [1, " + number_text(slowest_speed) + "], one per worker"},
      d{.name = "membership", .flag = "membership", .kind = text, .fallback = std::string(),
        .help = "an elastic run in one process, e.g. 50:3,100:5,150:2:crash (after STEP the job goes on with "
                "WORKERS; crash: a worker dies mid-round and the survivors redo it)",
        .group = "elastic", .fingerprint = false, .owner = "job",
        .check = [](const setting_value& v) { parse_membership(std::get<std::string>(v)); },
        .accepts = "STEP:WORKERS[:crash],..."},
      d{.name = "membership_replay", .flag = "replay-membership", .kind = text, .fallback = std::string(),
        .help = "the membership changes a --record-membership file tells, at the same steps: in one process "
                "through the emulation; between processes (elastic; accord-launch --replay-membership starts the "
                "joiners too) real workers leave, join and the coordinator's process goes away at the recorded "
                "steps. With --max-accumulation 1 --blas-threads 1 in both runs the replay ends with the recorded "
                "parameters and optimizer state, bit for bit",
        .group = "elastic", .fingerprint = false, .owner = "job"},
  };
  return settings;
}

const std::vector<setting_declaration>& declared_output_settings() {
  using d = setting_declaration;
  using enum setting_kind;
  static const std::vector<setting_declaration> settings = {
      d{.name = "log_interval", .flag = "log-interval", .kind = whole, .fallback = std::int64_t{10}, .low = 0,
        .high = 1e9, .unit = "steps", .help = "progress line every this many steps (0: none)", .group = "output",
        .fingerprint = false, .owner = "job"},
      d{.name = "show_config", .flag = "show-config", .kind = boolean, .fallback = false,
        .help = "print the job's settings as the flags, --config and the environment make them, one 'name = value' "
                "line per job_config field (between processes also the process_group's, as 'group.name = value'), "
                "and exit",
        .group = "output", .fingerprint = false, .owner = "job"},
      d{.name = "save_parameters", .flag = "save-parameters", .kind = text, .fallback = std::string(),
        .help = "write the final parameters (raw float32) to this file; between processes rank 0 writes it (every "
                "rank holds the same parameters)",
        .group = "output", .fingerprint = false, .owner = "job"},
      d{.name = "status_port", .flag = "status-port", .kind = whole, .fallback = std::int64_t{-1}, .low = 0,
        .high = 65535,
        .help = "rank 0 serves a live status page (loss curves, workers, membership) at http://HOST:PORT/ and "
                "Prometheus metrics at /metrics (0: a free port, printed)",
        .group = "output", .fingerprint = false, .owner = "job"},
  };
  return settings;
}

void add_output_options(flag_sections& sections) {
  for (const setting_declaration& s : declared_output_settings()) add_declared_flag(sections.output, s, s.help);
}

namespace {

// The place's duration `member`, a number of seconds, declared by `d`.
process_setting seconds_field(std::chrono::milliseconds process_group::*member, setting_declaration d) {
  d.kind = setting_kind::number;
  d.unit = "s";
  d.fallback = std::chrono::duration<double>(process_group{}.*member).count();
  return {std::move(d), [member](process_group& place, const setting_value& v) {
            place.*member = std::chrono::milliseconds(std::llround(std::get<double>(v) * 1000));
          }};
}

// The place's text `member`, declared by `d`.
process_setting text_field(std::string process_group::*member, setting_declaration d) {
  d.kind = setting_kind::text;
  d.fallback = process_group{}.*member;
  return {std::move(d), [member](process_group& place, const setting_value& v) { place.*member = std::get<std::string>(v); }};
}

std::vector<process_setting> declare_process_settings() {
  using d = setting_declaration;
  const auto detectors = [] { return std::vector<std::string>{"adaptive", "timeout"}; };
  return {
      text_field(&process_group::transport,
                 d{.name = "transport", .flag = "transport",
                   .help = "how tensors travel between processes (nccl: GPU to GPU, each process on GPU LOCAL_RANK)",
                   .group = "distributed", .fingerprint = false, .owner = between_processes,
                   .choices = [] { return std::vector<std::string>{"ucx", "nccl"}; }}),
      seconds_field(&process_group::heartbeat_timeout,
                    d{.name = "heartbeat_timeout", .flag = "heartbeat-timeout", .low = 0.1, .high = 86400,
                      .help = "seconds of silence after which a worker process counts as dead, at the latest",
                      .group = "distributed", .fingerprint = false, .owner = between_processes}),
      {d{.name = "failure_detector", .flag = "failure-detector", .kind = setting_kind::text,
         .fallback = std::string(process_group{}.adaptive_failure_detection ? "adaptive" : "timeout"),
         .help = "how an elastic job finds a hung worker: one silent well past what its own heartbeats allowed, "
                 "and at least 1.5 s (adaptive), or only --heartbeat-timeout, as every job that is not elastic",
         .group = "distributed", .fingerprint = false, .owner = elastic_only, .choices = detectors},
       [](process_group& place, const setting_value& v) {
         place.adaptive_failure_detection = std::get<std::string>(v) == "adaptive";
       }},
      seconds_field(&process_group::rendezvous_timeout,
                    d{.name = "rendezvous_timeout", .flag = "rendezvous-timeout", .low = 0.1, .high = 1e6,
                      .help = "seconds after which rank 0 gives up when the starting ranks have not all said hello",
                      .group = "distributed", .fingerprint = false, .owner = between_processes}),
      text_field(&process_group::master_bind,
                 d{.name = "master_bind", .flag = "master-bind",
                   .help = "rank 0: the address its master port listens on (0.0.0.0: every interface; default: "
                           "MASTER_ADDR's, loopback when every rank is local)",
                   .group = "distributed", .fingerprint = false, .owner = between_processes}),
      {d{.name = elastic_mode, .flag = elastic_mode, .kind = setting_kind::boolean, .fallback = process_group{}.elastic,
         .help = "go on when a worker dies or leaves (SIGTERM: leave at the next step), admit joiners (also set by "
                 "ACCORD_ELASTIC=1, as accord-launch --elastic does)",
         .group = "elastic", .fingerprint = false, .owner = between_processes},
       [](process_group& place, const setting_value& v) { place.elastic = place.elastic || std::get<bool>(v); }},
      {d{.name = "join", .flag = "join", .kind = setting_kind::text, .fallback = std::string(),
         .help = "join the running elastic job whose rank 0 listens at HOST:PORT (also set by ACCORD_JOIN, as "
                 "accord-launch --join does)",
         .group = "elastic", .fingerprint = false, .owner = "job"},
       nullptr},
      seconds_field(&process_group::majority_wait,
                    d{.name = "majority_wait", .flag = "majority-wait", .low = 0, .high = 86400,
                      .help = "seconds a side without a majority of the last epoch's members (a partition, members "
                              "stopped) keeps its state and waits for them before it stops (0: at once)",
                      .group = "elastic", .fingerprint = false, .owner = elastic_only}),
  };
}

}  // namespace

const std::vector<process_setting>& declared_process_settings() {
  static const std::vector<process_setting> settings = declare_process_settings();
  return settings;
}

void add_process_options(flag_sections& sections) {
  for (const process_setting& s : declared_process_settings())
    add_declared_flag(s.declared.group == "elastic" ? sections.elastic : sections.distributed, s.declared, s.declared.help);
}

void read_process_options(const po::variables_map& flags, process_group& place) {
  for (const process_setting& s : declared_process_settings())
    if (s.set && flags.count(s.declared.flag)) s.set(place, flag_value(flags, s.declared));
}

void add_topology_options(po::options_description& options, const job_config& d) {
  topology_names();  // the built-in topologies have declared their settings
  add_job_flag(options, topology_setting_of_job(), d);
  add_declared_flags(options, declared_topology_settings());
}

void add_training_options(flag_sections& sections, const job_config& d) {
  const std::map<std::string, po::options_description*> by_group = {
      {"model", &sections.model},         {"data", &sections.data},         {"algorithm", &sections.algorithm},
      {"topology", &sections.topology},   {"precision", &sections.precision},
      {"distributed", &sections.distributed}, {"elastic", &sections.elastic}, {"output", &sections.output}};
  // --topology and the topologies' settings lead their section; what builds the model and reads
  // the data (accord-train's own) leads the others.
  add_topology_options(sections.topology, d);
  for (const setting_declaration& s : declared_training_settings()) add_declared_flag(*by_group.at(s.group), s, s.help);
  // job_config's declared settings, each in its section, `d`'s value as the default.
  for (const job_setting& s : declared_job_settings())
    if (s.command_line && &s != &topology_setting_of_job())  // --topology leads its section (above)
      add_job_flag(*by_group.at(s.declared.group), s, d);
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
  return flags_ignored(flag_declarations(), [&topology](const std::string& flag) -> std::optional<std::string> {
    if (flag == "topology") return topology;
    return std::nullopt;
  });
}

void read_topology_options(const po::variables_map& flags, job_config& job, int local_workers) {
  job.topology = flags["topology"].as<std::string>();  // one of the registered, checked as it was parsed
  // The settings given (on the command line or in a --config file), each parsed as declared.
  std::set<std::string> read;
  for (const auto& [topology, settings] : declared_topology_settings())
    for (const setting_declaration& s : settings)
      if (read.insert(s.flag).second && flags.count(s.flag) && !flags[s.flag].defaulted())
        job.topology_settings.set(s.name, flag_value(flags, s));
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
  for (const job_setting& s : declared_job_settings())
    if (s.command_line && flags.count(s.declared.flag)) s.set(job, flag_value(flags, s.declared));
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

  const std::string kind = flags["model"].as<std::string>();  // gpt or mlp, checked as it was parsed
  const std::string device_name = flags["device"].as<std::string>();  // checked as it was parsed
  // The MLP has no CUDA path: auto means the cpu for it, and cuda is a mistake.
  if (kind == "mlp" && device_name.starts_with("cuda"))
    throw std::invalid_argument("--device " + device_name + ": --model mlp runs on the cpu only");
  // Opened here: whether CUDA (GPU N) is usable is asked only now.
  device_kind device = kind == "mlp" ? device_kind::cpu : parse_device(device_name);
  if (const std::optional<int> gpu = cuda_index(device_name)) use_cuda_device(*gpu);
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
    config.context = static_cast<int>(whole_flag(flags, "context"));
    config.layers = static_cast<int>(whole_flag(flags, "layers"));
    config.heads = static_cast<int>(whole_flag(flags, "heads"));
    config.width = static_cast<int>(whole_flag(flags, "width"));
    config.tied_head = !flags["untied-head"].as<bool>();
    // Checked before the data are opened (a job too big for any data is refused at once) and
    // again with the vocabulary the data give.
    const int vocab = flags.count("vocab") ? static_cast<int>(whole_flag(flags, "vocab")) : 0;  // 0: from the data
    config.vocab = vocab ? vocab : 256;
    require_job_memory(flags, shape, workers_flag);
    const auto load_tokens = [data, eval_data = flags.count("eval-data") ? flags["eval-data"].as<std::string>() : "",
                              vocab,
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

std::int64_t whole_flag(const po::variables_map& flags, const std::string& flag) {
  return std::stoll(flags[flag].as<std::string>());
}

seeded_data data_for_seed(const training_setup& setup, std::uint64_t seed) {
  return seed == setup.job.seed ? seeded_data{setup.train, setup.eval} : setup.load_data(seed);
}

std::vector<std::pair<std::string, std::string>> training_flags_ignored(const po::variables_map& flags,
                                                                        std::optional<job_place> place) {
  const std::vector<setting_declaration> declared = flag_declarations();
  return flags_ignored(declared, [&](const std::string& mode) -> std::optional<std::string> {
    if (mode == place_mode)
      return place ? std::optional<std::string>(place->between_processes ? "between processes" : "in one process")
                   : std::nullopt;
    if (mode == elastic_mode && place) return place->elastic ? "on" : "off";
    if (!flags.count(mode)) return std::nullopt;
    const auto setting = std::find_if(declared.begin(), declared.end(), [&](const auto& s) { return s.flag == mode; });
    return setting_text(flag_value(flags, *setting));
  });
}

void warn_ignored_training_flags(const po::variables_map& flags, const std::string& program,
                                 std::optional<job_place> place) {
  warn_ignored(flags, program, training_flags_ignored(flags, place));
}

}  // namespace accord
