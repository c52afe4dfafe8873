#include "transport/feedback_all_reduce.hpp"

#include "transport/shard.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord {

namespace {

// A 16-bit reduce-scatter rounds the values it sends once and keeps no residual
// (transport::reduce_scatter_feedback adds it and sends): the values to the other owners are
// rounded here first, with feedback, so that they travel exactly; the own shard stays exact.
void round_with_feedback(std::span<float> values, std::span<float> residual, shard own, wire_precision precision) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] += residual[i];
    residual[i] = 0;
  }
  for (const shard others : {shard{0, own.begin}, shard{own.end, values.size()}}) {
    const std::span<float> sent = values.subspan(others.begin, others.size());
    const std::span<float> missed = residual.subspan(others.begin, others.size());
    std::ranges::copy(sent, missed.begin());
    round_to_wire(precision, sent);
    for (std::size_t i = 0; i < sent.size(); ++i) missed[i] -= sent[i];
  }
}

}  // namespace

void all_reduce_with_feedback(transport& link, std::span<float> values, std::span<float> residual,
                              wire_precision precision) {
  if (residual.size() != values.size())
    throw std::invalid_argument("all_reduce_with_feedback: residual holds " + std::to_string(residual.size()) +
                                " values, the sum " + std::to_string(values.size()));
  const shard own = shard_of(values.size(), link.size(), link.rank());
  const auto own_of = [&](std::span<float> all) { return all.subspan(own.begin, own.size()); };
  // Afterwards the own shard holds its exact sum (values + residual there included) and the
  // residual's own range is zero: paid into it.
  if (block_quantized(precision)) {
    link.reduce_scatter_feedback(values, 1.f, residual, precision, true);
  } else {
    round_with_feedback(values, residual, own, precision);
    link.reduce_scatter(values, precision);
  }
  std::ranges::copy(own_of(values), own_of(residual).begin());
  // The base every rank holds: zeros, kept per thread (a channel's thread sums on its own).
  thread_local std::vector<float> zeros;
  if (zeros.size() < values.size()) zeros.resize(values.size());
  link.all_gather_delta(values, std::span<const float>(zeros).first(values.size()), precision);
  // What the own sum's records missed: the exact sum less what every rank decoded.
  const std::span<float> owed = own_of(residual), decoded = own_of(values);
  for (std::size_t i = 0; i < owed.size(); ++i) owed[i] -= decoded[i];
}

}  // namespace accord
