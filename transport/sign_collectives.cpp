// Distributed Lion's sign collectives over the default exchanges: the bit-packed majority vote
// and the vote counts, each an all-to-all of packed word shards (votes up, counted bit-sliced by
// each shard's owner) plus a ring all-gather (result down).
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>

#include "transport/exchanges.hpp"
#include "transport/sign_vote.hpp"
#include "transport/transport.hpp"

namespace accord {
namespace {

using namespace exchanges;

void expect_words(std::string_view backend, const char* collective, const char* what, std::size_t words,
                  std::size_t count) {
  if (words != packed_words(count))
    throw std::invalid_argument(std::string(backend) + (backend.empty() ? "" : " ") + collective + ": " + what +
                                " has " + std::to_string(words) + " packed words for " + std::to_string(count) +
                                " elements, expected " + std::to_string(packed_words(count)));
}

// Words handled per pass of the counting loops: their carries (or comparison state) stay in
// L1 while every plane is swept, and each sweep is a plain loop the compiler vectorises.
constexpr std::size_t vote_block_words = 512;

// Vote counts of a word shard, bit-sliced: plane j holds bit j of the count of every element
// (plane j of shard word i is planes[j * words + i]), so adding one voter's packed words is a
// ripple-carry add of a few word operations for 64 elements at once. The first voter's words
// become plane 0 as they are.
class vote_counter {
public:
  vote_counter(std::span<std::uint64_t> planes, int bits, std::span<const std::uint64_t> first_votes)
      : planes_(planes), bits_(bits), words_(planes.size() / bits) {
    std::copy(first_votes.begin(), first_votes.end(), planes_.begin());
    std::fill(planes_.begin() + static_cast<std::ptrdiff_t>(words_), planes_.end(), 0);
  }
  void add(std::size_t first_word, std::span<const std::uint64_t> votes) {
    std::array<std::uint64_t, vote_block_words> carry;
    for (std::size_t begin = 0; begin < votes.size(); begin += vote_block_words) {
      const std::size_t n = std::min(vote_block_words, votes.size() - begin);
      std::copy_n(votes.data() + begin, n, carry.data());
      for (int j = 0; j < bits_; ++j) {
        std::uint64_t* plane = planes_.data() + j * words_ + first_word + begin;
        std::uint64_t carried = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const std::uint64_t bit = plane[i];
          plane[i] = bit ^ carry[i];
          carry[i] &= bit;
          carried |= carry[i];
        }
        if (carried == 0) break;
      }
    }
  }

private:
  std::span<std::uint64_t> planes_;
  int bits_;
  std::size_t words_;
};

// Lane k (bits 16k..16k+15) of nibble_lanes[n] is bit k of n: four elements' 0/1 as four
// std::uint16_t at once.
constexpr std::array<std::uint64_t, 16> nibble_lanes = [] {
  std::array<std::uint64_t, 16> lanes{};
  for (unsigned n = 0; n < 16; ++n)
    for (unsigned k = 0; k < 4; ++k)
      if ((n >> k) & 1) lanes[n] |= 1ull << (16 * k);
  return lanes;
}();
static_assert(std::endian::native == std::endian::little, "unpack_counts stores 16-bit lanes little-endian");

// The counts of one packed word's elements (bit b of plane j is bit j of element b's count)
// as std::uint16_t, four elements per word operation instead of one bit at a time.
void unpack_counts(std::span<const std::uint64_t> word_planes, std::span<std::uint16_t> out) {
  std::array<std::uint64_t, 16> groups{};  // groups[g]: elements 4g..4g+3
  for (std::size_t j = 0; j < word_planes.size(); ++j)
    for (std::size_t g = 0; g < groups.size(); ++g) groups[g] |= nibble_lanes[(word_planes[j] >> (4 * g)) & 15] << j;
  std::memcpy(out.data(), groups.data(), out.size_bytes());
}

// Votes up: rank s owns word shard s of the packed vector, and each rank sends the others'
// shards to their owners (send_shards_to_owners). `planes` receives this rank's counts.
void count_votes(transport& t, std::span<const std::uint64_t> signs, std::uint64_t tag,
                 std::span<std::uint64_t> planes) {
  const int world = t.size(), rank = t.rank();
  const shard mine = shard_of(signs.size(), world, rank);
  vote_counter counter(planes, count_bits(world), signs.subspan(mine.begin, mine.size()));
  send_shards_to_owners<std::uint64_t>(
      t, signs, even_shards(signs.size(), world), tag,
      [&](std::size_t offset, std::span<const std::uint64_t> piece) { counter.add(offset, piece); });
}

}  // namespace

