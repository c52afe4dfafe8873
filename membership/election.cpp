#include "membership/election.hpp"

#include <algorithm>

namespace accord {

election_answer answer_election(const standby_view& view, std::uint64_t asker_epoch) {
  if (view.hosts) return election_answer::coordinates;
  if (view.replica.epoch == 0) return election_answer::no_copy_yet;
  if (view.lost_coordinator && *view.lost_coordinator == view.replica.coordinator) return election_answer::take_over;
  if (asker_epoch < view.replica.epoch) return election_answer::formed_without_asker;
  // Lost coordinators are seen by every member within a detector's threshold: wait for ours.
  return election_answer::wait_for_own_verdict;
}

std::string still_heard(std::uint64_t coordinator, const std::string& detail) {
  return std::string(coordinator_still_heard) + " (member " + std::to_string(coordinator) + ", " + detail +
         "): the asker is the one cut off from it";
}

bool counted_in(const coordination_replica& later, std::uint64_t member) {
  return std::any_of(later.members.begin(), later.members.end(),
                     [member](const replica_member& m) { return m.id == member && m.rank >= 0; });
}

std::vector<replica_member> election_candidates(const coordination_replica& replica) {
  std::vector<replica_member> order;
  for (replica_member& m : succession(replica))
    if (m.id != replica.coordinator && !m.leaving) order.push_back(std::move(m));
  return order;
}

}  // namespace accord
