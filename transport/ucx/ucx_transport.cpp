#include "transport/ucx/ucx_transport.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/stat.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "transport/ucx/ucx_wire.hpp"

namespace accord {
namespace {

using steady = std::chrono::steady_clock;

struct address_parts {
  std::string host;
  std::string port;
};

address_parts split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw std::invalid_argument("ucx address '" + address + "': expected host:port");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (error != std::errc{} || end != port.data() + port.size() || value > 65535)
    throw std::invalid_argument("ucx address '" + address + "': port '" + port + "' is not 0..65535");
  return {host, port};
}

struct socket_address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

socket_address resolve(const std::string& address) {
  const address_parts parts = split_address(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(parts.host.c_str(), parts.port.c_str(), &hints, &found); rc != 0)
    throw std::invalid_argument("ucx address '" + address + "': " + gai_strerror(rc));
  socket_address result;
  std::memcpy(&result.storage, found->ai_addr, found->ai_addrlen);
  result.length = found->ai_addrlen;
  freeaddrinfo(found);
  return result;
}

std::string numeric_host(const sockaddr* address, socklen_t length, std::string* port = nullptr) {
  char host[NI_MAXHOST] = "?";
  char service[NI_MAXSERV] = "?";
  getnameinfo(address, length, host, sizeof host, service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV);
  if (port) *port = service;
  return host;
}

std::string format_address(const sockaddr_storage& address) {
  std::string port;
  const std::string host = numeric_host(reinterpret_cast<const sockaddr*>(&address), sizeof address, &port);
  return address.ss_family == AF_INET6 ? "[" + host + "]:" + port : host + ":" + port;
}

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out.precision(3);
  out << std::chrono::duration<double>(duration).count() << " s";
  return out.str();
}

void check(ucs_status_t status, const std::string& what) {
  if (status != UCS_OK) throw transport_error("ucx: " + what + " failed: " + ucs_status_string(status));
}

// UCX only warns about a network device it does not have, then never connects (the peers wait
// for the connect timeout): refuse such a UCX_NET_DEVICES at once, naming the device.
void check_net_devices(const std::string& devices) {
  if (devices.empty() || devices == "all") return;
  std::istringstream items(devices);
  for (std::string item; std::getline(items, item, ',');) {
    const std::string name = item.substr(0, item.find(':'));  // "mlx5_0:1" is port 1 of mlx5_0
    struct stat info {};
    if (name.empty() || if_nametoindex(name.c_str()) != 0 ||
        stat(("/sys/class/infiniband/" + name).c_str(), &info) == 0)
      continue;
    throw transport_error("ucx: UCX_NET_DEVICES=" + devices + ": this machine has no network device '" + name +
                          "' (ucx_info -d lists the devices)");
  }
}

// The UCX variables that decide which transports exist, as "UCX_TLS=..., " for messages.
std::string transport_variables() {
  std::string set;
  for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES"})
    if (const char* value = std::getenv(name)) set += std::string(name) + "=" + value + ", ";
  return set;
}

bool rdma_devices_present() {
  std::error_code ignored;
  return std::filesystem::directory_iterator("/sys/class/infiniband", ignored) != std::filesystem::directory_iterator();
}

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
constexpr auto idle_spin = std::chrono::microseconds(100);
constexpr int max_sleep_ms = 20;
constexpr auto redial_delay = std::chrono::milliseconds(100);
// A flush-close completes only once the peer's worker acknowledges it. Peers closing at about
// the same time answer within milliseconds; one that is busy or destroyed later on the same
// thread must not stall our teardown (it sees the disconnect either way).
constexpr auto close_timeout = std::chrono::milliseconds(50);
// Cancelling a receive that already matched a rendezvous frame waits for the transfer to stop.
constexpr auto cancel_timeout = std::chrono::seconds(1);

template <auto destroy>
struct handle_deleter {
  template <class T>
  void operator()(T* handle) const { destroy(handle); }
};
using config_ptr = std::unique_ptr<ucp_config_t, handle_deleter<ucp_config_release>>;
using context_ptr = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, handle_deleter<ucp_cleanup>>;
using worker_ptr = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, handle_deleter<ucp_worker_destroy>>;
using listener_ptr = std::unique_ptr<std::remove_pointer_t<ucp_listener_h>, handle_deleter<ucp_listener_destroy>>;

// One UCX endpoint; the error callback writes into it, so it never moves.
struct link {
  std::string address;
  ucp_ep_h endpoint = nullptr;
  ucs_status_t failure = UCS_OK;
};

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) { static_cast<link*>(arg)->failure = status; }

// A request handle from a *_nbx call: null when it completed immediately.
void* posted(ucs_status_ptr_t request, const std::string& what) {
  if (UCS_PTR_IS_ERR(request)) check(UCS_PTR_STATUS(request), what);
  return request;
}

