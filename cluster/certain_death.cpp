#include "cluster/certain_death.hpp"

#include <cerrno>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace accord {
namespace {

enum class answer { refused, accepted, none };

// Connects one socket to `address` without blocking past `timeout`.
answer try_connect(const addrinfo& address, std::chrono::milliseconds timeout) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) return answer::none;
  answer result = answer::accepted;
  if (connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    const int failed = errno;
    result = failed == ECONNREFUSED ? answer::refused : answer::none;
    pollfd waiting{fd, POLLOUT, 0};
    if (failed == EINPROGRESS && poll(&waiting, 1, static_cast<int>(timeout.count())) == 1) {
      int error = 0;
      socklen_t length = sizeof error;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0)
        result = error == 0 ? answer::accepted : error == ECONNREFUSED ? answer::refused : answer::none;
    }
  }
  close(fd);
  return result;
}

// Whether `address` refuses before `deadline`. A process being killed closes its connections
// before its listening ports, so an accepting port is tried again until the deadline.
bool refused_at(const addrinfo& address, std::chrono::steady_clock::time_point deadline) {
  constexpr auto retry = std::chrono::milliseconds(50);
  for (auto now = std::chrono::steady_clock::now(); now < deadline; now = std::chrono::steady_clock::now()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const answer a = try_connect(address, std::max(left, std::chrono::milliseconds(1)));
    if (a != answer::accepted) return a == answer::refused;
    std::this_thread::sleep_for(retry);
  }
  return false;
}

}  // namespace

std::chrono::milliseconds earliest_verdict(const heartbeat_detector_settings& settings) {
  return std::min(settings.floor, settings.upper_bound);
}

bool closed_in_contact(std::chrono::steady_clock::time_point closed_at,
                       std::optional<std::chrono::steady_clock::time_point> newest_echoed,
                       std::chrono::milliseconds earliest) {
  return newest_echoed && closed_at - *newest_echoed < earliest;
}

bool port_refuses_connection(const std::string& host_port, std::chrono::milliseconds timeout) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = host_port.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), host_port.substr(colon + 1).c_str(), &hints, &found) != 0) return false;
  // Every address the name has must refuse: the process may listen on one of them only.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool refused = found != nullptr;
  for (const addrinfo* a = found; a && refused; a = a->ai_next) refused = refused_at(*a, deadline);
  freeaddrinfo(found);
  return refused;
}

bool majority_remains(int members, int reachable, int known_dead) { return 2 * reachable > members - known_dead; }

std::int64_t heartbeat_time(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::chrono::steady_clock::time_point heartbeat_time_point(std::int64_t nanoseconds) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(nanoseconds)));
}

void heartbeat_contact::heard(std::int64_t sent, std::int64_t echo) {
  heard_sent = sent;
  if (echo == 0) return;
  const auto ours = heartbeat_time_point(echo);
  if (!echoed || ours > *echoed) echoed = ours;
}

}  // namespace accord
