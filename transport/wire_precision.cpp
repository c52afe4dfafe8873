#include "transport/wire_precision.hpp"

#include <bit>
#include <stdexcept>

namespace accord {
namespace {

void check_lengths(wire_precision precision, std::size_t values, std::size_t wire, const char* what) {
  if (precision == wire_precision::fp32 || block_quantized(precision))
    throw std::invalid_argument(std::string(what) + ": " + std::string(precision_name(precision)) +
                                " values are not 16-bit");
  if (values != wire)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(values) + " values but " +
                                std::to_string(wire) + " wire elements");
}

// The conversions, internal so that the loops over spans inline them: the public to_bf16 etc.
// may be interposed in a shared (-fPIC) build, so calls to them stay calls, one per element.
std::uint16_t bf16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  // Round to nearest even at bit 16; a carry into the exponent is the correct result (up to inf).
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  // A select, not a branch, so that the loops over spans vectorise (the magnitude fits int32).
  const bool nan = static_cast<std::int32_t>(bits & 0x7fffffffu) > 0x7f800000;
  return static_cast<std::uint16_t>(nan ? quiet_nan : rounded);
}

float bf16_value(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

std::uint16_t fp16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // quiet NaN
  // 65520 is halfway between 65504 (odd mantissa) and 2^16: from there on, ±inf.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // a normal fp16 (>= 2^-14): rebias the exponent by 127 - 15
    const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (magnitude <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // at most 2^-25: rounds to ±0
  // Subnormal fp16: the value in units of 2^-24, rounded to nearest even (may become 2^-14).
  const std::uint32_t exponent = magnitude >> 23;  // 102..112
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;
  std::uint32_t units = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (units & 1u))) ++units;
  return static_cast<std::uint16_t>(sign | units);
}

float fp16_value(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t{bits & 0x8000u} << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// One conversion pair per 16-bit precision, picked once per span rather than per element.
template <class Body>
void with_conversions(wire_precision precision, Body body) {
  if (precision == wire_precision::bf16)
    body([](float v) { return bf16_bits(v); }, [](std::uint16_t b) { return bf16_value(b); });
  else
    body([](float v) { return fp16_bits(v); }, [](std::uint16_t b) { return fp16_value(b); });
}

}  // namespace

std::string_view precision_name(wire_precision precision) {
  switch (precision) {
    case wire_precision::fp32: return "fp32";
    case wire_precision::bf16: return "bf16";
    case wire_precision::fp16: return "fp16";
    case wire_precision::int8: return "int8";
    case wire_precision::sign: return "sign";
  }
  return "?";
}

wire_precision parse_wire_precision(std::string_view text, std::string_view what) {
  for (wire_precision p : {wire_precision::fp32, wire_precision::bf16, wire_precision::fp16, wire_precision::int8,
                           wire_precision::sign})
    if (text == precision_name(p)) return p;
  throw std::invalid_argument(std::string(what) + ": '" + std::string(text) + "' (expected fp32|bf16|fp16|int8|sign)");
}

bool block_quantized(wire_precision precision) {
  return precision == wire_precision::int8 || precision == wire_precision::sign;
}

std::uint16_t to_bf16(float value) { return bf16_bits(value); }
float from_bf16(std::uint16_t bits) { return bf16_value(bits); }
std::uint16_t to_fp16(float value) { return fp16_bits(value); }
float from_fp16(std::uint16_t bits) { return fp16_value(bits); }

void to_wire(wire_precision precision, std::span<const float> values, std::span<std::uint16_t> wire) {
  check_lengths(precision, values.size(), wire.size(), "to_wire");
  with_conversions(precision, [&](auto to, auto) {
    for (std::size_t i = 0; i < values.size(); ++i) wire[i] = to(values[i]);
  });
}

void from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> values) {
  check_lengths(precision, values.size(), wire.size(), "from_wire");
  with_conversions(precision, [&](auto, auto from) {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = from(wire[i]);
  });
}

void add_from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> sums) {
  check_lengths(precision, sums.size(), wire.size(), "add_from_wire");
  with_conversions(precision, [&](auto, auto from) {
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += from(wire[i]);
  });
}

void round_to_wire(wire_precision precision, std::span<float> values) {
  if (precision == wire_precision::fp32) return;
  check_lengths(precision, values.size(), values.size(), "round_to_wire");
  with_conversions(precision, [&](auto to, auto from) {
    for (float& v : values) v = from(to(v));
  });
}

}  // namespace accord
