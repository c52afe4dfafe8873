#pragma once
// Learning-rate schedules, a pure function of the step so every replica and a resumed run
// agree on the rate without shared state.
#include <cstdint>
#include <string>

namespace accord {

struct schedule_config {
  std::string kind = "constant";   // constant | cosine
  float peak_learning_rate = 1e-3f;
  std::uint64_t warmup_steps = 0;  // linear ramp from peak/warmup to peak over these steps
  std::uint64_t total_steps = 0;   // cosine: decay ends here and the floor holds afterwards
  float final_fraction = 0.1f;     // cosine: floor = final_fraction * peak
};

// Rate for step `step` (0-based). Constant: warmup, then peak forever. Cosine: warmup, then
// floor + (peak - floor) * (1 + cos(pi * progress)) / 2 with progress going 0 -> 1 from the
// end of warmup to total_steps, then floor. Throws std::invalid_argument for a bad config.
float learning_rate_at(const schedule_config& config, std::uint64_t step);

}  // namespace accord
