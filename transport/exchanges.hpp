// The exchanges the default collectives are built of, over post_send/post_recv/wait: steps of
// pieces pipelined on the wire (piece_exchange), the ring's reduce-scatter and all-gather steps
// (Gloo style), and the pairwise all-to-all that sends each owner its block. Internal to the
// transport folder: collectives.cpp and sign_collectives.cpp use them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "transport/shard.hpp"
#include "transport/transport.hpp"

namespace accord::exchanges {

inline int ring_rank(int rank, int offset, int world) { return ((rank + offset) % world + world) % world; }

template <class T>
std::span<T> clamped_subspan(std::span<T> data, std::size_t offset, std::size_t count) {
  offset = std::min(offset, data.size());
  return data.subspan(offset, std::min(count, data.size() - offset));
}

// Receives posted ahead of the one being consumed: enough to keep the link busy while an
// arrived piece is reduced, few enough that scratch stays small.
constexpr std::size_t pipeline_depth = 4;
// Pieces never get smaller than this: below it per-message costs dominate.
constexpr std::size_t min_piece_bytes = 32 << 10;

// The piece size of a collective over `total` elements: each rank's block in about
// pipeline_depth pieces, within [min_piece_bytes, t.ring_piece_bytes()]. Every rank derives it
// from the same total, so all cut the same pieces.
template <class T>
std::size_t piece_elements(const transport& t, std::size_t total) {
  const std::size_t largest = std::max<std::size_t>(1, t.ring_piece_bytes() / sizeof(T));
  const std::size_t smallest = std::min(largest, std::max<std::size_t>(1, min_piece_bytes / sizeof(T)));
  const std::size_t per_block = (total + static_cast<std::size_t>(t.size()) - 1) / static_cast<std::size_t>(t.size());
  return std::clamp((per_block + pipeline_depth - 1) / pipeline_depth, smallest, largest);
}

// One step of an exchange: `out` goes to `to` while `in_count` elements arrive from `from`.
template <class T>
struct exchange_step {
  int to = 0;
  std::span<const T> out;
  int from = 0;
  std::size_t in_count = 0;
};

// Runs `steps` in pieces of `piece` elements, pipelined: up to `depth` receives are posted
// ahead of the one being consumed, so pieces keep arriving while one is reduced. Sends are
// posted as soon as their data is ready: all at once, or with `chained` (ring reduce-scatter
// and all-gather, where step s+1 forwards what step s received) piece j of step s+1 right after
// piece j of step s was consumed; out(s+1) must then be as long as in_count(s). Piece k of all
// receives lands in landing(step, offset, count, k % depth) — a slot is reused only after its
// previous piece was consumed — and finish's received(step, offset, piece) consumes it, in step
// order, then offset order. Sender and receiver cut the same pieces because they agree on the
// lengths; empty pieces never travel.
// Construction posts the first sends and receives and returns: with every receive posted
// (depth: receive_count()) and not chained, the whole exchange travels while this thread does
// other work until finish(). Destroyed unfinished (an error between start and finish), it
// interrupts the transport and abandons its transfers, so that nothing writes into or reads
// from freed buffers and nothing waits on a peer that may be gone: the collective sequence of
// that endpoint is broken anyway.
template <class T>
class piece_exchange {
public:
  using landing_fn = std::function<std::span<T>(std::size_t step, std::size_t offset, std::size_t count, std::size_t slot)>;

  piece_exchange(transport& t, std::uint64_t tag, std::vector<exchange_step<T>> steps, bool chained, std::size_t piece,
                 std::size_t depth, landing_fn landing)
      : t_(t), tag_(tag), steps_(std::move(steps)), chained_(chained), piece_(piece), depth_(std::max<std::size_t>(1, depth)),
        landing_(std::move(landing)) {
    for (std::size_t s = 0; s < steps_.size(); ++s)
      for (std::size_t offset = 0; offset < steps_[s].in_count; offset += piece_)
        receives_.push_back({s, offset, std::min(piece_, steps_[s].in_count - offset), {}});
    guarded([&] {
      for (std::size_t s = 0; s < (chained_ ? std::min<std::size_t>(1, steps_.size()) : steps_.size()); ++s)
        for (std::size_t offset = 0; offset < steps_[s].out.size(); offset += piece_) send_piece(s, offset);
      post_receives(depth_);
    });
  }
  piece_exchange(const piece_exchange&) = delete;
  piece_exchange& operator=(const piece_exchange&) = delete;

