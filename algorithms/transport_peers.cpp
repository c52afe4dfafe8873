#include "algorithms/transport_peers.hpp"

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

}  // namespace accord
