#pragma once
// UCX (ucp) transport between processes and machines.
//
// Each rank owns one UCX context and one worker, driven only by the threads that call the
// transport: the communicator actor's and, with a channel (transport::open_channel), the
// thread of the worker's collectives in flight. The worker runs in serialized mode: every call
// into it holds one mutex, which a wait releases between progress calls (its spin's yields and
// its sleeps), so both threads' transfers progress while either waits, and nothing progresses
// while neither does. A channel's frames carry bit 46 of the transport tag (its tags must fit
// in 46 bits); the endpoint and its channel share the connections and the byte counts. Connection setup is by sockaddr: every rank listens, rank i
// dials every rank j < i and the two exchange a hello naming rank, world, job and epoch
// (transport/ucx/ucx_wire.hpp), so each pair has exactly one endpoint. Bulk data travels as
// UCX tag messages into the receivers' buffers (eagerly up to two ring pieces, see
// eager_rendezvous_threshold); the UCX tag names sender and transport tag, and every receive
// checks the frame size, so a wrong or stray frame is a transport_error naming the peer.
//
// Shared memory vs tcp: UCX 1.13 uses sysv/posix/cma between processes of one machine only in
// error-handling mode NONE. detect_peer_failure=true selects mode PEER (a dead peer becomes a
// prompt error), which silently restricts UCX to tcp: on loopback ~2.5 GB/s instead of
// ~4-6 GB/s. The default is false: peers on the same machine keep shared-memory bandwidth, a
// closed peer is still reported by the connection manager, and a crashed or hung one by
// operation_timeout. Multi-machine jobs over tcp lose nothing by turning it on.
//
// interrupt(): the wait loop checks the flag between idle sleeps of at most 20 ms on the
// worker's event fd, then cancels the receives in flight and gives up on the sends in flight
// (as when a peer fails), so the blocked call returns promptly and destruction is safe.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace accord {

struct ucx_options {
  // Both sides of every connection must agree; a hello from another job or epoch is refused.
  std::uint64_t job_id = 0;
  std::uint64_t epoch = 0;
  // Setup keeps redialling a peer that is not listening yet until this much time has passed.
  std::chrono::milliseconds connect_timeout{30'000};
  // Longest one blocking send/recv waits; generous because peers may lag by a whole step.
  std::chrono::milliseconds operation_timeout{600'000};
  bool detect_peer_failure = false;
  // UCX_NET_DEVICES for this context only (e.g. "lo", "eth0", "mlx5_0:1"); empty keeps the
  // environment's or UCX's default. Shared-memory transports are not affected by it.
  std::string net_devices;
};

// Largest piece a collective over UCX cuts.
inline constexpr std::size_t ucx_ring_piece_bytes = 1 << 20;

// The UCX_RNDV_THRESH every transport's context sets, or nullopt to keep UCX's choice.
// Over TCP, UCX 1.13 sends frames above 8 KiB by rendezvous: each ring piece waits for a
// request-to-send and a ready-to-receive, and on a slow link with a deep queue those small
// messages wait behind bulk data (30% of DDP's communication per step between 4 ranks on a
// shaped 22 Mbit/s link). Collectives post their receives ahead, so eager pieces land in place;
// shared memory measured no slower eager. Frames above two pieces (a whole model sent at once)
// keep rendezvous, so an early frame is not buffered whole by the receiver. RDMA devices keep
// UCX's zero-copy rendezvous, and the user's UCX_RNDV_THRESH (`user_threshold`) always wins.
std::optional<std::string> eager_rendezvous_threshold(const char* user_threshold, bool rdma_devices);

namespace detail {
struct ucx_worker;
}

class ucx_transport;

// First half of connection setup: this rank's UCX worker listening on `listen_address`
// ("host:port", port 0 picks a free one). Its address() can be published (e.g. through the
// control plane) before the addresses of all ranks are known.
class ucx_listener {
public:
  explicit ucx_listener(const std::string& listen_address, ucx_options options = {});
  ucx_listener(ucx_listener&&) noexcept;
  ucx_listener& operator=(ucx_listener&&) noexcept;
  ~ucx_listener();

  // "host:port" with the port actually bound.
  const std::string& address() const;

  // Second half: connects to every other rank of `addresses` (indexed by rank; this rank's
  // entry is not dialled) and returns the ready transport. Consumes the listener; the transport
  // keeps its address bound and refuses later dials. `epoch`, when given, replaces
  // options.epoch in the hellos: an elastic job creates and publishes the listener before the
  // membership epoch it will connect for is known.
  std::unique_ptr<ucx_transport> connect(int rank, const std::vector<std::string>& addresses,
                                         std::optional<std::uint64_t> epoch = {}) &&;
  // From another thread: a connect() in progress (or to come) throws transport_error naming
  // `why` instead of waiting for peers until connect_timeout.
  void interrupt(const std::string& why);

private:
  std::unique_ptr<detail::ucx_worker> worker_;
  std::shared_ptr<interrupt_flag> setup_interruption_;
};

class ucx_transport final : public transport {
public:
  ~ucx_transport() override;

  int rank() const override;
  int size() const override;
  void send(int peer, std::uint64_t tag, std::span<const std::byte> data) override;
  void recv(int peer, std::uint64_t tag, std::span<std::byte> data) override;
  // Posts the receive and the send at once: rendezvous sends wait for their receiver, so
  // "send, then receive" would deadlock a ring.
  void send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                 std::uint64_t tag) override;
  // ucp_tag_send_nbx / ucp_tag_recv_nbx; wait() drives the worker until the request is done.
  request post_send(int peer, std::uint64_t tag, std::span<const std::byte> data) override;
  request post_recv(int peer, std::uint64_t tag, std::span<std::byte> data) override;
  void wait(request handle) override;
  // Progresses the worker once and checks the request (or its peer's failure).
  bool settled(request handle) override;
  transfer_stats stats() const override;
  // Large pieces keep per-piece costs (a message, a wake-up, a rendezvous round trip where one
  // is used) small next to the data; the pipeline hides the rest.
  std::size_t ring_piece_bytes() const override { return ucx_ring_piece_bytes; }

  // "host:port" this rank dialled or accepted for `peer`.
  const std::string& peer_address(int peer) const;

protected:
  std::shared_ptr<transport> make_channel() override;

private:
  friend class ucx_listener;
  explicit ucx_transport(std::unique_ptr<detail::ucx_worker> worker);
  ucx_transport(std::shared_ptr<detail::ucx_worker> worker, int lane);
  // Shared with the channel; torn down (or retired) when the last of the two goes.
  std::shared_ptr<detail::ucx_worker> worker_;
  int lane_;  // 0: the endpoint, 1: its channel
};

// One rank of a multi-process job: listens on addresses[rank] and connects to the others.
std::unique_ptr<ucx_transport> connect_ucx_rank(int rank, const std::vector<std::string>& addresses,
                                                const ucx_options& options = {});

// `world` ranks in this process on 127.0.0.1 (ephemeral ports, set up concurrently on one
// thread per rank), for tests and benchmarks. Unless options.net_devices or the environment's
// UCX_NET_DEVICES says otherwise, UCX is kept on "lo": it would otherwise add an eth0 rail even
// for 127.0.0.1.
std::vector<std::unique_ptr<transport>> make_ucx_loopback_group(int world, ucx_options options = {});

}  // namespace accord
