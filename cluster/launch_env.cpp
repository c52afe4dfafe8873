#include "cluster/launch_env.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace accord {

const char* environment_variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

namespace {

std::string assignment(std::string_view name, std::string_view value) {
  return std::string(name) + "=" + std::string(value);
}

int parse_integer(const char* name, const char* value) {
  int parsed = 0;
  const char* end = value + std::strlen(value);
  const auto [stop, error] = std::from_chars(value, end, parsed);
  if (error == std::errc::result_out_of_range)
    throw std::invalid_argument(assignment(name, value) + " is out of range for an integer");
  if (error != std::errc{} || stop != end)
    throw std::invalid_argument(assignment(name, value) + " is not an integer");
  return parsed;
}

const char* required(const char* name, const char* because_of) {
  const char* value = environment_variable(name);
  if (value == nullptr)
    throw std::invalid_argument(std::string(name) + " is not set but " + because_of + " is");
  return value;
}

// Names of the variables one launcher family uses, so both families share one validation.
struct variable_names {
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

rendezvous_info read_placement(const variable_names& names, const char* rank_value,
                               const char* world_value) {
  rendezvous_info info;
  info.from_environment = true;
  info.world_size = parse_integer(names.world_size, world_value);
  if (info.world_size < 1)
    throw std::invalid_argument(assignment(names.world_size, world_value) + " must be at least 1");
  info.rank = parse_integer(names.rank, rank_value);
  if (info.rank < 0 || info.rank >= info.world_size)
    throw std::invalid_argument(assignment(names.rank, rank_value) + " is out of range for " +
                                assignment(names.world_size, world_value) + " (must be 0.." +
                                std::to_string(info.world_size - 1) + ")");
  if (const char* local = environment_variable(names.local_rank)) {
    info.local_rank = parse_integer(names.local_rank, local);
    if (info.local_rank < 0 || info.local_rank >= info.world_size)
      throw std::invalid_argument(assignment(names.local_rank, local) + " is out of range for " +
                                  assignment(names.world_size, world_value));
  }
  return info;
}

int read_master_port() {
  const char* value = environment_variable("MASTER_PORT");
  if (value == nullptr) return default_master_port;
  const int port = parse_integer("MASTER_PORT", value);
  if (port < 1 || port > 65535)
    throw std::invalid_argument(assignment("MASTER_PORT", value) + " is not a port (1..65535)");
  return port;
}

}  // namespace

std::string first_host_of_nodelist(std::string_view nodelist, std::string_view source) {
  if (nodelist.empty()) throw std::invalid_argument(std::string(source) + " is empty");
  // Each bracket group "[07-09,12]" contributes its first entry "07" (zero padding kept);
  // the first top-level comma ends the first host.
  std::string host;
  std::size_t at = 0;
  while (at < nodelist.size() && nodelist[at] != ',') {
    if (nodelist[at] == ']')
      throw std::invalid_argument(assignment(source, nodelist) + " has an unmatched ']'");
    if (nodelist[at] != '[') {
      host += nodelist[at++];
      continue;
    }
    const std::size_t close = nodelist.find(']', at);
    if (close == std::string_view::npos)
      throw std::invalid_argument(assignment(source, nodelist) + " has an unmatched '['");
    const std::string_view group = nodelist.substr(at + 1, close - at - 1);
    const std::string_view first = group.substr(0, group.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string_view::npos)
      throw std::invalid_argument(assignment(source, nodelist) + " has a malformed range [" +
                                  std::string(group) + "]");
    host += first;
    at = close + 1;
  }
  if (host.empty())
    throw std::invalid_argument(assignment(source, nodelist) + " does not start with a host");
  return host;
}

std::string job_id_from_environment() {
  for (const char* name : {"ACCORD_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    const char* value = std::getenv(name);
    if (value && *value && std::string_view(value) != "none") return value;
  }
  return {};
}

std::optional<rendezvous_info> rendezvous_from_environment() {
  const char* rank = environment_variable("RANK");
  const char* world = environment_variable("WORLD_SIZE");
  if (rank != nullptr || world != nullptr) {
    if (rank == nullptr) rank = required("RANK", "WORLD_SIZE");
    if (world == nullptr) world = required("WORLD_SIZE", "RANK");
    rendezvous_info info = read_placement({"RANK", "WORLD_SIZE", "LOCAL_RANK"}, rank, world);
    info.master_addr = required("MASTER_ADDR", "RANK");
    info.master_port = read_master_port();
    return info;
  }

  const char* slurm_rank = environment_variable("SLURM_PROCID");
  if (slurm_rank == nullptr) return std::nullopt;
  const char* slurm_world = required("SLURM_NTASKS", "SLURM_PROCID");
  rendezvous_info info =
      read_placement({"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}, slurm_rank, slurm_world);
  if (const char* addr = environment_variable("MASTER_ADDR")) {
    info.master_addr = addr;
  } else if (const char* nodes = environment_variable("SLURM_NODELIST")) {
    info.master_addr = first_host_of_nodelist(nodes, "SLURM_NODELIST");
  } else if (const char* job_nodes = environment_variable("SLURM_JOB_NODELIST")) {
    info.master_addr = first_host_of_nodelist(job_nodes, "SLURM_JOB_NODELIST");
  } else {
    throw std::invalid_argument(
        "SLURM_PROCID is set but none of MASTER_ADDR, SLURM_NODELIST, SLURM_JOB_NODELIST is");
  }
  info.master_port = read_master_port();
  return info;
}

rendezvous_info rendezvous_or_single_process() {
  if (auto info = rendezvous_from_environment()) return *info;
  return rendezvous_info{};
}

std::string local_address_towards(const std::string& master_addr, int master_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(master_port);
  if (const int status = getaddrinfo(master_addr.c_str(), service.c_str(), &hints, &found); status != 0)
    throw std::runtime_error("cannot resolve master address '" + master_addr + "': " + gai_strerror(status));

  std::string last_error = "no address";
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    const int fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // Connecting a UDP socket only picks the route and source address; nothing is sent.
    sockaddr_storage own{};
    socklen_t own_size = sizeof own;
    char text[INET6_ADDRSTRLEN] = {};
    const bool ok = connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&own), &own_size) == 0;
    if (!ok) last_error = std::strerror(errno);
    close(fd);
    if (!ok) continue;
    const void* raw = own.ss_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&own)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&own)->sin6_addr);
    if (inet_ntop(own.ss_family, raw, text, sizeof text) != nullptr) {
      freeaddrinfo(found);
      return text;
    }
    last_error = std::strerror(errno);
  }
  freeaddrinfo(found);
  throw std::runtime_error("no route to master address '" + master_addr + "': " + last_error);
}

std::vector<std::string_view> split_address_list(std::string_view list) {
  std::vector<std::string_view> addresses;
  for (std::size_t begin = 0; begin <= list.size();) {
    const std::size_t comma = std::min(list.find(',', begin), list.size());
    addresses.push_back(list.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return addresses;
}

}  // namespace accord