// Status of a stream or plain request, freeing it once done; UCS_OK for an immediate completion.
ucs_status_t poll_request(void*& request) {
  if (!request) return UCS_OK;
  const ucs_status_t status = ucp_request_check_status(request);
  if (status != UCS_INPROGRESS) {
    ucp_request_free(request);
    request = nullptr;
  }
  return status;
}

}  // namespace

std::optional<std::string> eager_rendezvous_threshold(const char* user_threshold, bool rdma_devices) {
  if (user_threshold || rdma_devices) return std::nullopt;
  return std::to_string(2 * ucx_ring_piece_bytes);
}

namespace detail {

struct ucx_worker {
  ucx_options options;
  context_ptr context;
  worker_ptr worker;
  // Lives as long as the worker: a dial whose TCP connection UCX 1.13 accepted but whose connect
  // data it has not read yet survives ucp_listener_destroy, and once the data comes its request
  // goes to the destroyed listener (use after free: a segfault in ucp_worker_progress). So
  // the listener goes only right before the worker, with no progress in between.
  listener_ptr listener;
  int event_fd = -1;
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
  // Whether the destructor's flush-close may run (see `retire`).
  bool safe_to_destroy() const;
  std::string broken;  // why the transport became unusable, empty while healthy
  bool connected = false;  // connect() finished: the teardown may flush-close
  // The listener's, while connecting: another thread may give up on a peer that never comes.
  std::shared_ptr<interrupt_flag> setup_interruption = std::make_shared<interrupt_flag>();

  std::atomic<std::uint64_t> bytes_sent{0};
  std::atomic<std::uint64_t> bytes_received{0};
  std::atomic<std::uint64_t> messages_sent{0};

  ucx_worker(const std::string& address, ucx_options opts);
  ~ucx_worker();
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
  ucp_ep_params_t endpoint_params(link& l) const {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = options.detect_peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = on_endpoint_error;
    params.err_handler.arg = &l;
    return params;
  }
  // Flush-closes (the peer sees an orderly disconnect) or, for a failed link, drops the
  // endpoint; returns the close request while it is still completing.
  void* close(link& l, bool flush);
  void drop(void*& request) {
    if (request) ucp_request_free(request);
    request = nullptr;
  }
  void drop_receive(void*& request) {
    if (request) ucp_request_cancel(worker.get(), request);
    drop(request);
  }
  // Progresses the worker; when nothing happened, spins (yielding) until `spin_until`, then
  // sleeps on the event fd until something happens, `until` or at most max_sleep_ms.
  // With `held` (the lock on `mutex` of a transport's call), the spin's yields and the sleep
  // release it, so that the other lane's thread may progress the worker meanwhile.
  void progress(steady::time_point until, steady::time_point spin_until, std::unique_lock<std::mutex>* held = nullptr);
  void progress(steady::time_point until) { progress(until, steady::now() + idle_spin); }

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
  bool channel_open = false;
  bool endpoint_interrupted = false;  // recorded when the endpoint went before its channel

