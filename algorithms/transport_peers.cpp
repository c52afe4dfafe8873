#include "algorithms/transport_peers.hpp"

#include "transport/feedback_all_reduce.hpp"

#include <stdexcept>
#include <string>

namespace accord {
namespace {

// A user tag of its own ("topo", for the topologies that first exchanged).
constexpr std::uint64_t exchange_tag = 0x746f706f;

}  // namespace

void transport_peers::exchange(int peer, std::span<const float> mine, std::span<float> theirs) {
  if (mine.size() != theirs.size())
    throw std::invalid_argument("round_peers::exchange: " + std::to_string(mine.size()) + " values out, " +
                                std::to_string(theirs.size()) + " in");
  const transport::request sent = link_.post_send(peer, exchange_tag, std::as_bytes(mine));
  link_.recv(peer, exchange_tag, std::as_writable_bytes(theirs));
  link_.wait(sent);
}

collective_channel* transport_peers::channel() {
  if (!channel_) return nullptr;
  if (!*channel_ || !(*channel_)->serves(link_)) {
    channel_->reset();  // the old link's, closed before the new one opens
    *channel_ = collective_channel::open(link_);
  }
  return channel_->get();
}

template <class Value>
std::unique_ptr<collective_in_flight> transport_peers::start_on_channel(std::span<Value> values) {
  if (collective_channel* in_flight = channel())
    return in_flight->start([values](transport& link) { link.all_reduce(values); });
  return round_peers::start_all_reduce(values);
}

std::unique_ptr<collective_in_flight> transport_peers::start_all_reduce(std::span<float> values) {
  return start_on_channel(values);
}

std::unique_ptr<collective_in_flight> transport_peers::start_all_reduce(std::span<double> values) {
  return start_on_channel(values);
}

std::unique_ptr<collective_in_flight> transport_peers::start_all_reduce(std::span<float> values,
                                                                       std::span<float> residual,
                                                                       std::string_view precision) {
  const wire_precision wire = parse_wire_precision(precision, "round_peers::start_all_reduce");
  const auto sum = [values, residual, wire](transport& link) { all_reduce_with_feedback(link, values, residual, wire); };
  if (collective_channel* in_flight = channel()) return in_flight->start(sum);
  sum(link_);
  return std::make_unique<detail::completed_collective>();
}

}  // namespace accord
