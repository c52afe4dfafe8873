#include "gpu/nccl_transport.hpp"

#include <nccl.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "gpu/copy_count.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_kernels.hpp"
#include "gpu/device.hpp"
#include "transport/shard.hpp"

namespace accord {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(nccl_unique_id));

constexpr ncclDataType_t nccl_type(float) { return ncclFloat32; }
constexpr ncclDataType_t nccl_type(double) { return ncclFloat64; }

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Staging buffers, one per role, so that the buffers one call uses at once never alias.
enum stage { send_stage, recv_stage, counts_stage, result_stage, unpacked_stage, header_stage, stages };

}  // namespace

struct nccl_transport::impl {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<kernels> vote_kernels;
  std::array<device_array<std::byte>, stages> staging;
  transfer_stats stats;
  const interrupt_flag* interruption = nullptr;  // the owning transport's

  // Joins a communicator already created (by ncclCommInitAll) or creates one.
  impl(int device_index, ncclComm_t created, const ncclUniqueId* id, int rank_index, int ranks)
      : rank(rank_index), size(ranks), device(device_index) {
    activate();
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (created) {
      comm = created;
    } else {
      const ncclResult_t status = ncclCommInitRank(&comm, ranks, *id, rank_index);
      if (status != ncclSuccess) {
        cudaStreamDestroy(stream);
        throw transport_error("nccl rank " + std::to_string(rank_index) + " of " + std::to_string(ranks) +
                              ": ncclCommInitRank: " + ncclGetErrorString(status));
      }
    }
    vote_kernels = make_cuda_kernels(stream);
  }

  ~impl() {
    cudaSetDevice(device);
    // After interrupt() peers may be gone: aborting is local, and stops kernels that still
    // wait for them, so the synchronisation below cannot hang.
    if (comm && interruption && interruption->raised()) abort_communicator();
    cudaStreamSynchronize(stream);
    if (comm) ncclCommDestroy(comm);
    cudaStreamDestroy(stream);
  }

  // CUDA calls act on the calling thread's current device; actor threads may change.
  void activate() const { cuda_check(cudaSetDevice(device), "cudaSetDevice"); }

  std::string who() const { return "nccl rank " + std::to_string(rank) + ": "; }
  [[noreturn]] void fail(const std::string& what) const { throw transport_error(who() + what); }
  // Ends the communicator's pending work and the communicator; later calls throw.
  void abort_communicator() {
    ncclCommAbort(comm);
    comm = nullptr;
  }
  void check(ncclResult_t status, const char* call) const {
    if (status != ncclSuccess) fail(std::string(call) + ": " + ncclGetErrorString(status));
  }
  void check_peer(int peer, const char* call) const {
    if (peer < 0 || peer >= size)
      fail(std::string(call) + ": peer " + std::to_string(peer) + " outside [0, " + std::to_string(size) + ")");
  }