  link& checked_peer(const lane& caller, int peer, std::uint64_t tag);
  // Post a send or a receive; what goes wrong (a bad peer, an interrupted transport) abandons
  // everything in flight on the lane, then throws.
  std::uint64_t post_send(lane& caller, int peer, std::uint64_t tag, std::span<const std::byte> data);
  std::uint64_t post_receive(lane& caller, int peer, std::uint64_t tag, std::span<std::byte> data);
  template <class Post>
  std::uint64_t post(lane& caller, Post post_operation);
  std::string finish(operation& op, ucs_status_t status, std::size_t received);
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
  std::string unexpected_frame_from(int peer);
};

ucx_worker::ucx_worker(const std::string& address, ucx_options opts) : options(std::move(opts)) {
  const socket_address bind_address = resolve(address);

  ucp_config_t* raw_config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &raw_config), "ucp_config_read");
  config_ptr config(raw_config);
  if (!options.net_devices.empty())
    check(ucp_config_modify(config.get(), "NET_DEVICES", options.net_devices.c_str()),
          "setting UCX_NET_DEVICES=" + options.net_devices);
  if (const auto threshold = eager_rendezvous_threshold(std::getenv("UCX_RNDV_THRESH"), rdma_devices_present()))
    check(ucp_config_modify(config.get(), "RNDV_THRESH", threshold->c_str()), "setting UCX_RNDV_THRESH=" + *threshold);
  // Lets a restarted job bind its fixed port again while the old one is in TIME-WAIT.
  check(ucp_config_modify(config.get(), "CM_REUSEADDR", "y"), "setting UCX_CM_REUSEADDR=y");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // Tag matching puts each frame straight into the receiver's buffer with a size check; the
  // stream carries the per-endpoint hello; wakeup lets idle waits sleep.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
  ucp_context_h raw_context = nullptr;
  check_net_devices(!options.net_devices.empty() ? options.net_devices
                    : std::getenv("UCX_NET_DEVICES") ? std::getenv("UCX_NET_DEVICES")
                                                      : "");
  if (const ucs_status_t status = ucp_init(&params, config.get(), &raw_context); status != UCS_OK)
    throw transport_error("ucx: no usable UCX transport (" + transport_variables() + "ucp_init: " +
                          ucs_status_string(status) + "; ucx_info -d lists what this machine has)");
  context.reset(raw_context);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time (setup may run on another thread than the communicator).
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h raw_worker = nullptr;
  check(ucp_worker_create(context.get(), &worker_params, &raw_worker), "ucp_worker_create");
  worker.reset(raw_worker);
  check(ucp_worker_get_efd(worker.get(), &event_fd), "ucp_worker_get_efd");

  ucp_listener_params_t listener_params{};
  listener_params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  listener_params.sockaddr.addr = bind_address.get();
  listener_params.sockaddr.addrlen = bind_address.length;
  listener_params.conn_handler.cb = [](ucp_conn_request_h request, void* self) {
    ucx_worker& me = *static_cast<ucx_worker*>(self);
    if (me.accepting)
      me.connection_requests.push_back(request);
    else
      ucp_listener_reject(me.listener.get(), request);
  };
  listener_params.conn_handler.arg = this;
  ucp_listener_h raw_listener = nullptr;
  if (const ucs_status_t status = ucp_listener_create(worker.get(), &listener_params, &raw_listener); status != UCS_OK)
    throw transport_error("ucx: cannot listen on " + address + ": " + ucs_status_string(status));
  listener.reset(raw_listener);

  ucp_listener_attr_t attributes{};
  attributes.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  check(ucp_listener_query(listener.get(), &attributes), "ucp_listener_query");
  std::string port;
  numeric_host(reinterpret_cast<const sockaddr*>(&attributes.sockaddr), sizeof attributes.sockaddr, &port);
  const address_parts requested = split_address(address);
  listen_address = (requested.host.find(':') != std::string::npos ? "[" + requested.host + "]" : requested.host) +
                   ":" + port;
}

void ucx_worker::refuse_dials() {
  accepting = false;
  for (ucp_conn_request_h request : connection_requests) ucp_listener_reject(listener.get(), request);
  connection_requests.clear();
}

ucx_worker::~ucx_worker() {
  refuse_dials();
  // Deliver pending endpoint errors first, then flush-close healthy endpoints so peers see an
  // orderly disconnect; failed ones are dropped.
  while (ucp_worker_progress(worker.get()) != 0) {
  }
  std::vector<void*> closing;
  for (auto& l : links)
    if (void* request = close(*l, l->failure == UCS_OK)) closing.push_back(request);
  const auto deadline = steady::now() + close_timeout;
  while (!closing.empty()) {
    std::erase_if(closing, [](void* request) { return poll_request(request) != UCS_INPROGRESS; });
    if (closing.empty() || steady::now() >= deadline) break;
    progress(deadline);
  }
  for (void* request : closing) ucp_request_free(request);
  listener.reset();  // then the worker, without progress in between (see `listener`)
  worker.reset();    // before the members its requests may still point into (`dials`, `accepts`)
}

bool ucx_worker::safe_to_destroy() const {
  const interrupt_flag* interruption = lanes[0].interruption;
  return links.empty() ||
         (connected && broken.empty() && !endpoint_interrupted && !(interruption && interruption->raised()));
}

void retire(std::unique_ptr<ucx_worker> worker) {
  if (!worker || worker->safe_to_destroy()) return;
  // A failed or unfinished setup, or a transport that gave up on operations: its teardown would
  // have to progress the worker, and UCX 1.13 may then deliver a message for an endpoint closed
  // during the failure and abort the process (ucp_worker_get_ep_by_id: "(*ep_p)->worker ==
  // worker"), or finish a send given up on from a buffer its owner has freed; without progress,
  // closing aborts on the pending requests. So the worker stays, never progressed again, with
  // the buffers its requests point into; its peers see the connections drop when this process
  // ends. One per failed epoch.
  static std::mutex guard;
  static auto* retired = new std::vector<ucx_worker*>();  // reachable: not a leak to sanitizers
  const std::lock_guard lock(guard);
  retired->push_back(worker.release());
}

void ucx_worker::progress(steady::time_point until, steady::time_point spin_until, std::unique_lock<std::mutex>* held) {
  do {
    if (ucp_worker_progress(worker.get()) != 0) return;
    if (held) held->unlock();
    sched_yield();
    if (held) held->lock();
  } while (steady::now() < spin_until);
  // UCS_ERR_BUSY: events arrived meanwhile, progress again (also runs in the destructor, so no throw).
  if (ucp_worker_arm(worker.get()) != UCS_OK) return;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - steady::now()).count();
  pollfd waiting{event_fd, POLLIN, 0};
  // Two lanes may both sleep here; whichever progresses first takes the events, and the other
  // wakes within max_sleep_ms at worst.
  if (held) held->unlock();
  poll(&waiting, 1, static_cast<int>(std::clamp<long long>(left, 0, max_sleep_ms)));
  if (held) held->lock();
}

