#pragma once
// The transport interface every backend implements (in-process, UCX, NCCL). Point-to-point
// messages carry raw bytes; collectives default to pipelined ring algorithms written once over
// post_send/post_recv/wait (transport/collectives.cpp) and a backend with native collectives
// overrides them. Calls block the calling thread (post_* excepted): the communicator actor runs
// detached on its own thread, and an endpoint is used by one thread at a time; interrupt() is
// the one exception.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "transport/shard.hpp"
#include "transport/wire_precision.hpp"

namespace accord {

// A failure of the link or of a peer (dead peer, timeout, malformed or unexpected frame).
// The message names the peer and the problem in one line.
class transport_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct transfer_stats {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t messages_sent = 0;
};

// Packed sign vectors: element i lives in word i/64, bit i%64 (LSB first); a set bit is +1.
// Bits past `count` in the last word are padding: inputs may hold anything there, results
// hold zeros (transport/sign_vote.hpp has the packing helpers and the tie rule).
inline std::size_t packed_words(std::size_t count) { return (count + 63) / 64; }

// Collective tags have the top bit set (see next_collective_tag); user tags must not.
inline bool is_collective_tag(std::uint64_t tag) { return (tag >> 63) != 0; }
// "tag 5" or "collective #12", for error messages that name what a rank was waiting for.
inline std::string describe_tag(std::uint64_t tag) {
  return is_collective_tag(tag) ? "collective #" + std::to_string(tag & ~(1ull << 63))
                                : "tag " + std::to_string(tag);
}

// The state behind transport::interrupt(): raised from any thread, read by the thread that
// drives the transport (a backend's wait loop may hold a pointer to it).
class interrupt_flag {
public:
  // Records why; the first reason wins.
  void raise(const std::string& why);
  // One atomic load: cheap enough for every turn of a wait loop.
  bool raised() const noexcept { return raised_.load(std::memory_order_acquire); }
  // "<who>interrupted: <why>", `who` being a prefix such as "ucx rank 1: "; call once raised.
  std::string message(std::string_view who) const;
  // The first reason given; call once raised.
  std::string reason() const;
  void throw_if_raised(std::string_view who) const {
    if (raised()) throw transport_error(message(who));
  }

private:
  std::atomic<bool> raised_{false};
  mutable std::mutex mutex_;  // guards why_
  std::string why_;
};

class transport {
public:
  virtual ~transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Blocking point-to-point. `recv` expects exactly data.size() bytes with this tag from that
  // peer; any other size is a transport_error naming the peer.
  virtual void send(int peer, std::uint64_t tag, std::span<const std::byte> data) = 0;
  virtual void recv(int peer, std::uint64_t tag, std::span<std::byte> data) = 0;
  // Send to one peer while receiving from another (the step of every ring algorithm). The
  // default sends first, which is correct for backends whose sends are buffered; backends
  // whose sends can wait for the receiver post both at once.
  virtual void send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                         std::uint64_t tag);

  // Non-blocking point-to-point, what the pipelined collectives are built on. post_send and
  // post_recv start a transfer and return at once; wait(handle) blocks until it is complete and
  // throws what send/recv would. Until then a send's buffer must stay unchanged and a
  // receive's buffer unread. Each handle is waited for exactly once, in any order; messages of
  // one peer and tag match the posted receives in posting order. A post or wait that throws
  // abandons every other request in flight too (receives stop writing into their buffers, which
  // may then be freed); their handles must not be waited for. The defaults send at once and receive in
  // wait(), in posting order: right for backends whose sends are buffered (in-process); a backend
  // whose sends wait for their receiver (UCX rendezvous) implements all three.
  using request = std::uint64_t;
  virtual request post_send(int peer, std::uint64_t tag, std::span<const std::byte> data);
  virtual request post_recv(int peer, std::uint64_t tag, std::span<std::byte> data);
  virtual void wait(request handle);
  // Whether wait(handle) would return at once (the transfer is done, or failed, or the
  // transport was interrupted), without waiting: lets one thread serve many peers' posted
  // receives (the asynchronous topologies between processes). Only backends that can poll
  // implement it; the default throws std::logic_error.
  virtual bool settled(request handle);

  virtual transfer_stats stats() const = 0;

