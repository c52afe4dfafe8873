// The membership log (cluster/membership_log.hpp), as --replay-membership reads it: anything
// gives records and the replays in one process and between processes, or one
// std::invalid_argument naming the line, never a crash.
#include "cluster/membership_log.hpp"

#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto records = accord::parse_membership_log(text, "fuzz.log");
    for (const auto& r : records) (void)accord::to_json_line(r);
    (void)accord::replay_of(records, "fuzz.log", 4, 800);
    (void)accord::process_replay_of(records, "fuzz.log", 4, 800);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
