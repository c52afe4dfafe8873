#include "algorithms/kept_values.hpp"

namespace accord {

kept_values::kept_values(const std::vector<parameter_group>& groups) {
  for (const parameter_group& g : groups)
    if (g.role != "trained") (g.role == "averaged" ? averaged_ : broadcast_).push_back(g);
}

bool kept_values::holds(std::size_t index) const {
  bool found = false;
  for_each_within(index, index + 1, [&](std::size_t, std::size_t) { found = true; });
  return found;
}

std::size_t kept_values::first_begin(std::size_t total) const {
  std::size_t first = total;
  for_each_within(0, total, [&](std::size_t begin, std::size_t) { first = std::min(first, begin); });
  return first;
}

void kept_values::weigh_broadcast(std::span<float> buffer, bool first_rank, const round_totals& local,
                                  const round_totals& global) const {
  const float weight =
      first_rank && local.micro_batches > 0 ? static_cast<float>(global.micro_batches / local.micro_batches) : 0.f;
  for (const parameter_group& g : broadcast_)
    for (float& value : buffer.subspan(g.begin, g.end - g.begin)) value *= weight;
}

}  // namespace accord
