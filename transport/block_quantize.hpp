#pragma once
// Block quantization (`--estimate-precision int8|fp8|fp4|sign|sign2|sign3` for ACCO's estimate
// rounds, `--wire-precision int8|fp8|fp4|sign|sign2|sign3` for real rounds with error feedback):
// values in blocks of 256, each block one fp32 scale (sign2: two bf16 levels, sign3: four) plus a
// code per value.
// - int8: scale = max|x| / 127, code = x / scale rounded to nearest (ties to even), in [-127, 127].
//   A block whose largest magnitude is below the smallest normal float is sent as zeros.
// - fp8: scale = max|x|, each code a sign bit and 7 bits of |x| / scale on a logarithmic scale: a
//   4-bit exponent and 3 mantissa bits (E4M3-like, no infinities or NaNs), rounded to nearest, so
//   every value within 2^-4 of itself (relative) down to 2^-16 of the block's largest; smaller
//   ones travel as zero. Same 8.125 bits per value as int8, but small values keep their relative
//   precision, which Adam's per-value normalisation needs (docs/algorithms.md).
// - fp4: scale = max|x|, each code a sign bit and 3 bits: |x| / scale rounded to the nearest
//   power of two from 2^-6 to 1, smaller ones zero; two codes a byte, 4.125 bits per value. Every
//   value from 2^-6.4 of the block's largest up arrives within a factor 1.5 of itself (error
//   feedback carries the rest), so Adam's second moment still sees every coordinate each round.
// - sign: scale = mean |x| of the block, one bit per value (set: negative); decodes to ±scale.
// - sign2: two bits per value, its sign and whether |x| is above the block's mean |x|; two
//   levels, the mean |x| of the values at or below the block's mean and of those above it (each
//   group's L2-optimal level); decodes to ± its group's level. 2.125 bits per value, and 0.34
//   (Gaussian values) to 0.41 (Laplacian) of sign's squared error.
// - sign3: sign2's split made once more, inside each of its two groups at that group's mean |x|:
//   a sign and two magnitude bits per value, four levels (each group's mean |x|). 3.25 bits per
//   value, and 0.11 (Gaussian) to 0.16 (Laplacian) of sign's squared error, a third of sign2's:
//   for a parameter change, whose coding error stays in the replica.
//   The levels travel as bf16 (fp32's range, 8 significant bits): a level is its group's mean, so
//   rounding it by up to 2^-9 of itself adds at most 4·10^-6 of its square per value to the
//   group's squared error, against 10^-2 and more from the split itself, and error feedback
//   re-sends it; fp32 levels would cost sign3
//   0.25 bits per value more (which ACCO under 8 bits/param/step cannot pay).
// A block holding any non-finite value gets a NaN scale and decodes as all-NaN: quantization
// never hides a NaN or an infinity. The last block of a span may be short; its record still
// has room for 256 codes (what travels is whole records). The loops are plain and branch-free
// so that the compiler vectorises them, and decoding is the same code on every rank, so every
// rank that decodes a record gets the same bits.
#include <cstddef>
#include <cstdint>
#include <span>

