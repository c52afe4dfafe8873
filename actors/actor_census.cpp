#include "actors/actor_census.hpp"

#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/scheduled_actor.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

namespace accord {
namespace {

struct counted {
  caf::actor_addr address;
  std::string role;
};

std::mutex census_mutex;
std::vector<counted> census;

}  // namespace

void census_add(const caf::actor& actor, std::string role) {
  const std::lock_guard lock(census_mutex);
  std::erase_if(census, [](const counted& c) { return !caf::actor_cast<caf::strong_actor_ptr>(c.address); });
  census.push_back({actor.address(), std::move(role)});
}

std::string census_report() {
  std::vector<counted> alive;
  {
    const std::lock_guard lock(census_mutex);
    alive = census;
  }
  std::string lines;
  int count = 0;
  for (const counted& c : alive) {
    const caf::strong_actor_ptr strong = caf::actor_cast<caf::strong_actor_ptr>(c.address);
    if (!strong) continue;
    ++count;
    auto* scheduled = dynamic_cast<caf::scheduled_actor*>(caf::actor_cast<caf::abstract_actor*>(strong));
    // blocked(): the inbox's atomic head says the actor waits for messages (an empty mailbox).
    const char* state = !scheduled                      ? "not a scheduled actor"
                        : scheduled->mailbox().blocked() ? "waits for messages, mailbox empty"
                                                         : "busy: in a handler or with messages queued";
    lines += "  actor " + std::to_string(strong->id()) + " (" + c.role + "): " + state + "\n";
  }
  return "actors (" + std::to_string(count) + " alive):\n" + lines;
}

}  // namespace accord
