#pragma once
// When a lost member may be counted as dead, rather than as possibly alive on the other side of
// a partition, by the majority rule that lets an epoch form after a loss
// (docs/distributed.md#coordinator-failover, "Majority"). No CAF: the membership actor and the
// member agents apply it.
//
// A member counts as dead when both hold:
// - its connection closed while it was still in contact: it had echoed a heartbeat this process
//   sent less than the earliest verdict any member's detector can reach (its floor, or the
//   heartbeat timeout if shorter) before the close. So it died before it could have judged this
//   process lost, hence before it could have joined another side's epoch;
// - its control port then refuses a connection: its process is gone. A live process's port
//   accepts even while it is stopped (the kernel answers), and a partition drops the attempt.
#include "cluster/heartbeat_detector.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace accord {

// The earliest a detector with `settings` can take a member for hung after hearing it.
std::chrono::milliseconds earliest_verdict(const heartbeat_detector_settings& settings);

// Whether a connection that closed at `closed_at` closed while its peer was in contact: the
// newest heartbeat of this process that the peer echoed (`newest_echoed`, when sent; none yet:
// not in contact) was sent less than `earliest` before.
bool closed_in_contact(std::chrono::steady_clock::time_point closed_at,
                       std::optional<std::chrono::steady_clock::time_point> newest_echoed,
                       std::chrono::milliseconds earliest);

// Whether HOST:PORT refuses a TCP connection on every address HOST has within `timeout` (its
// process is gone). False when one keeps accepting or nothing answers (a partition, a host
// gone), and for a name that does not resolve: only a refusal is proof.
bool port_refuses_connection(const std::string& host_port, std::chrono::milliseconds timeout);

// The majority rule after a loss: of the last epoch's `members`, the `reachable` ones must be
// more than half of those not `known_dead`. Two sides of a partition cannot both have that
// (the dead are on neither side).
bool majority_remains(int members, int reachable, int known_dead);

// A steady clock's time point as the integer heartbeats carry (nanoseconds), and back.
std::int64_t heartbeat_time(std::chrono::steady_clock::time_point t);
std::chrono::steady_clock::time_point heartbeat_time_point(std::int64_t nanoseconds);

// One side's view of the heartbeats it exchanges with a peer: each carries its send time and
// echoes the newest send time heard from the other side.
struct heartbeat_contact {
  std::int64_t heard_sent = 0;  // the peer's newest heartbeat's send time (its clock), to echo back
  std::optional<std::chrono::steady_clock::time_point> echoed;  // the newest of ours the peer echoed

  // The peer's heartbeat, sent at `sent`, echoing ours sent at `echo` (0: none heard yet).
  void heard(std::int64_t sent, std::int64_t echo);
};

}  // namespace accord
