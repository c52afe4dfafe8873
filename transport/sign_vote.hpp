#pragma once
// Packed sign vectors and the tie rule of the majority vote, shared by the collectives
// (transport/collectives.cpp) and the Lion optimizers, so that every replica breaks ties the
// same way. Layout: element i is bit i%64 of word i/64 (see packed_words in transport.hpp).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "transport/transport.hpp"

namespace accord {

// Bits a count of 0..voters votes takes: ceil(log2(voters + 1)).
inline int count_bits(int voters) { return std::bit_width(static_cast<unsigned>(voters)); }

// The vote of a tie (as many +1 as -1 votes, only possible with an even number of voters):
// +1 when element index + round is even. Neighbouring elements split evenly and each element
// alternates between rounds, so ties push parameters neither way on average.
inline bool tie_vote(std::size_t index, std::uint64_t round) { return ((index + round) & 1) == 0; }

// tie_vote for the 64 elements of packed word `word`, as a word. Word starts are even indices,
// so only the bit position and the round decide.
inline std::uint64_t tie_word(std::size_t word, std::uint64_t round) {
  constexpr std::uint64_t even_bits = 0x5555555555555555ull;
  return tie_vote(word * 64, round) ? even_bits : ~even_bits;
}

// The bits of word `word` that hold elements of a vector of `count` (the rest is padding).
inline std::uint64_t valid_bits(std::size_t word, std::size_t count) {
  const std::size_t first = word * 64;
  if (count >= first + 64) return ~0ull;
  if (count <= first) return 0;
  return (1ull << (count - first)) - 1;
}

inline bool packed_bit(std::span<const std::uint64_t> packed, std::size_t index) {
  return (packed[index / 64] >> (index % 64)) & 1;
}

// Packs is_plus(i) for i in [0, count) into `packed` (packed_words(count) words), padding zero.
template <class IsPlus>
void pack_signs(std::size_t count, IsPlus is_plus, std::span<std::uint64_t> packed) {
  if (packed.size() != packed_words(count))
    throw std::invalid_argument("pack_signs: " + std::to_string(packed.size()) + " words for " +
                                std::to_string(count) + " elements, expected " +
                                std::to_string(packed_words(count)));
  for (std::size_t w = 0; w < packed.size(); ++w) {
    std::uint64_t word = 0;
    const std::size_t end = std::min(count, (w + 1) * 64);
    for (std::size_t i = w * 64; i < end; ++i) word |= std::uint64_t{is_plus(i) ? 1u : 0u} << (i % 64);
    packed[w] = word;
  }
}

}  // namespace accord
