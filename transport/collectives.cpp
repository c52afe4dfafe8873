// The default collectives, written once over send/recv/send_recv: ring reduce-scatter and
// ring all-gather (Gloo style), all-reduce as their composition, and the bit-packed sign vote
// as an all-to-all of packed word shards (votes up) plus a ring all-gather (result down).
#include <algorithm>
#include <array>
#include <bit>
#include <string>
#include <vector>

#include "transport/shard.hpp"
#include "transport/sign_vote.hpp"
#include "transport/transport.hpp"

namespace accord {
namespace {

// Ring steps travel in pieces of t.ring_piece_bytes(), so no single message grows with the model.
template <class T>
std::size_t piece_elements(const transport& t) {
  return std::max<std::size_t>(1, t.ring_piece_bytes() / sizeof(T));
}

int ring_rank(int rank, int offset, int world) { return ((rank + offset) % world + world) % world; }

template <class T>
std::span<T> clamped_subspan(std::span<T> data, std::size_t offset, std::size_t count) {
  offset = std::min(offset, data.size());
  return data.subspan(offset, std::min(count, data.size() - offset));
}

// Sends `out` to `to` while `in_count` elements arrive from `from`, piece by piece. Each
// incoming piece lands in landing(offset, count), then received(offset, piece) consumes it.
// Sender and receiver cut the same pieces because they agree on the lengths; empty pieces
// never travel.
template <class T, class Landing, class Received>
void ring_step(transport& t, std::uint64_t tag, int to, std::span<const T> out, int from,
               std::size_t in_count, Landing landing, Received received) {
  const std::size_t piece = piece_elements<T>(t);
  const std::size_t total = std::max(out.size(), in_count);
  for (std::size_t offset = 0; offset < total; offset += piece) {
    const std::span<const T> out_piece = clamped_subspan(out, offset, piece);
    const std::size_t in_piece_count = offset < in_count ? std::min(piece, in_count - offset) : 0;
    if (in_piece_count == 0) {
      t.send(to, tag, std::as_bytes(out_piece));
      continue;
    }
    const std::span<T> in_piece = landing(offset, in_piece_count);
    if (out_piece.empty())
      t.recv(from, tag, std::as_writable_bytes(in_piece));
    else
      t.send_recv(to, std::as_bytes(out_piece), from, std::as_writable_bytes(in_piece), tag);
    received(offset, std::span<const T>(in_piece));
  }
}

// Block of rank s when `elements` are sharded in whole units of `unit` elements.
shard block_of(std::size_t elements, std::size_t unit, int world, int s) {
  const shard units = shard_of(elements / unit, world, s);
  return {units.begin * unit, units.end * unit};
}

// After world-1 steps rank r holds the sum of shard r. In step k rank r passes the partial
// sum of shard r-k-1 to r+1 and adds its own values to the partial sum of shard r-k-2 coming
// from r-1, so shard c is summed in the fixed order c+1, c+2, ..., c whatever the timing.
template <class T>
void ring_reduce_scatter(transport& t, std::span<T> data, std::uint64_t tag) {
  const int world = t.size(), rank = t.rank();
  std::vector<T> scratch(std::min(shard_of(data.size(), world, 0).size(), piece_elements<T>(t)));
  for (int step = 0; step + 1 < world; ++step) {
    const shard out = shard_of(data.size(), world, ring_rank(rank, -step - 1, world));
    const shard in = shard_of(data.size(), world, ring_rank(rank, -step - 2, world));
    ring_step<T>(
        t, tag, ring_rank(rank, 1, world), data.subspan(out.begin, out.size()),
        ring_rank(rank, -1, world), in.size(),
        [&](std::size_t, std::size_t count) { return std::span<T>(scratch).first(count); },
        [&](std::size_t offset, std::span<const T> piece) {
          T* sum = data.data() + in.begin + offset;
          for (std::size_t i = 0; i < piece.size(); ++i) sum[i] += piece[i];
        });
  }
}

// Rank s contributes block_of(..., s); in step k rank r forwards block r-k to r+1 and
// receives block r-k-1 from r-1 straight into place.
template <class T>
void ring_all_gather(transport& t, std::span<T> data, std::size_t unit, std::uint64_t tag) {
  const int world = t.size(), rank = t.rank();
  for (int step = 0; step + 1 < world; ++step) {
    const shard out = block_of(data.size(), unit, world, ring_rank(rank, -step, world));
    const shard in = block_of(data.size(), unit, world, ring_rank(rank, -step - 1, world));
    ring_step<T>(
        t, tag, ring_rank(rank, 1, world), data.subspan(out.begin, out.size()),
        ring_rank(rank, -1, world), in.size(),
        [&](std::size_t offset, std::size_t count) { return data.subspan(in.begin + offset, count); },
        [](std::size_t, std::span<const T>) {});
  }
}

// Reduce-scatter then all-gather: every element is summed once, by its owner, and copied
// everywhere else, so all ranks end bit-identical.
template <class T>
void ring_all_reduce(transport& t, std::span<T> data, std::uint64_t scatter_tag, std::uint64_t gather_tag) {
  ring_reduce_scatter(t, data, scatter_tag);
  ring_all_gather(t, data, 1, gather_tag);
}

// Every rank sends shard s of `data` (shard_of(data.size(), world, s)) to its owner s and
// receives its own shard from every other rank, pairwise: step k sends to r+k and receives
// from r-k, so each rank sends (world-1)/world of `data`. Pieces of the own shard arrive in a
// fixed order (from r-1, then r-2, ...) and go to received(offset in the shard, piece).
template <class T, class Received>
void send_shards_to_owners(transport& t, std::span<const T> data, std::uint64_t tag, Received received) {
  const int world = t.size(), rank = t.rank();
  const shard mine = shard_of(data.size(), world, rank);
  std::vector<T> scratch(std::min(mine.size(), piece_elements<T>(t)));
  for (int step = 1; step < world; ++step) {
    const int to = ring_rank(rank, step, world);
    const shard out = shard_of(data.size(), world, to);
    ring_step<T>(
        t, tag, to, data.subspan(out.begin, out.size()), ring_rank(rank, -step, world), mine.size(),
        [&](std::size_t, std::size_t count) { return std::span<T>(scratch).first(count); }, received);
  }
}

// 16-bit reduce-scatter: each rank's values are rounded once and go straight to the shard's
// owner, which adds them to its own fp32 values in fp32 as they arrive (a ring would round
// every partial sum again). Same bytes per rank as the ring.
void direct_reduce_scatter(transport& t, std::span<float> data, wire_precision precision, std::uint64_t tag) {
  std::vector<std::uint16_t> wire(data.size());
  to_wire(precision, data, wire);
  const shard mine = shard_of(data.size(), t.size(), t.rank());
  const std::span<float> sums = data.subspan(mine.begin, mine.size());
  send_shards_to_owners<std::uint16_t>(t, wire, tag, [&](std::size_t offset, std::span<const std::uint16_t> piece) {
    add_from_wire(precision, piece, sums.subspan(offset, piece.size()));
  });
}

// 16-bit all-gather: the owners' shards travel rounded, and every rank unpacks all of them,
// its own included, so all replicas hold the same rounded values.
void rounded_all_gather(transport& t, std::span<float> data, wire_precision precision, std::uint64_t tag) {
  std::vector<std::uint16_t> wire(data.size());
  const shard mine = shard_of(data.size(), t.size(), t.rank());
  to_wire(precision, data.subspan(mine.begin, mine.size()), std::span(wire).subspan(mine.begin, mine.size()));
  ring_all_gather<std::uint16_t>(t, wire, 1, tag);
  from_wire(precision, wire, data);
}

void expect_words(std::string_view backend, const char* collective, const char* what, std::size_t words,
                  std::size_t count) {
  if (words != packed_words(count))
    throw std::invalid_argument(std::string(backend) + (backend.empty() ? "" : " ") + collective + ": " + what +
                                " has " + std::to_string(words) + " packed words for " + std::to_string(count) +
                                " elements, expected " + std::to_string(packed_words(count)));
}

// Vote counts of a word shard, bit-sliced: plane j holds bit j of the count of every element
// (plane j of shard word i is planes[j * words + i]), so adding one voter's packed word is a
// ripple-carry add of a few word operations for 64 elements at once.
class vote_counter {
public:
  vote_counter(std::span<std::uint64_t> planes, int bits) : planes_(planes), bits_(bits), words_(planes.size() / bits) {
    std::fill(planes_.begin(), planes_.end(), 0);
  }
  void add(std::size_t first_word, std::span<const std::uint64_t> votes) {
    for (std::size_t i = 0; i < votes.size(); ++i) {
      std::uint64_t carry = votes[i];
      for (int j = 0; j < bits_ && carry != 0; ++j) {
        std::uint64_t& plane = planes_[j * words_ + first_word + i];
        const std::uint64_t next_carry = plane & carry;
        plane ^= carry;
        carry = next_carry;
      }
    }
  }

private:
  std::span<std::uint64_t> planes_;
  int bits_;
  std::size_t words_;
};

// Bits needed for a count 0..world: ceil(log2(world + 1)).
int count_bits(int world) { return std::bit_width(static_cast<unsigned>(world)); }

// Votes up: rank s owns word shard s of the packed vector, and each rank sends the others'
// shards to their owners (send_shards_to_owners). `planes` receives this rank's counts.
void count_votes(transport& t, std::span<const std::uint64_t> signs, std::uint64_t tag,
                 std::span<std::uint64_t> planes) {
  const int world = t.size(), rank = t.rank();
  const shard mine = shard_of(signs.size(), world, rank);
  vote_counter counter(planes, count_bits(world));
  counter.add(0, signs.subspan(mine.begin, mine.size()));
  send_shards_to_owners<std::uint64_t>(
      t, signs, tag, [&](std::size_t offset, std::span<const std::uint64_t> piece) { counter.add(offset, piece); });
}

}  // namespace

void interrupt_flag::raise(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (raised_.load(std::memory_order_relaxed)) return;
  why_ = why;
  raised_.store(true, std::memory_order_release);
}

std::string interrupt_flag::message(std::string_view who) const {
  std::lock_guard lock(mutex_);
  return std::string(who) + "interrupted: " + why_;
}

void transport::interrupt(const std::string& why) { interruption_.raise(why); }

void transport::throw_if_interrupted() const {
  interruption_.throw_if_raised((backend_.empty() ? "" : backend_ + " ") + "rank " + std::to_string(rank()) + ": ");
}

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

void transport::send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                          std::uint64_t tag) {
  send(to, tag, out);
  recv(from, tag, in);
}

