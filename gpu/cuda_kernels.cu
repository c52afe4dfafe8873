// CUDA twins of the reference kernels in cpu_kernels.cpp. Arithmetic uses the _rn intrinsics in
// the reference's order so nvcc cannot contract it into FMAs: results are bit-identical to the
// CPU, and replicas on different devices stay identical (Distributed Lion relies on that).
#include <memory>

#include "gpu/cuda_check.hpp"
#include "gpu/cuda_kernels.hpp"
#include "gpu/device.hpp"
#include "transport/half_precision_bits.hpp"
#include "transport/transport.hpp"

namespace accord {
namespace {

constexpr unsigned block_size = 256;

unsigned blocks_for(std::size_t threads) {
  return static_cast<unsigned>((threads + block_size - 1) / block_size);
}

__device__ std::size_t global_index() {
  return blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
}

__device__ bool bit_of(const std::uint64_t* words, std::size_t i) {
  return (words[i / 64] >> (i % 64)) & 1u;
}

// Packed words are written as 32-bit halves, one per warp (little-endian: element 64w+b lies in
// half 2w for b < 32). Every thread of the warp must arrive here, also past the end.
__device__ void store_ballot(bool value, std::size_t i, std::uint32_t* halves, std::size_t halves_count) {
  const unsigned mask = __ballot_sync(0xffffffffu, value);
  if (threadIdx.x % 32 == 0 && i / 32 < halves_count) halves[i / 32] = mask;
}

__global__ void accumulate_kernel(float* into, const float* values, float scale, std::size_t n) {
  const std::size_t i = global_index();
  if (i < n) into[i] = __fadd_rn(into[i], __fmul_rn(scale, values[i]));
}

__global__ void widen_bf16_kernel(const std::uint16_t* bf16, float* values, std::size_t n) {
  const std::size_t i = global_index();
  if (i < n) values[i] = __uint_as_float(std::uint32_t{bf16[i]} << 16);
}

__global__ void pack_signs_kernel(const float* values, std::size_t n, std::uint64_t round,
                                  std::uint32_t* halves, std::size_t halves_count) {
  const std::size_t i = global_index();
  bool plus = false;
  if (i < n) {
    const float v = values[i];
    plus = v > 0.0f || (v == 0.0f && ((i + round) & 1u) == 0);
  }
  store_ballot(plus, i, halves, halves_count);
}

__global__ void unpack_signs_kernel(const std::uint64_t* bits, float* signs, std::size_t n) {
  const std::size_t i = global_index();
  if (i < n) signs[i] = bit_of(bits, i) ? 1.0f : -1.0f;
}

__global__ void count_votes_kernel(const std::uint64_t* vectors, std::size_t voters,
                                   std::size_t words, std::uint16_t* plus_votes, std::size_t n) {
  const std::size_t i = global_index();
  if (i >= n) return;
  unsigned count = 0;
  for (std::size_t v = 0; v < voters; ++v) count += bit_of(vectors + v * words, i);
  plus_votes[i] = static_cast<std::uint16_t>(count);
}

__global__ void majority_kernel(const std::uint16_t* plus_votes, std::size_t n, std::size_t voters,
                                std::uint64_t first_element, std::uint64_t round,
                                std::uint32_t* halves, std::size_t halves_count) {
  const std::size_t i = global_index();
  bool plus = false;
  if (i < n) {
    const std::size_t twice = 2 * std::size_t{plus_votes[i]};
    plus = twice > voters || (twice == voters && ((first_element + i + round) & 1u) == 0);
  }
  store_ballot(plus, i, halves, halves_count);
}

__global__ void pack_counts_kernel(const std::uint16_t* counts, std::size_t n, unsigned bits_per_count,
                                   std::uint32_t* halves, std::size_t halves_per_plane) {
  const std::size_t i = global_index();
  const unsigned count = i < n ? counts[i] : 0u;
  for (unsigned k = 0; k < bits_per_count; ++k)
    store_ballot((count >> k) & 1u, i, halves + k * halves_per_plane, halves_per_plane);
}

__global__ void unpack_counts_kernel(const std::uint64_t* planes, unsigned bits_per_count,
                                     std::size_t words, std::uint16_t* counts, std::size_t n) {
  const std::size_t i = global_index();
  if (i >= n) return;
  unsigned count = 0;
  for (unsigned k = 0; k < bits_per_count; ++k) count |= unsigned{bit_of(planes + k * words, i)} << k;
  counts[i] = static_cast<std::uint16_t>(count);
}

// The reference's expressions (optim/optimizer.cpp, optim/lion.hpp), operation for operation.
__global__ void adamw_kernel(float* parameters, const float* gradients, float* m, float* v,
                             std::size_t n, adamw_step_config c, adamw_factors f) {
  const std::size_t i = global_index();
  if (i >= n) return;
  const float g = gradients[i];
  const float m_i = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(1.0f - c.beta1, g));
  const float v_i = __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - c.beta2, g), g));
  m[i] = m_i;
  v[i] = v_i;
  const float denominator = __fadd_rn(__fmul_rn(__fsqrt_rn(v_i), f.inv_sqrt_correction2), c.epsilon);
  parameters[i] = __fsub_rn(__fmul_rn(parameters[i], f.decay),
                            __fdiv_rn(__fmul_rn(f.step_size, m_i), denominator));
}

