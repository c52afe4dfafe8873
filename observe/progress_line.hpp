#pragma once
// The progress line accord-train prints every --log-interval steps, and accord.torch with
// log_interval=: the step, the columns of the step's fields that <accord/metrics_fields.hpp>
// declares for it (loss, the latest eval loss, throughput, bits sent per parameter, the hidden
// fraction), the job's seconds and the time left at the pace so far.
//   step   150/300 | loss 2.8183 | eval 2.9774 | 24.9k tok/s | 96.0 bits/param | hidden 100% | 57.7s | ETA 57s
#include <accord/metrics.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace accord {

// "24.9k", "1.25M", "312": a rate with a k or M suffix.
std::string format_rate(double per_second);
// "42s", "3m07s", "2h05m".
std::string format_duration(double seconds);

class progress_log {
public:
  // A job of `steps` steps; a line every `interval` steps (0: none), at the first and at the
  // last; `unit` names the items of step_metrics::items ("tok", "img", "ex").
  progress_log(std::uint64_t steps, std::uint64_t interval, std::string unit);
  // Sees every step the job reports, in order; the line when one is due, else "". The pace for
  // the ETA is measured from the first step seen (a resumed job starts late).
  std::string on_step(const step_metrics& m);

private:
  std::uint64_t steps_, interval_;
  std::string unit_;
  std::optional<step_metrics> first_seen_;
  std::optional<step_metrics> latest_;  // each optional figure: the latest measured
};

}  // namespace accord
