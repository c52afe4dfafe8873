#include "transport/wire_precision.hpp"

#include "transport/half_precision_bits.hpp"

#include <stdexcept>
#include <string>

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

// The conversions are inline (transport/half_precision_bits.hpp) so that the loops over spans
// inline them: the public to_bf16 etc. may be interposed in a shared (-fPIC) build, so calls to
// them stay calls, one per element.
using half_precision::bf16_bits;
using half_precision::bf16_value;
using half_precision::fp16_bits;
using half_precision::fp16_value;

// Every precision, in the order the messages name them.
constexpr wire_precision every_precision[] = {wire_precision::fp32, wire_precision::bf16,  wire_precision::fp16,
                                              wire_precision::int8, wire_precision::fp8,   wire_precision::fp4,
                                              wire_precision::sign, wire_precision::sign2, wire_precision::sign3};

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
    case wire_precision::fp8: return "fp8";
    case wire_precision::fp4: return "fp4";
    case wire_precision::sign2: return "sign2";
    case wire_precision::sign3: return "sign3";
  }
  return "?";
}

wire_precision parse_wire_precision(std::string_view text, std::string_view what) {
  for (const wire_precision p : every_precision)
    if (text == precision_name(p)) return p;
  throw std::invalid_argument(std::string(what) + ": '" + std::string(text) + "' (expected " + precision_names(false) + ")");
}

round_wires parse_round_wires(std::string_view text, std::string_view what) {
  const std::size_t comma = text.find(',');
  if (comma == std::string_view::npos) return parse_wire_precision(text, what);
  const auto part = [&](std::string_view precision) {
    try {
      return parse_wire_precision(precision, what);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(std::string(what) + ": '" + std::string(text) +
                                  "' (expected P or P,Q, each " + precision_names(false) + ")");
    }
  };
  const round_wires wires(part(text.substr(0, comma)), part(text.substr(comma + 1)));
  if (wires.gradients != wires.parameters && !(block_quantized(wires.gradients) && block_quantized(wires.parameters)))
    throw std::invalid_argument(std::string(what) + ": '" + std::string(text) +
                                "' (gradients and parameters may differ only among " + precision_names(true) +
                                "; fp32|bf16|fp16 apply to both)");
  return wires;
}

std::optional<round_wires> parse_wires_or_auto(std::string_view text, std::string_view what) {
  if (text == "auto") return std::nullopt;
  try {
    return parse_round_wires(text, what);
  } catch (const std::invalid_argument& bad) {
    throw std::invalid_argument(std::string(bad.what()) + " or auto");
  }
}

std::string round_wires_name(const round_wires& wires) {
  std::string name(precision_name(wires.gradients));
  if (wires.parameters != wires.gradients) name.append(",").append(precision_name(wires.parameters));
  return name;
}

std::string precision_names(bool block_codes_only) {
  std::string names;
  for (const wire_precision p : every_precision)
    if (!block_codes_only || block_quantized(p)) {
      if (!names.empty()) names += '|';
      names += precision_name(p);
    }
  return names;
}

bool block_quantized(wire_precision precision) {
  return precision == wire_precision::int8 || precision == wire_precision::fp8 || precision == wire_precision::fp4 ||
         precision == wire_precision::sign || precision == wire_precision::sign2 || precision == wire_precision::sign3;
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
