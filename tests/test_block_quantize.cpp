// Block quantization (transport/block_quantize.hpp): error bounds per block, the scaled sign and
// its two- and four-level forms (sign2, sign3), non-finite blocks, short and empty spans, and the argument checks.
#include <doctest/doctest.h>

#include "transport/block_quantize.hpp"
#include "transport/wire_precision.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using namespace accord;

namespace {

// Deterministic values of varied magnitude per block: block b spans about 2^(b % 9 - 4).
std::vector<float> sample(std::size_t count) {
  std::vector<float> values(count);
  std::uint32_t state = 12345;
  for (std::size_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) * 0x1p-24f * 2.f - 1.f;
    values[i] = std::ldexp(unit, static_cast<int>((i / quantization_block) % 9) - 4);
  }
  return values;
}

template <class Block>
std::vector<float> round_trip(const std::vector<float>& values) {
  std::vector<Block> blocks(quantized_blocks(values.size()));
  quantize(values, std::span<Block>(blocks));
  std::vector<float> zeros(values.size(), 0.f), decoded(values.size());
  add_dequantized(std::span<const Block>(blocks), zeros, decoded);
  return decoded;
}

float largest_magnitude(std::span<const float> block) {
  float largest = 0;
  for (float v : block) largest = std::max(largest, std::fabs(v));
  return largest;
}

// A block holding an infinity (either sign) decodes as all-NaN, the next block is untouched, and
// an all-zero block decodes as zeros: the logarithmic codes' scale is the block's largest |x|.
template <class Block>
void check_non_finite_and_zero_blocks() {
  for (const float infinity : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> values(300, 0.5f);
    values[3] = infinity;
    const std::vector<float> decoded = round_trip<Block>(values);
    CHECK(std::all_of(decoded.begin(), decoded.begin() + 256, [](float v) { return std::isnan(v); }));
    CHECK(std::all_of(decoded.begin() + 256, decoded.end(), [](float v) { return v == 0.5f; }));
  }
  const std::vector<float> zeros = round_trip<Block>(std::vector<float>(100, 0.f));
  CHECK(std::all_of(zeros.begin(), zeros.end(), [](float v) { return v == 0.f; }));
}

}  // namespace

