#pragma once
// The public round view (include/accord/round.hpp) over a worker's transport: what an app's
// aggregation rule (registered_rule.cpp) and a topology's worker (topology_rule.cpp) get.
#include <accord/round.hpp>

#include "algorithms/collective_channel.hpp"
#include "transport/transport.hpp"

namespace accord {

class transport_peers final : public round_peers {
public:
  // `channel`: where the collectives in flight run, kept by the caller from round to round (the
  // first start opens it on `link`); none: they run at once, as all_reduce.
  explicit transport_peers(transport& link, std::unique_ptr<collective_channel>* channel = nullptr)
      : link_(link), channel_(channel) {}
  int rank() const override { return link_.rank(); }
  int size() const override { return link_.size(); }
  void all_reduce(std::span<float> values) override { link_.all_reduce(values); }
  void all_reduce(std::span<double> values) override { link_.all_reduce(values); }
  std::unique_ptr<collective_in_flight> start_all_reduce(std::span<float> values) override;
  std::unique_ptr<collective_in_flight> start_all_reduce(std::span<double> values) override;
  // all_reduce_with_feedback (transport/feedback_all_reduce.hpp), in flight as the others.
  std::unique_ptr<collective_in_flight> start_all_reduce(std::span<float> values, std::span<float> residual,
                                                         std::string_view precision) override;
  // Over a user tag of its own: these pairwise messages never match anything else's.
  void exchange(int peer, std::span<const float> mine, std::span<float> theirs) override;

private:
  // The channel on this round's link, opened (or reopened, after a membership change) on first
  // use; nullptr where the link has none.
  collective_channel* channel();
  // start_all_reduce of either element type: on the channel, or at once where there is none.
  template <class Value>
  std::unique_ptr<collective_in_flight> start_on_channel(std::span<Value> values);

  transport& link_;
  std::unique_ptr<collective_channel>* channel_;
};

}  // namespace accord