  ~piece_exchange() {
    if (done_) return;
    t_.interrupt("an exchange was left unfinished");
    // Waiting for the newest transfer meets the interruption (the defaults' receives before it
    // in posting order first) and abandons every transfer in flight.
    std::optional<transport::request> newest;
    if (!sends_.empty()) newest = sends_.back();
    if (consumed_ < posted_) newest = std::max(newest.value_or(0), receives_[posted_ - 1].handle);
    try {
      if (newest) t_.wait(*newest);
    } catch (...) {
    }
  }

  // Receives every piece (received: as above), forwarding chained ones, then waits for the sends.
  template <class Received>
  void finish(Received received) {
    guarded([&] {
      for (; consumed_ < receives_.size(); ++consumed_) {
        const incoming& r = receives_[consumed_];
        t_.wait(r.handle);
        received(r.step, r.offset, std::span<const T>(r.into));
        if (chained_ && r.step + 1 < steps_.size()) send_piece(r.step + 1, r.offset);
        post_receives(consumed_ + 1 + depth_);
      }
      for (const transport::request handle : sends_) t_.wait(handle);
    });
    done_ = true;
  }

private:
  struct incoming {
    std::size_t step, offset, count;
    std::span<T> into;
    transport::request handle = 0;
  };

  // A post or wait that throws has abandoned every transfer in flight: nothing is left to end.
  template <class Body>
  void guarded(Body body) {
    try {
      body();
    } catch (...) {
      done_ = true;
      throw;
    }
  }

  void send_piece(std::size_t s, std::size_t offset) {
    const std::span<const T> out = clamped_subspan(steps_[s].out, offset, piece_);
    if (!out.empty()) sends_.push_back(t_.post_send(steps_[s].to, tag_, std::as_bytes(out)));
  }

  void post_receives(std::size_t until) {
    for (; posted_ < std::min(until, receives_.size()); ++posted_) {
      incoming& r = receives_[posted_];
      r.into = landing_(r.step, r.offset, r.count, posted_ % depth_);
      r.handle = t_.post_recv(steps_[r.step].from, tag_, std::as_writable_bytes(r.into));
    }
  }

