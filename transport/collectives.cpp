// The default collectives, written once over post_send/post_recv/wait: ring reduce-scatter
// and ring all-gather (Gloo style), all-reduce as their composition in one pipeline, and the
// bit-packed sign vote as an all-to-all of packed word shards (votes up) plus a ring
// all-gather (result down). Every exchange is pipelined: several pieces in flight, an arrived
// piece reduced while the next ones travel.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "transport/block_quantize.hpp"
#include "transport/shard.hpp"
#include "transport/sign_vote.hpp"
#include "transport/transport.hpp"

namespace accord {
namespace {

int ring_rank(int rank, int offset, int world) { return ((rank + offset) % world + world) % world; }

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
shard block_of(std::size_t elements, std::size_t unit, int world, int s) {
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
auto even_shards(std::size_t total, int world) {
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

// 16-bit reduce-scatter: each rank's values are rounded once and go straight to the shard's
// owner, which adds them to its own fp32 values in fp32 as they arrive (a ring would round
// every partial sum again). Same bytes per rank as the ring.
// `owner_block(s)`: the block of `data` rank s sums (its shard, or a bucket's part of it).
template <class OwnerBlock>
void direct_reduce_scatter(transport& t, std::span<float> data, OwnerBlock owner_block, wire_precision precision,
                           std::uint64_t tag) {
  const std::span<std::uint16_t> wire = kept_storage<std::uint16_t, kept_use::wire>(data.size());
  to_wire(precision, data, wire);
  const shard mine = owner_block(t.rank());
  const std::span<float> sums = data.subspan(mine.begin, mine.size());
  send_shards_to_owners<std::uint16_t>(t, wire, owner_block, tag,
                                       [&](std::size_t offset, std::span<const std::uint16_t> piece) {
                                         add_from_wire(precision, piece, sums.subspan(offset, piece.size()));
                                       });
}

// direct_reduce_scatter of a bucket, started (transport::start_reduce_scatter_range): its rounded
// values and the room its pieces land in are its own and every piece is posted at once, so the
// exchange travels while the caller starts the next bucket; finish() adds the pieces in
// direct_reduce_scatter's order, with its bits.
class started_direct_reduction final : public transport::range_reduction {
public:
  template <class OwnerBlock>
  started_direct_reduction(transport& t, std::span<float> data, OwnerBlock owner_block, wire_precision precision,
                           std::uint64_t tag)
      : precision_(precision), wire_(data.size()), sums_(data.subspan(owner_block(t.rank()).begin, owner_block(t.rank()).size())),
        landing_(static_cast<std::size_t>(t.size() - 1) * sums_.size()) {
    to_wire(precision, data, wire_);
    auto steps = steps_to_owners<std::uint16_t>(t, std::span<const std::uint16_t>(wire_), owner_block);
    const std::size_t piece = piece_elements<std::uint16_t>(t, data.size());
    const std::size_t receives = steps.size() * ((sums_.size() + piece - 1) / piece);
    exchange_.emplace(t, tag, std::move(steps), false, piece, receives,
                      [this](std::size_t step, std::size_t offset, std::size_t count, std::size_t) {
                        return std::span<std::uint16_t>(landing_).subspan(step * sums_.size() + offset, count);
                      });
  }

  void finish() override {
    exchange_->finish([&](std::size_t, std::size_t offset, std::span<const std::uint16_t> piece) {
      add_from_wire(precision_, piece, sums_.subspan(offset, piece.size()));
    });
  }

private:
  wire_precision precision_;
  std::vector<std::uint16_t> wire_;
  std::span<float> sums_;
  std::vector<std::uint16_t> landing_;
  std::optional<piece_exchange<std::uint16_t>> exchange_;  // last: ends before the buffers it uses
};

// The own shard of an error-feedback reduce-scatter: data = scale·data + residual, exact; with
// `commit` the residual is paid (zero).
void add_own_feedback(std::span<float> data, float scale, std::span<float> residual, shard own, bool commit) {
  float* __restrict x = data.data() + own.begin;
  float* __restrict r = residual.data() + own.begin;
  const std::size_t n = own.size();
  for (std::size_t i = 0; i < n; ++i) x[i] = scale * x[i] + r[i];
  if (commit) std::fill_n(r, n, 0.f);
}

// Where each owner's records lie when every shard of `values` is block-quantized on its own
// (blocks start at the shard's first value, so an owner decodes its shard without the others).
class shard_records {
public:
  shard_records(std::size_t values, int world) : values_(values), world_(world), first_(world + 1, 0) {
    for (int s = 0; s < world; ++s) first_[s + 1] = first_[s] + quantized_blocks(shard_of(values, world, s).size());
  }
  std::size_t total() const { return first_.back(); }
  shard of(int owner) const { return {first_[owner], first_[owner + 1]}; }
  // The values of `owner`'s shard that records [offset, offset + count) of it hold.
  shard values_of(int owner, std::size_t offset, std::size_t count) const {
    const shard own = shard_of(values_, world_, owner);
    const std::size_t begin = std::min(own.end, own.begin + offset * quantization_block);
    return {begin, std::min(own.end, begin + count * quantization_block)};
  }

private:
  std::size_t values_;
  int world_;
  std::vector<std::size_t> first_;
};

// A block-quantized reduce-scatter: each rank encodes every other owner's shard of `data` once
// (encode(values, records)) and sends it straight to its owner; `own` readies the rank's own
// shard, to which the decoded shards of the others are then added in fp32 in the fixed order
// r-1, r-2, ...
template <class Block, class Encode, class Own>
void reduce_scatter_records(transport& t, std::span<float> data, std::uint64_t tag, Encode encode, Own own) {
  const int world = t.size(), rank = t.rank();
  const shard_records records(data.size(), world);
  const std::span<Block> wire = kept_storage<Block, kept_use::wire>(records.total());
  for (int s = 0; s < world; ++s) {
    if (s == rank) continue;
    const shard out = records.of(s);
    encode(shard_of(data.size(), world, s), wire.subspan(out.begin, out.size()));
  }
  own(shard_of(data.size(), world, rank));
  send_shards_to_owners<Block>(t, wire, [&](int s) { return records.of(s); }, tag,
                               [&](std::size_t offset, std::span<const Block> piece) {
                                 const shard values = records.values_of(rank, offset, piece.size());
                                 const std::span<float> sums = data.subspan(values.begin, values.size());
                                 add_dequantized(piece, sums, sums);
                               });
}

// Block-quantized reduce-scatter (int8, fp8, fp4, sign, sign2, sign3): the shards travel as they are.
template <class Block>
void quantized_reduce_scatter(transport& t, std::span<float> data, std::uint64_t tag) {
  reduce_scatter_records<Block>(
      t, data, tag,
      [&](const shard& values, std::span<Block> out) {
        quantize(std::span<const float>(data.subspan(values.begin, values.size())), out);
      },
      [](const shard&) {});
}

// Block-quantized reduce-scatter with error feedback: each other owner's shard travels as
// scale·data + residual (quantize_with_feedback: with `commit`, the residual keeps what the
// records missed); the owner's own shard becomes scale·data + residual exactly (with `commit`
// that residual is then paid: zero).
template <class Block>
void feedback_reduce_scatter(transport& t, std::span<float> data, float scale, std::span<float> residual, bool commit,
                             std::uint64_t tag) {
  reduce_scatter_records<Block>(
      t, data, tag,
      [&](const shard& values, std::span<Block> out) {
        quantize_with_feedback(std::span<const float>(data.subspan(values.begin, values.size())), scale,
                               residual.subspan(values.begin, values.size()), out, commit);
      },
      [&](const shard& own) { add_own_feedback(data, scale, residual, own, commit); });
}

// Block-quantized all-gather of the difference from `base`: each owner encodes its shard's
// data - base and sends the records to every other rank, pairwise (step k to r+k, from r-k:
// the ring's bytes per rank); every rank, the owner too, ends with base + the decoded
// difference, so replicas stay bit-identical when `base` is.
template <class Block>
void quantized_all_gather_delta(transport& t, std::span<float> data, std::span<const float> base,
                                std::uint64_t tag) {
  const int world = t.size(), rank = t.rank();
  const shard_records records(data.size(), world);
  const std::span<Block> wire = kept_storage<Block, kept_use::wire>(records.total());
  const shard own = shard_of(data.size(), world, rank), own_records = records.of(rank);
  const auto decode = [&](int owner, std::size_t offset, std::span<const Block> piece) {
    const shard values = records.values_of(owner, offset, piece.size());
    add_dequantized(piece, base.subspan(values.begin, values.size()), data.subspan(values.begin, values.size()));
  };
  const std::span<Block> mine = wire.subspan(own_records.begin, own_records.size());
  quantize_difference(std::span<const float>(data.subspan(own.begin, own.size())), base.subspan(own.begin, own.size()),
                      mine);
  decode(rank, 0, mine);
  std::vector<exchange_step<Block>> steps;
  for (int step = 1; step < world; ++step) {
    const int from = ring_rank(rank, -step, world);
    steps.push_back({ring_rank(rank, step, world), mine, from, records.of(from).size()});
  }
  pipelined_exchange<Block>(
      t, tag, steps, false, piece_elements<Block>(t, records.total()),
      [&](std::size_t step, std::size_t offset, std::size_t count, std::size_t) {
        return wire.subspan(records.of(steps[step].from).begin + offset, count);
      },
      [&](std::size_t step, std::size_t offset, std::span<const Block> piece) { decode(steps[step].from, offset, piece); });
}

// Runs body.template operator()<Block>() with the record type of a block-quantized precision.
template <class Body>
void with_block_type(wire_precision precision, Body body) {
  if (precision == wire_precision::int8)
    body.template operator()<int8_block>();
  else if (precision == wire_precision::fp8)
    body.template operator()<fp8_block>();
  else if (precision == wire_precision::fp4)
    body.template operator()<fp4_block>();
  else if (precision == wire_precision::sign2)
    body.template operator()<sign2_block>();
  else if (precision == wire_precision::sign3)
    body.template operator()<sign3_block>();
  else
    body.template operator()<sign_block>();
}

void refuse_block_quantized(const char* collective, wire_precision precision) {
  if (block_quantized(precision))
    throw std::invalid_argument(std::string(collective) + ": " + std::string(precision_name(precision)) +
                                " values travel only as a reduce-scatter of gradients or as a difference "
                                "(all_gather_delta)");
}

// 16-bit all-gather: the owners' shards travel rounded, and every rank unpacks all of them,
// its own included, so all replicas hold the same rounded values.
void rounded_all_gather(transport& t, std::span<float> data, wire_precision precision, std::uint64_t tag) {
  // Every block is overwritten: the own one here, the others as they arrive.
  const std::span<std::uint16_t> wire = kept_storage<std::uint16_t, kept_use::wire>(data.size());
  const shard mine = shard_of(data.size(), t.size(), t.rank());
  to_wire(precision, data.subspan(mine.begin, mine.size()), wire.subspan(mine.begin, mine.size()));
  ring_collective<std::uint16_t>(t, wire, false, true, 1, tag);
  from_wire(precision, wire, data);
}

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

void interrupt_flag::raise(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (raised_.load(std::memory_order_relaxed)) return;
  why_ = why;
  raised_.store(true, std::memory_order_release);
}

std::string interrupt_flag::message(std::string_view who) const { return std::string(who) + "interrupted: " + reason(); }

std::string interrupt_flag::reason() const {
  std::lock_guard lock(mutex_);
  return why_;
}

void transport::interrupt(const std::string& why) {
  interruption_.raise(why);
  std::lock_guard lock(channels_mutex_);
  for (const auto& opened : channels_)
    if (const auto channel = opened.lock()) channel->interrupt(why);
}

std::shared_ptr<transport> transport::open_channel() {
  std::shared_ptr<transport> channel = make_channel();
  if (!channel) return nullptr;
  std::lock_guard lock(channels_mutex_);
  std::erase_if(channels_, [](const auto& opened) { return opened.expired(); });
  // Raised before or after the channel's registration, it reaches the channel either way.
  if (interruption_.raised()) channel->interrupt(interruption_.reason());
  channels_.push_back(channel);
  return channel;
}

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

transport::request transport::post_send(int peer, std::uint64_t tag, std::span<const std::byte> data) {
  try {
    send(peer, tag, data);
  } catch (...) {
    deferred_receives_.clear();
    throw;
  }
  return next_request_++;
}

transport::request transport::post_recv(int peer, std::uint64_t tag, std::span<std::byte> data) {
  deferred_receives_.push_back({next_request_, peer, tag, data});
  return next_request_++;
}

bool transport::settled(request) {
  throw std::logic_error((backend_.empty() ? std::string("this") : backend_) + " transport cannot poll a transfer");
}

void transport::wait(request handle) {
  // Receives posted before this one go first, so that they match in posting order.
  while (!deferred_receives_.empty() && deferred_receives_.front().handle <= handle) {
    const deferred_receive r = deferred_receives_.front();
    deferred_receives_.pop_front();
    try {
      recv(r.peer, r.tag, r.data);
    } catch (...) {
      deferred_receives_.clear();
      throw;
    }
  }
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
    ring_collective(*this, data, true, false, 1, next_collective_tag());
  else if (block_quantized(precision))
    with_block_type(precision, [&]<class Block>() { quantized_reduce_scatter<Block>(*this, data, next_collective_tag()); });
  else
    direct_reduce_scatter(*this, data, even_shards(data.size(), size()), precision, next_collective_tag());
}

namespace {

// reduce_scatter_range's checks; returns the block each rank sums (offsets in the range).
auto checked_owner_parts(const char* collective, std::size_t total, int world, shard range, wire_precision precision) {
  if (range.begin > range.end || range.end > total)
    throw std::invalid_argument(std::string(collective) + ": range [" + std::to_string(range.begin) + ", " +
                                std::to_string(range.end) + ") lies outside " + std::to_string(total) + " values");
  if (block_quantized(precision))
    throw std::invalid_argument(std::string(collective) + ": " + std::string(precision_name(precision)) +
                                " quantizes whole shards, not a range of them");
  // Rank s sums its shard of the whole buffer where it overlaps the range.
  return [=](int s) {
    const shard own = shard_of(total, world, s);
    const std::size_t begin = std::clamp(own.begin, range.begin, range.end);
    const std::size_t end = std::clamp(own.end, range.begin, range.end);
    return shard{begin - range.begin, end - range.begin};
  };
}

}  // namespace

void transport::reduce_scatter_range(std::span<float> data, shard range, wire_precision precision) {
  throw_if_interrupted();
  const auto owner_part = checked_owner_parts("reduce_scatter_range", data.size(), size(), range, precision);
  if (size() == 1 || range.size() == 0) return;
  const std::span<float> part = data.subspan(range.begin, range.size());
  if (precision == wire_precision::fp32)
    ring_reduce_scatter(*this, part, owner_part, next_collective_tag());
  else
    direct_reduce_scatter(*this, part, owner_part, precision, next_collective_tag());
}

std::unique_ptr<transport::range_reduction> transport::start_reduce_scatter_range(std::span<float> data, shard range,
                                                                                   wire_precision precision) {
  throw_if_interrupted();
  const auto owner_part = checked_owner_parts("reduce_scatter_range", data.size(), size(), range, precision);
  if (precision == wire_precision::fp32 || size() == 1 || range.size() == 0) {
    reduce_scatter_range(data, range, precision);
    return std::make_unique<range_reduction>();
  }
  return std::make_unique<started_direct_reduction>(*this, data.subspan(range.begin, range.size()), owner_part,
                                                    precision, next_collective_tag());
}

void transport::reduce_scatter_feedback(std::span<float> data, float scale, std::span<float> residual,
                                        wire_precision precision, bool commit) {
  throw_if_interrupted();
  if (residual.size() != data.size())
    throw std::invalid_argument("reduce_scatter_feedback: residual holds " + std::to_string(residual.size()) +
                                " values, data " + std::to_string(data.size()));
  if (!block_quantized(precision)) {
    // Nothing is lost on the wire that feedback could correct: the residual is added and sent
    // (paid, with `commit`).
    add_own_feedback(data, scale, residual, {0, data.size()}, commit);
    reduce_scatter(data, precision);
    return;
  }
  if (size() == 1) {
    add_own_feedback(data, scale, residual, {0, data.size()}, commit);
    return;
  }
  with_block_type(precision, [&]<class Block>() {
    feedback_reduce_scatter<Block>(*this, data, scale, residual, commit, next_collective_tag());
  });
}

void transport::all_gather_delta(std::span<float> data, std::span<const float> base, wire_precision precision) {
  if (!block_quantized(precision)) return all_gather(data, precision);
  throw_if_interrupted();
  if (base.size() != data.size())
    throw std::invalid_argument("all_gather_delta: base holds " + std::to_string(base.size()) + " values, data " +
                                std::to_string(data.size()));
  if (size() == 1) return;
  with_block_type(precision, [&]<class Block>() {
    quantized_all_gather_delta<Block>(*this, data, base, next_collective_tag());
  });
}

void transport::all_gather(std::span<float> data, wire_precision precision) {
  throw_if_interrupted();
  refuse_block_quantized("all_gather", precision);
  if (size() == 1) return;
  if (precision == wire_precision::fp32)
    ring_collective(*this, data, false, true, 1, next_collective_tag());
  else
    rounded_all_gather(*this, data, precision, next_collective_tag());
}

void transport::all_reduce(std::span<float> data, wire_precision precision) {
  throw_if_interrupted();
  refuse_block_quantized("all_reduce", precision);
  if (size() == 1) return;
  if (precision == wire_precision::fp32) {
    ring_collective(*this, data, true, true, 1, next_collective_tag());
    return;
  }
  reduce_scatter(data, precision);
  all_gather(data, precision);
}

void transport::all_reduce(std::span<double> data) {
  throw_if_interrupted();
  if (size() > 1) ring_collective(*this, data, true, true, 1, next_collective_tag());
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
