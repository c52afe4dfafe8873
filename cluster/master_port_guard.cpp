#include "cluster/master_port_guard.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <stdexcept>
#include <thread>
#include <vector>

namespace accord {

namespace {

// BASP (CAF 0.17, version 3): operation (1 byte), 2 padding bytes, flags (1), payload length
// (4, network byte order), operation data (8), source and destination actor ids (8 each).
constexpr std::uint8_t client_handshake = 0x01;
constexpr std::uint8_t last_message_type = 0x06;  // heartbeat

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

std::optional<std::string> basp_frame_filter::check_header() {
  const std::uint8_t operation = header_[0];
  if (operation > last_message_type) return "unknown BASP message type " + std::to_string(operation);
  if (!handshaken_ && operation != client_handshake)
    return "BASP message type " + std::to_string(operation) + " before the handshake";
  const std::uint32_t payload = big_endian_u32(header_ + 4);
  const std::uint32_t cap = handshaken_ ? limits_.message_payload : limits_.handshake_payload;
  if (payload > cap)
    return "BASP payload of " + std::to_string(payload) + " bytes exceeds the limit of " + std::to_string(cap);
  handshaken_ = true;
  payload_left_ = payload;
  return std::nullopt;
}

std::optional<std::string> basp_frame_filter::feed(const std::uint8_t* data, std::size_t size) {
  while (size > 0 && !broken_) {
    if (payload_left_ > 0) {
      const std::size_t skip = static_cast<std::size_t>(std::min<std::uint64_t>(payload_left_, size));
      payload_left_ -= skip;
      data += skip, size -= skip;
      continue;
    }
    const std::size_t take = std::min(size, header_size - header_bytes_);
    std::memcpy(header_ + header_bytes_, data, take);
    header_bytes_ += take;
    data += take, size -= take;
    if (header_bytes_ == header_size) {
      header_bytes_ = 0;
      broken_ = check_header();
    }
  }
  return broken_;
}

namespace {

std::string describe_errno(const std::string& what) { return what + ": " + std::strerror(errno); }

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string peer_name(const sockaddr_storage& peer) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (peer.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(peer);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
  } else if (peer.ss_family == AF_INET6) {
    const auto& in = reinterpret_cast<const sockaddr_in6&>(peer);
    inet_ntop(AF_INET6, &in.sin6_addr, host, sizeof host);
    port = ntohs(in.sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// A socket listening on address:port (numeric, v4 or v6).
int listen_on(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string where = address + ":" + std::to_string(port);
  if (const int status = getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found); status != 0)
    throw std::runtime_error("cannot listen on " + where + ": " + gai_strerror(status));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(describe_errno("cannot listen on " + where));
  const int yes = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 128) != 0) {
    const std::string why = describe_errno("cannot listen on " + where);
    close(fd);
    throw std::runtime_error(why);
  }
  set_nonblocking(fd);
  return fd;
}

int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    const int why = errno;
    close(fd);
    errno = why;
    return -1;
  }
  const int yes = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  set_nonblocking(fd);
  return fd;
}

// Bytes read from one side and not yet written to the other; reading stops while it holds any,
// so each direction buffers at most one read.
struct pending_bytes {
  static constexpr std::size_t chunk = 64 * 1024;
  std::vector<std::uint8_t> bytes;
  std::size_t sent = 0;
  bool empty() const { return sent == bytes.size(); }
};

using clock = std::chrono::steady_clock;

struct relay {
  int client = -1;
  int backend = -1;
  std::string peer;
  basp_frame_filter filter;
  pending_bytes to_backend, to_client;
  clock::time_point accepted, last_heard;
  bool client_done = false, backend_done = false;  // end of stream read from that side

  relay(int client_fd, int backend_fd, std::string from, const master_port_limits& limits)
      : client(client_fd), backend(backend_fd), peer(std::move(from)), filter(limits),
        accepted(clock::now()), last_heard(accepted) {}
  ~relay() {
    close(client);
    close(backend);
  }
};

enum class io_result { progress, blocked, closed };

io_result read_into(int fd, pending_bytes& into) {
  into.bytes.resize(pending_bytes::chunk);
  into.sent = 0;
  const ssize_t got = recv(fd, into.bytes.data(), into.bytes.size(), 0);
  into.bytes.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  if (got > 0) return io_result::progress;
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return io_result::blocked;
  return io_result::closed;
}

io_result write_from(int fd, pending_bytes& from) {
  while (!from.empty()) {
    const ssize_t put = send(fd, from.bytes.data() + from.sent, from.bytes.size() - from.sent, MSG_NOSIGNAL);
    if (put < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return io_result::blocked;
      return io_result::closed;
    }
    from.sent += static_cast<std::size_t>(put);
  }
  return io_result::progress;
}

}  // namespace

