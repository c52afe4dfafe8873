// The guard in front of rank 0's master port. CAF 0.17's middleman trusts every byte it reads:
// a 32-byte BASP header claiming a 4 GiB payload makes it allocate and touch 4 GiB, and it keeps
// any number of idle connections. So CAF listens on a loopback-only port, and this guard accepts
// on the master port, checks every BASP header (known message type, handshake first, payload
// under a cap) before relaying it, limits the connections and closes those that stall.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accord {

struct master_port_limits {
  // Largest payload of the first frame (the client handshake), and of every later frame.
  std::uint32_t handshake_payload = 1u << 20;
  std::uint32_t message_payload = 1u << 20;
  int max_connections = 64;
  int max_pending = 16;  // connections still to send their handshake
  std::chrono::milliseconds handshake_timeout{10'000};
  std::chrono::milliseconds idle_timeout{120'000};  // nothing received for this long
};

// The frame check on one connection's incoming byte stream (client to rank 0), fed in order.
class basp_frame_filter {
public:
  static constexpr std::size_t header_size = 32;
  explicit basp_frame_filter(const master_port_limits& limits) : limits_(limits) {}
  // Checks `size` more bytes; the first violation returns its reason (and every call after).
  std::optional<std::string> feed(const std::uint8_t* data, std::size_t size);
  bool handshaken() const { return handshaken_; }

private:
  std::optional<std::string> check_header();
  master_port_limits limits_;
  std::uint8_t header_[header_size] = {};
  std::size_t header_bytes_ = 0;
  std::uint64_t payload_left_ = 0;
  bool handshaken_ = false;
  std::optional<std::string> broken_;
};

// Accepts on port at each of bind_addresses (numeric; "0.0.0.0" or "::" for every interface;
// port 0 takes a free one) and relays checked traffic to CAF at 127.0.0.1:backend_port, on its
// own thread until destroyed. Throws std::runtime_error naming the address it cannot listen at.
// The destructor stops accepting and relays on for up to 2 s until every connection has ended:
// destroy CAF's actor system first, so its last messages (and its closing) reach the workers.
// `on_drop` hears one line per refused or closed connection (from the guard's thread).
class master_port_guard {
public:
  master_port_guard(const std::vector<std::string>& bind_addresses, int port, int backend_port, master_port_limits limits,
                    std::function<void(const std::string&)> on_drop = {});
  ~master_port_guard();
  master_port_guard(const master_port_guard&) = delete;
  master_port_guard& operator=(const master_port_guard&) = delete;

  // Closes the listening sockets and relays on: a job that is over stops taking connections
  // before it tells its workers, so that a worker starting the next job on this port waits for
  // that job's rank 0 instead of reaching this one.
  void stop_accepting();

  int port() const;  // the port it listens on
  int open_connections() const;

private:
  struct state;
  std::unique_ptr<state> state_;
};

// Where rank 0 listens for workers (numeric addresses): `requested` (--master-bind; "0.0.0.0" or
// "::" for every interface) when given, else master_addr's own addresses, loopback when every
// rank is local (both 127.0.0.1 and ::1 where "localhost" names both), else the interface the
// workers were told to reach. A host name that resolves to loopback here only (Debian's
// 127.0.1.1) means every interface. Throws std::runtime_error naming what does not resolve.
std::vector<std::string> master_bind_addresses(const std::string& requested, const std::string& master_addr);

}  // namespace accord
