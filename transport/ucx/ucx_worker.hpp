#pragma once
// Inside the UCX backend (ucx_transport.hpp is its public face): one rank's UCX context and
// worker, shared by the endpoint and its channel, and the helpers its parts share. Each part
// lives in a file of its own:
//   ucx_context.cpp      context and worker setup (options, devices, thresholds), teardown
//   ucx_connection.cpp   the sockaddr listener and connection setup (the hello handshake)
//   ucx_frames.cpp       posting validated frames: peers, tags, sizes
//   ucx_requests.cpp     the lanes' requests in flight, the wait and progress loop
//   ucx_transport.cpp    the public classes over it: listener, endpoint and channel lanes
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "transport/ucx/ucx_transport.hpp"
#include "transport/ucx/ucx_wire.hpp"

namespace accord::detail {

// Helpers of the backend's files; a namespace of their own keeps their short names apart from
// the rest of accord::detail.
namespace ucx {

using steady = std::chrono::steady_clock;

// Ranks share cores with each other and with compute, so an idle wait gives its core away:
// it spins, yielding the core at every turn, then sleeps on the worker's event fd. Yielding
// turns cost next to nothing when another thread or rank wants the core (it runs instead), and
// when none does they poll at once for the next frame: pieces of a pipelined collective arrive
// every ~100 us over shared memory, and a sleep and wake-up between them cost more CPU than the
// turns (2 ranks, 1 MiB all-reduce: 0.27 instead of 0.44 CPU ns per byte with a 20 us spin per
// wake-up that did not yield; 3 ranks on 2 cores: 0.63 instead of 1.05). The spin is bounded in
// time per wait, not per wake-up nor in turns: over TCP every turn is an epoll_wait system call,
// and on a slow link a wait wakes for every few segments; 200 turns per wake-up took the
// communicator 1.1 CPU-s per 20 steps (2 ranks, 60 Mbit/s), CPU that ACCO's compute needs.
inline constexpr auto idle_spin = std::chrono::microseconds(100);
inline constexpr int max_sleep_ms = 20;

template <auto destroy>
struct handle_deleter {
  template <class T>
  void operator()(T* handle) const { destroy(handle); }
};
using context_ptr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, handle_deleter<ucp_cleanup>>;
using worker_ptr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, handle_deleter<ucp_worker_destroy>>;
using listener_ptr = std::unique_ptr<std::remove_pointer_t<ucp_listener_h>, handle_deleter<ucp_listener_destroy>>;

// One UCX endpoint; the error callback writes into it, so it never moves.
struct link {
  std::string address;
  ucp_ep_h endpoint = nullptr;
  ucs_status_t failure = UCS_OK;
};

// Throws transport_error "ucx: <what> failed: <status>" unless `status` is UCS_OK.
void check(ucs_status_t status, const std::string& what);
// A request handle from a *_nbx call: null when it completed immediately.
void* posted(ucs_status_ptr_t request, const std::string& what);
// Status of a stream or plain request, freeing it once done; UCS_OK for an immediate completion.
ucs_status_t poll_request(void*& request);
// "1.5 s", for messages.
std::string seconds(std::chrono::milliseconds duration);

struct socket_address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};
// "host:port" (host a name, an IPv4 or a bracketed IPv6 address) resolved; std::invalid_argument
// naming the address when it is malformed or unknown.
socket_address resolve(const std::string& address);

}  // namespace ucx

struct ucx_worker {
  using steady = ucx::steady;
  using link = ucx::link;

  // --- context and worker (ucx_context.cpp) ---
  ucx_options options;
  ucx::context_ptr context;
  ucx::worker_ptr worker;
  // Lives as long as the worker: a dial whose TCP connection UCX 1.13 accepted but whose connect
  // data it has not read yet survives ucp_listener_destroy, and once the data comes its request
  // goes to the destroyed listener (use after free: a segfault in ucp_worker_progress). So
  // the listener goes only right before the worker, with no progress in between.
  ucx::listener_ptr listener;
  int event_fd = -1;

  // --- listener and connection setup (ucx_connection.cpp) ---
  std::string listen_address;
  // Dials queue here while connect() waits for its peers; afterwards every dial is a stray,
  // refused as it arrives.
  bool accepting = true;
  std::vector<ucp_conn_request_h> connection_requests;

  int rank = -1;
  int world = 0;
  std::vector<std::unique_ptr<link>> links;  // every endpoint created, failed dials included
  std::vector<link*> peers;                  // by rank; null for this rank
  std::vector<std::string> peer_addresses;
  // The handshake's requests and the buffers they read and write. Members, not locals of
  // connect(): when connect() throws (interrupted, timed out) they stay posted (see `retire`).
  struct dial {
    int peer = -1;
    link* current = nullptr;
    void* hello_send = nullptr;
    void* answer_receive = nullptr;
    ucx_wire::hello_frame answer{};
    std::size_t answer_length = 0;
    bool answered = false;
    steady::time_point next_attempt{};
    std::string last_error = "no answer";
  };
  struct accepted {
    link* current = nullptr;
    void* hello_receive = nullptr;
    void* answer_send = nullptr;
    ucx_wire::hello_frame hello{};
    std::size_t hello_length = 0;
    int peer = -1;  // known once its hello arrived
  };
  ucx_wire::hello_frame my_hello{};
  std::vector<dial> dials;  // sized once per connect(): its elements never move
  std::vector<std::unique_ptr<accepted>> accepts;

