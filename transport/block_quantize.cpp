#include "transport/block_quantize.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace accord {
namespace {

constexpr std::size_t block = quantization_block;
using block_values = std::array<float, block>;

// The block's values, a short last block padded with zeros (which change neither its largest
// magnitude nor its sum of magnitudes), so that the encoders always run a fixed-length loop.
const float* full_block(std::span<const float> values, std::size_t first, block_values& padded) {
  const std::size_t count = std::min(block, values.size() - first);
  if (count == block) return values.data() + first;
  std::copy_n(values.data() + first, count, padded.begin());
  std::fill(padded.begin() + static_cast<std::ptrdiff_t>(count), padded.end(), 0.f);
  return padded.data();
}

// The largest |x| as its bit pattern: for non-negative floats integer order is float order, and
// any infinity or NaN compares at least 0x7f800000. An integer max reduction vectorises.
std::uint32_t largest_magnitude_bits(const float* x) {
  std::uint32_t largest = 0;
  for (std::size_t i = 0; i < block; ++i) largest = std::max(largest, std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu);
  return largest;
}

bool non_finite(std::uint32_t magnitude_bits) { return magnitude_bits >= 0x7f800000u; }

constexpr float nan = std::numeric_limits<float>::quiet_NaN();

void encode(const float* x, std::size_t /*count: the zero padding changes nothing*/, int8_block& out) {
  const std::uint32_t largest_bits = largest_magnitude_bits(x);
  const float largest = std::bit_cast<float>(largest_bits);
  // Below 2^-120 the inverse scale 127/largest would overflow: the block travels as zeros.
  const bool zeros = non_finite(largest_bits) || largest < 0x1p-120f;
  out.scale = non_finite(largest_bits) ? nan : zeros ? 0.f : largest / 127.f;
  const float inverse = zeros ? 0.f : 127.f / largest;
  // Adding and subtracting 1.5·2^23 rounds a float of magnitude below 2^22 to the nearest
  // integer, ties to even, in plain SSE2 arithmetic.
  // |x| * 127/largest stays below 127.5, so it rounds into [-127, 127] without a clamp. The
  // codes go to a local array first: int8 stores into `out` might alias `x` (a char type may
  // alias anything), which keeps the compiler from vectorising.
  constexpr float round_magic = 0x1.8p23f;
  std::array<std::int8_t, block> codes{};
  if (!zeros)
    for (std::size_t i = 0; i < block; ++i)
      codes[i] = static_cast<std::int8_t>(static_cast<int>((x[i] * inverse + round_magic) - round_magic));
  std::memcpy(out.codes, codes.data(), block);
}

// fp8 codes: bits 0-6 of a code are bits 20-26 of the float |x| / scale (3 mantissa bits and the
// exponent's low 4), offset so that 1.0 is code 127 and code 1 is 2^-16 · 1.25; code 0 is zero.
constexpr std::uint32_t fp8_offset = (127u << 3) - 127u;

void encode(const float* x, std::size_t /*count: the zero padding changes nothing*/, fp8_block& out) {
  const std::uint32_t largest_bits = largest_magnitude_bits(x);
  const float largest = std::bit_cast<float>(largest_bits);
  const bool zeros = non_finite(largest_bits) || largest < 0x1p-120f;
  out.scale = non_finite(largest_bits) ? nan : zeros ? 0.f : largest;
  const float inverse = zeros ? 0.f : 1.f / largest;
  // Adding 2^19 to the bits rounds |y| to 3 mantissa bits (to nearest, ties away from zero),
  // carrying into the exponent; the clamps keep tiny values at 0 and a |y| a rounding above 1 at
  // 127. All integer arithmetic, which vectorises.
  std::array<std::uint8_t, block> codes;
  for (std::size_t i = 0; i < block; ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(x[i] * inverse);
    const std::int32_t rounded = static_cast<std::int32_t>(((bits & 0x7fffffffu) + (1u << 19)) >> 20);
    const std::int32_t magnitude = std::min(std::max(rounded - static_cast<std::int32_t>(fp8_offset), 0), 127);
    codes[i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(magnitude) | ((bits >> 24) & 0x80u));
  }
  std::memcpy(out.codes, codes.data(), block);
}

// What an fp8 code stands for, times the block's scale.
inline float fp8_value(std::uint8_t code, float scale) {
  const std::uint32_t magnitude = code & 0x7fu;
  const std::uint32_t bits = magnitude ? (magnitude + fp8_offset) << 20 : 0u;
  return scale * std::bit_cast<float>(bits | (static_cast<std::uint32_t>(code & 0x80u) << 24));
}

void encode(const float* x, std::size_t count, sign_block& out) {
  const std::uint32_t largest_bits = largest_magnitude_bits(x);
  // Eight running sums in a fixed order: vectorised, and the same bits on every machine.
  std::array<float, 8> partial{};
  for (std::size_t i = 0; i < block; i += 8)
    for (std::size_t k = 0; k < 8; ++k) partial[k] += std::fabs(x[i + k]);
  const float sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                    ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  out.scale = non_finite(largest_bits) ? nan : sum / static_cast<float>(count);
  // Sign bits as one byte each (a vectorised shift), then eight bytes to eight bits with one
  // multiply: byte j (bit 8j) times 2^(56-7j) lands on bit 56+j, and no two products overlap.
  std::array<std::uint8_t, block> negative;
  for (std::size_t i = 0; i < block; ++i) negative[i] = static_cast<std::uint8_t>(std::bit_cast<std::uint32_t>(x[i]) >> 31);
  static_assert(std::endian::native == std::endian::little, "byte j of a word is bits 8j..8j+7");
  std::array<std::uint8_t, block / 8> packed;
  for (std::size_t g = 0; g < packed.size(); ++g) {
    std::uint64_t bytes;
    std::memcpy(&bytes, negative.data() + 8 * g, 8);
    packed[g] = static_cast<std::uint8_t>((bytes * 0x0102040810204080ull) >> 56);
  }
  std::memcpy(out.signs, packed.data(), packed.size());  // value i is bit i%32 of word i/32
}

void decode(const int8_block& in, const float* base, float* out, std::size_t count) {
  const float scale = in.scale;
  for (std::size_t i = 0; i < count; ++i) out[i] = base[i] + scale * static_cast<float>(in.codes[i]);
}

void decode(const fp8_block& in, const float* base, float* out, std::size_t count) {
  const float scale = in.scale;
  for (std::size_t i = 0; i < count; ++i) out[i] = base[i] + fp8_value(in.codes[i], scale);
}

void decode(const sign_block& in, const float* base, float* out, std::size_t count) {
  const std::uint32_t scale = std::bit_cast<std::uint32_t>(in.scale);
  for (std::size_t first = 0; first < count; first += 32) {
    const std::uint32_t word = in.signs[first / 32];
    const std::size_t n = std::min<std::size_t>(32, count - first);
    for (std::size_t k = 0; k < n; ++k)
      out[first + k] = base[first + k] + std::bit_cast<float>(scale ^ (((word >> k) & 1u) << 31));
  }
}

void check_blocks(const char* what, std::size_t values, std::size_t blocks) {
  if (blocks != quantized_blocks(values))
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(blocks) + " blocks for " +
                                std::to_string(values) + " values, expected " +
                                std::to_string(quantized_blocks(values)));
}

