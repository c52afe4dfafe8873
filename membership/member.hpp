#pragma once
// One worker process as the membership state machine sees it, and how lines name it. No CAF.
#include "cluster/certain_death.hpp"
#include "cluster/membership_log.hpp"
#include "membership/requests.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

namespace accord {

struct member_entry {
  std::uint64_t id = 0;
  int initial_rank = -1;  // -1: joined later
  std::string host;
  bool alive = true;
  bool leaving = false;
  bool remote = false;  // in another process than the coordinator (its heartbeats are judged)
  bool has_agent = false;  // said hello to this coordinator (its agent can be told things)
  int rank = -1;  // in the running epoch; -1 when not in it
  int last_rank = -1;  // in the last epoch formed (the succession order); -1 when not in it
  std::string control;  // HOST:PORT of its standby
  bool reconnecting = false;  // after a takeover: known from the replica, not yet reconnected
  bool held = false;  // a replay's joiner: admitted when its change is due
  std::optional<epoch_request> request;
  bool asking = false;    // its epoch request waits for an answer
  bool released = false;  // told that the job is over (or failed)
  heartbeat_contact contact;     // its heartbeats and the coordinator's, echoed
  bool checking_death = false;  // lost while in contact: its control port is being tried
  bool known_dead = false;      // and it refused: the process is gone (cluster/certain_death.hpp)
  // Lost since the last epoch formed: its loss, recorded once an epoch forms without it (until
  // then it may come back), and when the verdict came.
  std::optional<membership_record> lost_record;
  std::chrono::steady_clock::time_point lost_at;

  std::string name() const;
};

// "rank 2 (127.0.0.1)", "member 5" (a joiner).
std::string member_name(int initial_rank, std::uint64_t id, const std::string& host);
// "membership: rank 2 (127.0.0.1), worker, lost at step 40: connection closed (...)"
std::string member_event_line(const std::string& name, const membership_record& r);

// The order of an epoch's ranks: the coordinator's own process first, then the members the job
// started with in their RANK order, then joiners by arrival.
std::tuple<bool, int, std::uint64_t> order_key(const member_entry& m);

}  // namespace accord
