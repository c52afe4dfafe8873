// UCX transport: real UCX endpoints on 127.0.0.1, one thread per rank. Besides the shared
// behaviour, frames are injected on real connections by a raw ucp "impostor" peer that speaks
// the wire format of transport/ucx/ucx_wire.hpp, to check that wrong hellos, wrong sizes and
// unexpected tags are rejected with errors naming the peer.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "transport/ucx/ucx_transport.hpp"
#include "transport_conformance.hpp"
#include "transport/ucx/ucx_wire.hpp"

using namespace accord;
using namespace std::chrono_literals;

extern char** environ;

namespace {

// A port with nobody listening (was free a moment ago).
std::string unused_address() {
  const ucx_listener probe("127.0.0.1:0");
  return probe.address();
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const transport_error& e) {
    return e.what();
  }
  return "no transport_error";
}

// A raw ucp client that dials a rank and then sends whatever the test wants.
class impostor {
public:
  explicit impostor(const std::string& address) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM;
    REQUIRE(ucp_init(&params, nullptr, &context_) == UCS_OK);
    ucp_worker_params_t worker_params{};
    REQUIRE(ucp_worker_create(context_, &worker_params, &worker_) == UCS_OK);

    const auto colon = address.rfind(':');
    sockaddr_in target{};
    target.sin_family = AF_INET;
    target.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
    inet_pton(AF_INET, address.substr(0, colon).c_str(), &target.sin_addr);
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&target);
    ep_params.sockaddr.addrlen = sizeof target;
    REQUIRE(ucp_ep_create(worker_, &ep_params, &endpoint_) == UCS_OK);
  }
  ~impostor() {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    if (void* request = ucp_ep_close_nbx(endpoint_, &param); request && !UCS_PTR_IS_ERR(request)) ucp_request_free(request);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  void send_stream(std::span<const std::byte> bytes) {
    ucp_request_param_t param{};
    finish(ucp_stream_send_nbx(endpoint_, bytes.data(), bytes.size(), &param));
  }
  void send_hello(const ucx_wire::hello& h) {
    const auto frame = ucx_wire::encode(h);
    send_stream(frame);
  }
  ucx_wire::hello receive_answer() {
    ucx_wire::hello_frame answer{};
    std::size_t length = 0;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_STREAM_RECV_FLAG_WAITALL;
    finish(ucp_stream_recv_nbx(endpoint_, answer.data(), answer.size(), &length, &param));
    const auto decoded = ucx_wire::decode(answer);
    REQUIRE(decoded.has_value());
    return *decoded;
  }
  void send_frame(std::uint64_t wire_tag, std::span<const std::byte> bytes) {
    ucp_request_param_t param{};
    finish(ucp_tag_send_nbx(endpoint_, bytes.data(), bytes.size(), wire_tag, &param));
  }
  // Keeps this side's worker running while the rank under test works (its flushes need us).
  template <class Future>
  void progress_until_ready(Future& f) {
    while (f.wait_for(0s) != std::future_status::ready) {
      ucp_worker_progress(worker_);
      std::this_thread::sleep_for(100us);
    }
  }

private:
  void finish(ucs_status_ptr_t request) {
    REQUIRE_FALSE(UCS_PTR_IS_ERR(request));
    if (!request) return;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (ucp_request_check_status(request) == UCS_INPROGRESS) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      ucp_worker_progress(worker_);
    }
    CHECK(ucp_request_check_status(request) == UCS_OK);
    ucp_request_free(request);
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h endpoint_ = nullptr;
};

// Rank 0 of a two-rank job whose rank 1 is an impostor dialling from this thread.
struct impostor_job {
  ucx_options options;
  std::vector<std::string> addresses;
  std::unique_ptr<ucx_listener> listener;

  impostor_job() {
    options.job_id = 7;
    options.epoch = 3;
    options.connect_timeout = 5s;
    options.operation_timeout = 2s;
    options.net_devices = "lo";
    listener = std::make_unique<ucx_listener>("127.0.0.1:0", options);
    addresses = {listener->address(), "127.0.0.1:1"};
  }
  ucx_wire::hello honest_hello() const { return {ucx_wire::protocol_version, 1, 2, options.job_id, options.epoch}; }
  // Starts rank 0's setup, then `what_rank0_does` with its transport, on another thread.
  std::future<std::string> rank0(std::function<void(transport&)> what_rank0_does) {
    return std::async(std::launch::async, [this, what_rank0_does] {
      return error_of([&] {
        auto t = std::move(*listener).connect(0, addresses);
        what_rank0_does(*t);
      });
    });
  }
};

}  // namespace

