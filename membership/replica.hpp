#pragma once
// What the membership state machine needs to form the next epoch, copied to every member process
// at each kept step and each epoch formation, so that a survivor can take over when the
// coordinator's process dies or hangs (actors/standby_actor.hpp). Small: the members and the
// newest kept steps' data positions, never tensors (those stay with their holders,
// recovery/elastic_state.hpp). No CAF (actors/coordination_replica.hpp makes it a message).
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

struct replica_member {
  std::uint64_t id = 0;
  int initial_rank = -1;  // -1: joined later
  std::string host;
  std::string control;    // HOST:PORT of its standby actor
  int rank = -1;          // in the replicated epoch; -1 when not in it (a joiner waiting)
  bool leaving = false;
};

struct kept_position {
  std::uint64_t epoch = 0;  // the layout the step was kept in
  std::uint64_t steps = 0;
  std::uint64_t data_position = 0;
};

struct coordination_replica {
  std::uint64_t epoch = 0;     // 0: none received yet
  std::uint64_t sequence = 0;  // grows with every replica the coordinator sends
  std::uint64_t coordinator = 0;  // the member whose process hosts the coordinator
  std::string coordinator_control;
  int epoch_workers = 0;
  std::uint64_t epoch_start = 0;
  std::uint64_t steps_done = 0;
  std::uint64_t next_id = 0;
  std::vector<replica_member> members;  // alive ones
  std::vector<kept_position> kept;      // the newest few
};

// Whether `a` is newer than `b`: a later epoch, or a later copy of the same one.
inline bool newer(const coordination_replica& a, const coordination_replica& b) {
  return a.epoch != b.epoch ? a.epoch > b.epoch : a.sequence > b.sequence;
}

// The members in the order they take over: the replicated epoch's ranks, then joiners by id.
std::vector<replica_member> succession(const coordination_replica& replica);

}  // namespace accord
