// process_group_from_environment (include/accord/process_group.hpp): the launch environment
// (launch_env.hpp) as the process_group run_job_process takes.
#include <accord/process_group.hpp>

#include "cluster/launch_env.hpp"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace accord {
namespace {

// "HOST:PORT" (HOST may be a bracketless IPv6 address: the port follows the last colon).
std::pair<std::string, int> parse_host_port(std::string_view text, const std::string& source) {
  const auto colon = text.rfind(':');
  int port = 0;
  const char* end = text.data() + text.size();
  if (colon == std::string_view::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, end, port).ptr != end || port < 1 || port > 65535)
    throw std::invalid_argument(source + "'" + std::string(text) + "' (expected HOST:PORT, port 1..65535)");
  return {std::string(text.substr(0, colon)), port};
}

}  // namespace

std::optional<process_group> process_group_from_environment(std::string_view join) {
  const char* join_variable = environment_variable("ACCORD_JOIN");
  const bool joining = !join.empty() || join_variable != nullptr;
  process_group group;
  if (joining) {
    // Several comma-separated addresses are tried in turn: any live member's leads to the job.
    const std::string_view list = join.empty() ? std::string_view(join_variable) : join;
    const std::string source = join.empty() ? "ACCORD_JOIN=" : "join address (--join) ";
    group.master_addr.clear();
    for (const std::string_view text : split_address_list(list)) {
      const auto [address, port] = parse_host_port(text, source);
      if (group.more_join_addresses.empty() && group.master_addr.empty()) {
        group.master_addr = address;
        group.master_port = port;
      } else {
        group.more_join_addresses.push_back(address + ":" + std::to_string(port));
      }
    }
    group.rank = -1;  // the job gives a joiner its rank
    group.world_size = 0;
    group.join = true;
    group.elastic = true;
    // A joiner has no RANK, so LOCAL_RANK (which GPU to take) is read on its own.
    if (const char* local_rank = environment_variable("LOCAL_RANK")) {
      const std::string_view text = local_rank;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), group.local_rank);
      if (error != std::errc{} || end != text.data() + text.size() || group.local_rank < 0)
        throw std::invalid_argument("LOCAL_RANK='" + std::string(text) + "' is not a non-negative integer");
    }
    // It named its job by address already: only an explicit ACCORD_JOB_ID is checked.
    if (const char* named = environment_variable("ACCORD_JOB_ID")) group.job_id = named;
  } else {
    const std::optional<rendezvous_info> place = rendezvous_from_environment();
    if (!place) return std::nullopt;
    group.rank = place->rank;
    group.world_size = place->world_size;
    group.local_rank = place->local_rank;
    group.master_addr = place->master_addr;
    group.master_port = place->master_port;
    group.job_id = job_id_from_environment();
    const char* elastic = environment_variable("ACCORD_ELASTIC");
    group.elastic = elastic != nullptr && std::string_view(elastic) == "1";
  }
  group.host = local_address_towards(group.master_addr, group.master_port);
  return group;
}

}  // namespace accord