void* ucx_worker::close(link& l, bool flush) {
  if (!l.endpoint) return nullptr;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t request = ucp_ep_close_nbx(l.endpoint, &param);
  l.endpoint = nullptr;
  return UCS_PTR_IS_ERR(request) ? nullptr : request;
}

void ucx_worker::connect(int my_rank, const std::vector<std::string>& addresses) {
  const int size = static_cast<int>(addresses.size());
  if (size < 1 || size > ucx_wire::max_world)
    throw std::invalid_argument("ucx: " + std::to_string(size) + " addresses, expected 1.." +
                                std::to_string(ucx_wire::max_world));
  if (my_rank < 0 || my_rank >= size)
    throw std::invalid_argument("ucx: rank " + std::to_string(my_rank) + " outside 0.." + std::to_string(size - 1));
  rank = my_rank;
  world = size;
  peers.assign(static_cast<std::size_t>(world), nullptr);
  peer_addresses = addresses;
  peer_addresses[static_cast<std::size_t>(rank)] = listen_address;

  const ucx_wire::hello mine{ucx_wire::protocol_version, rank, world, options.job_id, options.epoch};
  my_hello = ucx_wire::encode(mine);
  const auto hello_problem = [&](const ucx_wire::hello_frame& frame) { return ucx_wire::hello_problem(frame, mine); };
  dials.assign(static_cast<std::size_t>(rank), {});
  for (int j = 0; j < rank; ++j) dials[static_cast<std::size_t>(j)].peer = j;
  accepts.clear();

  ucp_request_param_t stream_receive{};
  stream_receive.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  stream_receive.flags = UCP_STREAM_RECV_FLAG_WAITALL;
  ucp_request_param_t stream_send{};

  const auto deadline = steady::now() + options.connect_timeout;
  for (;;) {
    const auto now = steady::now();
    for (dial& d : dials) {
      const std::string& address = addresses[static_cast<std::size_t>(d.peer)];
      if (!d.current && now >= d.next_attempt) {
        const socket_address target = resolve(address);
        link& l = new_link(address);
        ucp_ep_params_t params = endpoint_params(l);
        params.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
        params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        params.sockaddr.addr = target.get();
        params.sockaddr.addrlen = target.length;
        check(ucp_ep_create(worker.get(), &params, &l.endpoint), "ucp_ep_create to " + address);
        d.current = &l;
        d.hello_send = posted(ucp_stream_send_nbx(l.endpoint, my_hello.data(), my_hello.size(), &stream_send),
                              "sending hello to " + address);
        d.answer_receive = posted(ucp_stream_recv_nbx(l.endpoint, d.answer.data(), d.answer.size(),
                                                      &d.answer_length, &stream_receive),
                                  "receiving hello from " + address);
        d.answered = d.answer_receive == nullptr;
      }
      if (!d.current) continue;
      const ucs_status_t sent = poll_request(d.hello_send);
      const ucs_status_t received = d.answer_receive ? poll_request(d.answer_receive) : UCS_OK;
      if (received == UCS_OK) d.answered = true;
      ucs_status_t failure = d.current->failure;
      for (const ucs_status_t status : {sent, received})
        if (failure == UCS_OK && status != UCS_OK && status != UCS_INPROGRESS) failure = status;
      if (failure != UCS_OK) {
        // Most often the peer is not listening yet: drop this endpoint and dial again shortly.
        d.last_error = ucs_status_string(failure);
        drop(d.hello_send);
        drop_receive(d.answer_receive);
        void* closing = close(*d.current, false);
        drop(closing);
        d.current = nullptr;
        d.answered = false;
        d.next_attempt = now + redial_delay;
        continue;
      }
      if (d.answered && !peers[static_cast<std::size_t>(d.peer)]) {
        std::string problem = hello_problem(d.answer);
        if (problem.empty() && ucx_wire::decode(d.answer)->rank != d.peer)
          problem = "answered as rank " + std::to_string(ucx_wire::decode(d.answer)->rank);
        if (!problem.empty())
          throw transport_error(who() + "rank " + std::to_string(d.peer) + " at " + address + " " + problem);
        peers[static_cast<std::size_t>(d.peer)] = d.current;
      }
    }

    while (!connection_requests.empty()) {
      // Out of the queue before use: ucp_ep_create consumes it even when it fails (and throws
      // here), so the teardown must not reject it again.
      const ucp_conn_request_h request = connection_requests.front();
      connection_requests.erase(connection_requests.begin());
      ucp_conn_request_attr_t attributes{};
      attributes.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
      std::string client = "an unknown client";
      if (ucp_conn_request_query(request, &attributes) == UCS_OK) client = format_address(attributes.client_address);
      link& l = new_link(client);
      ucp_ep_params_t params = endpoint_params(l);
      params.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
      params.conn_request = request;
      check(ucp_ep_create(worker.get(), &params, &l.endpoint), "accepting a connection from " + client);
      auto& a = *accepts.emplace_back(std::make_unique<accepted>());
      a.current = &l;
      a.hello_receive = posted(ucp_stream_recv_nbx(l.endpoint, a.hello.data(), a.hello.size(), &a.hello_length,
                                                   &stream_receive),
                               "receiving hello from " + client);
      if (!a.hello_receive) a.hello_length = a.hello.size();
    }

    for (auto& a : accepts) {
      if (!a->current) continue;
      const ucs_status_t received = a->peer < 0 ? poll_request(a->hello_receive) : UCS_OK;
      if (a->current->failure != UCS_OK || (received != UCS_OK && received != UCS_INPROGRESS)) {
        // A client that gave up on this connection and dials again.
        drop_receive(a->hello_receive);
        drop(a->answer_send);
        if (a->peer >= 0) peers[static_cast<std::size_t>(a->peer)] = nullptr;
        void* closing = close(*a->current, false);
        drop(closing);
        a->current = nullptr;
        continue;
      }
      if (a->peer < 0 && received == UCS_OK) {
        const std::string& client = a->current->address;
        std::string problem = hello_problem(a->hello);
        const int peer = problem.empty() ? ucx_wire::decode(a->hello)->rank : -1;
        if (problem.empty() && (peer <= rank || peer >= world))
          problem = "claims rank " + std::to_string(peer) + ", but only ranks " + std::to_string(rank + 1) + ".." +
                    std::to_string(world - 1) + " dial rank " + std::to_string(rank);
        if (problem.empty() && peers[static_cast<std::size_t>(peer)])
          problem = "claims rank " + std::to_string(peer) + ", which is already connected";
        if (!problem.empty()) throw transport_error(who() + "connection from " + client + " " + problem);
        a->peer = peer;
        a->current->address = addresses[static_cast<std::size_t>(peer)];
        peers[static_cast<std::size_t>(peer)] = a->current;
        a->answer_send = posted(ucp_stream_send_nbx(a->current->endpoint, my_hello.data(), my_hello.size(), &stream_send),
                                "answering hello of " + client);
      }
      if (a->answer_send && poll_request(a->answer_send) != UCS_INPROGRESS) a->answer_send = nullptr;
    }

    const bool all_connected = std::ranges::all_of(
        peers, [&, r = 0](link* l) mutable { return r++ == rank || l != nullptr; });
    const bool handshakes_done =
        std::ranges::none_of(dials, [](const dial& d) { return d.hello_send != nullptr; }) &&
        std::ranges::none_of(accepts, [](const auto& a) { return a->answer_send != nullptr; });
    if (all_connected && handshakes_done) break;

    setup_interruption->throw_if_raised(who());
    if (steady::now() >= deadline) {
      std::string missing;
      for (const dial& d : dials)
        if (!peers[static_cast<std::size_t>(d.peer)])
          missing += "; cannot connect to rank " + std::to_string(d.peer) + " at " +
                     addresses[static_cast<std::size_t>(d.peer)] + " (" + d.last_error + ")";
      for (int j = rank + 1; j < world; ++j)
        if (!peers[static_cast<std::size_t>(j)])
          missing += "; rank " + std::to_string(j) + " (" + addresses[static_cast<std::size_t>(j)] +
                     ") never connected";
      if (missing.empty()) missing = "; hello answers still in flight";
      throw transport_error(who() + "connection setup timed out after " + seconds(options.connect_timeout) +
                            missing);
    }
    auto wake = deadline;
    for (const dial& d : dials)
      if (!d.current) wake = std::min(wake, d.next_attempt);
    progress(wake);
  }
  // Everyone expected has connected; later dials are strays.
  refuse_dials();
  connected = true;
}