  // Waits for the stream while watching NCCL's asynchronous errors (a dead peer), which a
  // plain cudaStreamSynchronize would wait on forever, and interrupt(). Calls on one
  // communicator must not race, so the abort happens here, on the thread that drives the
  // transport, never in interrupt() itself. Not covered: NCCL calls that block on the host
  // (ncclCommInitRank, and ncclGroupEnd while it connects to a peer for the first
  // point-to-point exchange); an interrupt takes effect once they return.
  void wait() {
    for (;;) {
      const cudaError_t query = cudaStreamQuery(stream);
      if (query == cudaSuccess) return;
      if (query != cudaErrorNotReady) fail(std::string("CUDA stream: ") + cudaGetErrorString(query));
      if (interruption->raised()) {
        abort_communicator();
        throw transport_error(interruption->message(who()));
      }
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_communicator();
        fail(std::string("communicator failed: ") + ncclGetErrorString(async));
      }
      std::this_thread::yield();
    }
  }

  template <class T = std::byte>
  T* buffer(stage role, std::size_t elements) {
    device_array<std::byte>& b = staging[role];
    const std::size_t bytes = elements * sizeof(T);
    if (b.size() < bytes) b = device_array<std::byte>(device_kind::cuda, std::max(bytes, 2 * b.size()));
    return reinterpret_cast<T*>(b.span().data());
  }

  void copy_in(void* device_data, const void* host, std::size_t bytes) {
    if (!bytes) return;
    count_tensor_copy();
    cuda_check(cudaMemcpyAsync(device_data, host, bytes, cudaMemcpyHostToDevice, stream), "copy in");
  }
  // A copy to pageable host memory blocks the thread until the stream reaches it, out of
  // sight of wait()'s watch, so the stream's earlier work is waited for first.
  void copy_out(void* host, const void* device_data, std::size_t bytes) {
    if (!bytes) return;
    wait();
    count_tensor_copy();
    cuda_check(cudaMemcpyAsync(host, device_data, bytes, cudaMemcpyDeviceToHost, stream), "copy out");
  }

  // The ring's volume for a collective moving `chunks` chunks of `chunk_bytes` per rank.
  void count_collective(std::size_t chunk_bytes, int passes) {
    stats.bytes_sent += std::uint64_t(passes) * (size - 1) * chunk_bytes;
    stats.bytes_received += std::uint64_t(passes) * (size - 1) * chunk_bytes;
    stats.messages_sent += std::uint64_t(passes) * (size - 1);
  }

  // Reduce-scatter / all-gather on `padded` (size * chunk floats, this rank's chunk at
  // rank * chunk): the in-place forms NCCL defines.
  void reduce_scatter_padded(float* padded, std::size_t chunk) {
    check(ncclReduceScatter(padded, padded + rank * chunk, chunk, ncclFloat32, ncclSum, comm, stream),
          "ncclReduceScatter");
    count_collective(chunk * sizeof(float), 1);
  }
  void all_gather_padded(float* padded, std::size_t chunk) {
    check(ncclAllGather(padded + rank * chunk, padded, chunk, ncclFloat32, comm, stream), "ncclAllGather");
    count_collective(chunk * sizeof(float), 1);
  }

  // Runs `body(padded, chunk)` on device data of `total` floats, through a padded staging
  // copy unless the data already divides evenly. `keep` is what to copy back: this rank's
  // shard (after a reduce-scatter) or everything.
  template <class Body>
  void padded_device(float* data, std::size_t total, bool whole, Body body) {
    const std::size_t chunk = ceil_div(total, size);
    if (chunk * size == total) return body(data, chunk);
    float* padded = buffer<float>(result_stage, chunk * size);
    cuda_check(cudaMemsetAsync(padded + total, 0, (chunk * size - total) * sizeof(float), stream), "memset");
    cuda_check(cudaMemcpyAsync(padded, data, total * sizeof(float), cudaMemcpyDeviceToDevice, stream), "copy");
    body(padded, chunk);
    const shard mine = whole ? shard{0, total} : shard_of(total, size, rank);
    cuda_check(cudaMemcpyAsync(data + mine.begin, padded + mine.begin, mine.size() * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream), "copy");
  }

  // Point-to-point runs in two phases, each one NCCL group that both directions join (NCCL
  // sends may wait for their receiver, and a rank may send to itself): first a 2-word header
  // (tag, bytes) each way, then the payloads, whose receive size the header told.
  struct header {
    std::uint64_t tag = 0, bytes = 0;
  };
  header exchange_headers(int to, std::uint64_t tag, std::size_t out_bytes, int from) {
    std::uint64_t* words = buffer<std::uint64_t>(header_stage, 4);
    const std::uint64_t out[2] = {tag, out_bytes};
    copy_in(words, out, sizeof out);
    check(ncclGroupStart(), "ncclGroupStart");
    if (to >= 0) check(ncclSend(words, 2, ncclUint64, to, comm, stream), "ncclSend");
    if (from >= 0) check(ncclRecv(words + 2, 2, ncclUint64, from, comm, stream), "ncclRecv");
    check(ncclGroupEnd(), "ncclGroupEnd");
    header got;
    if (from >= 0) copy_out(&got, words + 2, sizeof got);
    wait();
    return got;
  }
  void exchange_payloads(int to, const std::byte* out, std::size_t out_bytes, int from, std::byte* in,
                         std::size_t in_bytes) {
    check(ncclGroupStart(), "ncclGroupStart");
    if (to >= 0 && out_bytes) check(ncclSend(out, out_bytes, ncclUint8, to, comm, stream), "ncclSend");
    if (from >= 0 && in_bytes) check(ncclRecv(in, in_bytes, ncclUint8, from, comm, stream), "ncclRecv");
    check(ncclGroupEnd(), "ncclGroupEnd");
    wait();
    if (to >= 0) {
      stats.bytes_sent += out_bytes;
      ++stats.messages_sent;
    }
    stats.bytes_received += in_bytes;
  }
  // Copies a received payload out, or reports what arrived instead of what was expected.
  void finish_recv(int from, header expected, header got, const std::byte* payload, std::span<std::byte> data) {
    if (got.tag != expected.tag || got.bytes != expected.bytes)
      fail("peer " + std::to_string(from) + " sent " + describe_tag(got.tag) + " of " + std::to_string(got.bytes) +
           " bytes, expected " + describe_tag(expected.tag) + " of " + std::to_string(expected.bytes) + " bytes");
    copy_out(data.data(), payload, data.size());
    wait();
  }
};