struct master_port_guard::state {
  master_port_limits limits;
  std::function<void(const std::string&)> on_drop;
  std::vector<int> listeners;
  int wake = -1;  // eventfd: stop accepting (stop_accepting), and with `stopping` drain and stop
  std::atomic<bool> stopping{false};  // set by the destructor before it wakes the thread
  static constexpr std::chrono::seconds drain_time{2};  // eventfd: the destructor stops the thread
  int backend_port = 0;
  int port = 0;
  std::atomic<int> open{0};
  std::list<relay> relays;
  std::thread thread;

  void drop(const std::string& why) {
    if (on_drop) on_drop(why);
  }

  void accept_one(int listener) {
    sockaddr_storage from{};
    socklen_t length = sizeof from;
    const int fd = accept4(listener, reinterpret_cast<sockaddr*>(&from), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    const std::string peer = peer_name(from);
    const int pending = static_cast<int>(
        std::count_if(relays.begin(), relays.end(), [](const relay& r) { return !r.filter.handshaken(); }));
    std::string refusal;
    if (static_cast<int>(relays.size()) >= limits.max_connections)
      refusal = "the limit of " + std::to_string(limits.max_connections) + " connections is reached";
    else if (pending >= limits.max_pending)
      refusal = std::to_string(pending) + " connections are still to send their handshake";
    const int backend = refusal.empty() ? connect_loopback(backend_port) : -1;
    if (refusal.empty() && backend < 0) refusal = describe_errno("the coordinator's port does not answer");
    if (!refusal.empty()) {
      drop("refused a connection from " + peer + ": " + refusal);  // told before the peer sees it
      close(fd);
      return;
    }
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    relays.emplace_back(fd, backend, peer, limits);
  }

  // Moves what can move on one relay; returns the reason to close it, or nullopt to keep it.
  std::optional<std::string> pump(relay& r, short client_events, short backend_events) {
    if (!r.to_backend.empty() && (backend_events & (POLLOUT | POLLERR | POLLHUP)))
      if (write_from(r.backend, r.to_backend) == io_result::closed) return "the coordinator closed the connection";
    if (!r.to_client.empty() && (client_events & (POLLOUT | POLLERR | POLLHUP)))
      if (write_from(r.client, r.to_client) == io_result::closed) return "";  // the peer left
    if (r.to_backend.empty() && !r.client_done && (client_events & (POLLIN | POLLERR | POLLHUP))) {
      const io_result got = read_into(r.client, r.to_backend);
      if (got == io_result::closed) r.client_done = true;
      if (got == io_result::progress) {
        r.last_heard = clock::now();
        if (auto bad = r.filter.feed(r.to_backend.bytes.data(), r.to_backend.bytes.size())) return *bad;
        if (write_from(r.backend, r.to_backend) == io_result::closed) return "the coordinator closed the connection";
      }
    }
    if (r.to_client.empty() && !r.backend_done && (backend_events & (POLLIN | POLLERR | POLLHUP))) {
      const io_result got = read_into(r.backend, r.to_client);
      if (got == io_result::closed) r.backend_done = true;
      if (got == io_result::progress && write_from(r.client, r.to_client) == io_result::closed) return "";
    }
    // One side ended and what it sent has reached the other: done.
    if ((r.client_done && r.to_backend.empty()) || (r.backend_done && r.to_client.empty())) return "";
    const auto now = clock::now();
    if (!r.filter.handshaken() && now - r.accepted > limits.handshake_timeout)
      return "no handshake within " + std::to_string(limits.handshake_timeout.count()) + " ms";
    if (now - r.last_heard > limits.idle_timeout)
      return "silent for " + std::to_string(limits.idle_timeout.count()) + " ms";
    return std::nullopt;
  }

  // Relays until woken; then, accepting no more, until every connection has ended or
  // `drain_time` has passed, so that what the coordinator said last still reaches its workers.
  void run() {
    std::vector<pollfd> fds;
    std::optional<clock::time_point> drain_until;
    for (;;) {
      fds.clear();
      fds.push_back({drain_until ? -1 : wake, POLLIN, 0});  // a negative fd is ignored
      const std::size_t listening = listeners.size();
      for (int listener : listeners) fds.push_back({drain_until ? -1 : listener, POLLIN, 0});
      for (const relay& r : relays) {
        const short client = static_cast<short>((r.to_backend.empty() && !r.client_done ? POLLIN : 0) |
                                                (r.to_client.empty() ? 0 : POLLOUT));
        const short backend = static_cast<short>((r.to_client.empty() && !r.backend_done ? POLLIN : 0) |
                                                 (r.to_backend.empty() ? 0 : POLLOUT));
        fds.push_back({r.client, client, 0});
        fds.push_back({r.backend, backend, 0});
      }
      // Wakes at least every 100 ms to enforce the timeouts.
      if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) return;
      if (fds[0].revents) {
        std::uint64_t signals = 0;
        if (read(wake, &signals, sizeof signals) < 0) {
          // Nothing was pending after all; the listeners close either way.
        }
        // Closed, not just unpolled: the kernel would still complete new connections' handshakes.
        for (int fd : listeners) close(fd);
        listeners.clear();
        if (stopping) drain_until = clock::now() + drain_time;
      }
      std::size_t at = 1 + listening;
      for (auto r = relays.begin(); r != relays.end(); at += 2) {
        const auto verdict = pump(*r, fds[at].revents, fds[at + 1].revents);
        if (!verdict) {
          ++r;
          continue;
        }
        if (!verdict->empty()) drop("closed the connection from " + r->peer + ": " + *verdict);
        r = relays.erase(r);
      }
      if (drain_until && (relays.empty() || clock::now() > *drain_until)) return;
      for (std::size_t l = 0; l < listeners.size(); ++l)
        if (fds[1 + l].revents & POLLIN) accept_one(listeners[l]);
      open = static_cast<int>(relays.size());
    }
  }
};