TEST_CASE("int8 blocks: every value within half a step (max|x|/127 / 2) of its block") {
  for (std::size_t count : {1ul, 7ul, 255ul, 256ul, 257ul, 1000ul, 4096ul}) {
    CAPTURE(count);
    const std::vector<float> values = sample(count);
    const std::vector<float> decoded = round_trip<int8_block>(values);
    for (std::size_t first = 0; first < count; first += quantization_block) {
      const std::span<const float> block(values.data() + first, std::min(quantization_block, count - first));
      const float step = largest_magnitude(block) / 127.f;
      for (std::size_t i = 0; i < block.size(); ++i) {
        CAPTURE(first + i);
        CHECK(std::fabs(decoded[first + i] - block[i]) <= step * 0.5f * (1 + 1e-5f));
      }
      // The largest magnitude itself is exact up to one float rounding.
      const auto largest = std::max_element(block.begin(), block.end(),
                                            [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      CHECK(decoded[first + static_cast<std::size_t>(largest - block.begin())] == doctest::Approx(*largest).epsilon(1e-6));
    }
  }
}

TEST_CASE("sign blocks: ±(mean |x| of the block), the sign of each value") {
  for (std::size_t count : {1ul, 5ul, 256ul, 300ul, 1024ul}) {
    CAPTURE(count);
    const std::vector<float> values = sample(count);
    const std::vector<float> decoded = round_trip<sign_block>(values);
    for (std::size_t first = 0; first < count; first += quantization_block) {
      const std::size_t n = std::min(quantization_block, count - first);
      double mean = 0;
      for (std::size_t i = 0; i < n; ++i) mean += std::fabs(values[first + i]) / static_cast<double>(n);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(first + i);
        CHECK(std::fabs(decoded[first + i]) == doctest::Approx(mean).epsilon(1e-5));
        CHECK(std::signbit(decoded[first + i]) == std::signbit(values[first + i]));
      }
    }
  }
}

TEST_CASE("sign2 blocks: ± the mean |x| of the values above the block's mean |x|, or of the others") {
  for (std::size_t count : {1ul, 5ul, 64ul, 65ul, 256ul, 300ul, 1024ul}) {
    CAPTURE(count);
    const std::vector<float> values = sample(count);
    const std::vector<float> decoded = round_trip<sign2_block>(values);
    const std::vector<float> signs = round_trip<sign_block>(values);
    for (std::size_t first = 0; first < count; first += quantization_block) {
      const std::size_t n = std::min(quantization_block, count - first);
      double mean = 0;
      for (std::size_t i = 0; i < n; ++i) mean += std::fabs(values[first + i]) / static_cast<double>(n);
      double level_sum[2] = {0, 0}, level_count[2] = {0, 0};
      for (std::size_t i = 0; i < n; ++i) {
        const bool large = std::fabs(values[first + i]) > mean;
        level_sum[large] += std::fabs(values[first + i]);
        level_count[large] += 1;
      }
      double error = 0, sign_error = 0;
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(first + i);
        const float x = values[first + i];
        const bool large = std::fabs(x) > mean;
        // The level travels as bf16: within 2^-9 of itself.
        CHECK(std::fabs(decoded[first + i]) == doctest::Approx(level_sum[large] / level_count[large]).epsilon(0x1p-9));
        CHECK(std::signbit(decoded[first + i]) == std::signbit(x));
        error += std::pow(decoded[first + i] - x, 2);
        sign_error += std::pow(signs[first + i] - x, 2);
      }
      // Uniform magnitudes: sign leaves a quarter of the block's energy, sign2 a sixteenth.
      if (n >= 64) CHECK(error < 0.5 * sign_error);
    }
  }
  // Value i in bits 2(i/64) (negative) and 2(i/64)+1 (above the mean) of byte i%64.
  std::vector<float> values(256, 0.f);
  values[0] = -1.f, values[64] = 3.f, values[65] = -0.5f, values[255] = 0.25f;  // mean 4.75 / 256
  std::vector<sign2_block> record(1);
  quantize(values, std::span<sign2_block>(record));
  CHECK(from_bf16(record[0].levels[1]) == doctest::Approx(4.75f / 4).epsilon(0x1p-9));
  CHECK(from_bf16(record[0].levels[0]) == 0.f);
  CHECK(record[0].codes[0] == (3 | 2 << 2));
  CHECK(record[0].codes[1] == (3 << 2));
  CHECK(record[0].codes[63] == (2 << 6));
  CHECK(record[0].codes[2] == 0);
  check_non_finite_and_zero_blocks<sign2_block>();
}

TEST_CASE("sign3 blocks: sign2's two groups each split again at their own mean |x|, four levels, a third of sign2's error") {
  for (std::size_t count : {1ul, 5ul, 64ul, 65ul, 256ul, 300ul, 1024ul}) {
    CAPTURE(count);
    std::vector<float> values = sample(count);
    // Laplacian-like magnitudes too (many small values, a few large), where sign2 leaves most.
    for (std::size_t i = 0; i < count; i += 2) values[i] = values[i] * values[i] * values[i] * 8.f;
    const std::vector<float> decoded = round_trip<sign3_block>(values);
    const std::vector<float> halves = round_trip<sign2_block>(values);
    for (std::size_t first = 0; first < count; first += quantization_block) {
      const std::size_t n = std::min(quantization_block, count - first);
      const auto mean_of = [&](auto in_group) {
        double sum = 0, members = 0;
        for (std::size_t i = 0; i < n; ++i)
          if (in_group(std::fabs(values[first + i]))) sum += std::fabs(values[first + i]), members += 1;
        return members ? sum / members : 0.0;
      };
      const double mean = mean_of([](double) { return true; });
      const double small = mean_of([&](double m) { return m <= mean; });
      const double large = mean_of([&](double m) { return m > mean; });
      const auto group_of = [&](double m) { return m <= mean ? (m <= small ? 0 : 1) : (m <= large ? 2 : 3); };
      double error = 0, sign2_error = 0;
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(first + i);
        const float x = values[first + i];
        const int group = group_of(std::fabs(x));
        const double level = mean_of([&](double m) { return group_of(m) == group; });
        CHECK(std::fabs(decoded[first + i]) == doctest::Approx(level).epsilon(0x1p-9));
        CHECK(std::signbit(decoded[first + i]) == std::signbit(x));
        error += std::pow(decoded[first + i] - x, 2);
        sign2_error += std::pow(halves[first + i] - x, 2);
      }
      if (n >= 64) CHECK(error < 0.5 * sign2_error);
    }
  }
  // Codes c = negative + 2·group: bits 0-1 of value i in bits 2(i/64), 2(i/64)+1 of codes[i%64]
  // (as sign2's), bit 2 in bit i/32 of high[i%32].
  std::vector<float> values(256, 0.1f);
  values[0] = -1.f, values[33] = 2.f, values[64] = 3.f, values[65] = -0.5f, values[255] = 0.12f;
  // Mean 31.72 / 256 = 0.1239: at or below it 251 values 0.1 and one 0.12 (mean 0.10008, split
  // into 0.1, level 0.1, and 0.12, level 0.12); above it 0.5, 1, 2, 3 (mean 1.625, split into 0.5,
  // 1, level 0.75, and 2, 3, level 2.5).
  std::vector<sign3_block> record(1);
  quantize(values, std::span<sign3_block>(record));
  CHECK(from_bf16(record[0].levels[0]) == doctest::Approx(0.1f).epsilon(0x1p-9));
  CHECK(from_bf16(record[0].levels[1]) == doctest::Approx(0.12f).epsilon(0x1p-9));
  CHECK(from_bf16(record[0].levels[2]) == doctest::Approx(0.75f).epsilon(0x1p-9));
  CHECK(from_bf16(record[0].levels[3]) == doctest::Approx(2.5f).epsilon(0x1p-9));
  // Values 0 and 65 (negative, group 2): c = 5; 33 and 64 (group 3): c = 6; 255 (group 1): c = 2.
  CHECK(record[0].codes[0] == (1 | 2 << 2));  // values 0 and 64
  CHECK(record[0].codes[1] == (1 << 2));      // value 65
  CHECK(record[0].codes[33] == 2);
  CHECK(record[0].codes[63] == (2 << 6));  // value 255
  CHECK(record[0].codes[2] == 0);
  CHECK(record[0].high[0] == (1 | 1 << 2));       // values 0 and 64
  CHECK(record[0].high[1] == (1 << 1 | 1 << 2));  // values 33 and 65
  CHECK(record[0].high[31] == 0);                 // value 255 is group 1
  check_non_finite_and_zero_blocks<sign3_block>();
}

