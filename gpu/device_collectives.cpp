// The device collectives over NCCL (gpu/device_collectives.hpp), part of the CUDA plugin.
//
// Everything is queued on the NCCL transport's stream, in call order: the 16-bit conversions
// and fp32 sums (CUDA kernels on that stream), then the NCCL point-to-point groups. No call
// waits on the host; finish() does, once per round. Shards follow shard_of, so they may be
// uneven or empty: exchanges are grouped ncclSend/ncclRecv (ncclReduceScatter/AllGather need
// equal pieces), and sums add the ranks' pieces in rank order, in fp32, the own piece as it is.
//
// Not run on a GPU yet (no GPU where it was written).
#include "gpu/device_collectives.hpp"

#include <nccl.h>

#include <array>
#include <string>

#include "gpu/cuda_check.hpp"
#include "gpu/cuda_kernels.hpp"
#include "gpu/device.hpp"
#include "gpu/nccl_transport.hpp"
#include "transport/shard.hpp"

namespace accord {
namespace {

// Scratch buffers, one per role, so that the buffers one call uses at once never alias.
enum scratch_role { wire_scratch, arrived_scratch, votes_scratch, roles };

class nccl_collectives final : public device_collectives {
public:
  explicit nccl_collectives(nccl_transport& link)
      : link_(link), kernels_(make_cuda_kernels(link.stream())) {}

  int rank() const override { return link_.rank(); }
  int world() const override { return link_.size(); }
  memory_location memory() const override { return {memory_space::cuda, link_.device()}; }
  kernels& stream() override { return *kernels_; }

  void reduce_scatter(std::span<float> data, wire_precision wire) override {
    link_.activate();
    const int ranks = world(), me = rank();
    if (ranks == 1) return;
    const shard mine = shard_of(data.size(), ranks, me);
    const std::span<float> sums = data.subspan(mine.begin, mine.size());
    const bool narrow = wire != wire_precision::fp32;
    const std::size_t element_bytes = narrow ? 2 : 4;
    // The peers' pieces of the own shard land here, one block per rank (the own block unused).
    std::byte* arrived = scratch(arrived_scratch, ranks * mine.size() * element_bytes);
    const std::byte* outgoing = reinterpret_cast<const std::byte*>(data.data());
    if (narrow) {
      auto* wire_values = reinterpret_cast<std::uint16_t*>(scratch(wire_scratch, data.size() * 2));
      kernels_->to_wire(wire, data, {wire_values, data.size()});
      outgoing = reinterpret_cast<const std::byte*>(wire_values);
    }
    send_to_owners(outgoing, arrived, element_bytes, [&](int owner) { return shard_of(data.size(), ranks, owner); });
    for (int peer = 0; peer < ranks; ++peer) {
      if (peer == me || sums.empty()) continue;
      std::byte* block = arrived + peer * mine.size() * element_bytes;
      if (narrow)
        kernels_->add_from_wire(wire, {reinterpret_cast<const std::uint16_t*>(block), mine.size()}, sums);
      else
        kernels_->accumulate(sums, {reinterpret_cast<const float*>(block), mine.size()});
    }
  }

  void all_gather(std::span<float> data, wire_precision wire) override {
    link_.activate();
    const int ranks = world(), me = rank();
    if (ranks == 1) return;
    const shard mine = shard_of(data.size(), ranks, me);
    if (wire == wire_precision::fp32) {
      exchange_shards(reinterpret_cast<std::byte*>(data.data()), data.size(), 4);
      return;
    }
    // Every block goes through the wire values, the own one too: all replicas get the same bits.
    auto* wire_values = reinterpret_cast<std::uint16_t*>(scratch(wire_scratch, data.size() * 2));
    kernels_->to_wire(wire, data.subspan(mine.begin, mine.size()), {wire_values + mine.begin, mine.size()});
    exchange_shards(reinterpret_cast<std::byte*>(wire_values), data.size(), 2);
    kernels_->from_wire(wire, {wire_values, data.size()}, data);
  }

  void sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                     std::span<std::uint64_t> result) override {
    link_.activate();
    const std::span<std::uint16_t> plus_votes = count_own_votes(signs, count);
    const shard mine = shard_of(signs.size(), world(), rank());
    if (!plus_votes.empty())
      kernels_->majority(plus_votes, world(), mine.begin * 64, round, result.subspan(mine.begin, mine.size()));
    exchange_shards(reinterpret_cast<std::byte*>(result.data()), result.size(), sizeof(std::uint64_t));
  }

  // The counts travel as 16 bits each (the host transport packs them in bit planes; not done here).
  void sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                   std::span<std::uint16_t> plus_votes) override {
    link_.activate();
    const std::span<std::uint16_t> own = count_own_votes(signs, count);
    const shard mine = shard_of(signs.size(), world(), rank());
    if (!own.empty())
      cuda_check(cudaMemcpyAsync(plus_votes.data() + mine.begin * 64, own.data(), own.size_bytes(),
                                 cudaMemcpyDeviceToDevice, link_.stream()),
                 "sign_counts: own counts");
    exchange_element_shards(plus_votes, signs.size());
  }

  void finish() override { link_.wait_for_stream(); }

private:
  // Elements of the word shard `words` of a `count`-element vector: [first, first + size).
  static shard elements_of(const shard& words, std::size_t count) {
    const std::size_t first = std::min(count, words.begin * 64);
    return {first, std::min(count, words.end * 64)};
  }

