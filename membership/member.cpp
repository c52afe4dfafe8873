#include "membership/member.hpp"

#include <climits>

namespace accord {

std::string member_entry::name() const { return member_name(initial_rank, id, host); }

std::string member_name(int initial_rank, std::uint64_t id, const std::string& host) {
  return (initial_rank >= 0 ? "rank " + std::to_string(initial_rank) : "member " + std::to_string(id)) +
         (host.empty() ? "" : " (" + host + ")");
}

std::string member_event_line(const std::string& name, const membership_record& r) {
  return "membership: " + name + ", " + r.role + ", " + r.event + " at step " + std::to_string(r.step) + ": " + r.cause;
}

std::tuple<bool, int, std::uint64_t> order_key(const member_entry& m) {
  return std::make_tuple(m.remote, m.initial_rank >= 0 ? m.initial_rank : INT_MAX, m.id);
}

}  // namespace accord
