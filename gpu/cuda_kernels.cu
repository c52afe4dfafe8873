// CUDA twins of the reference kernels in cpu_kernels.cpp. Arithmetic uses the _rn intrinsics in
// the reference's order so nvcc cannot contract it into FMAs: results are bit-identical to the
// CPU, and replicas on different devices stay identical (Distributed Lion relies on that).
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_kernels.hpp"
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

std::uint32_t* halves_of(std::span<std::uint64_t> words) {
  return reinterpret_cast<std::uint32_t*>(words.data());
}

class cuda_kernels final : public kernels {
public:
  explicit cuda_kernels(cudaStream_t stream) : stream_(stream) {}
  device_kind kind() const override { return device_kind::cuda; }
  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "kernels::synchronize"); }

protected:
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
};

}  // namespace

std::unique_ptr<kernels> make_cuda_kernels(cudaStream_t stream) {
  return std::make_unique<cuda_kernels>(stream);
}

}  // namespace accord
