#include "observe/trace_files.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace accord {

std::string trace_part_path(const std::string& path, const std::string& label) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "." + label + p.extension().string())).string();
}

void merge_trace_files(const std::vector<std::string>& parts, const std::string& out) {
  nlohmann::json events = nlohmann::json::array();
  for (const std::string& part : parts) {
    std::ifstream in(part);
    if (!in) throw std::runtime_error(part + ": cannot read the trace");
    const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
    if (trace.is_discarded() || !trace.is_object() || !trace.contains("traceEvents") ||
        !trace["traceEvents"].is_array())
      throw std::runtime_error(part + ": not a trace (no traceEvents array)");
    for (const auto& event : trace["traceEvents"]) events.push_back(event);
  }
  std::ofstream file(out);
  file << nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump() << '\n';
  if (!file) throw std::runtime_error(out + ": cannot write the merged trace");
}

}  // namespace accord
