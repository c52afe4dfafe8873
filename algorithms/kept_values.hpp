#pragma once
// The parameter groups whose values the app keeps (a module's buffers: job_config's
// parameter_groups with role averaged or broadcast). A worker submits their values summed over
// its micro-batches in place of gradients; every round sets them to their mean over the round's
// micro-batches of every worker ("averaged") or of rank 0 only ("broadcast"), instead of an
// optimizer step. Plain C++, shared by the update rules.
#include <accord/config.hpp>

#include "algorithms/round_state.hpp"

#include <cstddef>
#include <span>
#include <vector>

namespace accord {

class kept_values {
public:
  explicit kept_values(const std::vector<parameter_group>& groups);

  bool empty() const { return averaged_.empty() && broadcast_.empty(); }
  // Whether the flat parameter `index` is a kept value.
  bool holds(std::size_t index) const;
  // Where the first kept range begins; `total` without one.
  std::size_t first_begin(std::size_t total) const;
  // Weighs rank 0's sums of the broadcast groups by global / local micro-batches, so that the sum
  // over workers divided by the global count is rank 0's mean, and zeroes the other ranks' sums.
  void weigh_broadcast(std::span<float> buffer, bool first_rank, const round_totals& local,
                       const round_totals& global) const;
  // Calls f(begin, end) for each kept range's part within the flat parameters [from, to).
  template <class F>
  void for_each_within(std::size_t from, std::size_t to, F f) const {
    for (const auto* kept : {&averaged_, &broadcast_})
      for (const parameter_group& g : *kept) {
        const std::size_t begin = std::max<std::size_t>(g.begin, from), end = std::min<std::size_t>(g.end, to);
        if (begin < end) f(begin, end);
      }
  }

private:
  std::vector<parameter_group> averaged_, broadcast_;
};

}  // namespace accord