void transport::check_sign_majority(std::string_view backend, std::span<const std::uint64_t> signs,
                                    std::size_t count, std::span<const std::uint64_t> result) {
  expect_words(backend, "sign_majority", "signs", signs.size(), count);
  expect_words(backend, "sign_majority", "result", result.size(), count);
}

void transport::check_sign_counts(std::string_view backend, std::span<const std::uint64_t> signs,
                                  std::size_t count, std::span<const std::uint16_t> plus_votes) {
  expect_words(backend, "sign_counts", "signs", signs.size(), count);
  if (plus_votes.size() != count)
    throw std::invalid_argument(std::string(backend) + (backend.empty() ? "" : " ") +
                                "sign_counts: plus_votes has " + std::to_string(plus_votes.size()) +
                                " elements, expected " + std::to_string(count));
}

void transport::sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                              std::span<std::uint64_t> result) {
  throw_if_interrupted();
  check_sign_majority("", signs, count, result);
  const int world = size(), bits = count_bits(world);
  const shard mine = shard_of(signs.size(), world, rank());
  vote_planes_.resize(bits * mine.size());
  const std::span<const std::uint64_t> planes = vote_planes_;
  count_votes(*this, signs, next_collective_tag(), vote_planes_);
  // Majority is 2·count > world, i.e. count > world/2 (integer division); with an even world
  // count == world/2 is a tie. Compare the bit-sliced counts with world/2 from the top bit.
  // Ties vote by tie_word, the same for every word: words start at even indices.
  const unsigned half = static_cast<unsigned>(world) / 2;
  const std::uint64_t ties = world % 2 == 0 ? tie_word(0, round) : 0;
  std::array<std::uint64_t, vote_block_words> above, equal;
  for (std::size_t begin = 0; begin < mine.size(); begin += vote_block_words) {
    const std::size_t n = std::min(vote_block_words, mine.size() - begin);
    std::fill_n(above.data(), n, 0);
    std::fill_n(equal.data(), n, ~0ull);
    for (int j = bits - 1; j >= 0; --j) {
      const std::uint64_t* plane = planes.data() + j * mine.size() + begin;
      if ((half >> j) & 1) {
        for (std::size_t i = 0; i < n; ++i) equal[i] &= plane[i];
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          above[i] |= equal[i] & plane[i];
          equal[i] &= ~plane[i];
        }
      }
    }
    std::uint64_t* out = result.data() + mine.begin + begin;
    for (std::size_t i = 0; i < n; ++i) out[i] = above[i] | (equal[i] & ties);
  }
  if (mine.size() > 0) result[mine.end - 1] &= valid_bits(mine.end - 1, count);
  if (world > 1) ring_collective(*this, result, false, true, 1, next_collective_tag());
}

void transport::sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                            std::span<std::uint16_t> plus_votes) {
  throw_if_interrupted();
  check_sign_counts("", signs, count, plus_votes);
  const int world = size(), bits = count_bits(world);
  if (world > 65535) throw std::invalid_argument("sign_counts: " + std::to_string(world) + " ranks overflow 16-bit vote counts");
  // Wire layout of the counts: owner s's block is the `bits` planes of its word shard, so
  // the blocks are contiguous and the all-gather moves `bits` bits per element.
  vote_planes_.resize(bits * signs.size());
  const std::span<std::uint64_t> packed = vote_planes_;
  const shard mine = block_of(packed.size(), bits, world, rank());
  count_votes(*this, signs, next_collective_tag(), packed.subspan(mine.begin, mine.size()));
  if (world > 1) ring_collective(*this, packed, false, true, bits, next_collective_tag());
  for (int owner = 0; owner < world; ++owner) {
    const shard words = shard_of(signs.size(), world, owner);
    const std::uint64_t* planes = packed.data() + words.begin * bits;
    for (std::size_t i = 0; i < words.size(); ++i) {
      std::array<std::uint64_t, 16> word_planes;  // counts fit std::uint16_t: at most 16 planes
      for (int j = 0; j < bits; ++j) word_planes[j] = planes[j * words.size() + i];
      const std::size_t first = (words.begin + i) * 64;
      unpack_counts(std::span(word_planes).first(bits), plus_votes.subspan(first, std::min<std::size_t>(64, count - first)));
    }
  }
}

}  // namespace accord
