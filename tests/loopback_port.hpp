#pragma once
// Loopback TCP ports for tests that start processes or probe ports.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace accord::testing {

// A loopback socket bound to a free port, listening (as a live process's control port, which the
// kernel answers even while the process is stopped) or not (as a dead one's); closed when it goes.
struct loopback_port {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  explicit loopback_port(bool listening) {
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port = ntohs(address.sin_port);
    if (listening) REQUIRE(listen(fd, 4) == 0);
  }
  loopback_port(const loopback_port&) = delete;
  loopback_port& operator=(const loopback_port&) = delete;
  ~loopback_port() { close(fd); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

// A port that was free a moment ago, for a rank 0 that others must find.
inline int free_port() { return loopback_port(false).port; }

}  // namespace accord::testing
