#pragma once
// The public round view (include/accord/round.hpp) over a worker's transport: what an app's
// aggregation rule (registered_rule.cpp) and a topology's worker (topology_rule.cpp) get.
#include <accord/round.hpp>

#include "algorithms/collective_channel.hpp"
#include "transport/transport.hpp"

#include <functional>
#include <vector>

namespace accord {

class transport_peers final : public round_peers {
public:
  // `channel`: where the collectives in flight run, kept by the caller from round to round (the
  // first start opens it on `link`); none: they run at once, as all_reduce.
  explicit transport_peers(transport& link, std::unique_ptr<collective_channel>* channel = nullptr)
      : link_(link), channel_(channel) {}
  int rank() const override { return group().rank(); }
  int size() const override { return group().size(); }
  void all_reduce(std::span<float> values) override { group().all_reduce(values); }
  void all_reduce(std::span<double> values) override { group().all_reduce(values); }
  std::unique_ptr<collective_in_flight> start_all_reduce(std::span<float> values) override;
  std::unique_ptr<collective_in_flight> start_all_reduce(std::span<double> values) override;
  // all_reduce_with_feedback (transport/feedback_all_reduce.hpp), in flight as the others.
  std::unique_ptr<collective_in_flight> start_all_reduce(std::span<float> values, std::span<float> residual,
                                                         std::string_view precision) override;
  // Over a user tag of its own: these pairwise messages never match anything else's.
  void exchange(int peer, std::span<const float> mine, std::span<float> theirs) override;
  // Over make_subgroup_transport (transport/hierarchical.hpp) of the link, and of the channel for
  // collectives in flight; subgroups of a subgroup name their ranks within it.
  std::unique_ptr<round_peers> among(std::vector<int> members) override;

private:
  transport_peers(transport& link, std::unique_ptr<collective_channel>* channel, std::vector<int> members);
  // The transport this round's collectives run on: the link's subgroup, or the link itself.
  transport& group() const { return subgroup_ ? *subgroup_ : link_; }
  // Runs `collective` on this round's group of the channel's transport, in flight; at once on
  // group() where the link has no channel.
  std::unique_ptr<collective_in_flight> start(std::function<void(transport&)> collective);
  // The channel on this round's link, opened (or reopened, after a membership change) on first
  // use; nullptr where the link has none.
  collective_channel* channel();
  // start_all_reduce of either element type, through start.
  template <class Value>
  std::unique_ptr<collective_in_flight> start_on_channel(std::span<Value> values);

  transport& link_;
  std::unique_ptr<collective_channel>* channel_;
  std::vector<int> members_;              // the link's ranks of this subgroup; empty: every rank
  std::unique_ptr<transport> subgroup_;  // over link_, when members_ is not empty
};

}  // namespace accord
