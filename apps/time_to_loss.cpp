#include "apps/time_to_loss.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace accord {

bool staged(const std::string& algorithm) { return algorithm.rfind("acco", 0) == 0; }

std::size_t estimate_stage(const job_config& job) {
  return job.estimate_accumulation ? job.estimate_accumulation : job.accumulation / 2;
}

void check_stage_split(const std::vector<std::string>& algorithms, const job_config& job) {
  for (const auto& name : algorithms) {
    if (!staged(name)) continue;
    if (!job.estimate_accumulation && job.accumulation % 2 != 0)
      throw std::invalid_argument("--accumulation must be even: " + name + " takes half of it per stage "
                                  "(or split it with --estimate-accumulation)");
    if (job.estimate_accumulation >= job.accumulation)
      throw std::invalid_argument("--estimate-accumulation must be below --accumulation: " + name +
                                  " takes it per estimate stage and the rest per real stage");
  }
}

job_config with_equal_tokens(job_config job, const std::string& algorithm) {
  const std::size_t estimates = estimate_stage(job);
  job.algorithm = algorithm;
  job.accumulation = staged(algorithm) ? job.accumulation - estimates : job.accumulation;
  job.estimate_accumulation = staged(algorithm) ? estimates : 0;
  return job;
}

job_config step_benchmark_defaults() {
  job_config defaults;
  defaults.workers = 4;
  defaults.steps = 30;
  defaults.accumulation = 2;
  defaults.link = "100mbit,100us";
  defaults.eval_interval = 0;
  defaults.replica_check_interval = 0;
  return defaults;
}

std::vector<std::string> algorithm_list(const std::string& list) {
  const std::vector<std::string> known = algorithm_names();
  std::string expected;
  for (const auto& name : known) expected += (expected.empty() ? "" : "|") + name;
  const std::vector<std::string> names = list_items("--algos", list, expected);
  for (const auto& name : names)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw std::invalid_argument("--algos: unknown algorithm '" + name + "' (expected " + expected + ")");
  return names;
}

std::vector<std::string> split_list(const std::string& list, char separator) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, separator);) items.push_back(item);
  return items;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return never;
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double seconds_to(const job_result& r, double target) {
  for (const auto& m : r.steps)
    if (m.eval_loss >= 0 && m.eval_loss <= target) return m.seconds;
  return never;
}

double eval_loss_at(const job_result& r, std::uint64_t step) {
  double loss = never;
  for (const auto& m : r.steps)
    if (m.step <= step && m.eval_loss >= 0) loss = m.eval_loss;
  return loss;
}

std::string calibrated_link(const training_setup& setup, job_config probe, double comm_ratio) {
  probe.link = "unlimited";
  probe.steps = 8;
  probe.eval_interval = 0;
  const job_result r = run_job(*setup.net, setup.train, setup.eval, probe);
  const double steps = static_cast<double>(r.steps.size());
  const double compute_per_step = r.compute_seconds / steps;
  const double bytes_per_step = static_cast<double>(r.bytes_sent) / probe.workers / steps;
  const double megabits = std::max(1.0, std::round(8 * bytes_per_step / (comm_ratio * compute_per_step) / 1e6));
  std::printf("link auto: %s computes %.1f ms and sends %.0f KB per worker and step -> %.0fmbit,100us "
              "(communication %gx compute)\n",
              probe.algorithm.c_str(), 1e3 * compute_per_step, bytes_per_step / 1e3, megabits, comm_ratio);
  return std::to_string(static_cast<long long>(megabits)) + "mbit,100us";
}

std::string format_seconds(double seconds) {
  char text[16];
  if (std::isinf(seconds)) return "-";
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

std::string format_ratio(double baseline, double seconds) {
  char text[16];
  if (std::isinf(seconds) || std::isinf(baseline)) return "-";
  std::snprintf(text, sizeof text, "%.2f", baseline / seconds);
  return text;
}

}  // namespace accord
