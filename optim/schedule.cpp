#include "optim/schedule.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace accord {

float learning_rate_at(const schedule_config& config, std::uint64_t step) {
  const bool cosine = config.kind == "cosine";
  if (!cosine && config.kind != "constant")
    throw std::invalid_argument("unknown learning-rate schedule '" + config.kind +
                                "' (expected constant or cosine)");
  if (cosine && config.total_steps <= config.warmup_steps)
    throw std::invalid_argument("cosine schedule: total_steps " +
                                std::to_string(config.total_steps) +
                                " must exceed warmup_steps " +
                                std::to_string(config.warmup_steps));
  const double peak = config.peak_learning_rate;
  if (step < config.warmup_steps)
    return static_cast<float>(peak * static_cast<double>(step + 1) /
                              static_cast<double>(config.warmup_steps));
  if (!cosine) return config.peak_learning_rate;
  const double floor = peak * config.final_fraction;
  if (step >= config.total_steps) return static_cast<float>(floor);
  const double progress = static_cast<double>(step - config.warmup_steps) /
                          static_cast<double>(config.total_steps - config.warmup_steps);
  return static_cast<float>(floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

}  // namespace accord
