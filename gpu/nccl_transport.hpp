#pragma once
// The transport interface over NCCL, part of the CUDA plugin (gpu/cuda_backend.hpp). Collectives
// run natively on the transport's own CUDA stream, so they overlap with compute on other
// streams; every call blocks the calling thread (the communicator actor's) until its stream
// work is done.
//
// Host spans are staged through device buffers; the *_device calls take device memory of the
// transport's GPU and skip the staging. Point-to-point: NCCL has no tags, so each send carries
// a (tag, size) header that the receiver checks before it posts the payload receive (a mismatch
// is still received, into staging, then reported as a transport_error naming the peer).
// The sign vote never sums packed bits: packed words go all-to-all (ncclSend/ncclRecv), each
// owner counts the votes of its word shard, and the result (majority bits, or the counts as
// ceil(log2(size+1)) bit planes) is all-gathered.
//
// interrupt(): a call waiting for its stream notices it at once, aborts the communicator
// (ncclCommAbort) and throws; a call blocked inside NCCL on the host notices it only once that
// returns (see impl::wait).
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "gpu/cuda_backend.hpp"
#include "transport/transport.hpp"

struct ncclComm;     // nccl.h's communicator
struct CUstream_st;  // a cudaStream_t points to one

namespace accord {

// A new communicator's id (nccl_unique_id: gpu/cuda_backend.hpp).
nccl_unique_id make_nccl_unique_id();

class nccl_transport final : public transport {
public:
  // Joins communicator `id` as `rank` of `size` on CUDA device `device`; blocks until all
  // ranks have joined (one per process, or one per thread).
  nccl_transport(const nccl_unique_id& id, int rank, int size, int device);
  ~nccl_transport() override;
  nccl_transport(const nccl_transport&) = delete;
  nccl_transport& operator=(const nccl_transport&) = delete;

  int rank() const override;
  int size() const override;
  int device() const;

  void send(int peer, std::uint64_t tag, std::span<const std::byte> data) override;
  void recv(int peer, std::uint64_t tag, std::span<std::byte> data) override;
  void send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                 std::uint64_t tag) override;
  transfer_stats stats() const override;

  // fp32 runs natively; bf16/fp16 run the default send/recv collectives, because NCCL's own
  // 16-bit reductions add in 16 bits.
  void all_reduce(std::span<float> data, wire_precision precision = wire_precision::fp32) override;
  void all_reduce(std::span<double> data) override;
  void reduce_scatter(std::span<float> data, wire_precision precision = wire_precision::fp32) override;
  void all_gather(std::span<float> data, wire_precision precision = wire_precision::fp32) override;
  void sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                     std::span<std::uint64_t> result) override;
  void sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                   std::span<std::uint16_t> plus_votes) override;

  // The same collectives on memory of device(), without host staging.
  void all_reduce_device(std::span<float> data);
  void reduce_scatter_device(std::span<float> data);
  void all_gather_device(std::span<float> data);

  // For the device collectives (make_nccl_collectives), which queue on this communicator and
  // stream: the calling thread is switched to device() by activate().
  ncclComm* communicator() const;
  CUstream_st* stream() const;
  void activate() const;
  // Waits for the stream as the collectives above do (failed peers, interrupt()).
  void wait_for_stream();
  // Traffic queued by the device collectives, for stats().
  void count_traffic(std::uint64_t bytes_sent, std::uint64_t bytes_received, std::uint64_t messages);

private:
  struct impl;
  explicit nccl_transport(std::unique_ptr<impl> state);
  friend std::vector<std::unique_ptr<nccl_transport>> make_nccl_group(std::span<const int> devices);

  template <class T>
  void all_reduce_host(std::span<T> data);
  std::uint64_t* exchange_votes(std::span<const std::uint64_t> signs, std::size_t chunk);

  std::unique_ptr<impl> impl_;
};

// Device collectives (gpu/device_collectives.hpp) on `link`'s communicator and stream; `link`
// must outlive them.
std::unique_ptr<device_collectives> make_nccl_collectives(nccl_transport& link);

// One communicator whose rank r runs on devices[r], for ranks driven by threads of this
// process. NCCL refuses the same GPU twice in one communicator, so the devices must be
// distinct: on a machine with one GPU the group has one rank.
std::vector<std::unique_ptr<nccl_transport>> make_nccl_group(std::span<const int> devices);

}  // namespace accord
