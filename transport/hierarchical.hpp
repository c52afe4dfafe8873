#pragma once
// Collectives in two levels over one flat transport: ranks form groups of `group_size`
// consecutive ranks (a machine's workers, say); a collective reduces inside each group first,
// then across the group leaders (each group's first rank), then each leader hands the result to
// its group. Every rank ends with the leader's bit-identical values. The sign votes count inside
// a group (2 bits up, counts back) and send only packed count bits between leaders, so the
// majority and the counts equal the flat vote's exactly. Point-to-point messages and the
// round's double counts go over the flat transport unchanged.
#include "transport/transport.hpp"

#include <memory>

namespace accord {

// `group_size` >= 1 (1, or at least the world: one level, still correct). Throws
// std::invalid_argument for a group size below 1.
std::unique_ptr<transport> make_hierarchical_transport(std::shared_ptr<transport> flat, int group_size);

}  // namespace accord
