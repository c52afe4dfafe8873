// accord-bench-algorithms: the algorithms side by side on the same model, data and emulated
// link, in one run: step time and its ratio to DDP, compute vs communication time, how much
// communication was hidden, bits per parameter on the wire, and memory per worker.
#include "apps/time_to_loss.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace po = boost::program_options;
using namespace accord;

int main(int argc, char** argv) {
  const job_config defaults = step_benchmark_defaults();
  po::options_description options("accord-bench-algorithms options");
  options.add_options()("help,h", "show this help")
      ("algos", po::value<std::string>()->default_value("ddp,dpu,acco,dlion-mavo,acco-dlion"),
       "algorithms to compare; the first is the baseline of the ratios");
  add_training_options(options, defaults);
  try {
    const auto parsed = parse_flags(
        argc, argv, options,
        "usage: accord-bench-algorithms [options]\n"
        "Runs each algorithm on the same model, data and emulated link and prints step time,\n"
        "compute and communication time, hidden fraction, bits/param/step and memory per worker.\n"
        "Every algorithm takes --accumulation micro-batches per step: synchronous ones per round,\n"
        "ACCO-style ones half of it per stage (two stages per step), as in the ACCO paper, or with\n"
        "--estimate-accumulation E, E per estimate stage and the rest per real stage.");
    if (!parsed) return 0;  // --help
    const po::variables_map& flags = *parsed;
    const std::vector<std::string> names = algorithm_list(flags["algos"].as<std::string>());
    warn_ignored(flags, "accord-bench-algorithms", {{"algo", "here (--algos lists the algorithms)"}});
    warn_ignored_training_flags(flags, "accord-bench-algorithms");
    const training_setup setup = make_training_setup(flags);  // model and data serve every algorithm
    check_stage_split(names, setup.job);
    std::printf("%s, %d workers, %llu steps of %zu micro-batches (ACCO: %zu per estimate stage + %zu per real "
                "stage) x %zu examples, link %s, wire %s%s\n",
                setup.net->signature().c_str(), setup.job.workers, static_cast<unsigned long long>(setup.job.steps),
                setup.job.accumulation, estimate_stage(setup.job), setup.job.accumulation - estimate_stage(setup.job),
                setup.job.micro_batch, setup.job.link.c_str(), setup.job.wire_precision.c_str(),
                setup.job.estimate_precision.empty() ? "" : (", estimates " + setup.job.estimate_precision).c_str());
    std::printf("%-11s %9s %6s %11s %11s %9s %7s %11s %8s %8s %9s %9s %9s\n", "algorithm", "step ms",
                "xbase", "compute ms", "comm ms", "step/max", "hidden", "bits/param", "mb/step",
                "eval", "peak MB", "min MB", "items/s");
    double baseline_step = 0;
    for (const auto& name : names) {
      job_config job = with_equal_tokens(setup.job, name);
      job.eval_interval = 0;
      const job_result r = run_job(*setup.net, setup.train, setup.eval, job);
      const double steps = static_cast<double>(r.steps.size());
      const double step_ms = 1e3 * r.seconds / steps;
      const double compute_ms = 1e3 * r.compute_seconds / steps;
      const double comm_ms = 1e3 * r.communication_seconds / steps;
      if (baseline_step == 0) baseline_step = step_ms;
      double micro_batches = 0, items = 0;
      for (const auto& m : r.steps) {
        micro_batches += static_cast<double>(m.micro_batches);
        items += m.items;
      }
      std::printf("%-11s %9.1f %6.2f %11.1f %11.1f %9.2f %6.0f%% %11.2f %8.1f %8.4f %9.2f %9.2f %9.0f\n",
                  name.c_str(), step_ms, step_ms / baseline_step, compute_ms, comm_ms,
                  step_ms / std::max(compute_ms, comm_ms), 100 * r.hidden_fraction,
                  r.bits_per_parameter_per_step, micro_batches / steps, r.final_eval_loss,
                  r.peak_bytes_per_worker / 1e6, r.minimum_bytes_per_worker / 1e6, items / r.seconds);
      std::fflush(stdout);
    }
    std::printf("compute/comm ms: per worker and step; step/max = step time / max(compute, comm) "
                "(1.0: communication fully overlapped); mb/step: micro-batches per step, all workers; items/s: tokens or images per second, all workers\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-bench-algorithms: %s\n", e.what());
    return 2;
  }
}