TEST_CASE("a block holding a NaN or an infinity decodes as all-NaN, the other blocks are untouched") {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    std::vector<float> values = sample(600);  // blocks of 256, 256, 88
    values[300] = bad;
    values[599] = bad;
    const std::vector<float> clean = round_trip<int8_block>(sample(600));
    for (const std::vector<float>& decoded : {round_trip<int8_block>(values), round_trip<sign_block>(values)}) {
      CHECK(std::all_of(decoded.begin() + 256, decoded.end(), [](float v) { return std::isnan(v); }));
      CHECK(std::none_of(decoded.begin(), decoded.begin() + 256, [](float v) { return std::isnan(v); }));
    }
    CHECK(std::equal(clean.begin(), clean.begin() + 256, round_trip<int8_block>(values).begin()));
  }
}

TEST_CASE("zeros, tiny values and empty spans") {
  CHECK(quantized_blocks(0) == 0);
  CHECK(quantized_blocks(1) == 1);
  CHECK(quantized_blocks(256) == 1);
  CHECK(quantized_blocks(257) == 2);
  CHECK(round_trip<int8_block>({}).empty());
  CHECK(round_trip<sign_block>({}).empty());
  const std::vector<float> zeros(300, 0.f);
  CHECK(round_trip<int8_block>(zeros) == zeros);
  CHECK(round_trip<sign_block>(zeros) == zeros);
  // Below 2^-120 a block travels as zeros: an error under 2^-120, never a NaN or an infinity.
  const std::vector<float> tiny(10, 0x1p-126f);
  for (float v : round_trip<int8_block>(tiny)) CHECK(v == 0.f);
}

TEST_CASE("add_dequantized adds onto a base, in place as well") {
  const std::vector<float> delta = sample(700), base = sample(700);
  std::vector<int8_block> blocks(quantized_blocks(delta.size()));
  quantize(delta, std::span<int8_block>(blocks));
  const std::vector<float> decoded = round_trip<int8_block>(delta);
  std::vector<float> out(700), sums = base;
  add_dequantized(std::span<const int8_block>(blocks), base, out);
  add_dequantized(std::span<const int8_block>(blocks), sums, sums);
  CHECK(out == sums);
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i] == base[i] + decoded[i]);
}

