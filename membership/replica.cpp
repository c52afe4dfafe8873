#include "membership/replica.hpp"

#include <algorithm>
#include <climits>
#include <utility>

namespace accord {

std::vector<replica_member> succession(const coordination_replica& replica) {
  std::vector<replica_member> order = replica.members;
  auto key = [](const replica_member& m) { return std::make_pair(m.rank >= 0 ? m.rank : INT_MAX, m.id); };
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  return order;
}

}  // namespace accord