namespace accord {

inline constexpr std::size_t quantization_block = 256;

struct int8_block {
  float scale;
  std::int8_t codes[quantization_block];
};

struct fp8_block {
  float scale;
  std::uint8_t codes[quantization_block];  // bit 7: negative; bits 0-6: 0 (zero) or the magnitude's code
};

struct fp4_block {
  float scale;
  std::uint8_t codes[quantization_block / 2];  // value 2j: low 4 bits of byte j, 2j + 1: high 4 bits
};

struct sign_block {
  float scale;
  std::uint32_t signs[quantization_block / 32];  // value i is bit i%32 of word i/32, LSB first
};

// sign2 and sign3 code value i as c = negative + 2·group, its group counted from the smallest
// magnitudes up (sign2: 0 at or below the block's mean |x|, 1 above; sign3: 0-1 the halves of
// sign2's group 0, 2-3 those of its group 1). Bits 0-1 of c sit in bits 2(i/64), 2(i/64)+1 of
// codes[i%64]; sign3's bit 2 in bit i/32 of high[i%32]: each plane is read in contiguous runs.
struct sign2_block {
  std::uint16_t levels[2];  // each group's mean |x|, bf16
  std::uint8_t codes[quantization_block / 4];
};

struct sign3_block {
  std::uint16_t levels[4];  // each group's mean |x|, bf16
  std::uint8_t codes[quantization_block / 4];
  std::uint8_t high[quantization_block / 8];
};

static_assert(sizeof(int8_block) == 4 + quantization_block, "int8 records travel unpadded");
static_assert(sizeof(fp8_block) == 4 + quantization_block, "fp8 records travel unpadded");
static_assert(sizeof(fp4_block) == 4 + quantization_block / 2, "fp4 records travel unpadded");
static_assert(sizeof(sign_block) == 4 + quantization_block / 8, "sign records travel unpadded");
static_assert(sizeof(sign2_block) == 4 + quantization_block / 4, "sign2 records travel unpadded");
static_assert(sizeof(sign3_block) == 8 + 3 * quantization_block / 8, "sign3 records travel unpadded");

// Records needed for `count` values.
inline std::size_t quantized_blocks(std::size_t count) {
  return (count + quantization_block - 1) / quantization_block;
}

// `blocks` must hold quantized_blocks(values.size()) records (std::invalid_argument otherwise).
void quantize(std::span<const float> values, std::span<int8_block> blocks);
void quantize(std::span<const float> values, std::span<fp8_block> blocks);
void quantize(std::span<const float> values, std::span<fp4_block> blocks);
void quantize(std::span<const float> values, std::span<sign_block> blocks);
void quantize(std::span<const float> values, std::span<sign2_block> blocks);
void quantize(std::span<const float> values, std::span<sign3_block> blocks);

// out[i] = base[i] + the decoded value i. `base` and `out` may be the same span (sums +=
// decoded); both hold as many values as were quantized.
void add_dequantized(std::span<const int8_block> blocks, std::span<const float> base, std::span<float> out);
void add_dequantized(std::span<const fp8_block> blocks, std::span<const float> base, std::span<float> out);
void add_dequantized(std::span<const fp4_block> blocks, std::span<const float> base, std::span<float> out);
void add_dequantized(std::span<const sign_block> blocks, std::span<const float> base, std::span<float> out);
void add_dequantized(std::span<const sign2_block> blocks, std::span<const float> base, std::span<float> out);
void add_dequantized(std::span<const sign3_block> blocks, std::span<const float> base, std::span<float> out);

// Error feedback, fused (one pass over the fp32 data; each block is built in a 256-float local
// array that stays in L1): per block v = scale·values + residual is encoded, and with `commit`
// residual ← v − decode(record), what the record missed, which the next round sends again.
// Without `commit` the residual is only read (an estimate round: it commits nothing). `values`,
// `residual` and what `blocks` encode are equally long.
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<int8_block> blocks, bool commit = true);
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<fp8_block> blocks, bool commit = true);
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<fp4_block> blocks, bool commit = true);
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<sign_block> blocks, bool commit = true);
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<sign2_block> blocks, bool commit = true);
void quantize_with_feedback(std::span<const float> values, float scale, std::span<float> residual,
                            std::span<sign3_block> blocks, bool commit = true);

// Encodes values − base (a parameter change from what every rank holds), fused: no difference
// is written anywhere.
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<int8_block> blocks);
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<fp8_block> blocks);
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<fp4_block> blocks);
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<sign_block> blocks);
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<sign2_block> blocks);
void quantize_difference(std::span<const float> values, std::span<const float> base, std::span<sign3_block> blocks);

// The kernels come compiled twice, for the baseline target and (x86-64) for AVX2, picked at run
// time; both compute the same bits. For tests: with `force` the baseline ones run even where
// AVX2 is there. Returns whether the AVX2 ones exist and the CPU has AVX2.
bool force_baseline_kernels(bool force);

}  // namespace accord
