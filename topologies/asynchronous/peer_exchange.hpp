#pragma once
// One thread that owns a transport between processes and serves every peer at once, for the
// asynchronous topologies (no global barrier: any peer may send at any time). It keeps one
// receive posted per peer for each kind of message, hands each arrival to the kind's handler
// on its own thread, and sends what any thread queues. One thread because a UCX worker is
// driven by one thread at a time (transport/ucx/ucx_transport.hpp); it polls the transfers
// (transport::settled) instead of blocking on one. A message to this process's own rank goes
// to the handler without the transport.
#include "transport/transport.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace accord {

class peer_exchange {
public:
  struct kind {
    std::uint64_t tag = 0;
    std::function<std::size_t(int from)> size;  // bytes of this kind's messages from `from`
    std::function<void(int from, std::span<const std::byte> message)> on_message;
  };
  // `on_failure` runs once, on the exchange's thread, when the transport fails (a peer lost,
  // interrupted); the exchange then stops.
  peer_exchange(std::shared_ptr<transport> link, std::vector<kind> kinds,
                std::function<void(const std::string&)> on_failure);
  ~peer_exchange();
  // Starts serving (the handlers may send through this exchange from then on).
  void start();
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Queues a message; any thread.
  void send(int to, std::uint64_t tag, std::vector<std::byte> message);
  // Once no more messages are expected from anyone: sends what is queued, tells every peer,
  // waits until every peer told it the same (so no peer leaves while another still expects
  // something of it), then ends the thread (cancelling the receives still posted). Returns the
  // failure, if the exchange failed.
  std::optional<std::string> finish();
  // Ends the thread at once (after a failure elsewhere). Any thread.
  void stop(const std::string& why);

private:
  void run();
  void serve();
  void cancel_receives(const std::string& why);
  void close(int byes);
  // The peers' closing notices travel under this tag (below the 47 bits a UCX frame tag carries).
  static constexpr std::uint64_t bye_tag = std::uint64_t{1} << 40;
  // A receive already waited for (a peer's notice).
  static constexpr transport::request done_handle = ~transport::request{0};

  std::shared_ptr<transport> link_;
  std::vector<kind> kinds_;
  std::function<void(const std::string&)> on_failure_;
  int rank_, size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct outgoing {
    int to;
    std::uint64_t tag;
    std::vector<std::byte> message;
  };
  std::vector<outgoing> outbox_;
  bool finishing_ = false;
  std::optional<std::string> stopped_;   // why, once stopped or failed
  std::optional<std::string> failure_;
  // The exchange thread's transfers; their buffers outlive the thread (a failed transport may
  // have given up on a send that UCX still reads).
  struct receive {
    int from;
    std::size_t kind;
    std::vector<std::byte> buffer;
    transport::request handle;
  };
  struct sending {
    std::vector<std::byte> message;
    transport::request handle;
  };
  std::vector<receive> receives_;
  std::vector<sending> sends_;
  std::thread thread_;
};

// Messages: a fixed, trivially copyable header, then floats (or counts).
template <class Header>
std::vector<std::byte> header_then(const Header& header, std::span<const std::byte> payload) {
  std::vector<std::byte> message(sizeof(Header) + payload.size());
  std::memcpy(message.data(), &header, sizeof(Header));
  if (!payload.empty()) std::memcpy(message.data() + sizeof(Header), payload.data(), payload.size());
  return message;
}
template <class Header>
std::vector<std::byte> message_of(const Header& header, std::span<const float> values = {}) {
  return header_then(header, std::as_bytes(values));
}
template <class Header>
std::vector<std::byte> message_of(const Header& header, std::span<const std::uint64_t> counts) {
  return header_then(header, std::as_bytes(counts));
}
inline std::vector<std::uint64_t> counts_of(std::span<const std::byte> message, std::size_t header_bytes) {
  std::vector<std::uint64_t> counts((message.size() - header_bytes) / sizeof(std::uint64_t));
  if (!counts.empty()) std::memcpy(counts.data(), message.data() + header_bytes, counts.size() * sizeof(std::uint64_t));
  return counts;
}
template <class Header>
Header header_of(std::span<const std::byte> message) {
  Header header;
  std::memcpy(&header, message.data(), sizeof(Header));
  return header;
}
inline std::span<const float> values_of(std::span<const std::byte> message, std::size_t header_bytes) {
  return {reinterpret_cast<const float*>(message.data() + header_bytes), (message.size() - header_bytes) / sizeof(float)};
}

}  // namespace accord
