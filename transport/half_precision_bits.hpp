#pragma once
// The bf16 and fp16 conversions of one float, written once for the host (transport/
// wire_precision.cpp, whose span loops inline them) and the device (gpu/cuda_kernels.cu), so
// a value rounds to the same bits wherever it travels. Internal: the public forms are to_bf16
// etc. in transport/wire_precision.hpp.
#include <cstdint>

#if defined(__CUDACC__)
#define ACCORD_HOST_DEVICE __host__ __device__
#else
#include <bit>
#define ACCORD_HOST_DEVICE
#endif

namespace accord::half_precision {

ACCORD_HOST_DEVICE inline std::uint32_t bits_of(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  return std::bit_cast<std::uint32_t>(value);
#endif
}

ACCORD_HOST_DEVICE inline float float_of(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

ACCORD_HOST_DEVICE inline std::uint16_t bf16_bits(float value) {
  const std::uint32_t bits = bits_of(value);
  // Round to nearest even at bit 16; a carry into the exponent is the correct result (up to inf).
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  // A select, not a branch, so that the host's loops over spans vectorise (the magnitude fits int32).
  const bool nan = static_cast<std::int32_t>(bits & 0x7fffffffu) > 0x7f800000;
  return static_cast<std::uint16_t>(nan ? quiet_nan : rounded);
}

ACCORD_HOST_DEVICE inline float bf16_value(std::uint16_t bits) { return float_of(std::uint32_t{bits} << 16); }

ACCORD_HOST_DEVICE inline std::uint16_t fp16_bits(float value) {
  const std::uint32_t bits = bits_of(value);
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

ACCORD_HOST_DEVICE inline float fp16_value(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t{bits & 0x8000u} << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in fp32 (nothing to contract)
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace accord::half_precision
