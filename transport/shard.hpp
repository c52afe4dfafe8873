#pragma once
// ZeRO-1 shard bounds: rank r of `world` owns [begin, end) of a flat buffer of `total` elements.
// Chunks are ceil(total/world) long; trailing ranks may own a short or empty shard, so bounds
// are computed explicitly rather than from `total % chunk` (see acco-notes.md trap 7).
#include <algorithm>
#include <cstddef>

namespace accord {

struct shard {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
  bool operator==(const shard&) const = default;
};

inline shard shard_of(std::size_t total, int world, int rank) {
  const std::size_t n = static_cast<std::size_t>(world);
  const std::size_t chunk = (total + n - 1) / n;
  const std::size_t begin = std::min(total, chunk * static_cast<std::size_t>(rank));
  return {begin, std::min(total, begin + chunk)};
}

}  // namespace accord