__global__ void lion_kernel(float* parameters, const float* gradients, float* m, std::size_t n,
                            lion_step_config c, float decay) {
  const std::size_t i = global_index();
  if (i >= n) return;
  const float g = gradients[i];
  const float m_i = m[i];
  const float direction = __fadd_rn(__fmul_rn(c.beta1, m_i), __fmul_rn(1.0f - c.beta1, g));
  const float sign = static_cast<float>((direction > 0.0f) - (direction < 0.0f));
  parameters[i] = __fsub_rn(__fmul_rn(parameters[i], decay), __fmul_rn(c.learning_rate, sign));
  m[i] = __fadd_rn(__fmul_rn(c.beta2, m_i), __fmul_rn(1.0f - c.beta2, g));
}

// The wire conversions: the host's own (transport/half_precision_bits.hpp), so the device
// rounds to the same bits; tests/test_gpu.cpp compares the two.
using half_precision::bf16_bits;
using half_precision::bf16_value;
using half_precision::fp16_bits;
using half_precision::fp16_value;

__global__ void fill_kernel(float* values, float value, std::size_t n) {
  const std::size_t i = global_index();
  if (i < n) values[i] = value;
}

__global__ void scale_kernel(float* values, float factor, std::size_t n) {
  const std::size_t i = global_index();
  if (i < n) values[i] = __fmul_rn(values[i], factor);
}