TEST_CASE("ucx: ring pieces travel eagerly unless RDMA devices exist or the user set UCX_RNDV_THRESH") {
  const auto threshold = eager_rendezvous_threshold(nullptr, false);
  REQUIRE(threshold);
  CHECK(std::stoul(*threshold) >= 2 * ucx_ring_piece_bytes);
  CHECK(std::stoul(*threshold) < 4 * ucx_ring_piece_bytes);
  CHECK_FALSE(eager_rendezvous_threshold("auto", false));
  CHECK_FALSE(eager_rendezvous_threshold(nullptr, true));
}

TEST_CASE("ucx transport conformance, shared memory and tcp on loopback") {
  testing::run_transport_conformance("ucx", [](int world) { return make_ucx_loopback_group(world); });
}

// Both ranks of the multi-process test run this: a send_recv large enough for rendezvous
// (cross-process cma), an all-reduce and a sign vote, each checked against what it must give.
static void exchange_with_other_process(transport& t) {
  const int other = 1 - t.rank();
  std::vector<std::byte> in(8 << 20);
  t.send_recv(other, testing::byte_pattern(in.size(), t.rank()), other, in, 3);
  CHECK(in == testing::byte_pattern(in.size(), other));
  std::vector<float> data(1'000'003);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = testing::small_integer(t.rank(), i);
  t.all_reduce(data);
  bool sums_right = true;
  for (std::size_t i = 0; i < data.size(); ++i)
    sums_right &= data[i] == testing::small_integer(0, i) + testing::small_integer(1, i);
  CHECK(sums_right);
  const std::vector<std::uint64_t> mine{t.rank() == 0 ? 0b0011ull : 0b0101ull};
  std::vector<std::uint16_t> counts(4);
  t.sign_counts(mine, 4, counts);
  CHECK(counts == std::vector<std::uint16_t>{2, 1, 1, 0});
}

constexpr const char* child_variable = "ACCORD_UCX_TEST_CHILD_ADDRESSES";

// The other process of the test below: the same binary, started with only this case selected.
TEST_CASE("ucx: rank 1 of the multi-process test (does nothing unless started by it)") {
  const char* addresses = std::getenv(child_variable);
  if (!addresses) return;
  const std::string both = addresses;
  const auto comma = both.find(',');
  ucx_options options;
  options.net_devices = "lo";
  options.operation_timeout = 20s;
  auto t = connect_ucx_rank(1, {both.substr(0, comma), both.substr(comma + 1)}, options);
  exchange_with_other_process(*t);
}

