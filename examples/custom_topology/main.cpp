// Your own topology: periodic model averaging (local SGD without an outer optimizer). Each
// worker steps the algorithm's optimizer on its own copy of the parameters; every K steps (and
// at the job's last) every copy becomes their mean. Registered by name and run like a built-in,
// training accord's byte-level GPT on the fortunes corpus:
//   accord-example-custom-topology
#include <accord/job.hpp>
#include <accord/topology.hpp>

#include "data/text.hpp"   // accord's own corpus and model, installed with the package
#include "models/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <vector>

namespace {

class averaging_worker final : public accord::worker_topology {
public:
  averaging_worker(std::uint64_t period, std::uint64_t steps, std::span<const float> initial)
      : period_(period), steps_(steps), own_(initial.begin(), initial.end()) {}

  // `round` and `peers` are what an aggregation rule gets too (<accord/round.hpp>).
  void round(std::span<float> buffer, const accord::round_view& round, accord::round_peers& peers,
             accord::algorithm_rules& rules, accord::topology_report& report) override {
    // `buffer` holds this worker's gradient sum: its mean steps the worker's own copy.
    const float mean = round.micro_batches > 0 ? static_cast<float>(1.0 / round.micro_batches) : 0.f;
    for (float& g : buffer) g *= mean;
    rules.local_step(own_, buffer);
    if (replicas_agree(round.step)) {
      std::vector<float> before = own_;
      peers.all_reduce(std::span<float>(own_));  // the same sums, bit for bit, on every worker
      for (float& v : own_) v /= static_cast<float>(peers.size());
      double spread[1] = {0};
      for (std::size_t i = 0; i < own_.size(); ++i) spread[0] += (before[i] - own_[i]) * (before[i] - own_[i]);
      peers.all_reduce(std::span<double>(spread));
      report.consensus_distance = std::sqrt(spread[0] / peers.size());
    }
    std::copy(own_.begin(), own_.end(), buffer.begin());  // what this worker computes with next
  }
  bool replicas_agree(std::uint64_t step) const override { return (step + 1) % period_ == 0 || step + 1 == steps_; }

private:
  std::uint64_t period_;
  std::uint64_t steps_;  // the job's (topology_job::steps)
  std::vector<float> own_;
};

class model_averaging final : public accord::topology {
public:
  model_averaging(std::uint64_t period, std::uint64_t steps) : period_(period), steps_(steps) {}
  std::unique_ptr<accord::worker_topology> make_worker(int, std::span<const float> initial) const override {
    return std::make_unique<averaging_worker>(period_, steps_, initial);
  }

private:
  std::uint64_t period_, steps_;
};

}  // namespace

int main() try {
  // The factory sees the job and refuses, in one line, what the topology cannot run.
  accord::register_topology("model-averaging", [](const accord::topology_job& job) -> std::unique_ptr<accord::topology> {
    if (!job.synchronous || !job.sharded_optimizer)
      throw std::invalid_argument("--topology model-averaging: needs --algo ddp or lion, not " + job.algorithm);
    if (job.checkpoints || job.membership_changes)
      throw std::invalid_argument("--topology model-averaging: no checkpoints or membership changes");
    const std::int64_t period = job.options.whole("averaging_period");
    if (period < 1) throw std::invalid_argument("--averaging-period must be at least 1");
    return std::make_unique<model_averaging>(static_cast<std::uint64_t>(period), job.steps);
  }, {
    // Its own setting, declared once: accord-train would get --averaging-period, describe and
    // Python's TopologyOptions show it, and processes of one job compare it (<accord/settings.hpp>).
    {.name = "averaging_period", .flag = "averaging-period", .kind = accord::setting_kind::whole,
     .fallback = std::int64_t{4}, .low = 1, .high = 1e9, .unit = "steps", .help = "steps between averages (K)"},
  });

  accord::gpt_config shape;
  shape.context = 32, shape.layers = 1, shape.heads = 2, shape.width = 32;
  accord::gpt net(shape);
  const auto train = accord::load_default_corpus(shape.context, true, 1);
  const auto eval = accord::load_default_corpus(shape.context, false, 1);
  accord::job_config config;
  config.algorithm = "ddp";
  config.topology = "model-averaging";
  config.topology_settings.set("averaging_period", 5);
  config.workers = 2;
  config.steps = 40;
  config.micro_batch = 8;
  config.eval_interval = 0;
  config.eval_examples = 64;
  config.replica_check_interval = 5;  // compared where the topology says the copies agree
  config.blas_threads = 1;
  const accord::job_result result = accord::run_job(net, train, eval, config);
  double consensus = -1;
  for (const auto& step : result.steps)
    if (step.consensus_distance >= 0) consensus = step.consensus_distance;
  std::printf("model-averaging every %lld steps: train loss %.4f -> %.4f, eval loss %.4f, consensus distance "
              "before the last average %.4f, replicas identical: %s\n",
              static_cast<long long>(config.topology_settings.whole("averaging_period")),
              result.steps.front().train_loss, result.steps.back().train_loss, result.final_eval_loss, consensus,
              result.replicas_identical ? "yes" : "no");
  // Untrained, the loss is about ln 256 = 5.5; byte frequencies alone bring it near 3.4.
  if (!(result.final_eval_loss < 4.0) || !result.replicas_identical || !(consensus > 0)) {
    std::fprintf(stderr, "accord-example-custom-topology: model-averaging did not train\n");
    return 1;
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "accord-example-custom-topology: %s\n", error.what());
  return 1;
}
