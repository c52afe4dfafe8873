// How a worker process of a job between processes finds its coordinator over the network: rank
// 0's master port or a member's standby, the clock offset to it, and after its loss the election
// of the next one among the last epoch's members (job/coordinator_finding.hpp).
#include "job/coordinator_finding.hpp"

#include "actors/standby_actor.hpp"
#include "cluster/rendezvous.hpp"
#include "observe/trace.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>

namespace accord {
namespace {

// The coordinator's membership actor, found through a member's standby at host:port (an
// elastic job's members each have one; a joiner may name any of them).
caf::expected<membership_actor> membership_through_standby(caf::actor_system& system, const std::string& host,
                                                           int port, std::chrono::milliseconds timeout) {
  auto standby = find_published<standby_actor>(system, host, port, timeout);
  if (!standby) return standby.error();
  caf::scoped_actor self{system};
  std::string where;
  caf::expected<membership_actor> result{caf::sec::request_timeout};
  self->request(*standby, timeout, where_atom::value)
      .receive([&](std::string& at) { where = std::move(at); }, [&](caf::error& e) { result = std::move(e); });
  if (!where.empty()) {  // another member hosts it
    const auto colon = where.rfind(':');
    standby = find_published<standby_actor>(system, where.substr(0, colon), std::stoi(where.substr(colon + 1)), timeout);
    if (!standby) return standby.error();
  }
  self->request(*standby, timeout, membership_atom::value)
      .receive([&](membership_actor& found) { result = std::move(found); }, [&](caf::error& e) { result = std::move(e); });
  return result;
}

// The membership actor at host:port: rank 0's master port, or (elastic jobs) any member's
// control port, whose standby knows where the coordinator is now.
caf::expected<membership_actor> find_membership(caf::actor_system& system, const std::string& host, int port,
                                                std::chrono::milliseconds timeout) {
  auto found = find_published<membership_actor>(system, host, port, timeout);
  if (found || found.error() != caf::sec::unexpected_actor_messaging_interface) return found;
  return membership_through_standby(system, host, port, timeout);
}

}  // namespace

// Rank 0's wall clock minus this process's (Cristian's method: rank 0 read its clock about
// halfway through the exchange; of a few, the one with the shortest round trip is the closest).
std::chrono::microseconds clock_offset_to(caf::scoped_actor& self, const membership_actor& membership) {
  const auto microseconds = [](trace_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  };
  std::int64_t offset = 0, shortest = INT64_MAX;
  for (int exchange = 0; exchange < 5; ++exchange) {
    std::optional<std::int64_t> theirs;
    const std::int64_t sent = microseconds(trace_clock::now());
    self->request(membership, std::chrono::seconds(5), clock_atom::value)
        .receive([&](std::int64_t at) { theirs = at; }, [](caf::error&) {});
    const std::int64_t received = microseconds(trace_clock::now());
    if (!theirs) break;  // rank 0 gone: the hello's failure or the epoch request says so
    if (received - sent < shortest) {
      shortest = received - sent;
      offset = *theirs - (sent + received) / 2;
    }
  }
  return std::chrono::microseconds(offset);
}


// The coordinator reached through the member whose standby listens at `control` (HOST:PORT).
caf::expected<membership_actor> membership_at(caf::actor_system& system, const std::string& control,
                                              std::chrono::milliseconds timeout) {
  const auto colon = control.rfind(':');
  if (colon == std::string::npos) return caf::make_error(caf::sec::invalid_argument, "no port in " + control);
  return membership_through_standby(system, control.substr(0, colon), std::stoi(control.substr(colon + 1)), timeout);
}

// What the standby at `control` (a lost member's) says about the job: the newest epoch it holds
// a copy of, and whether its process hosts a coordinator; nullopt when it does not answer.
std::optional<std::pair<std::uint64_t, bool>> ask_standby(caf::actor_system& system, const std::string& control) {
  constexpr auto timeout = std::chrono::milliseconds(2000);
  const auto colon = control.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  auto standby = find_published<standby_actor>(system, control.substr(0, colon), std::stoi(control.substr(colon + 1)), timeout);
  if (!standby) return std::nullopt;
  caf::scoped_actor self{system};
  std::optional<std::pair<std::uint64_t, bool>> answer;
  self->request(*standby, timeout, replica_atom::value)
      .receive([&](coordination_replica& r) { answer.emplace(r.epoch, false); }, [](caf::error&) {});
  if (answer)
    self->request(*standby, timeout, membership_atom::value)
        .receive([&](membership_actor&) { answer->second = true; }, [](caf::error&) {});
  return answer;
}

// A worker's way to the coordinator: rank 0's master port, retried until the connect timeout;
// a joiner tries each address it was given in turn.
membership_actor find_coordinator(caf::actor_system& system, const process_group& group, const job_hooks& hooks) {
  const std::string who = group.join ? "joiner" : "rank " + std::to_string(group.rank);
  std::vector<std::pair<std::string, int>> addresses{{group.master_addr, group.master_port}};
  for (const std::string& more : group.more_join_addresses) {
    const auto colon = more.rfind(':');
    addresses.emplace_back(more.substr(0, colon), std::stoi(more.substr(colon + 1)));
  }
  const auto deadline = std::chrono::steady_clock::now() + group.connect_timeout;
  for (;;) {
    std::string errors;
    for (const auto& [address, port] : addresses) {
      const std::string at = address + ":" + std::to_string(port);
      // A listening rank 0 answers CAF's handshake within milliseconds, however busy the job.
      const auto handshake = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            deadline - std::chrono::steady_clock::now()),
                                        std::chrono::milliseconds(1), std::chrono::milliseconds(10'000));
      auto found = find_membership(system, address, port, handshake);
      if (found) return *found;
      if (found.error() == caf::sec::request_timeout || found.error() == caf::sec::connection_timeout ||
          found.error() == caf::sec::disconnect_during_handshake) {
        if (addresses.size() == 1)
          throw std::runtime_error(who + ": the master port " + at + " accepted the connection but did not answer "
                                   "the handshake (is an accord job's rank 0 listening there?): " +
                                   system.render(found.error()));
      }
      errors += (errors.empty() ? "" : "; ") + at + ": " + system.render(found.error());
    }
    if (hooks.stop_requested && hooks.stop_requested->load())
      throw std::runtime_error(who + ": asked to stop while waiting for the coordinator at " + errors);
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(who + ": no coordinator at " +
                               (addresses.size() == 1 ? "" : "any of the " + std::to_string(addresses.size()) +
                                                                 " addresses ") +
                               "within " + std::to_string(group.connect_timeout.count()) + " ms: " + errors);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// After the coordinator's loss (`cause`), the members of the last replicated epoch take over in
// its rank order: this process asks each in turn (its own standby when its turn comes) until one
// answers with the membership actor it now hosts. `refusals` collects why the others did not;
// `left_behind` says that one of them holds a later epoch, formed without this process.
std::optional<membership_actor> elect_coordinator(caf::actor_system& system, caf::scoped_actor& self,
                                                  const standby_actor& standby, std::uint64_t me,
                                                  const std::string& cause, std::string& refusals,
                                                  bool& left_behind) {
  // A dead candidate refuses the connection at once; a hung one is given this long.
  constexpr auto candidate_timeout = std::chrono::milliseconds(2000);
  coordination_replica replica;
  self->request(standby, candidate_timeout, replica_atom::value)
      .receive([&](coordination_replica& r) { replica = std::move(r); }, [](caf::error&) {});
  std::vector<replica_member> candidates = election_candidates(replica);
  for (std::size_t next = 0; next < candidates.size(); ++next) {
    const replica_member& candidate = candidates[next];
    const std::string name = member_name(candidate.initial_rank, candidate.id, candidate.host);
    standby_actor asked = standby;
    if (candidate.id != me) {
      const auto colon = candidate.control.rfind(':');
      auto found = find_published<standby_actor>(system, candidate.control.substr(0, colon),
                                                 std::stoi(candidate.control.substr(colon + 1)), candidate_timeout);
      if (!found) {
        refusals += (refusals.empty() ? "" : "; ") + name + ": " + system.render(found.error());
        continue;
      }
      asked = *found;
    }
    std::optional<membership_actor> elected;
    bool still_heard = false;
    // A live candidate answers once it has judged the coordinator lost itself (at most
    // takeover_confirm_wait later): the longer wait is only for one that did not yet.
    self->request(asked, takeover_confirm_wait + candidate_timeout, elect_atom::value, replica.epoch, cause)
        .receive([&](membership_actor& m) { elected = std::move(m); },
                 [&](caf::error& e) {
                   const std::string why = describe(system, e);
                   still_heard = why.find(coordinator_still_heard) != std::string::npos;
                   left_behind = left_behind || why.find(formed_without_asker) != std::string::npos;
                   refusals += (refusals.empty() ? "" : "; ") + name + ": " + why;
                 });
    if (elected) {
      if (candidate.id != me) caf::anon_send(standby, elected_atom::value);  // no takeover here too
      return elected;
    }
    if (left_behind) {
      // A later epoch formed: without this member, or with it while a cut held its plan and
      // its copies (it judged that epoch's coordinator lost first). In the second case it
      // takes the candidate's copy and elects from it (membership/election.hpp, counted_in).
      std::optional<coordination_replica> later;
      self->request(asked, candidate_timeout, replica_atom::value)
          .receive([&](coordination_replica& r) { later = std::move(r); }, [](caf::error&) {});
      if (later && newer(*later, replica) && counted_in(*later, me)) {
        left_behind = false;
        replica = std::move(*later);
        caf::anon_send(standby, replica_atom::value, replica);
        candidates = election_candidates(replica);
        next = static_cast<std::size_t>(-1);  // from the first of its candidates
        continue;
      }
    }
    // The coordinator lives, and a member reaches it: this process is the one cut off. Asking
    // the next in line (this process's own standby, maybe) would start a second coordinator.
    if (still_heard) return std::nullopt;
  }
  if (refusals.empty()) refusals = "this worker holds no copy of the coordinator's state";
  return std::nullopt;
}

}  // namespace accord