  // --- the whole rank's state, both lanes' ---
  std::string broken;  // why the transport became unusable, empty while healthy
  bool connected = false;  // connect() finished: the teardown may flush-close
  // The listener's, while connecting: another thread may give up on a peer that never comes.
  std::shared_ptr<interrupt_flag> setup_interruption = std::make_shared<interrupt_flag>();

  std::atomic<std::uint64_t> bytes_sent{0};
  std::atomic<std::uint64_t> bytes_received{0};
  std::atomic<std::uint64_t> messages_sent{0};

  // Opens the context and the worker (ucx_context.cpp), then listens on `address`.
  ucx_worker(const std::string& address, ucx_options opts);
  ~ucx_worker();
  // Whether the destructor's flush-close may run (see `retire`).
  bool safe_to_destroy() const;

  // Listening and connecting (ucx_connection.cpp).
  void listen(const std::string& address, const ucx::socket_address& bind_address);
  void connect(int my_rank, const std::vector<std::string>& addresses);
  void refuse_dials();

  std::string who() const { return "ucx rank " + std::to_string(rank) + ": "; }
  std::string describe_peer(int peer) const {
    return "peer " + std::to_string(peer) + " (" + peer_addresses[static_cast<std::size_t>(peer)] + ")";
  }
  link& new_link(std::string address) {
    links.push_back(std::make_unique<link>());
    links.back()->address = std::move(address);
    return *links.back();
  }
  ucp_ep_params_t endpoint_params(link& l) const;
  // Flush-closes (the peer sees an orderly disconnect) or, for a failed link, drops the
  // endpoint; returns the close request while it is still completing (ucx_context.cpp).
  void* close(link& l, bool flush);
  void drop(void*& request) {
    if (request) ucp_request_free(request);
    request = nullptr;
  }
  void drop_receive(void*& request) {
    if (request) ucp_request_cancel(worker.get(), request);
    drop(request);
  }

  // --- the lanes' requests and waits (ucx_requests.cpp) ---
  // Progresses the worker; when nothing happened, spins (yielding) until `spin_until`, then
  // sleeps on the event fd until something happens, `until` or at most max_sleep_ms.
  // With `held` (the lock on `mutex` of a transport's call), the spin's yields and the sleep
  // release it, so that the other lane's thread may progress the worker meanwhile.
  void progress(steady::time_point until, steady::time_point spin_until, std::unique_lock<std::mutex>* held = nullptr);
  void progress(steady::time_point until) { progress(until, steady::now() + ucx::idle_spin); }

  struct operation {
    void* request = nullptr;
    bool is_receive = false;
    bool finished = false;
    int peer = -1;
    std::uint64_t tag = 0;
    std::size_t bytes = 0;
  };
  // The endpoint's traffic (lane 0) and its channel's (lane 1, transport::open_channel): each
  // driven by one thread, both through this worker. Every call of a transport into the worker
  // holds `mutex` (UCS_THREAD_MODE_SERIALIZED: one thread at a time), which waits release
  // between progress calls.
  struct lane {
    std::map<std::uint64_t, operation> in_flight;  // posted, not yet waited for, by request handle
    std::uint64_t next_request = 0;
    const interrupt_flag* interruption = nullptr;  // its transport's
    std::uint64_t tag_bit = 0;  // in its frames' tags: 0, or channel_tag_bit
  };
  static constexpr std::uint64_t channel_tag_bit = 1ull << 46;  // the top bit of a frame's transport tag
  lane lanes[2];
  std::mutex mutex;
  bool endpoint_interrupted = false;  // recorded when the endpoint went before its channel

  // Waits for the lane's operations `handles`. A frame of the wrong size fails its receive but
  // the transport stays usable unless other operations were in flight; a failed or silent peer
  // abandons everything in flight on the lane.
  void wait(lane& caller, std::span<const std::uint64_t> handles, std::unique_lock<std::mutex>& held);
  // Whether wait({handle}) would return at once; progresses the worker once.
  bool settled(lane& caller, std::uint64_t handle);
  operation& in_flight_operation(lane& caller, std::uint64_t handle);
  // Cancels the lane's receives in flight and gives up on its sends (UCX may still read their
  // buffers, so the transport becomes unusable), then throws `message`.
  [[noreturn]] void abandon(lane& caller, const std::string& message);
  void abandon_in_flight(lane& caller, const std::string& message);

  // --- validated frames (ucx_frames.cpp) ---
  link& checked_peer(const lane& caller, int peer, std::uint64_t tag);
  // Post a send or a receive; what goes wrong (a bad peer, an interrupted transport) abandons
  // everything in flight on the lane, then throws.
  std::uint64_t post_send(lane& caller, int peer, std::uint64_t tag, std::span<const std::byte> data);
  std::uint64_t post_receive(lane& caller, int peer, std::uint64_t tag, std::span<std::byte> data);
  template <class Post>
  std::uint64_t post(lane& caller, Post post_operation);
  // Validates a completed operation and counts its bytes; returns what is wrong with it, if anything.
  std::string finish(operation& op, ucs_status_t status, std::size_t received);
  // What a peer sent instead of the awaited frame, if anything is queued from it.
  std::string unexpected_frame_from(int peer);
};

// Destroys `worker` unless its teardown could crash UCX (see ucx_context.cpp), in which case it
// stays alive, never progressed again.
void retire(std::unique_ptr<ucx_worker> worker);

}  // namespace accord::detail
