// Connection setup by sockaddr: every rank listens, rank i dials every rank j < i, and each pair
// exchanges a hello (ucx_wire.hpp) on the new endpoint before it carries frames.
#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "transport/ucx/ucx_worker.hpp"

namespace accord::detail {

using namespace ucx;

namespace {

constexpr auto redial_delay = std::chrono::milliseconds(100);

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

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) { static_cast<link*>(arg)->failure = status; }

}  // namespace

socket_address ucx::resolve(const std::string& address) {
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

ucp_ep_params_t ucx_worker::endpoint_params(link& l) const {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.err_mode = options.detect_peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = on_endpoint_error;
  params.err_handler.arg = &l;
  return params;
}

void ucx_worker::listen(const std::string& address, const socket_address& bind_address) {
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

}  // namespace accord::detail