  // Unblocks the owner thread, e.g. from a thread that learned that a peer it waits on is gone;
  // the one call another thread may make while the owner is blocked in a call. That call and
  // every later send, recv and collective throw a transport_error whose message contains `why`
  // ("ucx rank 1: interrupted: member lost"); then the transport can be destroyed. Only this
  // endpoint is interrupted: its peers see no more than this rank going silent. Callable more
  // than once (the first reason wins). The default records the reason, which suffices for a
  // backend whose waits check interruption() every few milliseconds; one that sleeps on
  // something else overrides this to wake that sleep too, after calling the default.
  virtual void interrupt(const std::string& why);

  // A second endpoint of this rank over the same links, for one other thread: the worker's
  // collectives in flight (round_peers::start_all_reduce) run on it while this endpoint's owner
  // runs its rounds. Its tags and collective sequence are its own, disjoint from this
  // endpoint's; it shares this rank's outgoing links (an emulated link's bandwidth included) and
  // byte counts (stats() here include its traffic), and interrupt() here interrupts it too. Every
  // rank calls the same collectives on its channel in the same order, as on the endpoint. A
  // channel has no channel, and an endpoint one channel at a time: opening another while one is
  // still owned throws std::logic_error. nullptr where the backend has none (NCCL, hierarchical
  // groups).
  std::shared_ptr<transport> open_channel();

  // Ring collectives cut each step into pieces of at most this size (smaller for small
  // buffers, so that several pieces are in flight): small pieces let an emulated link interleave
  // messages; a backend with a costly per-message handshake (UCX rendezvous) wants larger ones.
  virtual std::size_t ring_piece_bytes() const { return 256 << 10; }

  // Collectives: every rank calls the same collectives in the same order with the same
  // lengths; a mismatch surfaces as a transport_error. The defaults are ring algorithms whose
  // summation order is fixed, so results do not depend on timing, and after all_reduce every
  // rank holds bit-identical values (each element is summed once, by its shard's owner).

  //
  // `precision`: what the floats travel as. A 16-bit reduce-scatter rounds each rank's values
  // once, sends each shard straight to its owner, and the owner sums in fp32 in a fixed order;
  // a 16-bit all-gather rounds each owner's shard once and every rank, the owner included,
  // ends with the rounded values. int8, fp8, fp4, sign, sign2 and sign3 (block-quantized,
  // transport/block_quantize.hpp, for ACCO's estimate rounds) work the same way in
  // reduce_scatter, with each shard quantized on its own; all_gather and all_reduce refuse them
  // (std::invalid_argument): parameters travel quantized only as a difference, through
  // all_gather_delta. With one rank nothing travels and nothing is rounded.

  // Sums over all ranks, in place.
  virtual void all_reduce(std::span<float> data, wire_precision precision = wire_precision::fp32);
  virtual void all_reduce(std::span<double> data);
  // Afterwards this rank's shard_of(data.size(), size(), rank()) holds the sum over ranks;
  // the rest of `data` is scratch.
  virtual void reduce_scatter(std::span<float> data, wire_precision precision = wire_precision::fp32);
  // reduce_scatter of data[range) alone (a DDP gradient bucket): afterwards the part of this
  // rank's shard_of(data.size(), size(), rank()) inside `range` holds the sum over ranks, added
  // in the order reduce_scatter adds it (fp32 and 16-bit: the same bits as reduce_scatter's),
  // the rest of `range` is scratch and nothing outside it changes. Block-quantized precisions
  // quantize whole shards and are refused (std::invalid_argument).
  virtual void reduce_scatter_range(std::span<float> data, shard range, wire_precision precision = wire_precision::fp32);
  // A reduce_scatter_range under way; finish() completes it (call it exactly once, before
  // reading the range). The base class is one already complete.
  class range_reduction {
  public:
    virtual ~range_reduction() = default;
    virtual void finish() {}
  };
  // reduce_scatter_range, started: 16-bit ones post every piece and return, so that this thread
  // can start the next bucket while this one travels. A bucket inside one owner's shard loads
  // only that owner's link; buckets in flight together load every link, as the whole buffer's
  // reduce-scatter does. Same bits as reduce_scatter_range; every rank starts the same ranges in
  // the same order; `data` stays untouched until finish(). fp32 (a ring, whose pieces wait for
  // each other) runs at once. Destroyed unfinished, it interrupts this transport (its collective
  // sequence is broken) and abandons its transfers.
  virtual std::unique_ptr<range_reduction> start_reduce_scatter_range(std::span<float> data, shard range,
                                                                      wire_precision precision = wire_precision::fp32);
  // Every rank contributes its shard_of(...) of `data`; afterwards all of `data` is filled.
  virtual void all_gather(std::span<float> data, wire_precision precision = wire_precision::fp32);
  // all_gather where `base` (as long as `data`) holds values every rank already has, the same
  // bits everywhere: int8, fp8, fp4, sign, sign2 and sign3 send each owner's quantized data - base, and
  // every rank, the owner included, ends with base + the decoded difference (bit-identical
  // replicas); the other precisions ignore `base` and are all_gather. Written once over
  // post_send/post_recv/wait, so every backend runs it as it is.
  void all_gather_delta(std::span<float> data, std::span<const float> base, wire_precision precision);
  // reduce_scatter with error feedback (`residual` as long as `data`, this rank's own): int8, fp8
  // and sign send scale·data + residual of each other owner's shard, block-quantized once, and with
  // `commit` the residual becomes what the records missed (classic error feedback); this rank's
  // own shard ends as scale·data + residual plus the others' decoded shards, summed in fp32 in
  // a fixed order (with `commit` its own residual range is then zero: paid). Without `commit`
  // (an estimate) the residual is only read. Other precisions add the residual and reduce_scatter.
  // Written once over post_send/post_recv/wait, so every backend runs it as it is.
  void reduce_scatter_feedback(std::span<float> data, float scale, std::span<float> residual,
                               wire_precision precision, bool commit);