link& ucx_worker::checked_peer(const lane& caller, int peer, std::uint64_t tag) {
  if (!broken.empty()) throw transport_error(who() + "unusable after an earlier error: " + broken);
  if (peer < 0 || peer >= world || peer == rank)
    throw std::invalid_argument(who() + "peer " + std::to_string(peer) + " is not another rank of 0.." +
                                std::to_string(world - 1));
  if (!ucx_wire::tag_fits(tag) || (caller.tag_bit != 0 && (tag & caller.tag_bit) != 0))
    throw std::invalid_argument(who() + describe_tag(tag) + " needs more than the " + (caller.tag_bit ? "46" : "47") +
                                " bits a UCX frame tag carries" + (caller.tag_bit ? " on a channel" : ""));
  return *peers[static_cast<std::size_t>(peer)];
}

template <class Post>
std::uint64_t ucx_worker::post(lane& caller, Post post_operation) {
  try {
    if (caller.interruption && caller.interruption->raised()) throw transport_error(caller.interruption->message(who()));
    operation op;
    post_operation(op);
    caller.in_flight.emplace(caller.next_request, op);
    return caller.next_request++;
  } catch (...) {
    abandon_in_flight(caller, "an earlier post failed");
    throw;
  }
}

std::uint64_t ucx_worker::post_send(lane& caller, int peer, std::uint64_t tag, std::span<const std::byte> data) {
  return post(caller, [&](operation& op) {
    link& l = checked_peer(caller, peer, tag);
    if (l.failure != UCS_OK)
      throw transport_error(who() + "cannot send " + describe_tag(tag) + " to " + describe_peer(peer) +
                            ": it failed (" + ucs_status_string(l.failure) + ")");
    op = {nullptr, false, false, peer, tag, data.size()};
    ucp_request_param_t param{};
    op.request = posted(ucp_tag_send_nbx(l.endpoint, data.data(), data.size(),
                                         ucx_wire::frame_tag(rank, tag | caller.tag_bit), &param),
                        "sending " + describe_tag(tag) + " to " + describe_peer(peer));
  });
}