  // Packed words go all-to-all: every rank counts the votes of its own word shard. Returns the
  // own shard's counts (in scratch), queued.
  std::span<std::uint16_t> count_own_votes(std::span<const std::uint64_t> signs, std::size_t count) {
    const int ranks = world(), me = rank();
    const shard mine = shard_of(signs.size(), ranks, me);
    const shard elements = elements_of(mine, count);
    auto* vectors = reinterpret_cast<std::uint64_t*>(scratch(arrived_scratch, ranks * mine.size() * 8));
    if (mine.size())
      cuda_check(cudaMemcpyAsync(vectors + me * mine.size(), signs.data() + mine.begin, mine.size() * 8,
                                 cudaMemcpyDeviceToDevice, link_.stream()),
                 "vote: own signs");
    send_to_owners(reinterpret_cast<const std::byte*>(signs.data()), reinterpret_cast<std::byte*>(vectors),
                   sizeof(std::uint64_t), [&](int owner) { return shard_of(signs.size(), ranks, owner); });
    if (elements.size() == 0) return {};
    auto* counts = reinterpret_cast<std::uint16_t*>(scratch(votes_scratch, elements.size() * 2));
    const std::span<std::uint16_t> own{counts, elements.size()};
    kernels_->count_votes({vectors, ranks * mine.size()}, ranks, own);
    return own;
  }

  // Every rank sends each other owner its range_of(owner) of `outgoing` and receives its own
  // range from each peer into `landing`, one block of that size per rank (the own block unused).
  template <class RangeOf>
  void send_to_owners(const std::byte* outgoing, std::byte* landing, std::size_t element_bytes, RangeOf range_of) {
    const int ranks = world(), me = rank();
    const std::size_t own_bytes = range_of(me).size() * element_bytes;
    std::uint64_t sent = 0;
    group([&] {
      for (int peer = 0; peer < ranks; ++peer) {
        if (peer == me) continue;
        const shard theirs = range_of(peer);
        sent += send(outgoing + theirs.begin * element_bytes, theirs.size() * element_bytes, peer);
        receive(landing + peer * own_bytes, own_bytes, peer);
      }
    });
    link_.count_traffic(sent, (ranks - 1) * own_bytes, ranks - 1);
  }

  // All-gather of shard_of(total, ...) pieces of `element_bytes` each, in place.
  void exchange_shards(std::byte* data, std::size_t total, std::size_t element_bytes) {
    exchange_ranges(data, element_bytes, [&](int owner) { return shard_of(total, world(), owner); });
  }

  // All-gather of per-element counts whose owners hold word shards of `words` words.
  void exchange_element_shards(std::span<std::uint16_t> counts, std::size_t words) {
    exchange_ranges(reinterpret_cast<std::byte*>(counts.data()), sizeof(std::uint16_t), [&](int owner) {
      return elements_of(shard_of(words, world(), owner), counts.size());
    });
  }

  // All-gather in place: each owner's range_of(owner) elements of `element_bytes` each go to
  // every other rank.
  template <class RangeOf>
  void exchange_ranges(std::byte* data, std::size_t element_bytes, RangeOf range_of) {
    const int ranks = world(), me = rank();
    const shard mine = range_of(me);
    std::uint64_t sent = 0, received = 0;
    group([&] {
      for (int peer = 0; peer < ranks; ++peer) {
        if (peer == me) continue;
        const shard theirs = range_of(peer);
        sent += send(data + mine.begin * element_bytes, mine.size() * element_bytes, peer);
        received += receive(data + theirs.begin * element_bytes, theirs.size() * element_bytes, peer);
      }
    });
    link_.count_traffic(sent, received, ranks - 1);
  }

  // One NCCL group: its sends and receives are posted together, so they cannot deadlock.
  template <class Body>
  void group(Body body) {
    check(ncclGroupStart(), "ncclGroupStart");
    try {
      body();
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }
  // Bytes as ncclUint8; empty pieces are not posted (the peer skips them as well).
  std::uint64_t send(const std::byte* data, std::size_t bytes, int peer) {
    if (bytes) check(ncclSend(data, bytes, ncclUint8, peer, link_.communicator(), link_.stream()), "ncclSend");
    return bytes;
  }
  std::uint64_t receive(std::byte* data, std::size_t bytes, int peer) {
    if (bytes) check(ncclRecv(data, bytes, ncclUint8, peer, link_.communicator(), link_.stream()), "ncclRecv");
    return bytes;
  }
  void check(ncclResult_t status, const char* call) const {
    if (status != ncclSuccess)
      throw transport_error("nccl rank " + std::to_string(rank()) + ": " + call + ": " + ncclGetErrorString(status));
  }

  std::byte* scratch(scratch_role role, std::size_t bytes) {
    device_array<std::byte>& buffer = scratch_[role];
    // Growing frees the old buffer while queued work may still use it: wait for it first.
    if (buffer.size() < bytes) {
      link_.wait_for_stream();
      buffer = device_array<std::byte>(device_kind::cuda, std::max(bytes, 2 * buffer.size()));
    }
    return buffer.span().data();
  }

  nccl_transport& link_;
  std::unique_ptr<kernels> kernels_;
  std::array<device_array<std::byte>, roles> scratch_;
};

}  // namespace

std::unique_ptr<device_collectives> make_nccl_collectives(nccl_transport& link) {
  return std::make_unique<nccl_collectives>(link);
}

}  // namespace accord