  // Majority vote over ranks of `count` packed signs. Ties (even size()) and nothing else are
  // broken by the parity of (element index + round) (tie_vote in transport/sign_vote.hpp):
  // deterministic on every replica and without drift over consecutive rounds. Sends ~2 bits
  // per element per rank. `signs` and `result` hold packed_words(count) words each.
  virtual void sign_majority(std::span<const std::uint64_t> signs, std::size_t count,
                             std::uint64_t round, std::span<std::uint64_t> result);
  // Number of ranks voting +1 for each element (0..size()), for Distributed Lion's averaging.
  // Counts travel packed in ceil(log2(size()+1)) bits per element; plus_votes holds `count`.
  virtual void sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                           std::span<std::uint16_t> plus_votes);

protected:
  // open_channel's backend part (the default has none), called only on an endpoint without an
  // open channel.
  virtual std::shared_ptr<transport> make_channel() { return nullptr; }

  // `backend` prefixes the rank in error messages ("ucx" gives "ucx rank 1: ..."); empty gives
  // "rank 1: ...".
  explicit transport(std::string_view backend = {}) : backend_(backend) {}

  const interrupt_flag& interruption() const { return interruption_; }
  // Throws "<backend> rank <r>: interrupted: <why>" once interrupt() was called; every call
  // that communicates starts with it.
  void throw_if_interrupted() const;

  // Argument checks of the sign votes, shared by every backend (std::invalid_argument naming
  // the collective, prefixed by `backend` and a space when it is not empty).
  static void check_sign_majority(std::string_view backend, std::span<const std::uint64_t> signs,
                                  std::size_t count, std::span<const std::uint64_t> result);
  static void check_sign_counts(std::string_view backend, std::span<const std::uint64_t> signs,
                                std::size_t count, std::span<const std::uint16_t> plus_votes);

  // Tag for the next collective: every rank calls collectives in the same order, so the
  // sequence numbers agree and messages of different collectives never mix.
  std::uint64_t next_collective_tag() { return (1ull << 63) | collective_sequence_++; }

private:
  std::string backend_;
  interrupt_flag interruption_;
  std::uint64_t collective_sequence_ = 0;
  // "<backend> rank <r>: ", which error messages start with.
  std::string who() const;
  // The channels opened here, which interrupt() forwards to.
  std::mutex channels_mutex_;
  std::vector<std::weak_ptr<transport>> channels_;
  bool is_channel_ = false;  // opened by open_channel
  // The default post_recv's receives, not yet done, in posting order.
  struct deferred_receive {
    request handle;
    int peer;
    std::uint64_t tag;
    std::span<std::byte> data;
  };
  std::deque<deferred_receive> deferred_receives_;
  request next_request_ = 0;
  // The sign votes' bit-sliced counts, kept between calls: fresh pages for a buffer this size
  // cost about as much as the exchange itself.
  std::vector<std::uint64_t> vote_planes_;
};

}  // namespace accord