nccl_unique_id make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t status = ncclGetUniqueId(&id);
  if (status != ncclSuccess) throw transport_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(status));
  nccl_unique_id bytes;
  std::memcpy(bytes.data(), &id, sizeof id);
  return bytes;
}

nccl_transport::nccl_transport(const nccl_unique_id& id, int rank, int size, int device) : transport("nccl") {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("nccl_transport: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (device < 0 || device >= cuda_device_count())
    throw std::invalid_argument("nccl_transport: CUDA device " + std::to_string(device) + " does not exist (" +
                                std::to_string(cuda_device_count()) + " devices)");
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), sizeof nccl_id);
  impl_ = std::make_unique<impl>(device, nullptr, &nccl_id, rank, size);
  impl_->interruption = &interruption();
}

nccl_transport::nccl_transport(std::unique_ptr<impl> state) : transport("nccl"), impl_(std::move(state)) {
  impl_->interruption = &interruption();
}
nccl_transport::~nccl_transport() = default;

std::vector<std::unique_ptr<nccl_transport>> make_nccl_group(std::span<const int> devices) {
  const int count = cuda_device_count();
  if (devices.empty()) throw std::invalid_argument("make_nccl_group: no devices");
  for (int d : devices)
    if (d < 0 || d >= count)
      throw std::invalid_argument("make_nccl_group: CUDA device " + std::to_string(d) + " does not exist (" +
                                  std::to_string(count) + " devices)");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    throw std::invalid_argument("make_nccl_group: a device appears twice; NCCL allows one rank per GPU "
                                "in a communicator");
  const int ranks = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size());
  if (const ncclResult_t status = ncclCommInitAll(comms.data(), ranks, devices.data()); status != ncclSuccess)
    throw transport_error(std::string("ncclCommInitAll: ") + ncclGetErrorString(status));
  std::vector<std::unique_ptr<nccl_transport>> group;
  for (int r = 0; r < ranks; ++r)
    group.push_back(std::unique_ptr<nccl_transport>(
        new nccl_transport(std::make_unique<nccl_transport::impl>(devices[r], comms[r], nullptr, r, ranks))));
  return group;
}

int nccl_transport::rank() const { return impl_->rank; }
int nccl_transport::size() const { return impl_->size; }
int nccl_transport::device() const { return impl_->device; }
transfer_stats nccl_transport::stats() const { return impl_->stats; }
ncclComm* nccl_transport::communicator() const {
  if (!impl_->comm) impl_->fail("the communicator was aborted");
  return impl_->comm;
}
CUstream_st* nccl_transport::stream() const { return impl_->stream; }
void nccl_transport::activate() const { impl_->activate(); }
void nccl_transport::wait_for_stream() {
  impl_->activate();
  impl_->wait();
}
void nccl_transport::count_traffic(std::uint64_t bytes_sent, std::uint64_t bytes_received, std::uint64_t messages) {
  impl_->stats.bytes_sent += bytes_sent;
  impl_->stats.bytes_received += bytes_received;
  impl_->stats.messages_sent += messages;
}

void nccl_transport::send(int peer, std::uint64_t tag, std::span<const std::byte> data) {
  throw_if_interrupted();
  impl& s = *impl_;
  s.check_peer(peer, "send");
  s.activate();
  std::byte* payload = s.buffer(send_stage, data.size());
  s.copy_in(payload, data.data(), data.size());
  s.exchange_headers(peer, tag, data.size(), -1);
  s.exchange_payloads(peer, payload, data.size(), -1, nullptr, 0);
}

