#pragma once
// Collectives in two levels over one flat transport: ranks form groups of `group_size`
// consecutive ranks (a machine's workers, say); a collective reduces inside each group first,
// then across the group leaders (each group's first rank), then each leader hands the result to
// its group. Every rank ends with the leader's bit-identical values. The sign votes count inside
// a group (2 bits up, counts back) and send only packed count bits between leaders, so the
// majority and the counts equal the flat vote's exactly. Point-to-point messages and the
// round's double counts go over the flat transport unchanged.
#include "transport/transport.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace accord {

// `group_size` >= 1 (1, or at least the world: one level, still correct). Throws
// std::invalid_argument for a group size below 1.
std::unique_ptr<transport> make_hierarchical_transport(std::shared_ptr<transport> flat, int group_size);

// Ranks `members` of `flat` (ascending, flat.rank() among them) as a world of their own: member i
// is flat rank members[i]. Its messages carry `level` (1..7) in tag bits 44..46, so they match
// nothing of the flat transport's or of another level's (on a UCX channel, whose bit 46 is its
// own, only 1..3 fit); the hierarchical transport's own levels are 1..3. Its collectives are
// the default ring algorithms over those ranks' links; stats() are the flat transport's. Throws
// std::invalid_argument for members that fail subgroup_members_fit(members, flat.size(), flat.rank()).
std::unique_ptr<transport> make_subgroup_transport(transport& flat, std::vector<int> members, std::uint64_t level);
// Whether `members` are ascending ranks of a world of `world`, `rank` among them.
bool subgroup_members_fit(std::span<const int> members, int world, int rank);

}  // namespace accord