// Posted even when the peer has failed: frames it sent before are still queued here.
std::uint64_t ucx_worker::post_receive(lane& caller, int peer, std::uint64_t tag, std::span<std::byte> data) {
  return post(caller, [&](operation& op) {
    checked_peer(caller, peer, tag);
    op = {nullptr, true, false, peer, tag, data.size()};
    ucp_request_param_t param{};
    // Always a request, so that ucp_tag_recv_request_test reports the frame's length.
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    op.request = posted(ucp_tag_recv_nbx(worker.get(), data.data(), data.size(),
                                         ucx_wire::frame_tag(peer, tag | caller.tag_bit),
                                         ucx_wire::full_mask, &param),
                        "receiving " + describe_tag(tag) + " from " + describe_peer(peer));
  });
}

// Validates a completed operation and counts its bytes; returns what is wrong with it, if anything.
std::string ucx_worker::finish(operation& op, ucs_status_t status, std::size_t received) {
  op.finished = true;
  const std::string peer = describe_peer(op.peer);
  if (status == UCS_ERR_MESSAGE_TRUNCATED)
    return who() + peer + " sent a frame larger than the " + std::to_string(op.bytes) + " bytes expected for " +
           describe_tag(op.tag) + (received > op.bytes ? " (" + std::to_string(received) + " bytes)" : "");
  if (status != UCS_OK)
    return who() + (op.is_receive ? "receiving " : "sending ") + describe_tag(op.tag) +
           (op.is_receive ? " from " : " to ") + peer + " failed: " + ucs_status_string(status);
  if (op.is_receive && received != op.bytes)
    return who() + peer + " sent " + std::to_string(received) + " bytes for " + describe_tag(op.tag) + ", expected " +
           std::to_string(op.bytes);
  if (op.is_receive) {
    bytes_received += op.bytes;
  } else {
    bytes_sent += op.bytes;
    ++messages_sent;
  }
  return {};
}

// What a peer sent instead of the awaited frame, if anything is queued from it.
std::string ucx_worker::unexpected_frame_from(int peer) {
  ucp_tag_recv_info_t info{};
  if (!ucp_tag_probe_nb(worker.get(), ucx_wire::frame_tag(peer, 0), ucx_wire::sender_mask, 0, &info)) return {};
  return "; it sent " + describe_tag(ucx_wire::frame_transport_tag(info.sender_tag)) + " (" +
         std::to_string(info.length) + " bytes) instead";
}

void ucx_worker::abandon_in_flight(lane& caller, const std::string& message) {
  for (auto& [handle, op] : caller.in_flight) {
    if (!op.request) continue;
    if (op.is_receive) {
      // Once cancelled, the receive no longer writes into the caller's buffer.
      ucp_request_cancel(worker.get(), op.request);
      const auto until = steady::now() + cancel_timeout;
      while (ucp_request_check_status(op.request) == UCS_INPROGRESS && steady::now() < until) progress(until);
      if (ucp_request_check_status(op.request) == UCS_INPROGRESS) broken = message;
    } else {
      // A send cannot be recalled: UCX may still read the caller's buffer, so stop here.
      broken = message;
    }
    ucp_request_free(op.request);
    op.request = nullptr;
  }
  caller.in_flight.clear();
}

void ucx_worker::abandon(lane& caller, const std::string& message) {
  abandon_in_flight(caller, message);
  throw transport_error(message);
}