void nccl_transport::recv(int peer, std::uint64_t tag, std::span<std::byte> data) {
  throw_if_interrupted();
  impl& s = *impl_;
  s.check_peer(peer, "recv");
  s.activate();
  const std::uint64_t bytes = s.exchange_headers(-1, 0, 0, peer).bytes;
  std::byte* payload = s.buffer(recv_stage, bytes);
  s.exchange_payloads(-1, nullptr, 0, peer, payload, bytes);
  s.finish_recv(peer, {tag, data.size()}, {tag, bytes}, payload, data);
}

void nccl_transport::send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                               std::uint64_t tag) {
  throw_if_interrupted();
  impl& s = *impl_;
  s.check_peer(to, "send_recv");
  s.check_peer(from, "send_recv");
  s.activate();
  std::byte* payload = s.buffer(send_stage, out.size());
  s.copy_in(payload, out.data(), out.size());
  const impl::header got = s.exchange_headers(to, tag, out.size(), from);
  std::byte* received = s.buffer(recv_stage, got.bytes);
  s.exchange_payloads(to, payload, out.size(), from, received, got.bytes);
  s.finish_recv(from, {tag, in.size()}, got, received, in);
}

template <class T>
void nccl_transport::all_reduce_host(std::span<T> data) {
  throw_if_interrupted();
  impl& s = *impl_;
  if (data.empty()) return;
  s.activate();
  T* staged = s.buffer<T>(send_stage, data.size());
  s.copy_in(staged, data.data(), data.size_bytes());
  s.check(ncclAllReduce(staged, staged, data.size(), nccl_type(T{}), ncclSum, s.comm, s.stream), "ncclAllReduce");
  s.copy_out(data.data(), staged, data.size_bytes());
  s.wait();
  s.count_collective(ceil_div(data.size(), s.size) * sizeof(T), 2);
}

void nccl_transport::all_reduce(std::span<float> data, wire_precision precision) {
  if (precision != wire_precision::fp32) return transport::all_reduce(data, precision);
  all_reduce_host(data);
}
void nccl_transport::all_reduce(std::span<double> data) { all_reduce_host(data); }

void nccl_transport::reduce_scatter(std::span<float> data, wire_precision precision) {
  if (precision != wire_precision::fp32) return transport::reduce_scatter(data, precision);
  throw_if_interrupted();
  impl& s = *impl_;
  if (data.empty()) return;
  s.activate();
  const std::size_t chunk = ceil_div(data.size(), s.size);
  float* padded = s.buffer<float>(send_stage, chunk * s.size);
  cuda_check(cudaMemsetAsync(padded, 0, chunk * s.size * sizeof(float), s.stream), "memset");
  s.copy_in(padded, data.data(), data.size_bytes());
  s.reduce_scatter_padded(padded, chunk);
  const shard mine = shard_of(data.size(), s.size, s.rank);
  s.copy_out(data.data() + mine.begin, padded + mine.begin, mine.size() * sizeof(float));
  s.wait();
}

void nccl_transport::all_gather(std::span<float> data, wire_precision precision) {
  if (precision != wire_precision::fp32) return transport::all_gather(data, precision);
  throw_if_interrupted();
  impl& s = *impl_;
  if (data.empty()) return;
  s.activate();
  const std::size_t chunk = ceil_div(data.size(), s.size);
  float* padded = s.buffer<float>(send_stage, chunk * s.size);
  const shard mine = shard_of(data.size(), s.size, s.rank);
  s.copy_in(padded + mine.begin, data.data() + mine.begin, mine.size() * sizeof(float));
  s.all_gather_padded(padded, chunk);
  s.copy_out(data.data(), padded, data.size_bytes());
  s.wait();
}

void nccl_transport::all_reduce_device(std::span<float> data) {
  throw_if_interrupted();
  impl& s = *impl_;
  if (data.empty()) return;
  s.activate();
  s.check(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, s.comm, s.stream),
          "ncclAllReduce");
  s.wait();
  s.count_collective(ceil_div(data.size(), s.size) * sizeof(float), 2);
}

void nccl_transport::reduce_scatter_device(std::span<float> data) {
  throw_if_interrupted();
  impl& s = *impl_;
  if (data.empty()) return;
  s.activate();
  s.padded_device(data.data(), data.size(), false,
                  [&](float* padded, std::size_t chunk) { s.reduce_scatter_padded(padded, chunk); });
  s.wait();
}

