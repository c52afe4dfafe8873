// accord-train: data-parallel training with actors in one process. With no flags it trains the
// byte-level GPT on the fortunes corpus with ACCO on 4 workers over an emulated link.
#include "apps/training_options.hpp"

#include <cstdio>
#include <iostream>

namespace po = boost::program_options;
using namespace accord;

namespace {

job_config default_job() {
  job_config job;
  job.algorithm = "acco";
  job.workers = 4;
  job.steps = 300;
  job.micro_batch = 8;
  job.link = "200mbit,100us";
  job.eval_interval = 50;
  job.metrics_path = "";
  return job;
}

std::string format_rate(double per_second) {
  char text[32];
  if (per_second >= 1e6)
    std::snprintf(text, sizeof text, "%.2fM", per_second / 1e6);
  else if (per_second >= 1e3)
    std::snprintf(text, sizeof text, "%.1fk", per_second / 1e3);
  else
    std::snprintf(text, sizeof text, "%.0f", per_second);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description options("accord-train options");
  options.add_options()("help,h", "show this help")
      ("log-interval", po::value<std::uint64_t>()->default_value(10), "progress line every this many steps");
  add_training_options(options, default_job());
  try {
    const auto flags = parse_flags(argc, argv, options,
                                   "usage: accord-train [options]\n"
                                   "Trains a model data-parallel with CAF actors: per worker a compute, an\n"
                                   "accumulator and a communicator actor, over an emulated link.");
    training_setup setup = make_training_setup(flags);
    const std::uint64_t log_interval = flags["log-interval"].as<std::uint64_t>();
    const job_config& job = setup.job;
    const bool language_model = flags["model"].as<std::string>() == "gpt";
    std::printf("accord-train: %s, %d workers, %s, %zu parameters\n  data: %s\n  link: %s, device: cpu\n",
                job.algorithm.c_str(), job.workers, setup.net->signature().c_str(),
                setup.net->parameter_count(), setup.data_description.c_str(), job.link.c_str());
    std::fflush(stdout);
    double last_eval = -1;
    const job_result result = run_job(
        *setup.net, setup.train, setup.eval, job, [&](const step_metrics& m) {
          if (m.eval_loss >= 0) last_eval = m.eval_loss;
          const bool last = m.step == job.steps;
          if (!log_interval || (m.step % log_interval != 0 && m.step != 1 && !last)) return;
          std::printf("step %5llu/%llu | loss %.4f | eval %s | %s %s/s | %.1f bits/param | hidden %3.0f%% | %.1fs\n",
                      static_cast<unsigned long long>(m.step), static_cast<unsigned long long>(job.steps),
                      m.train_loss, last_eval >= 0 ? std::to_string(last_eval).substr(0, 6).c_str() : "  -   ",
                      format_rate(m.items_per_second).c_str(), language_model ? "tok" : "img",
                      m.bits_per_parameter, 100 * m.hidden_fraction, m.seconds);
          std::fflush(stdout);
        });
    std::printf("done: %llu steps in %.1fs | final eval loss %.4f | compute %.1fs, communication %.1fs, "
                "waiting %.1fs per worker | %.1f%% of communication hidden | %.2f bits/param/step | "
                "replicas %s\n",
                static_cast<unsigned long long>(result.steps.size()), result.seconds, result.final_eval_loss,
                result.compute_seconds, result.communication_seconds, result.wait_seconds,
                100 * result.hidden_fraction, result.bits_per_parameter_per_step,
                result.replicas_identical ? "identical" : "DIVERGED");
    if (!job.metrics_path.empty()) std::printf("metrics: %s\n", job.metrics_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-train: %s\n", e.what());
    return 2;
  }
}
