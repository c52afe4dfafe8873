// accord-bench-topologies: every topology on the same model, data, straggler and emulated link,
// at equal tokens: seconds to the baseline's final held-out loss (+1%), final loss, bytes per
// step, staleness and consensus distance. Runs are interleaved over repetitions (one of each,
// then the next round), repetition r with seed --seed + r, and every figure is a median.
#include "apps/time_to_loss.hpp"

#include "algorithms/algorithm.hpp"
#include "job/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace po = boost::program_options;
using namespace accord;

namespace {

// One column of the comparison: a topology with its own flags, as written in --runs.
struct topology_run {
  std::string spec;
  job_config job;
};

// "parameter-server --max-staleness 8": the topology flags of accord-train, read over `base`;
// a flag the topology does not read is refused.
topology_run parse_run(const std::string& spec, const job_config& base) {
  std::vector<std::string> tokens;
  std::istringstream words(spec);
  for (std::string word; words >> word;) tokens.push_back(word);
  if (tokens.empty()) throw std::invalid_argument("--runs: an empty run (expected e.g. 'ring;gossip --gossip-rate 2')");
  const std::string name = tokens.front();
  tokens.front() = "--topology";
  tokens.insert(tokens.begin() + 1, name);
  po::options_description options;
  add_topology_options(options, base);
  po::variables_map flags;
  try {
    po::store(po::command_line_parser(tokens).options(options).run(), flags);
    po::notify(flags);
  } catch (const po::error& e) {
    throw std::invalid_argument("--runs '" + spec + "': " + e.what());
  }
  for (const auto& [flag, why] : topology_flags_ignored_by(name))
    if (flags.count(flag) && !flags[flag].defaulted())
      throw std::invalid_argument("--runs '" + spec + "': --" + flag + " does nothing " + why);
  topology_run run{spec, base};
  try {
    read_topology_options(flags, run.job);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--runs '" + spec + "': " + e.what());
  }
  return run;
}

std::vector<topology_run> parse_runs(const std::string& list, const job_config& base) {
  std::vector<topology_run> runs;
  for (const auto& spec : split_list(list, ';')) runs.push_back(parse_run(spec, base));
  if (runs.empty()) throw std::invalid_argument("--runs: expected at least one topology");
  return runs;
}

// Of every gradient the parameter server applied: mean and largest staleness (never: none).
std::pair<double, double> staleness_of(const job_result& r) {
  double count = 0, sum = 0, largest = never;
  for (const auto& m : r.steps)
    for (std::size_t k = 0; k < m.staleness.size(); ++k) {
      if (m.staleness[k] == 0) continue;
      count += static_cast<double>(m.staleness[k]);
      sum += static_cast<double>(k * m.staleness[k]);
      largest = std::isinf(largest) ? static_cast<double>(k) : std::max(largest, static_cast<double>(k));
    }
  return {count > 0 ? sum / count : never, largest};
}

// The consensus distance measured last and its mean over the measurements (never: the
// topology measured none).
std::pair<double, double> consensus_of(const job_result& r) {
  double last = never, sum = 0, count = 0;
  for (const auto& m : r.steps)
    if (m.consensus_distance >= 0) {
      last = m.consensus_distance;
      sum += m.consensus_distance;
      ++count;
    }
  return {last, count > 0 ? sum / count : never};
}

// The share of the gradients worker `slowest` computed (never: the topology does not count
// them; every worker computes one per step).
double share_of(const job_result& r, std::size_t slowest) {
  double total = 0, slow = 0;
  for (const auto& m : r.steps)
    for (std::size_t w = 0; w < m.worker_gradients.size(); ++w) {
      total += static_cast<double>(m.worker_gradients[w]);
      if (w == slowest) slow += static_cast<double>(m.worker_gradients[w]);
    }
  return total > 0 ? slow / total : never;
}

// Over the run's edges (each direction apart), the bytes each carried per step: their mean and
// the busiest edge's (never: the topology counts no edges).
std::pair<double, double> edge_bytes_per_step(const job_result& r) {
  std::map<std::pair<int, int>, double> totals;
  for (const auto& m : r.steps)
    for (const edge_traffic& e : m.edge_bytes) totals[{e.from, e.to}] += static_cast<double>(e.bytes);
  if (totals.empty() || r.steps.empty()) return {never, never};
  double sum = 0, most = 0;
  for (const auto& [edge, bytes] : totals) {
    sum += bytes;
    most = std::max(most, bytes);
  }
  const auto steps = static_cast<double>(r.steps.size());
  return {sum / static_cast<double>(totals.size()) / steps, most / steps};
}

std::string format_number(double value, const char* format) {
  char text[32];
  if (std::isinf(value)) return "-";
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  job_config defaults;
  defaults.algorithm = "ddp";
  defaults.workers = 4;
  defaults.steps = 200;
  defaults.micro_batch = 8;
  defaults.accumulation = 2;
  defaults.link = "auto";
  defaults.eval_interval = 10;
  po::options_description options("accord-bench-topologies options");
  options.add_options()("help,h", "show this help")
      ("runs", po::value<std::string>()->default_value(
                   "ring;hierarchical --group-size 2;parameter-server --max-staleness 0;"
                   "parameter-server --max-staleness 1000;local-sgd --local-steps 8;gossip --gossip-rate 1;"
                   "gossip --gossip-rate 1 --gossip-momentum a2cid2"),
       "topologies to compare, ';'-separated, each with its own flags as accord-train takes them; "
       "the first is the baseline of the speed-ups and of --target auto")
      ("repetitions", po::value<int>()->default_value(3), "interleaved runs of each, repetition r with seed --seed + r (medians)")
      ("target", po::value<std::string>()->default_value("auto"),
       "the eval loss to time, e.g. 2.9; auto: the baseline's median final eval loss + 1%");
  add_training_options(options, defaults);
  try {
    const auto parsed = parse_flags(
        argc, argv, options,
        "usage: accord-bench-topologies [options]\n"
        "Runs each topology of --runs on the same model, data, --speed factors and emulated link at\n"
        "equal tokens (--steps x --workers x --accumulation micro-batches; the parameter server's\n"
        "fast workers push more of them than its slow one). --link auto (the default) emulates a\n"
        "link on which DDP, without stragglers, communicates about as long as it computes. Prints\n"
        "medians over interleaved repetitions: seconds to the target eval loss and the speed-up\n"
        "over the first run, final eval loss, MB sent per step, staleness, consensus distance.\n"
        "The default straggler: --speed 1,...,1,4 (the last worker 4x slower).");
    if (!parsed) return 0;  // --help
    const po::variables_map& flags = *parsed;
    if (!flags["topology"].defaulted())
      throw std::invalid_argument("--topology: each run of --runs names its own topology");
    const int repetitions = flags["repetitions"].as<int>();
    if (repetitions < 1) throw std::invalid_argument("--repetitions must be at least 1");
    double target = never;
    if (const std::string text = flags["target"].as<std::string>(); text != "auto") {
      const auto loss = number_range<double>{0, 1e9, true}.parse(text);
      if (!loss) throw std::invalid_argument("--target: '" + text + "' is not a positive loss or auto");
      target = *loss;
    }
    training_setup setup = make_training_setup(flags);
    job_config& base = setup.job;
    if (!flags.count("speed")) {  // one worker 4x slower than the others
      base.speed_factors.assign(static_cast<std::size_t>(base.workers), 1.0);
      base.speed_factors.back() = 4.0;
    }
    base.defer_evaluation = true;  // evaluations take no compute from the timed run
    base.replica_check_interval = 0;
    std::vector<topology_run> runs = parse_runs(flags["runs"].as<std::string>(), base);
    for (const auto& run : runs)  // each refuses what it cannot run before anything runs
      job_topology(run.job, find_algorithm(run.job.algorithm), *setup.net, false);
    if (base.link == "auto") {  // the link of an undisturbed ring
      job_config probe = base;
      probe.speed_factors.clear();
      probe.topology = "ring";
      base.link = calibrated_link(setup, probe);
      for (auto& run : runs) run.job.link = base.link;
    }
    std::string speeds;
    for (double s : base.speed_factors) speeds += (speeds.empty() ? "" : ",") + format_number(s, "%g");
    std::printf("%s, --algo %s, %d workers at speed %s, %llu steps of %zu micro-batches x %zu examples, link %s, wire %s\n",
                setup.net->signature().c_str(), base.algorithm.c_str(), base.workers, speeds.c_str(),
                static_cast<unsigned long long>(base.steps), base.accumulation, base.micro_batch, base.link.c_str(),
                base.wire_precision.c_str());
    std::fflush(stdout);

    std::vector<std::vector<job_result>> results(runs.size());
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      const seeded_data data = data_for_seed(setup, base.seed + static_cast<std::uint64_t>(repetition));
      for (std::size_t i = 0; i < runs.size(); ++i) {
        job_config job = runs[i].job;
        job.seed += static_cast<std::uint64_t>(repetition);
        job_result r = run_job(*setup.net, data.train, data.eval, job);
        std::printf("  repetition %d %-40s %.1f s, final eval %.4f\n", repetition + 1, runs[i].spec.c_str(),
                    r.steps.empty() ? 0.0 : r.steps.back().seconds, r.final_eval_loss);
        std::fflush(stdout);
        results[i].push_back(std::move(r));
      }
    }

    auto median_of = [&](std::size_t i, auto figure) {
      std::vector<double> values;
      for (const auto& r : results[i]) values.push_back(figure(r));
      return median(values);
    };
    const auto final_eval = [](const job_result& r) { return r.final_eval_loss; };
    const double base_eval = median_of(0, final_eval);
    if (std::isinf(target)) target = 1.01 * base_eval;
    const double base_seconds = median_of(0, [&](const job_result& r) { return seconds_to(r, target); });
    std::printf("\nmedians over %d repetitions; target: eval loss %.4f; speed-up = %s's seconds to it / these\n",
                repetitions, target, runs.front().spec.c_str());
    const auto& factors = base.speed_factors;
    const auto slowest = static_cast<std::size_t>(std::max_element(factors.begin(), factors.end()) - factors.begin());
    std::printf("%-40s %8s %9s %8s %10s %8s %8s %8s %7s %10s %9s %9s %8s %7s\n", "topology", "step ms", "s to T",
                "speed-up", "final eval", "vs base", "MB/step", "edge MB", "(max)", "staleness", "(max)", "consensus",
                "(mean)", "slow %");
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const double step_ms = median_of(i, [](const job_result& r) {
        return r.steps.empty() ? never : 1e3 * r.steps.back().seconds / static_cast<double>(r.steps.size());
      });
      const double to = median_of(i, [&](const job_result& r) { return seconds_to(r, target); });
      const double eval = median_of(i, final_eval);
      const double megabytes = median_of(i, [](const job_result& r) {
        return r.steps.empty() ? never : static_cast<double>(r.bytes_sent) / 1e6 / static_cast<double>(r.steps.size());
      });
      const double edge_mean = median_of(i, [](const job_result& r) { return edge_bytes_per_step(r).first / 1e6; });
      const double edge_most = median_of(i, [](const job_result& r) { return edge_bytes_per_step(r).second / 1e6; });
      const double stale_mean = median_of(i, [](const job_result& r) { return staleness_of(r).first; });
      const double stale_max = median_of(i, [](const job_result& r) { return staleness_of(r).second; });
      const double consensus = median_of(i, [](const job_result& r) { return consensus_of(r).first; });
      const double consensus_mean = median_of(i, [](const job_result& r) { return consensus_of(r).second; });
      const double slow_share = median_of(i, [&](const job_result& r) { return share_of(r, slowest); });
      std::printf("%-40s %8.1f %9s %8s %10.4f %+7.2f%% %8.2f %8s %7s %10s %9s %9s %8s %7s\n", runs[i].spec.c_str(),
                  step_ms, format_seconds(to).c_str(), format_ratio(base_seconds, to).c_str(), eval,
                  100 * (eval / base_eval - 1), megabytes, format_number(edge_mean, "%.2f").c_str(),
                  format_number(edge_most, "%.2f").c_str(), format_number(stale_mean, "%.2f").c_str(),
                  format_number(stale_max, "%.0f").c_str(), format_number(consensus, "%.4f").c_str(),
                  format_number(consensus_mean, "%.4f").c_str(),
                  factors.empty() ? "-" : format_number(100 * slow_share, "%.1f").c_str());
    }
    std::printf("s to T: training seconds until the first evaluation (every %llu steps) at or below the target, "
                "- if never; vs base: final eval loss relative to the first run's; MB/step: sent by all workers (gossip: "
                "two copies per exchange, one each way); edge MB: per step on one edge (one direction: what one "
                "worker sent another), mean over the edges used and the busiest (asynchronous gossip); "
                "staleness: mean and largest over applied gradients (parameter server); consensus: "
                "sqrt(mean_i |theta_i - mean|^2) measured last and its mean over the steps measured (local-sgd, gossip); slow %%: share of the gradients "
                "the slowest worker computed (asynchronous topologies; the others: 1 / workers)\n",
                static_cast<unsigned long long>(base.eval_interval));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-bench-topologies: %s\n", e.what());
    return 2;
  }
}