void nccl_transport::all_gather_device(std::span<float> data) {
  throw_if_interrupted();
  impl& s = *impl_;
  if (data.empty()) return;
  s.activate();
  s.padded_device(data.data(), data.size(), true,
                  [&](float* padded, std::size_t chunk) { s.all_gather_padded(padded, chunk); });
  s.wait();
}

// All-to-all of packed words: owner o gets words [o*chunk, (o+1)*chunk) of every rank's
// vector (zero-padded to size*chunk words), voter after voter. Returns that block.
std::uint64_t* nccl_transport::exchange_votes(std::span<const std::uint64_t> signs, std::size_t chunk) {
  impl& s = *impl_;
  std::uint64_t* out = s.buffer<std::uint64_t>(send_stage, chunk * s.size);
  std::uint64_t* in = s.buffer<std::uint64_t>(recv_stage, chunk * s.size);
  cuda_check(cudaMemsetAsync(out, 0, chunk * s.size * sizeof(std::uint64_t), s.stream), "memset");
  s.copy_in(out, signs.data(), signs.size_bytes());
  s.check(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < s.size; ++peer) {
    s.check(ncclSend(out + peer * chunk, chunk, ncclUint64, peer, s.comm, s.stream), "ncclSend");
    s.check(ncclRecv(in + peer * chunk, chunk, ncclUint64, peer, s.comm, s.stream), "ncclRecv");
  }
  s.check(ncclGroupEnd(), "ncclGroupEnd");
  s.count_collective(chunk * sizeof(std::uint64_t), 1);
  return in;
}

void nccl_transport::sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                                   std::span<std::uint64_t> result) {
  throw_if_interrupted();
  check_sign_majority("nccl", signs, count, result);
  impl& s = *impl_;
  if (signs.empty()) return;
  s.activate();
  const std::size_t chunk = ceil_div(signs.size(), s.size), elements = chunk * 64;
  const std::uint64_t* votes = exchange_votes(signs, chunk);
  std::uint16_t* counts = s.buffer<std::uint16_t>(counts_stage, elements);
  std::uint64_t* majority = s.buffer<std::uint64_t>(result_stage, chunk * s.size);
  s.vote_kernels->count_votes({votes, chunk * s.size}, s.size, {counts, elements});
  s.vote_kernels->majority({counts, elements}, s.size, s.rank * elements, round, {majority + s.rank * chunk, chunk});
  s.check(ncclAllGather(majority + s.rank * chunk, majority, chunk, ncclUint64, s.comm, s.stream), "ncclAllGather");
  s.count_collective(chunk * sizeof(std::uint64_t), 1);
  s.copy_out(result.data(), majority, result.size_bytes());
  s.wait();
  // Padding bits of the inputs may hold anything; results hold zeros there.
  if (count % 64) result.back() &= (std::uint64_t{1} << (count % 64)) - 1;
}

void nccl_transport::sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                                 std::span<std::uint16_t> plus_votes) {
  throw_if_interrupted();
  check_sign_counts("nccl", signs, count, plus_votes);
  impl& s = *impl_;
  if (signs.empty()) return;
  s.activate();
  const std::size_t chunk = ceil_div(signs.size(), s.size), elements = chunk * 64;
  const unsigned bits = std::bit_width(static_cast<unsigned>(s.size));  // ceil(log2(size + 1))
  const std::uint64_t* votes = exchange_votes(signs, chunk);
  std::uint16_t* counts = s.buffer<std::uint16_t>(counts_stage, elements);
  std::uint64_t* planes = s.buffer<std::uint64_t>(result_stage, bits * chunk * s.size);
  std::uint16_t* all_counts = s.buffer<std::uint16_t>(unpacked_stage, elements * s.size);
  s.vote_kernels->count_votes({votes, chunk * s.size}, s.size, {counts, elements});
  s.vote_kernels->pack_counts({counts, elements}, bits, {planes + s.rank * bits * chunk, bits * chunk});
  s.check(ncclAllGather(planes + s.rank * bits * chunk, planes, bits * chunk, ncclUint64, s.comm, s.stream),
          "ncclAllGather");
  s.count_collective(bits * chunk * sizeof(std::uint64_t), 1);
  for (int owner = 0; owner < s.size; ++owner)
    s.vote_kernels->unpack_counts({planes + owner * bits * chunk, bits * chunk}, bits,
                                  {all_counts + owner * elements, elements});
  s.copy_out(plus_votes.data(), all_counts, plus_votes.size_bytes());
  s.wait();
}

}  // namespace accord
