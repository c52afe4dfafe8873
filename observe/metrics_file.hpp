#pragma once
// The --metrics file: one record per step, as JSON lines, or as CSV when the path ends in
// ".csv" (a header row, then one row per step; per-worker times averaged over the workers).
#include <accord/job.hpp>

#include <fstream>
#include <string>

namespace accord {

class metrics_file {
public:
  // Opens `path` (appending when `append`: a resumed job or a later epoch). Throws
  // std::runtime_error naming the file when it cannot be written.
  metrics_file(const std::string& path, bool append);
  void write(const step_metrics& m);
  // An event of the job (a membership change: a JSON object with an "event" field) between the
  // steps; JSON lines only (a CSV row has no place for it).
  void write_event(const std::string& json_object);

private:
  bool csv_;
  std::ofstream out_;
};

}  // namespace accord
