#include "apps/training_options.hpp"

#include "data/fashion_mnist.hpp"
#include "data/text.hpp"
#include "gpu/model_factory.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "transport/wire_precision.hpp"

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace po = boost::program_options;

namespace accord {
namespace {

// A comma-separated list for `flag`: `parse` turns one item into a value and throws when the
// item is not acceptable; the error names the flag, the item and what was `expected`.
template <class T, class Parse>
std::vector<T> parse_list(const std::string& flag, const std::string& list, const std::string& expected,
                          Parse parse) {
  std::vector<T> values;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      std::size_t used = 0;
      values.push_back(parse(item, used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw std::invalid_argument(flag + ": '" + item + "' is not " + expected);
    }
  }
  return values;
}

std::vector<double> parse_speed_factors(const std::string& list) {
  return parse_list<double>("--speed", list, "a number (expected e.g. 1,1,1,4)",
                            [](const std::string& item, std::size_t& used) { return std::stod(item, &used); });
}

std::vector<int> parse_sizes(const std::string& flag, const std::string& list) {
  return parse_list<int>(flag, list, "a positive integer", [](const std::string& item, std::size_t& used) {
    const int v = std::stoi(item, &used);
    if (v <= 0) throw std::invalid_argument(item);
    return v;
  });
}

std::vector<membership_change> parse_membership(const std::string& list) {
  return parse_list<membership_change>(
      "--membership", list, "STEP:WORKERS or STEP:WORKERS:crash", [](const std::string& item, std::size_t& used) {
        membership_change change;
        std::size_t at = 0;
        change.step = std::stoull(item, &at);
        if (at >= item.size() || item[at] != ':') throw std::invalid_argument(item);
        std::size_t more = 0;
        change.workers = std::stoi(item.substr(at + 1), &more);
        at += 1 + more;
        if (item.compare(at, std::string::npos, ":crash") == 0) {
          change.crash = true;
          at = item.size();
        }
        used = at;
        return change;
      });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void add_training_options(po::options_description& options, const job_config& d) {
  static const std::string data_help =
      "gpt: a text file, or an llm.c .bin token shard (default: the fortunes corpus); "
      "mlp: a Fashion-MNIST directory (default: " + std::string(default_fashion_mnist_directory) + ")";
  options.add_options()
      ("algo", po::value<std::string>()->default_value(d.algorithm),
       "ddp | dpu | acco | lion | dlion-mavo | dlion-avg | acco-dlion")
      ("workers", po::value<int>()->default_value(d.workers), "data-parallel workers")
      ("speed", po::value<std::string>(),
       "per-worker slowdown factors, e.g. 1,1,1,4 (emulates heterogeneous hardware)")
      ("steps", po::value<std::uint64_t>()->default_value(d.steps), "optimizer steps")
      ("micro-batch", po::value<std::size_t>()->default_value(d.micro_batch), "examples per micro-batch")
      ("accumulation", po::value<std::size_t>()->default_value(d.accumulation),
       "micro-batches per round at least (ACCO: per stage)")
      ("max-accumulation", po::value<std::size_t>()->default_value(d.max_accumulation),
       "overlapped algorithms: at most this many micro-batches per round (0: no cap)")
      ("dpu-warmup", po::value<std::uint64_t>()->default_value(d.dpu_warmup),
       "DPU: synchronous rounds before overlapping")
      ("seed", po::value<std::uint64_t>()->default_value(d.seed), "initialisation and data order")
      ("model", po::value<std::string>()->default_value("gpt"), "gpt (byte-level transformer) | mlp (classifier)")
      ("device", po::value<std::string>()->default_value("auto"),
       "where compute actors run the model: cpu | cuda | auto (cuda when a GPU exists)")
      ("data", po::value<std::string>(), data_help.c_str())
      ("context", po::value<int>()->default_value(64), "gpt: context length")
      ("layers", po::value<int>()->default_value(2), "gpt: transformer blocks")
      ("heads", po::value<int>()->default_value(4), "gpt: attention heads")
      ("width", po::value<int>()->default_value(128), "gpt: embedding width")
      ("untied-head", po::bool_switch(), "gpt: separate output head instead of the token embedding")
      ("hidden", po::value<std::string>()->default_value("256,128"), "mlp: hidden layer widths")
      ("optimizer", po::value<std::string>(), "adamw | lion | sgd (default: the algorithm's)")
      ("lr", po::value<float>(), "peak learning rate (default: adamw 3e-3, lion 3e-4, sgd 0.05)")
      ("beta1", po::value<float>(), "first moment / momentum coefficient")
      ("beta2", po::value<float>(), "second moment coefficient (Lion: momentum update)")
      ("weight-decay", po::value<float>()->default_value(d.weight_decay), "decoupled weight decay")
      ("warmup", po::value<std::uint64_t>()->default_value(d.warmup_steps), "linear warm-up steps")
      ("schedule", po::value<std::string>()->default_value(d.cosine ? "cosine" : "constant"),
       "cosine (to --min-lr-ratio x lr) | constant")
      ("min-lr-ratio", po::value<float>()->default_value(d.min_lr_ratio), "cosine floor as a fraction of lr")
      ("link", po::value<std::string>()->default_value(d.link),
       "emulated link between workers: bandwidth and/or latency, e.g. 1gbit,50us | 100mbit | unlimited")
      ("wire-precision", po::value<std::string>()->default_value(d.wire_precision),
       "what gradients and parameters travel as: fp32 | bf16 | fp16 (sums in fp32, fp32 master weights "
       "and optimizer state; Distributed Lion's votes are 1 bit regardless)")
      ("estimate-precision", po::value<std::string>()->default_value(d.estimate_precision),
       "ACCO's estimate rounds (they commit no state): fp32 | bf16 | fp16 (empty: as --wire-precision)")
      ("eval-interval", po::value<std::uint64_t>()->default_value(d.eval_interval),
       "held-out loss every this many steps (0: only at the end)")
      ("eval-examples", po::value<std::uint64_t>()->default_value(d.eval_examples),
       "held-out examples per evaluation, the same set every time (gpt: windows of --context tokens)")
      ("replica-check", po::value<std::uint64_t>()->default_value(d.replica_check_interval),
       "compare parameter hashes of all replicas every this many rounds (0: never)")
      ("metrics", po::value<std::string>(), "write one JSON line per step to this file")
      ("checkpoint", po::value<std::string>(),
       "write parameters, optimizer state and data position to this file (at the end, and every --checkpoint-interval steps)")
      ("checkpoint-interval", po::value<std::uint64_t>()->default_value(d.checkpoint_interval),
       "steps between checkpoints (0: only at the end)")
      ("resume", po::value<std::string>(), "continue from a checkpoint, with any number of workers, up to --steps")
      ("membership", po::value<std::string>(),
       "elastic run in one process: STEP:WORKERS[:crash],... e.g. 50:3,100:5,150:2:crash "
       "(after STEP the job goes on with WORKERS; crash: a worker dies mid-round and the survivors redo it)")
      ("blas-threads", po::value<int>()->default_value(d.blas_threads), "BLAS threads per worker (0: cores/workers)");
}

training_setup make_training_setup(const po::variables_map& flags) {
  training_setup setup;
  job_config& job = setup.job;
  job.algorithm = flags["algo"].as<std::string>();
  job.workers = flags["workers"].as<int>();
  if (flags.count("speed")) job.speed_factors = parse_speed_factors(flags["speed"].as<std::string>());
  job.steps = flags["steps"].as<std::uint64_t>();
  job.micro_batch = flags["micro-batch"].as<std::size_t>();
  job.accumulation = flags["accumulation"].as<std::size_t>();
  job.max_accumulation = flags["max-accumulation"].as<std::size_t>();
  job.dpu_warmup = flags["dpu-warmup"].as<std::uint64_t>();
  job.seed = flags["seed"].as<std::uint64_t>();
  if (flags.count("optimizer")) job.optimizer = flags["optimizer"].as<std::string>();
  if (flags.count("lr")) {
    job.learning_rate = flags["lr"].as<float>();
    if (job.learning_rate <= 0) throw std::invalid_argument("--lr must be positive");
  }
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
  parse_wire_precision(job.wire_precision, "--wire-precision");
  job.estimate_precision = flags["estimate-precision"].as<std::string>();
  if (!job.estimate_precision.empty()) parse_wire_precision(job.estimate_precision, "--estimate-precision");
  job.eval_interval = flags["eval-interval"].as<std::uint64_t>();
  job.eval_examples = flags["eval-examples"].as<std::uint64_t>();
  if (job.eval_examples < 1) throw std::invalid_argument("--eval-examples must be at least 1");
  job.replica_check_interval = flags["replica-check"].as<std::uint64_t>();
  if (flags.count("metrics")) job.metrics_path = flags["metrics"].as<std::string>();
  if (flags.count("checkpoint")) job.checkpoint_path = flags["checkpoint"].as<std::string>();
  job.checkpoint_interval = flags["checkpoint-interval"].as<std::uint64_t>();
  if (flags.count("resume")) job.resume_path = flags["resume"].as<std::string>();
  if (flags.count("membership")) job.membership = parse_membership(flags["membership"].as<std::string>());
  job.blas_threads = flags["blas-threads"].as<int>();

  const std::string kind = flags["model"].as<std::string>();
  const device_kind device = parse_device(flags["device"].as<std::string>());
  setup.device_description = describe_device(device);
  const std::string data = flags.count("data") ? flags["data"].as<std::string>() : "";
  if (kind == "gpt") {
    gpt_config config;
    config.context = flags["context"].as<int>();
    config.layers = flags["layers"].as<int>();
    config.heads = flags["heads"].as<int>();
    config.width = flags["width"].as<int>();
    config.tied_head = !flags["untied-head"].as<bool>();
    std::shared_ptr<const token_dataset> train, eval;
    if (data.empty()) {
      train = load_default_corpus(config.context, true, job.seed);
      eval = load_default_corpus(config.context, false, job.seed);
    } else if (ends_with(data, ".bin")) {
      train = load_token_shard(data, config.context, config.vocab, true, job.seed);
      eval = load_token_shard(data, config.context, config.vocab, false, job.seed);
    } else {
      train = load_text_file(data, config.context, true, job.seed);
      eval = load_text_file(data, config.context, false, job.seed);
    }
    config.vocab = train->vocab_size();
    setup.net = make_gpt_on(device, config);
    setup.train = train;
    setup.eval = eval;
  } else if (kind == "mlp") {
    if (device != device_kind::cpu) throw std::invalid_argument("--model mlp runs on the cpu only (use --device cpu)");
    mlp_config config;
    config.hidden = parse_sizes("--hidden", flags["hidden"].as<std::string>());
    const std::string directory = data.empty() ? default_fashion_mnist_directory : data;
    setup.net = std::make_unique<mlp>(config);
    setup.train = load_fashion_mnist(directory, true, job.seed);
    setup.eval = load_fashion_mnist(directory, false, job.seed);
  } else {
    throw std::invalid_argument("--model: '" + kind + "' (expected gpt|mlp)");
  }
  setup.data_description = setup.train->describe();
  return setup;
}

po::variables_map parse_flags(int argc, char** argv, const po::options_description& options,
                              const std::string& usage) {
  po::variables_map flags;
  try {
    po::store(po::command_line_parser(argc, argv).options(options).run(), flags);
    po::notify(flags);
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
  if (flags.count("help")) {
    std::cout << usage << "\n\n" << options << std::endl;
    std::exit(0);
  }
  return flags;
}

}  // namespace accord