template <class Block>
void quantize_blocks(std::span<const float> values, std::span<Block> blocks) {
  check_blocks("quantize", values.size(), blocks.size());
  block_values padded;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t first = b * block;
    encode(full_block(values, first, padded), std::min(block, values.size() - first), blocks[b]);
  }
}

template <class Block>
void add_dequantized_blocks(std::span<const Block> blocks, std::span<const float> base, std::span<float> out) {
  check_blocks("add_dequantized", out.size(), blocks.size());
  if (base.size() != out.size())
    throw std::invalid_argument("add_dequantized: base holds " + std::to_string(base.size()) + " values, out " +
                                std::to_string(out.size()));
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t first = b * block;
    decode(blocks[b], base.data() + first, out.data() + first, std::min(block, out.size() - first));
  }
}

// v minus what `in` decodes to, for the first `count` values: what a record missed.
void subtract_decoded(const float* v, const int8_block& in, float* missed, std::size_t count) {
  const float scale = in.scale;
  for (std::size_t i = 0; i < count; ++i) missed[i] = v[i] - scale * static_cast<float>(in.codes[i]);
}

void subtract_decoded(const float* v, const fp8_block& in, float* missed, std::size_t count) {
  const float scale = in.scale;
  for (std::size_t i = 0; i < count; ++i) missed[i] = v[i] - fp8_value(in.codes[i], scale);
}

