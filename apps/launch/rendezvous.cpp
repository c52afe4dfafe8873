#include "apps/launch/rendezvous.hpp"

#include "cluster/launch_env.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>

extern char** environ;

namespace accord::launch {
namespace {

// Every variable the launcher sets for some mode. Inherited values of these never reach a worker:
// an inherited ACCORD_ELASTIC must not make workers elastic under a fail-fast launcher, nor an
// inherited RANK give a joiner a rank, nor an inherited ACCORD_JOIN turn ranked workers into joiners.
constexpr std::string_view launcher_variables[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                   "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                   "ACCORD_ELASTIC", "ACCORD_JOIN", "ACCORD_TRACE",
                                                   "ACCORD_REPLAY_MEMBERSHIP"};

}  // namespace

std::vector<std::string> worker_environment(const launch_options& options, const worker& w, int master_port,
                                            int restarts) {
  std::vector<std::pair<std::string_view, std::string>> assigned = {
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.workers)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restarts)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts)},
  };
  if (w.joiner()) {
    assigned.emplace_back("ACCORD_JOIN", w.join_address);
  } else {
    assigned.emplace_back("RANK", std::to_string(w.rank));
    assigned.emplace_back("WORLD_SIZE", std::to_string(*options.world_size));
    assigned.emplace_back("MASTER_ADDR", options.master_addr);
    assigned.emplace_back("MASTER_PORT", std::to_string(master_port));
  }
  if (options.elastic) assigned.emplace_back("ACCORD_ELASTIC", "1");
  if (options.trace_path) assigned.emplace_back("ACCORD_TRACE", *options.trace_path);
  if (options.replay_log) assigned.emplace_back("ACCORD_REPLAY_MEMBERSHIP", *options.replay_log);
  // A launcher that starts the whole job names it, so that another job's workers reaching the
  // same master port are refused as such (unless the environment names the job already);
  // --rdzv-id names it on every machine.
  if (options.run_id) {
    assigned.emplace_back("ACCORD_JOB_ID", *options.run_id);
  } else if (!options.join_address && *options.world_size == options.workers &&
             accord::job_id_from_environment().empty()) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    assigned.emplace_back("ACCORD_JOB_ID", "accord-launch:" + std::string(host) + ":" + std::to_string(getpid()));
  }
  const auto is_launcher_variable = [&](std::string_view entry) {
    const auto names = [&](std::string_view name) {
      return entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=';
    };
    return std::any_of(std::begin(launcher_variables), std::end(launcher_variables), names) ||
           std::any_of(assigned.begin(), assigned.end(), [&](const auto& set) { return names(set.first); });
  };
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry)
    if (!is_launcher_variable(*entry)) environment.emplace_back(*entry);
  for (const auto& [name, value] : assigned) environment.push_back(std::string(name) + "=" + value);
  return environment;
}

int find_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t size = sizeof address;
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  const int error = errno;
  if (fd >= 0) close(fd);
  if (!ok) throw std::runtime_error(std::string("cannot find a free port: ") + std::strerror(error));
  return ntohs(address.sin_port);
}

}  // namespace accord::launch
