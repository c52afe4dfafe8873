#pragma once
// What the membership state machine asks its wiring to do (actors/membership_actor.cpp performs
// them in order; tests and the simulator read them). No CAF, no sockets, no clocks.
#include "cluster/membership_log.hpp"
#include "membership/replica.hpp"
#include "membership/requests.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace accord {

// What starting an epoch's coordinator needs.
struct epoch_spec {
  std::uint64_t epoch = 0;
  int workers = 0;
  std::uint64_t start_steps = 0;
  std::uint64_t data_position = 0;
  std::vector<std::string> metrics_events;  // JSON lines for the metrics file, before the epoch's steps
};

// The timers the machine sets; each comes back as an on_timer event with its epoch.
enum class membership_timer {
  rendezvous,  // checks on the starting ranks' hellos
  silence,     // judges the heartbeats
  grace,       // a failed epoch's wait for the death that explains it ran out
  majority,    // the wait for a majority (or the returning members' moment) ran out
  probe,       // asks the lost members' standbys where the job is
  reconnect,   // after a takeover: the members that did not reconnect are lost
};

namespace membership_do {
struct print { std::string line; };            // a line in this process's output
struct record { membership_record r; };        // for the membership log
struct tell { std::uint64_t member; std::string line; };  // a line for that member's process
struct change { std::uint64_t member; std::uint64_t epoch; };  // a change waits after that epoch
struct abort { std::uint64_t member; std::uint64_t epoch; std::string why; };  // that epoch failed
struct drop { std::uint64_t member; std::string why; };  // the job went on without that member
struct heartbeat { std::uint64_t member; std::int64_t sent; std::int64_t echo; };  // the coordinator's
struct answer { std::uint64_t member; epoch_assignment plan; };  // its epoch request
struct refuse { std::uint64_t member; std::string why; };        // its epoch request, failed
// Merges the ended epoch's result into the job's.
struct merge_result {};
// Starts the epoch's coordinator (the job's result loses the steps after spec.start_steps).
struct spawn_coordinator { epoch_spec spec; };
// Waits for the running epoch's coordinator to end (on_epoch_ended); it formed this long after
// the last one ended.
struct watch_epoch { std::uint64_t epoch; std::chrono::steady_clock::duration forming; };
struct fail_worker { int rank; std::string why; };  // tells the running coordinator
// Copies the replica to those members' standbys (through their agents); `then_depart`: once
// each answered, this process goes away (a replayed coordinator loss: on_departure_due).
struct replicate { coordination_replica replica; std::vector<std::uint64_t> to; bool then_depart = false; };
struct timer { membership_timer kind; std::uint64_t epoch; std::chrono::milliseconds after; };
// Does that member's control port refuse a connection? (on_death_probe)
struct probe_death { std::uint64_t member; std::string control; };
// Asks these standbys for their newest epoch and whether they coordinate (on_standby_answer, then
// one with an empty control to end the round).
struct probe_standbys { std::vector<std::string> controls; };
struct unwritten_events { std::vector<std::string> lines; };  // the metrics lines no epoch will write
struct finished {};         // the job is over, before any member hears it
struct release_waiters {};  // every member alive has heard that the job is over
}  // namespace membership_do

using membership_action =
    std::variant<membership_do::print, membership_do::record, membership_do::tell, membership_do::change,
                 membership_do::abort, membership_do::drop, membership_do::heartbeat, membership_do::answer,
                 membership_do::refuse, membership_do::merge_result, membership_do::spawn_coordinator,
                 membership_do::watch_epoch, membership_do::fail_worker, membership_do::replicate,
                 membership_do::timer, membership_do::probe_death, membership_do::probe_standbys,
                 membership_do::unwritten_events, membership_do::finished, membership_do::release_waiters>;
using membership_actions = std::vector<membership_action>;

}  // namespace accord
