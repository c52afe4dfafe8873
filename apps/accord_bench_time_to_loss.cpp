// accord-bench-time-to-loss: how soon each algorithm reaches a held-out loss, on the clock, at
// equal tokens per step and equal wire precision. Runs are interleaved over repetitions (one
// of each algorithm, then the next round), and every figure is the median over repetitions.
// With --link auto the emulated link is calibrated first so that DDP's communication per step
// takes about as long as its compute.
#include "apps/time_to_loss.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace po = boost::program_options;
using namespace accord;

namespace {

// Two positive losses, or empty for "auto".
std::vector<double> parse_targets(const std::string& list) {
  if (list == "auto") return {};
  std::vector<double> targets;
  for (const auto& item : split_list(list)) {
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(value > 0))
      throw std::invalid_argument("--targets: '" + item + "' is not a positive loss (expected e.g. 3.0,2.8 or auto)");
    targets.push_back(value);
  }
  if (targets.size() != 2) throw std::invalid_argument("--targets: expected two losses (e.g. 3.0,2.8) or auto");
  return targets;
}

// Every algorithm at --accumulation micro-batches per step (with_equal_tokens), overlapped ones
// capped to them. Repetition r runs with seed --seed + r (initialisation and data order, as
// accord-train --seed): a run is deterministic, and one seed's draw can decide a comparison
// (Distributed Lion's final loss on the default GPT moves by ±0.25 between seeds).
job_config job_for(const training_setup& setup, const std::string& name, int repetition = 0) {
  job_config job = with_equal_tokens(setup.job, name);
  job.seed += static_cast<std::uint64_t>(repetition);
  job.max_accumulation = job.accumulation;
  job.defer_evaluation = true;  // evaluations take no compute from the timed run
  job.replica_check_interval = 0;
  return job;
}

}  // namespace

