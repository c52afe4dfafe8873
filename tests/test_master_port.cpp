// Rank 0's master port guard (cluster/master_port_guard.hpp): the BASP frame check, connection
// limits and timeouts against a stand-in coordinator, and a real rank 0 given a forged header.
#include <doctest/doctest.h>

#include "loopback_port.hpp"

#include "cluster/master_port_guard.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace accord;
using accord::testing::free_port;

namespace {

std::vector<std::uint8_t> basp_header(std::uint8_t operation, std::uint32_t payload) {
  std::vector<std::uint8_t> h(basp_frame_filter::header_size, 0);
  h[0] = operation;
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<std::uint8_t>(payload >> (24 - 8 * i));
  return h;
}

std::vector<std::uint8_t> frame(std::uint8_t operation, std::uint32_t payload) {
  std::vector<std::uint8_t> f(basp_frame_filter::header_size + payload, 0xab);
  const auto header = basp_header(operation, payload);
  std::copy(header.begin(), header.end(), f.begin());
  return f;
}

constexpr std::uint8_t client_handshake = 1, direct_message = 2, heartbeat = 6;

// A connected TCP socket to 127.0.0.1:port whose receives give up after 20 s, so a guard that
// failed to close a connection fails the test instead of hanging it.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval limit{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0);
  return fd;
}

void send_all(int fd, const std::vector<std::uint8_t>& bytes) {
  REQUIRE(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

// True when the other end closed the connection (rather than the receive timing out).
bool closed_by_peer(int fd) {
  std::array<char, 256> sink{};
  for (;;) {
    const ssize_t got = recv(fd, sink.data(), sink.size(), 0);
    if (got == 0 || (got < 0 && errno == ECONNRESET)) return true;
    if (got < 0) return false;
  }
}

// Stands for CAF's loopback port: accepts, greets and keeps every byte each connection sends,
// connection after connection, on its own thread.
struct stand_in_coordinator {
  int listener = -1;
  int port = 0;
  std::vector<std::vector<std::uint8_t>> received;  // by connection
  std::thread thread;

  stand_in_coordinator() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener, reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0);
    REQUIRE(listen(listener, 64) == 0);
    socklen_t length = sizeof at;
    getsockname(listener, reinterpret_cast<sockaddr*>(&at), &length);
    port = ntohs(at.sin_port);
  }
  void serve(int connections) {
    thread = std::thread([this, connections] {
      for (int i = 0; i < connections; ++i) {
        const int fd = accept(listener, nullptr, nullptr);
        if (fd < 0) return;
        const char greeting[] = "server handshake";
        (void)send(fd, greeting, sizeof greeting, MSG_NOSIGNAL);
        received.emplace_back();
        std::array<std::uint8_t, 4096> buffer{};
        for (ssize_t got; (got = recv(fd, buffer.data(), buffer.size(), 0)) > 0;)
          received.back().insert(received.back().end(), buffer.begin(), buffer.begin() + got);
        close(fd);
      }
    });
  }
  ~stand_in_coordinator() {
    if (thread.joinable()) thread.join();
    close(listener);
  }
};

master_port_limits small_limits() {
  master_port_limits limits;
  limits.handshake_payload = 1024;
  limits.message_payload = 4096;
  limits.max_connections = 3;
  limits.max_pending = 2;
  limits.handshake_timeout = std::chrono::milliseconds(300);
  limits.idle_timeout = std::chrono::milliseconds(600);
  return limits;
}

}  // namespace

TEST_CASE("the BASP frame check passes a handshake and messages under the caps, in any split") {
  std::vector<std::uint8_t> stream;
  for (const auto& f : {frame(client_handshake, 700), frame(heartbeat, 0), frame(direct_message, 4096)})
    stream.insert(stream.end(), f.begin(), f.end());
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{32}, stream.size()}) {
    CAPTURE(piece);
    basp_frame_filter filter(small_limits());
    CHECK_FALSE(filter.handshaken());
    for (std::size_t at = 0; at < stream.size(); at += piece)
      REQUIRE_FALSE(filter.feed(stream.data() + at, std::min(piece, stream.size() - at)));
    CHECK(filter.handshaken());
  }
}