TEST_CASE("block counts and lengths that do not fit are refused naming them") {
  std::vector<float> values(300), base(300);
  std::vector<int8_block> blocks(1);
  CHECK_THROWS_WITH_AS(quantize(values, std::span<int8_block>(blocks)),
                       "quantize: 1 blocks for 300 values, expected 2", std::invalid_argument);
  blocks.resize(2);
  base.resize(299);
  CHECK_THROWS_WITH_AS(add_dequantized(std::span<const int8_block>(blocks), base, values),
                       "add_dequantized: base holds 299 values, out 300", std::invalid_argument);
}

TEST_CASE("error feedback, fused: a record decodes to scale·x + e minus the new residual, without commit e is only read") {
  for (std::size_t count : {1ul, 255ul, 256ul, 257ul, 1000ul}) {
    CAPTURE(count);
    const std::vector<float> x = sample(count);
    std::vector<float> e0(count);
    for (std::size_t i = 0; i < count; ++i) e0[i] = 0.01f * std::sin(static_cast<float>(i));
    const float scale = 0.5f;
    const auto check_code = [&](auto tag) {
      using Block = decltype(tag);
      std::vector<Block> blocks(quantized_blocks(count)), plain(quantized_blocks(count));
      std::vector<float> e = e0;
      quantize_with_feedback(x, scale, e, std::span<Block>(blocks), false);
      CHECK(e == e0);  // read only
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = scale * x[i] + e0[i];
      quantize(v, std::span<Block>(plain));
      CHECK(std::memcmp(blocks.data(), plain.data(), blocks.size() * sizeof(Block)) == 0);  // the same records
      quantize_with_feedback(x, scale, e, std::span<Block>(blocks), true);
      std::vector<float> zeros(count, 0.f), decoded(count);
      add_dequantized(std::span<const Block>(blocks), zeros, decoded);
      for (std::size_t i = 0; i < count; ++i) {
        CAPTURE(i);
        CHECK(std::fabs(decoded[i] + e[i] - v[i]) <= 1e-6f * (std::fabs(decoded[i]) + std::fabs(v[i])));
      }
    };
    check_code(int8_block{});
    check_code(fp8_block{});
    check_code(fp4_block{});
    check_code(sign_block{});
    check_code(sign2_block{});
    check_code(sign3_block{});
  }
}

TEST_CASE("quantize_difference encodes values − base as quantize of the written difference does, bit for bit") {
  for (std::size_t count : {1ul, 256ul, 1000ul}) {
    CAPTURE(count);
    const std::vector<float> values = sample(count);
    std::vector<float> base(count), difference(count);
    for (std::size_t i = 0; i < count; ++i) {
      base[i] = 0.3f * std::cos(static_cast<float>(i));
      difference[i] = values[i] - base[i];
    }
    const auto check_code = [&](auto tag) {
      using Block = decltype(tag);
      std::vector<Block> fused(quantized_blocks(count)), written(quantized_blocks(count));
      quantize_difference(values, base, std::span<Block>(fused));
      quantize(difference, std::span<Block>(written));
      CHECK(std::memcmp(fused.data(), written.data(), fused.size() * sizeof(Block)) == 0);
    };
    check_code(int8_block{});
    check_code(fp8_block{});
    check_code(fp4_block{});
    check_code(sign_block{});
    check_code(sign2_block{});
    check_code(sign3_block{});
  }
}