void subtract_decoded(const float* v, const sign_block& in, float* missed, std::size_t count) {
  // The record's bit for v[i] is v[i]'s own sign bit, so the decoded value is ±scale with that sign.
  const std::uint32_t scale = std::bit_cast<std::uint32_t>(in.scale);
  for (std::size_t i = 0; i < count; ++i)
    missed[i] = v[i] - std::bit_cast<float>(scale ^ (std::bit_cast<std::uint32_t>(v[i]) & 0x80000000u));
}

// Encodes `count` values block by block, each block's values made by make(first, n, v) into a
// local array v (zero-padded past n, so the encoders run their fixed-length loops); then
// after(first, n, v, record) sees the block and its record.
template <class Block, class Make, class After>
void encode_made_blocks(std::size_t count, std::span<Block> blocks, Make make, After after) {
  check_blocks("quantize", count, blocks.size());
  alignas(64) block_values v;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t first = b * block, n = std::min(block, count - first);
    make(first, n, v.data());
    if (n < block) std::fill(v.begin() + static_cast<std::ptrdiff_t>(n), v.end(), 0.f);
    encode(v.data(), n, blocks[b]);
    after(first, n, v.data(), blocks[b]);
  }
}

void check_length(const char* what, std::size_t values, std::size_t other, const char* other_name) {
  if (values != other)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(values) + " values but " +
                                std::to_string(other) + " " + other_name);
}

template <class Block>
void quantize_feedback_blocks(std::span<const float> values, float scale, std::span<float> residual,
                              std::span<Block> blocks, bool commit) {
  check_length("quantize_with_feedback", values.size(), residual.size(), "residuals");
  const float* __restrict x = values.data();
  float* __restrict r = residual.data();
  encode_made_blocks(
      values.size(), blocks,
      [&](std::size_t first, std::size_t n, float* __restrict v) {
        for (std::size_t i = 0; i < n; ++i) v[i] = scale * x[first + i] + r[first + i];
      },
      [&](std::size_t first, std::size_t n, const float* v, const Block& record) {
        if (commit) subtract_decoded(v, record, r + first, n);
      });
}

template <class Block>
void quantize_difference_blocks(std::span<const float> values, std::span<const float> base, std::span<Block> blocks) {
  check_length("quantize_difference", values.size(), base.size(), "base values");
  const float* __restrict x = values.data();
  const float* __restrict from = base.data();
  encode_made_blocks(
      values.size(), blocks,
      [&](std::size_t first, std::size_t n, float* __restrict v) {
        for (std::size_t i = 0; i < n; ++i) v[i] = x[first + i] - from[first + i];
      },
      [](std::size_t, std::size_t, const float*, const Block&) {});
}

}  // namespace

void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<int8_block> blocks, bool commit) {
  quantize_feedback_blocks(values, scale, residual, blocks, commit);
}
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<fp8_block> blocks, bool commit) {
  quantize_feedback_blocks(values, scale, residual, blocks, commit);
}
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<sign_block> blocks, bool commit) {
  quantize_feedback_blocks(values, scale, residual, blocks, commit);
}
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<int8_block> blocks) {
  quantize_difference_blocks(values, base, blocks);
}
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<fp8_block> blocks) {
  quantize_difference_blocks(values, base, blocks);
}
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<sign_block> blocks) {
  quantize_difference_blocks(values, base, blocks);
}

void quantize(std::span<const float> values, std::span<int8_block> blocks) { quantize_blocks(values, blocks); }
void quantize(std::span<const float> values, std::span<fp8_block> blocks) { quantize_blocks(values, blocks); }
void quantize(std::span<const float> values, std::span<sign_block> blocks) { quantize_blocks(values, blocks); }

void add_dequantized(std::span<const int8_block> blocks, std::span<const float> base, std::span<float> out) {
  add_dequantized_blocks(blocks, base, out);
}
void add_dequantized(std::span<const fp8_block> blocks, std::span<const float> base, std::span<float> out) {
  add_dequantized_blocks(blocks, base, out);
}
void add_dequantized(std::span<const sign_block> blocks, std::span<const float> base, std::span<float> out) {
  add_dequantized_blocks(blocks, base, out);
}

}  // namespace accord