void transport::reduce_scatter(std::span<float> data, wire_precision precision) {
  throw_if_interrupted();
  if (size() == 1) return;
  if (precision == wire_precision::fp32)
    ring_reduce_scatter(*this, data, next_collective_tag());
  else
    direct_reduce_scatter(*this, data, precision, next_collective_tag());
}

void transport::all_gather(std::span<float> data, wire_precision precision) {
  throw_if_interrupted();
  if (size() == 1) return;
  if (precision == wire_precision::fp32)
    ring_all_gather(*this, data, 1, next_collective_tag());
  else
    rounded_all_gather(*this, data, precision, next_collective_tag());
}

void transport::all_reduce(std::span<float> data, wire_precision precision) {
  throw_if_interrupted();
  if (size() == 1) return;
  if (precision == wire_precision::fp32) {
    const std::uint64_t scatter_tag = next_collective_tag();
    ring_all_reduce(*this, data, scatter_tag, next_collective_tag());
    return;
  }
  reduce_scatter(data, precision);
  all_gather(data, precision);
}

void transport::all_reduce(std::span<double> data) {
  throw_if_interrupted();
  if (size() == 1) return;
  const std::uint64_t scatter_tag = next_collective_tag();
  ring_all_reduce(*this, data, scatter_tag, next_collective_tag());
}

