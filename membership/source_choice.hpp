#pragma once
// Which kept step the next epoch starts from: the newest one that the coordinator saw completed
// and whose every optimizer shard one of the new ranks holds (its own or a copy). No CAF.
#include "membership/member.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accord {

// The data position of every step the workers completed keeping, by (epoch, steps).
using kept_positions = std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t>;

// The newest kept step the members of `order` (the new ranks, each with its epoch request) can
// rebuild completely, or none; then `why_not` says why the newest kept step cannot be.
// `sharded`: every ZeRO-1 optimizer shard must be held (else only the parameters matter).
std::optional<state_source> choose_source(const kept_positions& positions, bool sharded,
                                          const std::vector<const member_entry*>& order,
                                          std::string* why_not = nullptr);

// "ranks 2, 3" or "rank 2".
std::string list_ranks(const std::vector<int>& ranks);

}  // namespace accord
