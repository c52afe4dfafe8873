// The default collectives, written once over post_send/post_recv/wait (transport/exchanges.hpp):
// ring reduce-scatter and ring all-gather (Gloo style), all-reduce as their composition in one
// pipeline, 16-bit and block-quantized rounds sent straight to each shard's owner, and the
// transport's point-to-point defaults. Every exchange is pipelined: several pieces in flight,
// an arrived piece reduced while the next ones travel. The sign votes: sign_collectives.cpp.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "transport/block_quantize.hpp"
#include "transport/exchanges.hpp"
#include "transport/shard.hpp"
#include "transport/transport.hpp"

namespace accord {
namespace {

using namespace exchanges;

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
  {
    std::lock_guard lock(channels_mutex_);
    std::erase_if(channels_, [](const auto& opened) { return opened.expired(); });
    // Each backend counts on it: its channel is a second thread's, and a lane of its own.
    if (is_channel_ || !channels_.empty())
      throw std::logic_error(who() + "a channel has no channel, and an endpoint one channel at a time");
  }
  std::shared_ptr<transport> channel = make_channel();
  if (!channel) return nullptr;
  channel->is_channel_ = true;
  std::lock_guard lock(channels_mutex_);
  // Raised before or after the channel's registration, it reaches the channel either way.
  if (interruption_.raised()) channel->interrupt(interruption_.reason());
  channels_.push_back(channel);
  return channel;
}

std::string transport::who() const {
  return (backend_.empty() ? "" : backend_ + " ") + "rank " + std::to_string(rank()) + ": ";
}

void transport::throw_if_interrupted() const { interruption_.throw_if_raised(who()); }

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
  if (precision == wire_precision::fp32) {  // the ring, at once (it checks the range itself)
    reduce_scatter_range(data, range, precision);
    return std::make_unique<range_reduction>();
  }
  throw_if_interrupted();
  const auto owner_part = checked_owner_parts("reduce_scatter_range", data.size(), size(), range, precision);
  if (size() == 1 || range.size() == 0) return std::make_unique<range_reduction>();
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

}  // namespace accord
