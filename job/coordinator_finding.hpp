#pragma once
// How a worker process of a job between processes finds its coordinator over the network: rank
// 0's master port or a member's standby, the clock offset to it, and after its loss the election
// of the next one among the last epoch's members. Used by job/between_processes.cpp.
#include <accord/job.hpp>

#include "actors/membership_actor.hpp"
#include "actors/standby_actor.hpp"
#include "job/plan.hpp"

#include <caf/io/all.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace accord {

// The actor of type Handle published at host:port. Unlike middleman::remote_actor, gives up
// after `timeout` when the port accepts the connection but never answers CAF's handshake.
template <class Handle>
caf::expected<Handle> find_published(caf::actor_system& system, const std::string& host, int port,
                                     std::chrono::milliseconds timeout) {
  caf::scoped_actor self{system};
  caf::expected<Handle> result{caf::sec::request_timeout};
  self->request(system.middleman().actor_handle(), timeout, caf::connect_atom::value, host,
                static_cast<std::uint16_t>(port))
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& found, const std::set<std::string>& interface) {
            if (!found)
              result = caf::make_error(caf::sec::no_actor_published_at_port, "no actor published at the port");
            else if (!system.assignable<Handle>(interface))
              result = caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                                       "the actor at the port is not the accord actor expected there");
            else
              result = caf::actor_cast<Handle>(std::move(found));
          },
          [&](caf::error& e) { result = std::move(e); });
  return result;
}

// Rank 0's wall clock minus this process's (Cristian's method: rank 0 read its clock about
// halfway through the exchange; of a few, the one with the shortest round trip is the closest).
std::chrono::microseconds clock_offset_to(caf::scoped_actor& self, const membership_actor& membership);

// The coordinator reached through the member whose standby listens at `control` (HOST:PORT).
caf::expected<membership_actor> membership_at(caf::actor_system& system, const std::string& control,
                                              std::chrono::milliseconds timeout);

// What the standby at `control` (a lost member's) says about the job: the newest epoch it holds
// a copy of, and whether its process hosts a coordinator; nullopt when it does not answer.
std::optional<std::pair<std::uint64_t, bool>> ask_standby(caf::actor_system& system, const std::string& control);

// A worker's way to the coordinator: rank 0's master port, retried until the connect timeout;
// a joiner tries each address it was given in turn.
membership_actor find_coordinator(caf::actor_system& system, const process_group& group, const job_hooks& hooks);

// After the coordinator's loss (`cause`), the members of the last replicated epoch take over in
// its rank order: this process asks each in turn (its own standby when its turn comes) until one
// answers with the membership actor it now hosts. `refusals` collects why the others did not;
// `left_behind` says that one of them holds a later epoch, formed without this process.
std::optional<membership_actor> elect_coordinator(caf::actor_system& system, caf::scoped_actor& self,
                                                  const standby_actor& standby, std::uint64_t me,
                                                  const std::string& cause, std::string& refusals,
                                                  bool& left_behind);

}  // namespace accord
