#include "algorithms/transport_peers.hpp"

#include "transport/feedback_all_reduce.hpp"
#include "transport/hierarchical.hpp"

#include <functional>
#include <stdexcept>
#include <string>

namespace accord {
namespace {

// A user tag of its own ("topo", for the topologies that first exchanged).
constexpr std::uint64_t exchange_tag = 0x746f706f;
// The tag level of round_peers' subgroups: bit 46 is a UCX channel's own, so 1..3 are what fit;
// 3 is the hierarchical transport's own collectives', which run on its endpoint's thread, one
// after another with these (it has no channel), as every rank runs them in the same order.
constexpr std::uint64_t subgroup_level = 3;

}  // namespace

transport_peers::transport_peers(transport& link, std::unique_ptr<collective_channel>* channel, std::vector<int> members)
    : link_(link), channel_(channel), members_(std::move(members)),
      subgroup_(make_subgroup_transport(link, members_, subgroup_level)) {}

std::unique_ptr<round_peers> transport_peers::among(std::vector<int> members) {
  const int own = rank(), count = size();
  if (!subgroup_members_fit(members, count, own))
    throw std::invalid_argument("round_peers::among: the members are not ascending ranks of the " + std::to_string(count) +
                                " holding this worker's, " + std::to_string(own));
  if (!members_.empty())
    for (int& member : members) member = members_[static_cast<std::size_t>(member)];
  return std::unique_ptr<round_peers>(new transport_peers(link_, channel_, std::move(members)));
}

void transport_peers::exchange(int peer, std::span<const float> mine, std::span<float> theirs) {
  if (mine.size() != theirs.size())
    throw std::invalid_argument("round_peers::exchange: " + std::to_string(mine.size()) + " values out, " +
                                std::to_string(theirs.size()) + " in");
  transport& link = group();
  const transport::request sent = link.post_send(peer, exchange_tag, std::as_bytes(mine));
  link.recv(peer, exchange_tag, std::as_writable_bytes(theirs));
  link.wait(sent);
}

collective_channel* transport_peers::channel() {
  if (!channel_) return nullptr;
  if (!*channel_ || !(*channel_)->serves(link_)) {
    channel_->reset();  // the old link's, closed before the new one opens
    *channel_ = collective_channel::open(link_);
  }
  return channel_->get();
}

std::unique_ptr<collective_in_flight> transport_peers::start(std::function<void(transport&)> collective) {
  collective_channel* in_flight = channel();
  if (!in_flight) {
    collective(group());
    return std::make_unique<detail::completed_collective>();
  }
  if (members_.empty()) return in_flight->start(std::move(collective));
  // A subgroup of the channel's transport for each collective: its tags restart with it, which
  // the transport's order of one peer's messages of one tag keeps apart (the collectives on a
  // channel run one after another, in the same order on every rank).
  return in_flight->start([members = members_, collective = std::move(collective)](transport& channel) {
    collective(*make_subgroup_transport(channel, members, subgroup_level));
  });
}

template <class Value>
std::unique_ptr<collective_in_flight> transport_peers::start_on_channel(std::span<Value> values) {
  return start([values](transport& link) { link.all_reduce(values); });
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
  return start([values, residual, wire](transport& link) { all_reduce_with_feedback(link, values, residual, wire); });
}

}  // namespace accord
