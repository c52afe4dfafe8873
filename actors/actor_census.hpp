#pragma once
// The actors this process's jobs spawned, by role, for the stall watchdog's report
// (observe/stall_watchdog.hpp): which are alive, which wait for messages and which are busy.
#include <caf/actor.hpp>

#include <string>

namespace accord {

// Counts `actor` in (held weakly: a finished actor leaves the census by itself).
void census_add(const caf::actor& actor, std::string role);

// One line per live actor: its role, id, and whether its mailbox is empty with the actor waiting
// for messages, or it is busy (in a handler, or with messages queued). CAF 0.17 counts a
// mailbox's messages only from the actor's own thread (fifo_inbox::size takes them over), so a
// busy actor's depth is not read from outside; its thread's stack shows where it is.
std::string census_report();

}  // namespace accord