int main(int argc, char** argv) {
  job_config defaults;
  defaults.workers = 4;
  defaults.steps = 300;
  defaults.micro_batch = 8;
  defaults.accumulation = 2;
  defaults.link = "auto";
  defaults.wire_precision = "bf16";
  defaults.eval_interval = 10;
  po::options_description options("accord-bench-time-to-loss options");
  options.add_options()("help,h", "show this help")
      ("algos", po::value<std::string>()->default_value("ddp,acco,dlion-mavo,acco-dlion"),
       "algorithms to compare; the first is the baseline of the ratios and of --targets auto")
      ("repetitions", po::value<int>()->default_value(3), "interleaved runs of each algorithm, repetition r with seed --seed + r (medians)")
      ("comm-ratio", po::value<double>()->default_value(1.0),
       "with --link auto: the baseline's communication time / its compute time per step")
      ("targets", po::value<std::string>()->default_value("auto"),
       "two eval losses to time, e.g. 3.0,2.8; auto: the baseline's median eval loss at half its steps "
       "and its median final eval loss + 1%");
  add_training_options(options, defaults);
  try {
    const auto parsed = parse_flags(
        argc, argv, options,
        "usage: accord-bench-time-to-loss [options]\n"
        "Times each algorithm to two held-out losses at equal tokens per step and equal wire\n"
        "precision: synchronous algorithms accumulate --accumulation micro-batches per step,\n"
        "ACCO-style ones half of it per stage (two stages per step; --estimate-accumulation E: E per\n"
        "estimate stage, the rest per real stage), overlapped ones capped.\n"
        "--link auto (the default) emulates a link on which DDP communicates --comm-ratio times as\n"
        "long as it computes. Prints medians over interleaved repetitions: seconds to each target and\n"
        "the speed-up over the baseline, final eval loss, bits/param/step, peak memory/minimum.");
    if (!parsed) return 0;  // --help
    const po::variables_map& flags = *parsed;
    const std::vector<std::string> names = algorithm_list(flags["algos"].as<std::string>());
    const int repetitions = flags["repetitions"].as<int>();
    if (repetitions < 1) throw std::invalid_argument("--repetitions must be at least 1");
    const double comm_ratio = flags["comm-ratio"].as<double>();
    if (!(comm_ratio > 0) || !std::isfinite(comm_ratio) || comm_ratio > 1e6)
      throw std::invalid_argument("--comm-ratio must be a positive number up to 1e6");
    std::vector<double> targets = parse_targets(flags["targets"].as<std::string>());
    training_setup setup = make_training_setup(flags);
    const std::size_t accumulation = setup.job.accumulation;
    check_stage_split(names, setup.job);
    // A DDP step that spends --comm-ratio times its compute on the wire.
    if (setup.job.link == "auto")
      setup.job.link = calibrated_link(setup, job_for(setup, "ddp"), comm_ratio);
    std::printf("%s, %d workers, %llu steps of %zu micro-batches (ACCO: %zu per estimate stage + %zu per real "
                "stage) x %zu examples, link %s, wire %s%s\n",
                setup.net->signature().c_str(), setup.job.workers, static_cast<unsigned long long>(setup.job.steps),
                accumulation, estimate_stage(setup.job), accumulation - estimate_stage(setup.job),
                setup.job.micro_batch, setup.job.link.c_str(), setup.job.wire_precision.c_str(),
                setup.job.estimate_precision.empty() ? "" : (", estimates " + setup.job.estimate_precision).c_str());
    std::fflush(stdout);

    std::map<std::string, std::vector<job_result>> results;
    for (int repetition = 0; repetition < repetitions; ++repetition) {
      const seeded_data data = data_for_seed(setup, job_for(setup, names.front(), repetition).seed);
      for (const auto& name : names) {
        job_result r = run_job(*setup.net, data.train, data.eval, job_for(setup, name, repetition));
        std::printf("  repetition %d %-11s %.1f s, final eval %.4f\n", repetition + 1, name.c_str(),
                    r.steps.empty() ? 0.0 : r.steps.back().seconds, r.final_eval_loss);
        std::fflush(stdout);
        results[name].push_back(std::move(r));
      }
    }

    auto median_of = [&](const std::string& name, auto figure) {
      std::vector<double> values;
      for (const auto& r : results[name]) values.push_back(figure(r));
      return median(values);
    };
    const std::string& baseline = names.front();
    if (targets.empty()) {
      const std::uint64_t half = setup.job.steps / 2;
      const double at_half = median_of(baseline, [&](const job_result& r) { return eval_loss_at(r, half); });
      targets = {at_half, 1.01 * median_of(baseline, [](const job_result& r) { return r.final_eval_loss; })};
    }
    std::printf("\nmedians over %d repetitions; targets: eval loss %.3f and %.3f; speed-up = %s's seconds / these\n",
                repetitions, targets[0], targets[1], baseline.c_str());
    std::printf("%-11s %8s %9s %8s %9s %8s %10s %8s %10s %9s\n", "algorithm", "step ms", "s to T1", "speed-up",
                "s to T2", "speed-up", "final eval", "vs base", "bits/param", "peak/min");
    std::vector<double> baseline_seconds(2);
    for (const auto& name : names) {
      const double step_ms = median_of(name, [](const job_result& r) {
        return r.steps.empty() ? never : 1e3 * r.steps.back().seconds / static_cast<double>(r.steps.size());
      });
      double to[2];
      for (int t = 0; t < 2; ++t) to[t] = median_of(name, [&](const job_result& r) { return seconds_to(r, targets[t]); });
      if (name == baseline) baseline_seconds = {to[0], to[1]};
      const double final_eval = median_of(name, [](const job_result& r) { return r.final_eval_loss; });
      const double base_eval = median_of(baseline, [](const job_result& r) { return r.final_eval_loss; });
      const double bits = median_of(name, [](const job_result& r) { return r.bits_per_parameter_per_step; });
      const double memory = median_of(name, [](const job_result& r) {
        return static_cast<double>(r.peak_bytes_per_worker) / static_cast<double>(r.minimum_bytes_per_worker);
      });
      std::printf("%-11s %8.1f %9s %8s %9s %8s %10.4f %+7.2f%% %10.2f %9.2f\n", name.c_str(), step_ms,
                  format_seconds(to[0]).c_str(), format_ratio(baseline_seconds[0], to[0]).c_str(),
                  format_seconds(to[1]).c_str(), format_ratio(baseline_seconds[1], to[1]).c_str(), final_eval,
                  100 * (final_eval / base_eval - 1), bits, memory);
    }
    std::printf("s to T: training seconds until the first evaluation (every %llu steps) at or below the target, "
                "- if never; vs base: final eval loss relative to %s's; peak/min: peak memory per worker over "
                "parameters + the algorithm's gradient buffers (DDP one, overlapping ones two) + its optimizer shard\n",
                static_cast<unsigned long long>(setup.job.eval_interval), baseline.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-bench-time-to-loss: %s\n", e.what());
    return 2;
  }
}