ucx_worker::operation& ucx_worker::in_flight_operation(lane& caller, std::uint64_t handle) {
  const auto found = caller.in_flight.find(handle);
  if (found == caller.in_flight.end())
    throw std::logic_error(who() + "wait for request " + std::to_string(handle) + ", which is not in flight");
  return found->second;
}

bool ucx_worker::settled(lane& caller, std::uint64_t handle) {
  const operation& op = in_flight_operation(caller, handle);
  if (!op.request || (caller.interruption && caller.interruption->raised())) return true;
  while (ucp_worker_progress(worker.get()) != 0) {
  }
  return ucp_request_check_status(op.request) != UCS_INPROGRESS ||
         peers[static_cast<std::size_t>(op.peer)]->failure != UCS_OK;
}

void ucx_worker::wait(lane& caller, std::span<const std::uint64_t> handles, std::unique_lock<std::mutex>& held) {
  const auto deadline = steady::now() + options.operation_timeout;
  const auto spin_until = steady::now() + idle_spin;  // one spin per wait, however often it wakes
  std::string error;  // the first completed operation's problem, reported once all are done
  bool drained = false;
  for (;;) {
    bool pending = false;
    for (const std::uint64_t handle : handles) {
      operation& op = in_flight_operation(caller, handle);
      if (op.finished) continue;
      ucs_status_t status = UCS_OK;
      ucp_tag_recv_info_t info{};
      if (op.request) {
        status = op.is_receive ? ucp_tag_recv_request_test(op.request, &info) : ucp_request_check_status(op.request);
        if (status == UCS_INPROGRESS) {
          pending = true;
          continue;
        }
        ucp_request_free(op.request);
        op.request = nullptr;
      }
      const std::string problem = finish(op, status, info.length);
      if (error.empty()) error = problem;
    }
    if (!pending) break;
    if (caller.interruption && caller.interruption->raised()) abandon(caller, caller.interruption->message(who()));

    const operation* stuck = nullptr;
    for (const std::uint64_t handle : handles) {
      const operation& op = caller.in_flight.at(handle);
      if (op.request && peers[static_cast<std::size_t>(op.peer)]->failure != UCS_OK) stuck = &op;
    }
    if (stuck) {
      // Frames that arrived just before the failure was noticed still count.
      if (!drained) {
        drained = true;
        while (ucp_worker_progress(worker.get()) != 0) {
        }
        continue;
      }
      abandon(caller, !error.empty() ? error
                             : who() + describe_peer(stuck->peer) + " failed during " + describe_tag(stuck->tag) + ": " +
                                   ucs_status_string(peers[static_cast<std::size_t>(stuck->peer)]->failure));
    }
    if (steady::now() >= deadline) {
      const operation* late = nullptr;
      for (const std::uint64_t handle : handles)
        if (!late && caller.in_flight.at(handle).request) late = &caller.in_flight.at(handle);
      if (!error.empty()) abandon(caller, error);
      if (late->is_receive)
        abandon(caller, who() + "no " + describe_tag(late->tag) + " from " + describe_peer(late->peer) + " within " +
                seconds(options.operation_timeout) + unexpected_frame_from(late->peer));
      abandon(caller, who() + describe_peer(late->peer) + " did not take " + describe_tag(late->tag) + " (" +
              std::to_string(late->bytes) + " bytes) within " + seconds(options.operation_timeout));
    }
    progress(deadline, spin_until, &held);
  }
  for (const std::uint64_t handle : handles) caller.in_flight.erase(handle);
  if (!error.empty()) abandon(caller, error);
}

}  // namespace detail

ucx_listener::ucx_listener(const std::string& listen_address, ucx_options options)
    : worker_(std::make_unique<detail::ucx_worker>(listen_address, std::move(options))),
      setup_interruption_(worker_->setup_interruption) {}
ucx_listener::ucx_listener(ucx_listener&&) noexcept = default;
ucx_listener& ucx_listener::operator=(ucx_listener&& other) noexcept {
  if (this != &other) {
    detail::retire(std::move(worker_));
    worker_ = std::move(other.worker_);
    setup_interruption_ = std::move(other.setup_interruption_);
  }
  return *this;
}
ucx_listener::~ucx_listener() { detail::retire(std::move(worker_)); }

const std::string& ucx_listener::address() const { return worker_->listen_address; }

void ucx_listener::interrupt(const std::string& why) {
  if (setup_interruption_) setup_interruption_->raise(why);
}

std::unique_ptr<ucx_transport> ucx_listener::connect(int rank, const std::vector<std::string>& addresses,
                                                     std::optional<std::uint64_t> epoch) && {
  if (!worker_) throw std::logic_error("ucx_listener::connect: listener already used");
  if (epoch) worker_->options.epoch = *epoch;
  worker_->connect(rank, addresses);
  return std::unique_ptr<ucx_transport>(new ucx_transport(std::move(worker_)));
}

