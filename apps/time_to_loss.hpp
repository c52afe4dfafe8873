#pragma once
// What the time-to-loss benchmarks (accord-bench-time-to-loss, accord-bench-topologies) share:
// medians over repetitions, seconds to a held-out loss, the calibrated emulated link and the
// table's number formats.
#include "apps/training_options.hpp"

#include <limits>
#include <string>
#include <vector>

namespace accord {

// Seconds of a target never reached.
inline constexpr double never = std::numeric_limits<double>::infinity();

// The items of a `separator`-separated list, as written (empty items kept).
std::vector<std::string> split_list(const std::string& list, char separator = ',');

// The median (of an empty list: never).
double median(std::vector<double> values);

// Training seconds at the first evaluation at or below `target` (never if none).
double seconds_to(const job_result& r, double target);

// The last evaluation at or before step `step` (never if none).
double eval_loss_at(const job_result& r, std::uint64_t step);

// An emulated link on which `probe`'s communication per step takes `comm_ratio` times its compute:
// the probe runs 8 steps on an unlimited link and its bytes per worker and step over
// comm_ratio x its compute time per step give the bandwidth (latency 100us). Prints what it
// measured.
std::string calibrated_link(const training_setup& setup, job_config probe, double comm_ratio = 1.0);

// "12.3", or "-" for never.
std::string format_seconds(double seconds);
// baseline / seconds as "2.05", or "-" where either is never.
std::string format_ratio(double baseline, double seconds);

}  // namespace accord
