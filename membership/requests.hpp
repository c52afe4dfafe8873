#pragma once
// What worker processes ask the membership state machine, and what it answers them (without the
// epoch's coordinator handle, which the CAF wiring adds: actors/membership_actor.hpp). No CAF.
#include "membership/replica.hpp"
#include "recovery/elastic_state.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace accord {

struct member_hello {
  int rank = -1;  // RANK among the members the job starts with; -1 for a joiner
  int world = 0;  // WORLD_SIZE it was started with (ignored for a joiner)
  std::string fingerprint;
  std::string host;
  std::string job;  // process_group::job_id (empty: a joiner that did not name one)
  std::string control;  // HOST:PORT of its standby (elastic jobs)
  bool rejoin = false;  // a member reconnecting to a new coordinator, as `member`
  std::uint64_t member = 0;
  // Rejoining: the newest copy its standby holds (epoch 0: none). A later epoch than the
  // coordination's, one that counted it, may have formed while a cut held its copies from the
  // others (membership_machine::adopt).
  coordination_replica replica;
};

struct epoch_request {
  std::uint64_t member = 0;
  std::string address;  // where this member's transport listens for the epoch
  std::vector<kept_summary> kept;
};

// A member's part in the next epoch.
struct epoch_assignment {
  bool finished = false;  // the job is over, or this member has left: stop
  std::uint64_t epoch = 0;
  int rank = 0;
  int world = 0;
  std::vector<std::string> addresses;  // by rank
  std::uint64_t start_steps = 0;
  std::uint64_t data_position = 0;
  bool from_origin = true;  // start as the job starts (the seeded or resumed state)
  state_source source;      // else the kept state every rank restores
  std::uint64_t end_steps = 0;  // a replay's: the epoch ends after this step (0: when a change comes)
  // Not empty: this side had no majority and gave way to the coordinator whose standby listens
  // at this HOST:PORT (one earlier in the last epoch's order): say hello to it again as this member.
  std::string rejoin;
};

// The job is over for the member (or it left): it stops.
inline epoch_assignment job_over() {
  epoch_assignment plan;
  plan.finished = true;
  return plan;
}
// This side gave way: say hello to the coordinator whose standby listens at `control`.
inline epoch_assignment rejoin_at(std::string control) {
  epoch_assignment plan;
  plan.rejoin = std::move(control);
  return plan;
}
// How a coordination that gave way refuses a hello.
inline constexpr const char* gave_way_refusal = "this side gave way to the coordinator at ";
// Whether a refusal of a member's hello after a coordinator's loss says that the coordination it
// elected or found is gone (it gave way meanwhile): the member then elects again, as when that
// coordination's process is gone (job/between_processes.cpp, follow_next).
inline bool refused_as_gone(const std::string& why) { return why.find(gave_way_refusal) != std::string::npos; }

// A rank's view of the state it restored, to compare with what was kept.
struct restored_report {
  std::uint64_t epoch = 0;
  int rank = 0;
  std::uint64_t parameter_hash = 0;
  std::uint64_t state_checksum = 0;
};

}  // namespace accord
