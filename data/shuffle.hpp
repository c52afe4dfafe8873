#pragma once
// Seeded shuffling without stored permutations: stream position p lies in epoch p / n and maps
// to a pseudo-random permutation of [0, n) chosen by (seed, epoch). The permutation is a
// keyed Feistel network over the smallest even power of two >= n, walked until it lands
// inside [0, n) ("cycle walking"), so it is a bijection, costs O(1) memory and is a pure
// function: safe to call from any thread.
#include <cstdint>
#include <stdexcept>

namespace accord {

// SplitMix64's finaliser: a fast, well-mixing 64-bit bijection.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class shuffled_order {
public:
  shuffled_order(std::uint64_t size, std::uint64_t seed) : size_(size), seed_(mix64(seed)) {
    if (size == 0 || size > (1ull << 62))
      throw std::invalid_argument("shuffled_order: data set size must be in [1, 2^62]");
    while ((1ull << (2 * half_bits_)) < size) ++half_bits_;
  }

  std::uint64_t size() const { return size_; }

  // Index in [0, size()) of the example at stream position `position`.
  std::uint64_t operator()(std::uint64_t position) const {
    const std::uint64_t key = mix64(seed_ ^ mix64(position / size_));
    std::uint64_t index = position % size_;
    do index = permute(index, key);
    while (index >= size_);
    return index;
  }

private:
  std::uint64_t permute(std::uint64_t value, std::uint64_t key) const {
    const std::uint64_t mask = (1ull << half_bits_) - 1;
    std::uint64_t left = value >> half_bits_;
    std::uint64_t right = value & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t next = left ^ (mix64(key + round * 0x632be59bd9b4e019ull + right) & mask);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  std::uint64_t size_;
  std::uint64_t seed_;
  unsigned half_bits_ = 1;
};

}  // namespace accord
