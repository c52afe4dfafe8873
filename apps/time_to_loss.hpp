#pragma once
// What the benchmarks (accord-bench-time-to-loss, accord-bench-topologies, accord-bench-algorithms)
// share: equal tokens per step across algorithms, medians over repetitions, seconds to a held-out
// loss, the calibrated emulated link and the table's number formats.
#include "apps/training_options.hpp"

#include <limits>
#include <string>
#include <vector>

namespace accord {

// Seconds of a target never reached.
inline constexpr double never = std::numeric_limits<double>::infinity();

// ACCO-style algorithms run two rounds per step: an estimate round and a real one.
bool staged(const std::string& algorithm);

// Micro-batches per ACCO estimate stage at job.accumulation per step: job.estimate_accumulation,
// or half of job.accumulation when it is unset. The real stage takes the rest.
std::size_t estimate_stage(const job_config& job);

// Refuses, naming the flag, a split of job.accumulation that a staged algorithm among `algorithms`
// cannot take (odd without --estimate-accumulation, or no micro-batch left for the real stage).
void check_stage_split(const std::vector<std::string>& algorithms, const job_config& job);

// `job` running `algorithm` at job.accumulation micro-batches per step, the same tokens for every
// algorithm: synchronous ones take them all per round, ACCO-style ones split them between the
// stages (estimate_stage, then the rest).
job_config with_equal_tokens(job_config job, const std::string& algorithm);

// The side-by-side benchmarks' job: 4 workers, 30 steps of 2 micro-batches over a 100 Mbit/s,
// 100 µs link, no evaluation or replica check on the clock.
job_config step_benchmark_defaults();

// The algorithms an --algos list names, each known (else std::invalid_argument naming the flag,
// the item and the known names; an empty list or item is refused too).
std::vector<std::string> algorithm_list(const std::string& list);

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