// Sum of squares in double: each block sums a grid-stride share (then a tree in shared memory)
// into partials[block]; launched again with one block over the partials (squares = false).
__global__ void square_sum_kernel(const float* values, const double* partial_values, std::size_t n,
                                  bool squares, double* partials) {
  __shared__ double sums[block_size];
  double sum = 0;
  for (std::size_t i = global_index(); i < n; i += std::size_t{gridDim.x} * blockDim.x)
    sum += squares ? double{values[i]} * values[i] : partial_values[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = block_size / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

// direction: 0 narrow, 1 widen, 2 add widened (kernels::wire_direction); bf16 else fp16.
__global__ void convert_kernel(bool bf16, int direction, float* values, std::uint16_t* wire, std::size_t n) {
  const std::size_t i = global_index();
  if (i >= n) return;
  if (direction == 0) {
    wire[i] = bf16 ? bf16_bits(values[i]) : fp16_bits(values[i]);
    return;
  }
  const float value = bf16 ? bf16_value(wire[i]) : fp16_value(wire[i]);
  values[i] = direction == 1 ? value : __fadd_rn(values[i], value);
}

// lion_local_direction: direction before the momentum moves, its sign (ties by tie_vote).
__global__ void lion_signs_kernel(const float* gradients, float* momentum, std::size_t n, float beta1,
                                  float beta2, std::uint64_t round, std::uint32_t* halves,
                                  std::size_t halves_count) {
  const std::size_t i = global_index();
  bool plus = false;
  if (i < n) {
    const float g = gradients[i], m = momentum[i];
    const float direction = __fadd_rn(__fmul_rn(beta1, m), __fmul_rn(1.0f - beta1, g));
    momentum[i] = __fadd_rn(__fmul_rn(beta2, m), __fmul_rn(1.0f - beta2, g));
    plus = direction > 0.0f || (direction == 0.0f && ((i + round) & 1u) == 0);
  }
  store_ballot(plus, i, halves, halves_count);
}

// apply_sign_update: majority bits (plus_votes null) or the averaged delta (2c - N) / N.
__global__ void sign_update_kernel(float* parameters, const std::uint64_t* majority,
                                   const std::uint16_t* plus_votes, int voters, std::size_t n,
                                   float learning_rate, float decay) {
  const std::size_t i = global_index();
  if (i >= n) return;
  const float delta = plus_votes ? __fdiv_rn(static_cast<float>(2 * int{plus_votes[i]} - voters),
                                             static_cast<float>(voters))
                                 : (bit_of(majority, i) ? 1.0f : -1.0f);
  parameters[i] = __fsub_rn(__fmul_rn(parameters[i], decay), __fmul_rn(learning_rate, delta));
}

std::uint32_t* halves_of(std::span<std::uint64_t> words) {
  return reinterpret_cast<std::uint32_t*>(words.data());
}

class cuda_kernels final : public kernels {
public:
  explicit cuda_kernels(cudaStream_t stream) : stream_(stream) {}
  device_kind kind() const override { return device_kind::cuda; }
  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "kernels::synchronize"); }
  std::shared_ptr<const device_event> record() override { return record_cuda_event(stream_); }
  void wait_for(const device_event& event) override { wait_for_cuda_event(stream_, event); }

protected:
  void do_fill(std::span<float> values, float value) override {
    launch(values.size(), "fill", fill_kernel, values.data(), value, values.size());
  }
  void do_copy(std::span<const float> from, std::span<float> to) override {
    if (from.empty()) return;
    cuda_check(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyDeviceToDevice, stream_),
               "kernels::copy");
  }
  void do_scale(std::span<float> values, float factor) override {
    launch(values.size(), "scale", scale_kernel, values.data(), factor, values.size());
  }
  double do_square_sum(std::span<const float> values) override {
    constexpr unsigned blocks = 256;  // the second pass is one block of block_size threads
    static_assert(blocks <= block_size);
    if (partials_.size() < blocks + 1) partials_ = device_array<double>(device_kind::cuda, blocks + 1);
    double* partials = partials_.span().data();
    square_sum_kernel<<<blocks, block_size, 0, stream_>>>(values.data(), nullptr, values.size(), true, partials);
    cuda_check(cudaGetLastError(), "square_sum");
    square_sum_kernel<<<1, block_size, 0, stream_>>>(nullptr, partials, blocks, false, partials + blocks);
    cuda_check(cudaGetLastError(), "square_sum");
    double sum = 0;  // a scalar, not a tensor: not counted as a tensor copy
    cuda_check(cudaMemcpyAsync(&sum, partials + blocks, sizeof sum, cudaMemcpyDeviceToHost, stream_), "square_sum");
    synchronize();
    return sum;
  }
  void do_convert(wire_precision precision, wire_direction direction, std::span<float> values,
                  std::span<std::uint16_t> wire) override {
    launch(values.size(), "wire conversion", convert_kernel, precision == wire_precision::bf16,
           static_cast<int>(direction), values.data(), wire.data(), values.size());
  }
  void do_lion_signs(std::span<const float> gradients, std::span<float> momentum, float beta1, float beta2,
                     std::uint64_t round, std::span<std::uint64_t> bits) override {
    launch(bits.size() * 64, "lion_signs", lion_signs_kernel, gradients.data(), momentum.data(),
           gradients.size(), beta1, beta2, round, halves_of(bits), 2 * bits.size());
  }
  void do_sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority,
                      std::span<const std::uint16_t> plus_votes, int voters, float learning_rate,
                      float weight_decay) override {
    launch(parameters.size(), "sign_update", sign_update_kernel, parameters.data(), majority.data(),
           plus_votes.empty() ? nullptr : plus_votes.data(), voters, parameters.size(), learning_rate,
           1.0f - learning_rate * weight_decay);
  }
  void do_accumulate(std::span<float> into, std::span<const float> values, float scale) override {
    launch(into.size(), "accumulate", accumulate_kernel, into.data(), values.data(), scale, into.size());
  }
  void do_widen_bf16(std::span<const std::uint16_t> bf16, std::span<float> values) override {
    launch(values.size(), "widen_bf16", widen_bf16_kernel, bf16.data(), values.data(), values.size());
  }
  void do_pack_signs(std::span<const float> values, std::uint64_t round,
                     std::span<std::uint64_t> bits) override {
    launch(bits.size() * 64, "pack_signs", pack_signs_kernel, values.data(), values.size(), round,
           halves_of(bits), 2 * bits.size());
  }
  void do_unpack_signs(std::span<const std::uint64_t> bits, std::span<float> signs) override {
    launch(signs.size(), "unpack_signs", unpack_signs_kernel, bits.data(), signs.data(), signs.size());
  }
  void do_count_votes(std::span<const std::uint64_t> vectors, std::size_t voters,
                      std::span<std::uint16_t> plus_votes) override {
    launch(plus_votes.size(), "count_votes", count_votes_kernel, vectors.data(), voters,
           packed_words(plus_votes.size()), plus_votes.data(), plus_votes.size());
  }
  void do_majority(std::span<const std::uint16_t> plus_votes, std::size_t voters,
                   std::uint64_t first_element, std::uint64_t round,
                   std::span<std::uint64_t> bits) override {
    launch(bits.size() * 64, "majority", majority_kernel, plus_votes.data(), plus_votes.size(), voters,
           first_element, round, halves_of(bits), 2 * bits.size());
  }
  void do_pack_counts(std::span<const std::uint16_t> counts, unsigned bits_per_count,
                      std::span<std::uint64_t> planes) override {
    const std::size_t words = packed_words(counts.size());
    launch(words * 64, "pack_counts", pack_counts_kernel, counts.data(), counts.size(), bits_per_count,
           halves_of(planes), 2 * words);
  }
  void do_unpack_counts(std::span<const std::uint64_t> planes, unsigned bits_per_count,
                        std::span<std::uint16_t> counts) override {
    launch(counts.size(), "unpack_counts", unpack_counts_kernel, planes.data(), bits_per_count,
           packed_words(counts.size()), counts.data(), counts.size());
  }
  void do_adamw_step(std::span<float> parameters, std::span<const float> gradients,
                     std::span<float> m, std::span<float> v, const adamw_step_config& c) override {
    launch(parameters.size(), "adamw_step", adamw_kernel, parameters.data(), gradients.data(), m.data(),
           v.data(), parameters.size(), c, adamw_factors::of(c));
  }
  void do_lion_step(std::span<float> parameters, std::span<const float> gradients,
                    std::span<float> m, const lion_step_config& c) override {
    launch(parameters.size(), "lion_step", lion_kernel, parameters.data(), gradients.data(), m.data(),
           parameters.size(), c, 1.0f - c.learning_rate * c.weight_decay);
  }

