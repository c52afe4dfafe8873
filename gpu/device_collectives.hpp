#pragma once
// The collectives of a round on device memory, for update rules whose buffers stay on the GPU
// (update_rule::apply_on_device). Plain C++: CUDA appears only in the implementations.
//
// Ordering: every call queues its work on the collectives' own stream (for NCCL, the NCCL
// transport's stream) and returns without waiting; stream() runs kernels on that same stream,
// so a round's conversions, sums, votes and optimizer step run in queue order with its
// collectives. Work of other streams is ordered by events, never by host waits:
// stream().wait_for(e) before reading a buffer another stream wrote, stream().record() after
// writing one another stream will read. finish() is the one host wait, at the end of a round.
//
// Semantics are those of transport.hpp's collectives (shards of shard_of, ties of tie_vote),
// with the sums in fp32 whatever the wire: a 16-bit wire is converted on the device, never
// summed in 16 bits (NCCL's own 16-bit reductions would add in 16 bits).
#include <accord/device_span.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "gpu/kernels.hpp"
#include "transport/transport.hpp"
#include "transport/wire_precision.hpp"

namespace accord {

class device_collectives {
public:
  virtual ~device_collectives() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Where every span passed to the collectives lives.
  virtual memory_location memory() const = 0;
  // Kernels on the collectives' stream.
  virtual kernels& stream() = 0;

  // In place: after reduce_scatter, this rank's shard_of() shard of `data` holds the sum over
  // ranks (the own values as they are, the peers' as they travelled); the rest is scratch.
  virtual void reduce_scatter(std::span<float> data, wire_precision wire) = 0;
  // Every rank's shard to every rank; on a 16-bit wire the own shard is rounded too, so that
  // all replicas hold the same values.
  virtual void all_gather(std::span<float> data, wire_precision wire) = 0;
  // transport::sign_majority and transport::sign_counts on device memory.
  virtual void sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                             std::span<std::uint64_t> result) = 0;
  virtual void sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                           std::span<std::uint16_t> plus_votes) = 0;
  // Waits on the host until the queued work has run (NCCL: watching for failed peers and
  // transport::interrupt, see nccl_transport).
  virtual void finish() = 0;
};

// Collectives over `link` on memory `where`: the reference on host memory (the transport's own
// collectives and the CPU kernels, for tests and for resident_on_host), or NCCL on a CUDA device
// when `link` is an NCCL transport on that device. Null when `link` cannot serve `where`.
std::unique_ptr<device_collectives> make_device_collectives(transport& link, const memory_location& where);

}  // namespace accord