void transport::sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                              std::span<std::uint64_t> result) {
  throw_if_interrupted();
  check_sign_majority("", signs, count, result);
  const int world = size(), bits = count_bits(world);
  const shard mine = shard_of(signs.size(), world, rank());
  std::vector<std::uint64_t> planes(bits * mine.size());
  count_votes(*this, signs, next_collective_tag(), planes);
  // Majority is 2·count > world, i.e. count > world/2 (integer division); with an even world
  // count == world/2 is a tie. Compare the bit-sliced counts with world/2 from the top bit.
  const unsigned half = static_cast<unsigned>(world) / 2;
  const bool ties_possible = world % 2 == 0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    std::uint64_t above = 0, equal = ~0ull;
    for (int j = bits - 1; j >= 0; --j) {
      const std::uint64_t plane = planes[j * mine.size() + i];
      if ((half >> j) & 1) {
        equal &= plane;
      } else {
        above |= equal & plane;
        equal &= ~plane;
      }
    }
    const std::size_t word = mine.begin + i;
    const std::uint64_t ties = ties_possible ? equal & tie_word(word, round) : 0;
    result[word] = (above | ties) & valid_bits(word, count);
  }
  if (world > 1) ring_all_gather(*this, result, 1, next_collective_tag());
}

void transport::sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                            std::span<std::uint16_t> plus_votes) {
  throw_if_interrupted();
  check_sign_counts("", signs, count, plus_votes);
  const int world = size(), bits = count_bits(world);
  if (world > 65535) throw std::invalid_argument("sign_counts: " + std::to_string(world) + " ranks overflow 16-bit vote counts");
  // Wire layout of the counts: owner s's block is the `bits` planes of its word shard, so
  // the blocks are contiguous and the all-gather moves `bits` bits per element.
  std::vector<std::uint64_t> packed(bits * signs.size());
  const shard mine = block_of(packed.size(), bits, world, rank());
  count_votes(*this, signs, next_collective_tag(), std::span(packed).subspan(mine.begin, mine.size()));
  if (world > 1) ring_all_gather(*this, std::span(packed), bits, next_collective_tag());
  for (int owner = 0; owner < world; ++owner) {
    const shard words = shard_of(signs.size(), world, owner);
    const std::uint64_t* planes = packed.data() + words.begin * bits;
    for (std::size_t i = 0; i < words.size(); ++i) {
      std::array<std::uint64_t, 16> word_planes;  // counts fit std::uint16_t: at most 16 planes
      for (int j = 0; j < bits; ++j) word_planes[j] = planes[j * words.size() + i];
      const std::size_t first = (words.begin + i) * 64;
      const std::size_t valid = std::min<std::size_t>(64, count - first);
      for (std::size_t b = 0; b < valid; ++b) {
        unsigned votes = 0;
        for (int j = 0; j < bits; ++j) votes |= static_cast<unsigned>((word_planes[j] >> b) & 1) << j;
        plus_votes[first + b] = static_cast<std::uint16_t>(votes);
      }
    }
  }
}

}  // namespace accord