TEST_CASE("the BASP frame check refuses oversized payloads, unknown types and messages before the handshake") {
  auto verdict = [](std::vector<std::vector<std::uint8_t>> frames) {
    basp_frame_filter filter(small_limits());
    std::optional<std::string> reason;
    for (const auto& f : frames)
      if ((reason = filter.feed(f.data(), f.size()))) break;
    return reason.value_or("");
  };
  CHECK(verdict({basp_header(client_handshake, 0xffffffffu)}) ==
        "BASP payload of 4294967295 bytes exceeds the limit of 1024");
  CHECK(verdict({basp_header(client_handshake, 1025)}) == "BASP payload of 1025 bytes exceeds the limit of 1024");
  CHECK(verdict({frame(client_handshake, 10), basp_header(direct_message, 4097)}) ==
        "BASP payload of 4097 bytes exceeds the limit of 4096");
  CHECK(verdict({basp_header(direct_message, 0)}) == "BASP message type 2 before the handshake");
  CHECK(verdict({frame(client_handshake, 0), basp_header(7, 0)}) == "unknown BASP message type 7");
  CHECK(verdict({basp_header(0xff, 0)}) == "unknown BASP message type 255");
}

TEST_CASE("the guard relays checked traffic both ways and drops a forged header") {
  stand_in_coordinator coordinator;
  coordinator.serve(2);
  std::vector<std::string> drops;
  std::vector<std::uint8_t> sent;
  {
    master_port_guard guard({"127.0.0.1"}, 0, coordinator.port, small_limits(),
                            [&](const std::string& line) { drops.push_back(line); });
    auto greeted = [&] {
      const int client = connect_to(guard.port());
      std::array<char, sizeof "server handshake"> greeting{};
      REQUIRE(recv(client, greeting.data(), greeting.size(), MSG_WAITALL) == static_cast<ssize_t>(greeting.size()));
      CHECK(std::string(greeting.data()) == "server handshake");
      return client;
    };
    const int honest = greeted();
    for (const auto& f : {frame(client_handshake, 300), frame(heartbeat, 0), frame(direct_message, 4000)}) {
      send_all(honest, f);
      sent.insert(sent.end(), f.begin(), f.end());
    }
    shutdown(honest, SHUT_WR);
    CHECK(closed_by_peer(honest));
    close(honest);
    const int forger = greeted();
    send_all(forger, basp_header(client_handshake, 0xffffffffu));
    CHECK(closed_by_peer(forger));
    close(forger);
  }
  coordinator.thread.join();
  REQUIRE(coordinator.received.size() == 2);
  CHECK(coordinator.received[0] == sent);
  CHECK(coordinator.received[1].empty());  // nothing of the forged header
  REQUIRE(drops.size() == 1);
  CHECK(drops[0].find("closed the connection from 127.0.0.1:") == 0);
  CHECK(drops[0].find("BASP payload of 4294967295 bytes exceeds the limit of 1024") != std::string::npos);
}

