#include "transport/block_quantize.hpp"

#include "transport/half_precision_bits.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace accord {
namespace {

// The kernels for the baseline target (SSE2 on x86-64) and for AVX2 (twice the lanes, and the
// unsigned byte packing and 32-bit min/max SSE2 lacks), picked once per process. AVX2 without
// FMA: no multiply-add is contracted, so both compute the same bits for the same input, and
// replicas on machines with and without AVX2 decode alike.
namespace baseline {
#include "transport/block_quantize_kernels.inc"
}  // namespace baseline

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "transport/block_quantize_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options
std::atomic<bool> baseline_forced{false};
bool use_avx2() {
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported && !baseline_forced.load(std::memory_order_relaxed);
}
#define ACCORD_KERNEL(call) (use_avx2() ? avx2::call : baseline::call)
#else
#define ACCORD_KERNEL(call) baseline::call
#endif

}  // namespace

bool force_baseline_kernels(bool force) {
#if defined(__x86_64__) && defined(__GNUC__)
  baseline_forced.store(force);
  return __builtin_cpu_supports("avx2");
#else
  (void)force;
  return false;
#endif
}

// Each block code's entry points hand over to the kernels of this machine's target.
#define ACCORD_BLOCK_CODE(block)                                                                                   \
  void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,               \
                              std::span<block> blocks, bool commit) {                                              \
    ACCORD_KERNEL(quantize_feedback_blocks(values, scale, residual, blocks, commit));                              \
  }                                                                                                                \
  void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<block> blocks) {  \
    ACCORD_KERNEL(quantize_difference_blocks(values, base, blocks));                                               \
  }                                                                                                                \
  void quantize(std::span<const float> values, std::span<block> blocks) {                                          \
    ACCORD_KERNEL(quantize_blocks(values, blocks));                                                                \
  }                                                                                                                \
  void add_dequantized(std::span<const block> blocks, std::span<const float> base, std::span<float> out) {         \
    ACCORD_KERNEL(add_dequantized_blocks(blocks, base, out));                                                      \
  }
ACCORD_BLOCK_CODE(int8_block)
ACCORD_BLOCK_CODE(fp8_block)
ACCORD_BLOCK_CODE(fp4_block)
ACCORD_BLOCK_CODE(sign_block)
ACCORD_BLOCK_CODE(sign2_block)
ACCORD_BLOCK_CODE(sign3_block)
#undef ACCORD_BLOCK_CODE

}  // namespace accord
