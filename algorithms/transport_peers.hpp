#pragma once
// The public round view (include/accord/round.hpp) over a worker's transport: what an app's
// aggregation rule (registered_rule.cpp) and a topology's worker (topology_rule.cpp) get.
#include <accord/round.hpp>

#include "transport/transport.hpp"

namespace accord {

class transport_peers final : public round_peers {
public:
  explicit transport_peers(transport& link) : link_(link) {}
  int rank() const override { return link_.rank(); }
  int size() const override { return link_.size(); }
  void all_reduce(std::span<float> values) override { link_.all_reduce(values); }
  void all_reduce(std::span<double> values) override { link_.all_reduce(values); }
  // Over a user tag of its own: these pairwise messages never match anything else's.
  void exchange(int peer, std::span<const float> mine, std::span<float> theirs) override;

private:
  transport& link_;
};

}  // namespace accord
