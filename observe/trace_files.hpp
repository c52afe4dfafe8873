#pragma once
// The files of a trace taken between processes: where each process writes its part, and the
// merge of the parts into one trace (accord-launch --trace). No CAF: accord-launch builds it too.
#include <string>
#include <vector>

namespace accord {

// "trace.json", "rank2" -> "trace.rank2.json": the part a process of the job writes.
std::string trace_part_path(const std::string& path, const std::string& label);

// Writes to `out` one trace holding the events of every file of `parts` (Chrome trace JSON,
// {"traceEvents": [...]}), which are on one clock already. Throws std::runtime_error naming the
// part that cannot be read or is not a trace, or `out` when it cannot be written.
void merge_trace_files(const std::vector<std::string>& parts, const std::string& out);

}  // namespace accord