TEST_CASE("with error feedback the sum of decoded vectors stays within one residual of the true sum, without, it drifts") {
  // The same vector every round (magnitudes differing within each block, as gradients' do):
  // plain codes make the same error every round, so the gap of the sums grows with the rounds;
  // with the residual the gap is the residual itself, whatever the number of rounds.
  constexpr std::size_t count = 1000;
  std::vector<float> g(count);
  for (std::size_t i = 0; i < count; ++i) g[i] = 0.01f * static_cast<float>(1 + i % 13) * (i % 3 ? 1.f : -1.f);
  const auto largest_gap = [&](auto tag, bool feedback, int rounds) {
    using Block = decltype(tag);
    std::vector<Block> blocks(quantized_blocks(count));
    std::vector<float> e(count, 0.f), zeros(count, 0.f), decoded(count);
    std::vector<double> decoded_sum(count, 0.0);  // in double: a float sum would add its own drift
    for (int t = 0; t < rounds; ++t) {
      if (!feedback) std::fill(e.begin(), e.end(), 0.f);
      quantize_with_feedback(g, 1.f, e, std::span<Block>(blocks), true);
      add_dequantized(std::span<const Block>(blocks), zeros, decoded);
      for (std::size_t i = 0; i < count; ++i) decoded_sum[i] += decoded[i];
    }
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i)
      worst = std::max(worst, std::fabs(decoded_sum[i] - static_cast<double>(rounds) * g[i]));
    return worst;
  };
  for (const std::string code : {"int8", "fp8", "fp4", "sign", "sign2", "sign3"}) {
    CAPTURE(code);
    const bool sign = code == "sign" || code == "sign2" || code == "sign3";
    const auto gap = [&](bool feedback, int rounds) {
      return code == "sign"    ? largest_gap(sign_block{}, feedback, rounds)
             : code == "sign2" ? largest_gap(sign2_block{}, feedback, rounds)
             : code == "sign3" ? largest_gap(sign3_block{}, feedback, rounds)
             : code == "fp8" ? largest_gap(fp8_block{}, feedback, rounds)
             : code == "fp4" ? largest_gap(fp4_block{}, feedback, rounds)
                             : largest_gap(int8_block{}, feedback, rounds);
    };
    // The largest error of one record: int8 half a step, fp8 2^-4 of the value, fp4 a third of
    // it, sign (and sign2, sign3) up to the block's largest |x|. The residual of scaled signs settles at a few of
    // those (it is bounded, not one record's error).
    const double one_round = sign ? 0.13 : code == "fp8" ? 0.13 / 16 * 1.01 : code == "fp4" ? 0.13 / 3 * 1.01 : 0.13 / 254 * 1.01;
    const double with_50 = gap(true, 50), with_1000 = gap(true, 1000);
    const double without_50 = gap(false, 50), without_1000 = gap(false, 1000);
    MESSAGE(code << ": gap after 50 / 1000 rounds with feedback " << with_50 << " / " << with_1000
                                     << ", without " << without_50 << " / " << without_1000);
    CHECK(with_50 <= (sign ? 10 : 2) * one_round);
    CHECK(with_1000 <= (sign ? 10 : 2) * one_round);
    CHECK(with_1000 <= 1.5 * with_50 + one_round);  // not growing with the rounds
    CHECK(without_1000 > 10 * with_1000);
    CHECK(without_1000 > 10 * without_50);
  }
}