TEST_CASE("ucx: two real processes connect and exchange over shared memory") {
  ucx_options options;
  options.net_devices = "lo";
  options.operation_timeout = 20s;
  ucx_listener listener("127.0.0.1:0", options);
  const std::vector<std::string> addresses{listener.address(), unused_address()};

  std::vector<std::string> environment{std::string(child_variable) + "=" + addresses[0] + "," + addresses[1]};
  for (char** variable = environ; *variable; ++variable) environment.emplace_back(*variable);
  std::vector<char*> envp;
  for (auto& variable : environment) envp.push_back(variable.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", only_child = "--test-case=ucx: rank 1 of the multi-process test*";
  char* argv[] = {self.data(), only_child.data(), nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);

  {
    auto t = std::move(listener).connect(0, addresses);
    exchange_with_other_process(*t);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("ucx: detect_peer_failure (error mode PEER, tcp only) still moves data") {
  ucx_options options;
  options.detect_peer_failure = true;
  auto group = make_ucx_loopback_group(2, options);
  testing::run_ranks(group, [](transport& t) {
    const auto out = testing::byte_pattern(1 << 20, t.rank());
    std::vector<std::byte> in(out.size());
    t.send_recv(1 - t.rank(), out, 1 - t.rank(), in, 5);
    CHECK(in == testing::byte_pattern(1 << 20, 1 - t.rank()));
  });
}

TEST_CASE("ucx: dialling a port nobody listens on fails within connect_timeout, naming the address") {
  const std::string dead = unused_address();
  ucx_options options;
  options.connect_timeout = 1500ms;
  options.net_devices = "lo";
  const auto started = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { connect_ucx_rank(1, {dead, "127.0.0.1:0"}, options); });
  CHECK(std::chrono::steady_clock::now() - started < 20s);  // a hang guard, not a timing assertion
  CHECK(error.find("ucx rank 1: connection setup timed out") != std::string::npos);
  CHECK(error.find("cannot connect to rank 0 at " + dead) != std::string::npos);
}

TEST_CASE("ucx: a connect waiting for a peer that never comes gives up when interrupted from another thread") {
  ucx_options options;
  options.connect_timeout = 60s;  // far longer than the test may take: only the interrupt ends the wait
  options.net_devices = "lo";
  ucx_listener listener("127.0.0.1:0", options);
  std::thread interrupter([&] {
    std::this_thread::sleep_for(200ms);
    listener.interrupt("member lost");
  });
  const std::string error =
      error_of([&] { std::move(listener).connect(1, {unused_address(), "127.0.0.1:0"}, std::uint64_t{3}); });
  interrupter.join();
  CHECK(error.find("ucx rank 1: interrupted: member lost") != std::string::npos);
}

TEST_CASE("ucx: processes started at different times on fixed ports find each other, twice in a row") {
  // Fixed ports exercise redialling (rank 1 starts first) and port reuse after close.
  const std::vector<std::string> addresses{unused_address(), unused_address()};
  ucx_options options;
  options.net_devices = "lo";
  options.connect_timeout = 10s;
  for (int run = 0; run < 2; ++run) {
    auto rank1 = std::async(std::launch::async, [&] {
      auto t = connect_ucx_rank(1, addresses, options);
      std::vector<std::byte> in(5);
      t->recv(0, 1, in);
      return in;
    });
    std::this_thread::sleep_for(300ms);
    auto rank0 = connect_ucx_rank(0, addresses, options);
    rank0->send(1, 1, testing::byte_pattern(5, run));
    CHECK(rank1.get() == testing::byte_pattern(5, run));
    CHECK(rank0->peer_address(1) == addresses[1]);
  }
}

TEST_CASE("ucx: the epoch given to connect goes into the hellos, ranks of different epochs do not connect") {
  ucx_options options;
  options.net_devices = "lo";
  options.connect_timeout = 2s;
  // Made and published before the epoch is known, as in an elastic job.
  std::vector<ucx_listener> listeners;
  listeners.emplace_back("127.0.0.1:0", options);
  listeners.emplace_back("127.0.0.1:0", options);
  const std::vector<std::string> addresses{listeners[0].address(), listeners[1].address()};

  SUBCASE("the same epoch") {
    auto rank1 = std::async(std::launch::async, [&] {
      auto t = std::move(listeners[1]).connect(1, addresses, 5);
      t->send(0, 1, testing::byte_pattern(5, 1));
    });
    auto rank0 = std::move(listeners[0]).connect(0, addresses, 5);
    std::vector<std::byte> in(5);
    rank0->recv(1, 1, in);
    rank1.get();
    CHECK(in == testing::byte_pattern(5, 1));
  }
  SUBCASE("epoch 1 against epoch 2") {
    auto rank1 = std::async(std::launch::async,
                            [&] { return error_of([&] { std::move(listeners[1]).connect(1, addresses, 1); }); });
    const std::string refused = error_of([&] { std::move(listeners[0]).connect(0, addresses, 2); });
    CHECK(refused.find("ucx rank 0: connection from 127.0.0.1:") == 0);
    CHECK_MESSAGE(refused.find("belongs to job 0 epoch 1, expected job 0 epoch 2") != std::string::npos, refused);
    const std::string unanswered = rank1.get();  // its hello was never answered
    CHECK_MESSAGE(unanswered.find("ucx rank 1: connection setup timed out after 2 s") == 0, unanswered);
  }
}

TEST_CASE("ucx: a peer that closes turns the wait for it into an error, not a hang") {
  ucx_options options;
  options.operation_timeout = 5s;
  auto group = make_ucx_loopback_group(2, options);
  group[1].reset();
  std::vector<std::byte> in(16);
  const std::string error = error_of([&] { group[0]->recv(1, 4, in); });
  CHECK(error.find("ucx rank 0: peer 1 (127.0.0.1:") == 0);
  CHECK(error.find("failed during tag 4") != std::string::npos);
  CHECK(error_of([&] { group[0]->send(1, 4, in); }).find("cannot send tag 4 to peer 1") != std::string::npos);
}

TEST_CASE("ucx: a tag wider than a UCX frame tag carries is refused") {
  auto group = make_ucx_loopback_group(2);
  CHECK_THROWS_AS(group[0]->send(1, 1ull << 50, {}), std::invalid_argument);
}

TEST_CASE("ucx: injected frames with the wrong size or tag are rejected naming the peer") {
  impostor_job job;
  const std::vector<std::byte> twelve(12), twenty(20), sixteen(16);
  std::vector<std::byte> in(16);
  auto rank0_receives = [&in](transport& t) { t.recv(1, 5, in); };

  SUBCASE("a short frame") {
    auto rank0 = job.rank0(rank0_receives);
    impostor fake(job.addresses[0]);
    fake.send_hello(job.honest_hello());
    CHECK(fake.receive_answer() == ucx_wire::hello{ucx_wire::protocol_version, 0, 2, 7, 3});
    fake.send_frame(ucx_wire::frame_tag(1, 5), twelve);
    fake.progress_until_ready(rank0);
    CHECK(rank0.get() == "ucx rank 0: peer 1 (127.0.0.1:1) sent 12 bytes for tag 5, expected 16");
  }
  SUBCASE("an oversized frame") {
    auto rank0 = job.rank0(rank0_receives);
    impostor fake(job.addresses[0]);
    fake.send_hello(job.honest_hello());
    fake.receive_answer();
    fake.send_frame(ucx_wire::frame_tag(1, 5), twenty);
    fake.progress_until_ready(rank0);
    CHECK(rank0.get().find("ucx rank 0: peer 1 (127.0.0.1:1) sent a frame larger than the 16 bytes expected for tag 5") == 0);
  }
  SUBCASE("a frame of another tag") {
    auto rank0 = job.rank0(rank0_receives);
    impostor fake(job.addresses[0]);
    fake.send_hello(job.honest_hello());
    fake.receive_answer();
    fake.send_frame(ucx_wire::frame_tag(1, (1ull << 63) | 6), sixteen);
    fake.progress_until_ready(rank0);
    CHECK(rank0.get() == "ucx rank 0: no tag 5 from peer 1 (127.0.0.1:1) within 2 s; it sent collective #6 (16 bytes) instead");
  }
}

TEST_CASE("ucx: a hello from another epoch, world or protocol is refused naming the client") {
  impostor_job job;
  auto expect_refusal = [&](const std::function<void(impostor&)>& speak, const std::string& problem) {
    auto rank0 = job.rank0([](transport&) {});
    impostor fake(job.addresses[0]);
    speak(fake);
    fake.progress_until_ready(rank0);
    const std::string error = rank0.get();
    CHECK(error.find("ucx rank 0: connection from 127.0.0.1:") == 0);
    CHECK(error.find(problem) != std::string::npos);
  };
  SUBCASE("wrong epoch") {
    auto h = job.honest_hello();
    h.epoch = 4;
    expect_refusal([&](impostor& f) { f.send_hello(h); }, "belongs to job 7 epoch 4, expected job 7 epoch 3");
  }
  SUBCASE("wrong world") {
    auto h = job.honest_hello();
    h.world = 3;
    expect_refusal([&](impostor& f) { f.send_hello(h); }, "has world 3, expected 2");
  }
  SUBCASE("a rank that must not dial rank 0") {
    auto h = job.honest_hello();
    h.rank = 0;
    expect_refusal([&](impostor& f) { f.send_hello(h); }, "claims rank 0, but only ranks 1..1 dial rank 0");
  }
  SUBCASE("not a hello at all") {
    const std::vector<std::byte> junk(ucx_wire::hello_bytes, std::byte{0x5a});
    expect_refusal([&](impostor& f) { f.send_stream(junk); }, "sent a frame that is not an accord hello");
  }
}

TEST_CASE("ucx: settled polls a posted receive without waiting, and reports an interrupt") {
  auto group = accord::make_ucx_loopback_group(2);
  std::vector<float> in(4, 0.f);
  const std::vector<float> out = {1.f, 2.f, 3.f, 4.f};
  const auto bytes = [](auto& v) { return std::as_writable_bytes(std::span(v)); };
  const auto handle = group[0]->post_recv(1, 7, bytes(in));
  CHECK_FALSE(group[0]->settled(handle));  // nothing sent yet
  group[1]->send(0, 7, std::as_bytes(std::span(out)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!group[0]->settled(handle) && std::chrono::steady_clock::now() < deadline) {
  }
  REQUIRE(group[0]->settled(handle));
  group[0]->wait(handle);
  CHECK(in == out);
  const auto pending = group[0]->post_recv(1, 8, bytes(in));
  CHECK_FALSE(group[0]->settled(pending));
  group[0]->interrupt("test over");
  CHECK(group[0]->settled(pending));
  CHECK_THROWS_AS(group[0]->wait(pending), accord::transport_error);
}

TEST_CASE("ucx channels: collectives beside the endpoint's, an all-reduce in flight without calls, interrupts") {
  testing::check_channel([](int world) { return make_ucx_loopback_group(world); });
}