TEST_CASE("the guard refuses connections beyond its limits and closes silent ones") {
  stand_in_coordinator coordinator;  // never accepts: its backlog holds the guard's connections
  std::vector<std::string> drops;
  std::mutex drops_mutex;
  master_port_guard guard({"127.0.0.1"}, 0, coordinator.port, small_limits(), [&](const std::string& line) {
    std::lock_guard lock(drops_mutex);
    drops.push_back(line);
  });
  auto dropped = [&](const std::string& part) {
    std::lock_guard lock(drops_mutex);
    for (const auto& d : drops)
      if (d.find(part) != std::string::npos) return true;
    return false;
  };

  SUBCASE("a third connection without a handshake is refused; the first two time out") {
    const int first = connect_to(guard.port()), second = connect_to(guard.port());
    while (guard.open_connections() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int third = connect_to(guard.port());
    CHECK(closed_by_peer(third));
    CHECK(dropped("2 connections are still to send their handshake"));
    CHECK(closed_by_peer(first));
    CHECK(closed_by_peer(second));
    CHECK(dropped("no handshake within 300 ms"));
    for (int fd : {first, second, third}) close(fd);
  }
  SUBCASE("a fourth connection is refused; a handshaken one that goes silent is closed") {
    std::vector<int> clients;
    for (int i = 0; i < 3; ++i) {
      clients.push_back(connect_to(guard.port()));
      send_all(clients.back(), frame(client_handshake, 16));
      while (guard.open_connections() < i + 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const int fourth = connect_to(guard.port());
    CHECK(closed_by_peer(fourth));
    CHECK(dropped("the limit of 3 connections is reached"));
    for (int fd : clients) CHECK(closed_by_peer(fd));
    CHECK(dropped("silent for 600 ms"));
    for (int fd : clients) close(fd);
    close(fourth);
  }
}

TEST_CASE("rank 0 listens where the job needs it") {
  using list = std::vector<std::string>;
  CHECK(master_bind_addresses("", "127.0.0.1") == list{"127.0.0.1"});
  for (const auto& address : master_bind_addresses("", "localhost"))
    CHECK((address.rfind("127.", 0) == 0 || address == "::1"));
  CHECK(master_bind_addresses("0.0.0.0", "10.1.2.3") == list{"0.0.0.0"});
  CHECK(master_bind_addresses("127.0.0.1", "10.1.2.3") == list{"127.0.0.1"});
  CHECK(master_bind_addresses("", "10.1.2.3") == list{"10.1.2.3"});
  CHECK_THROWS_WITH_AS(master_bind_addresses("", "no-such-host.invalid"),
                       doctest::Contains("cannot resolve master address 'no-such-host.invalid'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(master_port_guard({"10.255.255.1"}, 0, 1, {}), doctest::Contains("cannot listen on 10.255.255.1:0"),
                       std::runtime_error);
}

namespace {

long resident_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = -1;
  while (status >> key)
    if (key == "VmRSS:" && status >> value) return value;
  return -1;
}

}  // namespace

TEST_CASE("a forged 4 GiB handshake header costs a real rank 0 almost nothing") {
  const int port = free_port();
  const std::string log = "master_port_rank0.log";
  const pid_t rank0 = fork();
  REQUIRE(rank0 >= 0);
  if (rank0 == 0) {
    // Rank 0 of 2 waits for a rank 1 that never comes: its master port stays open meanwhile.
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    freopen(log.c_str(), "w", stderr);
    execl(ACCORD_TRAIN_BINARY, ACCORD_TRAIN_BINARY, "--width", "32", "--layers", "1", "--heads", "2", "--context",
          "16", "--steps", "1", "--blas-threads", "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Waits (at most a minute) until rank 0 listens.
  int probe = -1;
  for (int attempt = 0; attempt < 600 && probe < 0; ++attempt) {
    probe = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(probe, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
      close(probe);
      probe = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  REQUIRE(probe >= 0);
  close(probe);
  const long before = resident_kib(rank0);
  const int client = connect_to(port);
  send_all(client, basp_header(client_handshake, 0xffffffffu));
  CHECK(closed_by_peer(client));
  close(client);
  const long after = resident_kib(rank0);
  kill(rank0, SIGKILL);
  waitpid(rank0, nullptr, 0);
  CHECK(before > 0);
  CHECK(after - before < 16 * 1024);
  std::ifstream in(log);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  CHECK(text.find("rank 0: closed the connection from 127.0.0.1:") != std::string::npos);
  CHECK(text.find("BASP payload of 4294967295 bytes exceeds the limit of 1048576") != std::string::npos);
}

TEST_CASE("--master-bind names where rank 0 cannot listen, in one line") {
  auto rank0_with = [](const std::string& bind) {
    const std::string command = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                                " " ACCORD_TRAIN_BINARY " --steps 1 --width 16 --layers 1 --heads 2 --context 8"
                                " --master-bind " + bind + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe);
    std::string text;
    std::array<char, 4096> buffer{};
    while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) text.append(buffer.data(), n);
    const int status = pclose(pipe);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    return text;
  };
  CHECK(rank0_with("10.255.255.1").find("cannot listen on 10.255.255.1:") != std::string::npos);
  CHECK(rank0_with("no-such-host.invalid").find("cannot resolve --master-bind 'no-such-host.invalid'") !=
        std::string::npos);
}