ucx_transport::ucx_transport(std::unique_ptr<detail::ucx_worker> worker)
    : transport("ucx"), worker_(worker.release(), [](detail::ucx_worker* w) { detail::retire(std::unique_ptr<detail::ucx_worker>(w)); }),
      lane_(0) {
  worker_->lanes[0].interruption = &interruption();
}

ucx_transport::ucx_transport(std::shared_ptr<detail::ucx_worker> worker, int lane)
    : transport("ucx"), worker_(std::move(worker)), lane_(lane) {}

ucx_transport::~ucx_transport() {
  // The worker may outlive this transport (its channel's or its endpoint's is still open).
  std::lock_guard lock(worker_->mutex);
  if (lane_ == 0) worker_->endpoint_interrupted = interruption().raised();
  else worker_->channel_open = false;
  worker_->lanes[lane_].interruption = nullptr;
}

std::shared_ptr<transport> ucx_transport::make_channel() {
  if (lane_ != 0) throw std::logic_error("ucx rank " + std::to_string(rank()) + ": a channel has no channel");
  std::lock_guard lock(worker_->mutex);
  if (worker_->channel_open) throw std::logic_error("ucx rank " + std::to_string(rank()) + ": a channel is open already");
  std::shared_ptr<ucx_transport> channel(new ucx_transport(worker_, 1));
  detail::ucx_worker::lane& lane = worker_->lanes[1];
  lane = {};  // a closed channel's requests were all waited for or abandoned
  lane.interruption = &channel->interruption();
  lane.tag_bit = detail::ucx_worker::channel_tag_bit;
  worker_->channel_open = true;
  return channel;
}

int ucx_transport::rank() const { return worker_->rank; }
int ucx_transport::size() const { return worker_->world; }

void ucx_transport::send(int peer, std::uint64_t tag, std::span<const std::byte> data) {
  wait(post_send(peer, tag, data));
}

void ucx_transport::recv(int peer, std::uint64_t tag, std::span<std::byte> data) {
  wait(post_recv(peer, tag, data));
}

void ucx_transport::send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                              std::uint64_t tag) {
  std::unique_lock lock(worker_->mutex);
  detail::ucx_worker::lane& lane = worker_->lanes[lane_];
  const request handles[] = {worker_->post_receive(lane, from, tag, in), worker_->post_send(lane, to, tag, out)};
  worker_->wait(lane, handles, lock);
}

transport::request ucx_transport::post_send(int peer, std::uint64_t tag, std::span<const std::byte> data) {
  std::lock_guard lock(worker_->mutex);
  return worker_->post_send(worker_->lanes[lane_], peer, tag, data);
}

transport::request ucx_transport::post_recv(int peer, std::uint64_t tag, std::span<std::byte> data) {
  std::lock_guard lock(worker_->mutex);
  return worker_->post_receive(worker_->lanes[lane_], peer, tag, data);
}

void ucx_transport::wait(request handle) {
  std::unique_lock lock(worker_->mutex);
  worker_->wait(worker_->lanes[lane_], {&handle, 1}, lock);
}

bool ucx_transport::settled(request handle) {
  std::lock_guard lock(worker_->mutex);
  return worker_->settled(worker_->lanes[lane_], handle);
}

transfer_stats ucx_transport::stats() const {
  return {worker_->bytes_sent.load(), worker_->bytes_received.load(), worker_->messages_sent.load()};
}

const std::string& ucx_transport::peer_address(int peer) const {
  if (peer < 0 || peer >= worker_->world)
    throw std::invalid_argument("ucx: peer " + std::to_string(peer) + " outside 0.." + std::to_string(worker_->world - 1));
  return worker_->peer_addresses[static_cast<std::size_t>(peer)];
}

std::unique_ptr<ucx_transport> connect_ucx_rank(int rank, const std::vector<std::string>& addresses,
                                                const ucx_options& options) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= addresses.size())
    throw std::invalid_argument("ucx: rank " + std::to_string(rank) + " has no entry among " +
                                std::to_string(addresses.size()) + " addresses");
  return ucx_listener(addresses[static_cast<std::size_t>(rank)], options).connect(rank, addresses);
}

std::vector<std::unique_ptr<transport>> make_ucx_loopback_group(int world, ucx_options options) {
  if (world < 1) throw std::invalid_argument("ucx loopback group: world " + std::to_string(world) + " < 1");
  if (options.net_devices.empty() && !std::getenv("UCX_NET_DEVICES")) options.net_devices = "lo";
  std::vector<ucx_listener> listeners;
  std::vector<std::string> addresses;
  for (int r = 0; r < world; ++r) {
    listeners.emplace_back("127.0.0.1:0", options);
    addresses.push_back(listeners.back().address());
  }
  std::vector<std::unique_ptr<transport>> group(static_cast<std::size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        group[i] = std::move(listeners[i]).connect(r, addresses);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  return group;
}

}  // namespace accord
