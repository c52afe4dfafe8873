#pragma once
// Who coordinates after the coordinator's loss: the members of the last replicated epoch are
// asked in succession order (membership/replica.hpp), and each one's standby answers by the rule
// here. A standby takes over only once its own process judged the coordinator lost: a member cut
// off from a live coordinator (a partition, a flapping link) must not start a second one. No CAF.
#include "membership/replica.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accord {

// Longer than any member's detector takes to judge a hung coordinator (its 1.5 s floor, 3 s
// until ten heartbeats are known, more on an irregular machine); a dead one is seen at once.
inline constexpr auto takeover_confirm_wait = std::chrono::milliseconds(5000);
// Starts a refusal to take over from a coordinator this member still hears.
inline constexpr const char* coordinator_still_heard = "this member still hears the coordinator";
// In such a refusal: the coordinator formed a later epoch without the asker (it was dropped).
inline constexpr const char* formed_without_asker = "without the asker";

// What one member's standby knows when asked to take over.
struct standby_view {
  const coordination_replica& replica;  // the newest it holds
  bool hosts = false;                   // its process coordinates (from the start, or took over)
  std::optional<std::uint64_t> lost_coordinator;  // the coordinator its own process judged lost
};

enum class election_answer {
  coordinates,           // its process already coordinates: that coordination
  no_copy_yet,           // it holds no replica: refused
  take_over,             // its own process judged that coordinator lost: it takes over (once)
  formed_without_asker,  // the coordinator formed a later epoch without the asker: refused
  wait_for_own_verdict,  // until its process judges the coordinator lost, or refuse after the wait
};

// The answer of the standby in `view` to a member whose replica is of `asker_epoch`.
election_answer answer_election(const standby_view& view, std::uint64_t asker_epoch);

// The refusal text of a standby whose coordinator (member `coordinator`) is still heard.
std::string still_heard(std::uint64_t coordinator, const std::string& detail);

// Whether `later` (a replica of an epoch newer than the asker's) counted `member` in its epoch.
// A standby refuses such an asker as formed_without_asker by the epochs alone; but the epoch
// may have counted it while a cut held its plan and copies and it judged that coordinator lost
// first: then it takes `later` and elects from it (found by the membership simulation).
bool counted_in(const coordination_replica& later, std::uint64_t member);

// The members to ask, in order: the replica's succession without its coordinator, and without
// members leaving (a leaver's process is not in the next epoch: its coordination would fail the job).
std::vector<replica_member> election_candidates(const coordination_replica& replica);

}  // namespace accord
