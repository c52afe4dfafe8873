#pragma once
// Public embedder API: the app's own elementwise optimizer as the update of a sharded-optimizer
// algorithm (ddp, dpu, acco on the ring; job_config::app_optimizer). accord.torch makes one of a
// torch.optim optimizer. accord keeps its state as it keeps its own optimizers' (`slots` values
// per parameter and the step count: checkpoints, buddy backups, re-sharding at another worker
// count) and calls `step` once per worker's shard per round, on that worker's communicator
// thread, after the gradients are averaged (and clipped: job_config::max_gradient_norm). No CAF.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace accord {

struct elementwise_optimizer {
  std::string name;       // in errors and as job_config::optimizer (every process must agree)
  std::size_t slots = 0;  // state values per parameter: AdamW's exp_avg and exp_avg_sq are 2
  // Steps the flat parameters [begin, begin + parameters.size()) in place from their mean
  // `gradients` (read them only). `state`: `slots` spans of parameters.size() values, slot after
  // slot, zero before the first step; `step`: this step's number (1 for the first); the rates
  // are the app's own times `learning_rate_factor` (the job's schedule over its peak: 1 without
  // warm-up or cosine). ACCO's estimate rounds pass copies of the parameters and state and
  // commit nothing. The spans are valid during the call only. Must leave the values of the
  // parameter groups the app keeps (roles averaged, broadcast) as they are; an exception fails
  // the job. Returns the learning rate it used (its first group's, a scheduler's times the
  // factor), which step_metrics::learning_rate, the metrics file and the status page report;
  // a negative number reports the job's schedule instead.
  std::function<double(std::uint64_t begin, std::span<float> parameters, std::span<const float> gradients,
                       std::span<float> state, std::uint64_t step, float learning_rate_factor)>
      step;
};

}  // namespace accord