TEST_CASE("fp8 blocks: every value within 2^-4 of itself, relative, down to 2^-16 of its block's largest, zero below") {
  for (std::size_t count : {1ul, 255ul, 256ul, 1000ul}) {
    CAPTURE(count);
    std::vector<float> values = sample(count);
    // Magnitudes over 24 octaves inside each block, both signs.
    for (std::size_t i = 0; i < count; ++i) values[i] = std::ldexp(values[i] < 0 ? -1.f : 1.f, -static_cast<int>(i % 24)) * (1.f + 0.37f * static_cast<float>(i % 5) / 5);
    const std::vector<float> decoded = round_trip<fp8_block>(values);
    for (std::size_t first = 0; first < count; first += quantization_block) {
      const std::span<const float> block(values.data() + first, std::min(quantization_block, count - first));
      const float largest = largest_magnitude(block);
      for (std::size_t i = 0; i < block.size(); ++i) {
        CAPTURE(first + i);
        const float x = block[i], y = decoded[first + i];
        if (std::fabs(x) >= largest * 0x1.2p-16f) {
          CHECK(std::fabs(y - x) <= std::fabs(x) * (1.f / 16) * (1 + 1e-5f));
          CHECK(std::signbit(y) == std::signbit(x));
        } else if (std::fabs(x) < largest * 0x1p-16f) {
          CHECK(y == 0.f);
        }
      }
      // The largest magnitude itself is exact up to one float rounding.
      const auto at = std::max_element(block.begin(), block.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      CHECK(decoded[first + static_cast<std::size_t>(at - block.begin())] == doctest::Approx(*at).epsilon(1e-6));
    }
  }
  check_non_finite_and_zero_blocks<fp8_block>();
}

TEST_CASE("fp4 blocks: every value the nearest power of two times the block's largest, from 2^-6 up, zero below") {
  for (std::size_t count : {1ul, 255ul, 256ul, 257ul, 1000ul}) {
    CAPTURE(count);
    std::vector<float> values = sample(count);
    // Magnitudes over 10 octaves inside each block, both signs, mantissas on either side of 1.5.
    for (std::size_t i = 0; i < count; ++i)
      values[i] = std::ldexp(values[i] < 0 ? -1.f : 1.f, -static_cast<int>(i % 10)) * (1.f + static_cast<float>(i % 7) / 7);
    const std::vector<float> decoded = round_trip<fp4_block>(values);
    for (std::size_t first = 0; first < count; first += quantization_block) {
      const std::span<const float> block(values.data() + first, std::min(quantization_block, count - first));
      const float largest = largest_magnitude(block);
      for (std::size_t i = 0; i < block.size(); ++i) {
        CAPTURE(first + i);
        const float x = block[i], y = decoded[first + i];
        const float ratio = std::fabs(x) / largest;  // exact enough: the codes round at 1.5·2^k
        if (ratio < 0x1.8p-7f) {
          CHECK(y == 0.f);
          continue;
        }
        // The power of two nearest to the ratio (up from 1.5·2^k), at most 1.
        int exponent;
        const float mantissa = std::frexp(ratio, &exponent);  // ratio = mantissa·2^exponent, mantissa in [0.5, 1)
        const float power = std::ldexp(1.f, std::min(mantissa >= 0.75f ? exponent : exponent - 1, 0));
        CHECK(y == doctest::Approx(std::copysign(power * largest, x)).epsilon(1e-6));
      }
    }
  }
  // Two codes a byte: the high half of each byte carries the odd value.
  std::vector<float> values(256, 0.f);
  values[0] = 1.f, values[1] = -0.5f, values[255] = 0.25f;
  std::vector<fp4_block> record(1);
  quantize(values, std::span<fp4_block>(record));
  CHECK(record[0].scale == 1.f);
  CHECK(record[0].codes[0] == (7 | (6 | 8) << 4));
  CHECK(record[0].codes[127] == (5 << 4));
  check_non_finite_and_zero_blocks<fp4_block>();
}

TEST_CASE("the AVX2 kernels and the baseline ones compute the same bits") {
  // Replicas on machines with and without AVX2 must decode records alike, and encode alike.
  constexpr std::size_t count = 5000;
  std::vector<float> x = sample(count), base(count), e0(count);
  for (std::size_t i = 0; i < count; ++i) {
    base[i] = 0.3f * std::cos(static_cast<float>(i));
    e0[i] = 0.01f * std::sin(static_cast<float>(i) * 0.7f);
  }
  const auto run = [&](auto tag) {
    using Block = decltype(tag);
    std::vector<Block> fed(quantized_blocks(count)), changed(quantized_blocks(count)), plain(quantized_blocks(count));
    std::vector<float> e = e0, sums = base, decoded(count);
    quantize_with_feedback(x, 0.75f, e, std::span<Block>(fed));
    quantize_difference(x, base, std::span<Block>(changed));
    quantize(x, std::span<Block>(plain));
    add_dequantized(std::span<const Block>(fed), sums, sums);
    add_dequantized(std::span<const Block>(changed), base, decoded);
    std::vector<unsigned char> bytes;
    const auto append = [&](const void* data, std::size_t size) {
      const std::size_t at = bytes.size();
      bytes.resize(at + size);
      std::memcpy(bytes.data() + at, data, size);
    };
    append(fed.data(), fed.size() * sizeof(Block));
    append(changed.data(), changed.size() * sizeof(Block));
    append(plain.data(), plain.size() * sizeof(Block));
    for (const std::vector<float>* v : {&e, &sums, &decoded}) append(v->data(), v->size() * sizeof(float));
    return bytes;
  };
  const bool avx2 = force_baseline_kernels(false);
  const std::string where = avx2 ? "run here" : "are not available here: the comparison is trivial";
  MESSAGE("AVX2 kernels " << where);
  const auto fast_int8 = run(int8_block{}), fast_fp8 = run(fp8_block{}), fast_fp4 = run(fp4_block{}),
             fast_sign = run(sign_block{}), fast_sign2 = run(sign2_block{}), fast_sign3 = run(sign3_block{});
  force_baseline_kernels(true);
  const auto slow_int8 = run(int8_block{}), slow_fp8 = run(fp8_block{}), slow_fp4 = run(fp4_block{}),
             slow_sign = run(sign_block{}), slow_sign2 = run(sign2_block{}), slow_sign3 = run(sign3_block{});
  force_baseline_kernels(false);
  CHECK(fast_int8 == slow_int8);
  CHECK(fast_fp8 == slow_fp8);
  CHECK(fast_fp4 == slow_fp4);
  CHECK(fast_sign == slow_sign);
  CHECK(fast_sign2 == slow_sign2);
  CHECK(fast_sign3 == slow_sign3);
}