master_port_guard::master_port_guard(const std::vector<std::string>& bind_addresses, int port, int backend_port,
                                     master_port_limits limits, std::function<void(const std::string&)> on_drop)
    : state_(std::make_unique<state>()) {
  state_->limits = limits;
  state_->on_drop = std::move(on_drop);
  state_->backend_port = backend_port;
  state_->port = port;
  try {
    for (const std::string& address : bind_addresses) {
      state_->listeners.push_back(listen_on(address, state_->port));
      // Port 0: the first address picks a free port, the others listen on the same one.
      sockaddr_storage self{};
      socklen_t length = sizeof self;
      getsockname(state_->listeners.back(), reinterpret_cast<sockaddr*>(&self), &length);
      state_->port = ntohs(self.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(self).sin6_port
                                                      : reinterpret_cast<const sockaddr_in&>(self).sin_port);
    }
    if (state_->listeners.empty()) throw std::runtime_error("master port guard: no address to listen on");
    state_->wake = eventfd(0, EFD_CLOEXEC);
    if (state_->wake < 0) throw std::runtime_error(describe_errno("master port guard: eventfd"));
  } catch (...) {
    for (int fd : state_->listeners) close(fd);
    throw;
  }
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

void master_port_guard::stop_accepting() {
  const std::uint64_t one = 1;
  if (write(state_->wake, &one, sizeof one) < 0) {
    // The thread has ended: it accepts nothing anyway.
  }
}

master_port_guard::~master_port_guard() {
  state_->stopping = true;
  const std::uint64_t one = 1;
  if (write(state_->wake, &one, sizeof one) < 0) {
    // The thread then ends with the process; nothing else can be done here.
  }
  state_->thread.join();
  state_->relays.clear();
  for (int fd : state_->listeners) close(fd);
  close(state_->wake);
}

int master_port_guard::port() const { return state_->port; }

int master_port_guard::open_connections() const { return state_->open; }

std::vector<std::string> master_bind_addresses(const std::string& requested, const std::string& master_addr) {
  if (requested == "0.0.0.0" || requested == "::") return {requested};
  const std::string& name = requested.empty() ? master_addr : requested;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int status = getaddrinfo(name.c_str(), nullptr, &hints, &found); status != 0)
    throw std::runtime_error("cannot resolve " + std::string(requested.empty() ? "master address '" : "--master-bind '") +
                             name + "': " + gai_strerror(status));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
  std::vector<std::string> addresses;
  bool all_loopback = true;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    char host[INET6_ADDRSTRLEN] = "";
    const void* address =
        a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr)
                                : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (!inet_ntop(a->ai_family, address, host, sizeof host)) continue;
    const std::string numeric = host;
    all_loopback = all_loopback && (numeric.rfind("127.", 0) == 0 || numeric == "::1");
    if (std::find(addresses.begin(), addresses.end(), numeric) == addresses.end()) addresses.push_back(numeric);
  }
  if (addresses.empty()) throw std::runtime_error("'" + name + "' resolves to no IP address");
  const bool loopback_name = !requested.empty() || name == "localhost" || name == addresses.front();
  // A host name that resolves to loopback here only (Debian's 127.0.1.1 for the own name) may
  // still be what other machines reach over the network: listen on every interface then.
  if (all_loopback && !loopback_name) return {"0.0.0.0"};
  return addresses;
}

}  // namespace accord
