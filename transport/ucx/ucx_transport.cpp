// The backend's public classes over its worker (ucx_worker.hpp): the listener, and the
// endpoint and its channel, each a lane of the one worker.
#include "transport/ucx/ucx_transport.hpp"

#include <cstdlib>
#include <exception>
#include <thread>

#include "transport/ucx/ucx_worker.hpp"

namespace accord {

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
  // A channel's lane may serve the next channel already: open_channel takes this one for
  // closed once its last owner lets go, before this destructor runs.
  if (worker_->lanes[lane_].interruption == &interruption()) worker_->lanes[lane_].interruption = nullptr;
}

std::shared_ptr<transport> ucx_transport::make_channel() {
  std::lock_guard lock(worker_->mutex);
  std::shared_ptr<ucx_transport> channel(new ucx_transport(worker_, 1));
  detail::ucx_worker::lane& lane = worker_->lanes[1];
  lane = {};  // a closed channel's requests were all waited for or abandoned
  lane.interruption = &channel->interruption();
  lane.tag_bit = detail::ucx_worker::channel_tag_bit;
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