  transport& t_;
  std::uint64_t tag_;
  std::vector<exchange_step<T>> steps_;
  bool chained_;
  std::size_t piece_, depth_;
  landing_fn landing_;
  std::vector<incoming> receives_;
  std::vector<transport::request> sends_;
  std::size_t posted_ = 0, consumed_ = 0;
  bool done_ = false;
};

// piece_exchange from start to finish, pipeline_depth receives ahead.
template <class T, class Landing, class Received>
void pipelined_exchange(transport& t, std::uint64_t tag, std::vector<exchange_step<T>> steps, bool chained,
                        std::size_t piece, Landing landing, Received received) {
  piece_exchange<T>(t, tag, std::move(steps), chained, piece, pipeline_depth, landing).finish(received);
}

// Storage kept per thread between calls (a transport is driven by one thread at a time):
// fresh pages for every collective cost a fault and a clearing per page, about a tenth of the
// copy. `Use` keeps apart the buffers one collective needs at once; contents are whatever an
// earlier call left.
enum class kept_use { landing, wire };
template <class T, kept_use Use>
std::span<T> kept_storage(std::size_t count) {
  thread_local std::vector<T> kept;
  if (kept.size() < count) kept.resize(count);
  return std::span<T>(kept).first(count);
}

// Scratch for pipeline_depth pieces, where receives land before they are consumed.
template <class T>
class piece_slots {
public:
  piece_slots(std::size_t piece, std::size_t largest_step)
      : piece_(std::min(piece, largest_step)), storage_(kept_storage<T, kept_use::landing>(piece_ * pipeline_depth)) {}
  std::span<T> slot(std::size_t index, std::size_t count) { return storage_.subspan(index * piece_, count); }

private:
  std::size_t piece_;
  std::span<T> storage_;
};

// sum[i] += piece[i]. Distinct arrays (restrict) in groups of a fixed 8: GCC vectorises this
// at -O2 as well as -O3 (a plain loop over possibly aliasing spans needs -O3 and a runtime
// overlap check), so the reduction runs at memory speed whatever the build type.
template <class T>
void add_piece(T* __restrict sum, const T* __restrict piece, std::size_t count) {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (std::size_t k = 0; k < 8; ++k) sum[i + k] += piece[i + k];
  for (; i < count; ++i) sum[i] += piece[i];
}

// Block of rank s when `elements` are sharded in whole units of `unit` elements.
inline shard block_of(std::size_t elements, std::size_t unit, int world, int s) {
  const shard units = shard_of(elements / unit, world, s);
  return {units.begin * unit, units.end * unit};
}

// The steps of a ring reduce-scatter (blocks of shard_of(data.size(), ...)): after world-1 steps
// rank r holds the sum of shard r. In step k rank r passes the partial sum of shard r-k-1 to r+1
// and adds its own values to the partial sum of shard r-k-2 coming from r-1, so shard c is
// summed in the fixed order c+1, c+2, ..., c whatever the timing.
// `owner_block(s)`: the block rank s ends with (its shard, or a bucket's part of it).
template <class T, class OwnerBlock>
void add_reduce_scatter_steps(const transport& t, std::span<const T> data, OwnerBlock owner_block,
                              std::vector<exchange_step<T>>& steps, std::vector<shard>& in_blocks) {
  const int world = t.size(), rank = t.rank();
  for (int step = 0; step + 1 < world; ++step) {
    const shard out = owner_block(ring_rank(rank, -step - 1, world));
    const shard in = owner_block(ring_rank(rank, -step - 2, world));
    steps.push_back({ring_rank(rank, 1, world), data.subspan(out.begin, out.size()), ring_rank(rank, -1, world), in.size()});
    in_blocks.push_back(in);
  }
}

// The steps of a ring all-gather: rank s contributes block_of(..., s); in step k rank r forwards
// block r-k to r+1 and receives block r-k-1 from r-1 straight into place.
template <class T>
void add_all_gather_steps(const transport& t, std::span<const T> data, std::size_t unit,
                          std::vector<exchange_step<T>>& steps, std::vector<shard>& in_blocks) {
  const int world = t.size(), rank = t.rank();
  for (int step = 0; step + 1 < world; ++step) {
    const shard out = block_of(data.size(), unit, world, ring_rank(rank, -step, world));
    const shard in = block_of(data.size(), unit, world, ring_rank(rank, -step - 1, world));
    steps.push_back({ring_rank(rank, 1, world), data.subspan(out.begin, out.size()), ring_rank(rank, -1, world), in.size()});
    in_blocks.push_back(in);
  }
}

// Ring reduce-scatter (`reduce`), all-gather (`gather`, blocks of `unit` elements) or both in
// one pipeline (all-reduce: reduce-scatter ends with rank r holding shard r, which is what the
// all-gather's first step sends, so pieces flow from one into the other without a barrier).
// Every element is summed once, by its owner, and copied everywhere else, so all ranks end
// bit-identical.
// Shard s of `total` elements (shard_of), as a callable for the exchanges below.
inline auto even_shards(std::size_t total, int world) {
  return [total, world](int s) { return shard_of(total, world, s); };
}

template <class T>
void ring_collective(transport& t, std::span<T> data, bool reduce, bool gather, std::size_t unit, std::uint64_t tag) {
  std::vector<exchange_step<T>> steps;
  std::vector<shard> in_blocks;
  if (reduce) add_reduce_scatter_steps<T>(t, data, even_shards(data.size(), t.size()), steps, in_blocks);
  const std::size_t reduce_steps = steps.size();
  if (gather) add_all_gather_steps<T>(t, data, unit, steps, in_blocks);
  const std::size_t piece = piece_elements<T>(t, data.size());
  piece_slots<T> scratch(piece, reduce ? shard_of(data.size(), t.size(), 0).size() : 0);
  pipelined_exchange<T>(
      t, tag, steps, true, piece,
      [&](std::size_t step, std::size_t offset, std::size_t count, std::size_t slot) {
        return step < reduce_steps ? scratch.slot(slot, count) : data.subspan(in_blocks[step].begin + offset, count);
      },
      [&](std::size_t step, std::size_t offset, std::span<const T> piece_in) {
        if (step < reduce_steps) add_piece(data.data() + in_blocks[step].begin + offset, piece_in.data(), piece_in.size());
      });
}

// A ring reduce-scatter where rank s ends with the sum of owner_block(s) (blocks of `data` that
// need not cover it): each block is summed in the same order as in ring_collective (c+1, ..., c).
template <class OwnerBlock>
void ring_reduce_scatter(transport& t, std::span<float> data, OwnerBlock owner_block, std::uint64_t tag) {
  std::vector<exchange_step<float>> steps;
  std::vector<shard> in_blocks;
  add_reduce_scatter_steps<float>(t, data, owner_block, steps, in_blocks);
  std::size_t largest = 0;
  for (int s = 0; s < t.size(); ++s) largest = std::max(largest, owner_block(s).size());
  const std::size_t piece = piece_elements<float>(t, data.size());
  piece_slots<float> scratch(piece, largest);
  pipelined_exchange<float>(
      t, tag, steps, true, piece,
      [&](std::size_t, std::size_t, std::size_t count, std::size_t slot) { return scratch.slot(slot, count); },
      [&](std::size_t step, std::size_t offset, std::span<const float> piece_in) {
        add_piece(data.data() + in_blocks[step].begin + offset, piece_in.data(), piece_in.size());
      });
}

// The steps of sending block s of `data` (owner_block(s)) to each other owner s, pairwise:
// step k sends to r+k and receives this rank's block from r-k.
template <class T, class OwnerBlock>
std::vector<exchange_step<T>> steps_to_owners(const transport& t, std::span<const T> data, OwnerBlock owner_block) {
  const int world = t.size(), rank = t.rank();
  const shard mine = owner_block(rank);
  std::vector<exchange_step<T>> steps;
  for (int step = 1; step < world; ++step) {
    const int to = ring_rank(rank, step, world);
    const shard out = owner_block(to);
    steps.push_back({to, data.subspan(out.begin, out.size()), ring_rank(rank, -step, world), mine.size()});
  }
  return steps;
}

// Every rank sends block s of `data` (owner_block(s)) to its owner s and receives its own
// block from every other rank, pairwise: step k sends to r+k and receives from r-k, so each
// rank sends all of `data` but its own block. Pieces of the own block arrive in a fixed order
// (from r-1, then r-2, ...) and go to received(offset in the block, piece).
template <class T, class OwnerBlock, class Received>
void send_shards_to_owners(transport& t, std::span<const T> data, OwnerBlock owner_block, std::uint64_t tag,
                           Received received) {
  const shard mine = owner_block(t.rank());
  const std::size_t piece = piece_elements<T>(t, data.size());
  piece_slots<T> scratch(piece, mine.size());
  pipelined_exchange<T>(
      t, tag, steps_to_owners(t, data, owner_block), false, piece,
      [&](std::size_t, std::size_t, std::size_t count, std::size_t slot) { return scratch.slot(slot, count); },
      [&](std::size_t, std::size_t offset, std::span<const T> piece_in) { received(offset, piece_in); });
}

}  // namespace accord::exchanges