private:
  template <class... Kernel, class... Arguments>
  void launch(std::size_t threads, const char* name, void (*kernel)(Kernel...), Arguments... arguments) {
    if (threads == 0) return;
    kernel<<<blocks_for(threads), block_size, 0, stream_>>>(arguments...);
    cuda_check(cudaGetLastError(), name);
  }

  cudaStream_t stream_;
  device_array<double> partials_;  // square_sum's per-block sums and result
};

}  // namespace

namespace {

struct cuda_event final : device_event {
  cudaEvent_t event = nullptr;
  ~cuda_event() override { cudaEventDestroy(event); }
};

}  // namespace

std::shared_ptr<const device_event> record_cuda_event(cudaStream_t stream) {
  auto marker = std::make_shared<cuda_event>();
  cuda_check(cudaEventCreateWithFlags(&marker->event, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventRecord(marker->event, stream), "cudaEventRecord");
  return marker;
}

void wait_for_cuda_event(cudaStream_t stream, const device_event& event) {
  if (const auto* marker = dynamic_cast<const cuda_event*>(&event))
    cuda_check(cudaStreamWaitEvent(stream, marker->event, 0), "cudaStreamWaitEvent");
}

std::unique_ptr<kernels> make_cuda_kernels(cudaStream_t stream) {
  return std::make_unique<cuda_kernels>(stream);
}

}  // namespace accord
