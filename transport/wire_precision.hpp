#pragma once
// What a float travels as on the wire: fp32 as is, or bf16 / fp16 (2 bytes, round to nearest
// even, NaN kept a quiet NaN, fp16 overflowing to ±inf). The conversions are written out in
// integer arithmetic, so every backend and every machine rounds a value to the same bits.
// Collectives convert once when a value goes on the wire and sum in fp32 on arrival
// (transport/collectives.cpp). int8, fp8, fp4, sign, sign2 and sign3 are block-quantized codes (transport/
// block_quantize.hpp) for ACCO's estimate rounds and, with error feedback, real rounds: a
// reduce-scatter of gradients, and parameters as the difference from what every rank already
// holds (transport::all_gather_delta).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace accord {

enum class wire_precision { fp32, bf16, fp16, int8, sign, fp8, fp4, sign2, sign3 };

// "fp32" | "bf16" | "fp16" | "int8" | "fp8" | "fp4" | "sign" | "sign2" | "sign3".
std::string_view precision_name(wire_precision precision);
// Throws std::invalid_argument naming `what` (e.g. "--wire-precision") and the bad text.
wire_precision parse_wire_precision(std::string_view text, std::string_view what);
// int8, fp8, fp4, sign, sign2 and sign3: values travel in blocks with a scale each (transport/block_quantize.hpp).
bool block_quantized(wire_precision precision);
// "fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3", or the block codes' names only, for messages.
std::string precision_names(bool block_codes_only);

// What a round's two collectives travel as: the gradients' reduce-scatter and the updated
// parameters' all-gather. Adam normalises each gradient coordinate, so gradients need small
// values' relative precision (fp8, fp4); a parameter change is already normalised, and its
// error feedback (master − replica) lets it travel as signs (sign, or sign2's two levels and sign3's four).
struct round_wires {
  wire_precision gradients = wire_precision::fp32;
  wire_precision parameters = wire_precision::fp32;
  round_wires() = default;
  round_wires(wire_precision both) : gradients(both), parameters(both) {}  // NOLINT: one precision is both
  round_wires(wire_precision gradients_wire, wire_precision parameters_wire)
      : gradients(gradients_wire), parameters(parameters_wire) {}
  bool operator==(const round_wires&) const = default;
};

// "P" (both collectives) or "P,Q" (gradients P, parameters Q). P and Q may differ only among the
// block codes (int8, fp8, fp4, sign, sign2, sign3): a 16-bit or fp32 all-gather rounds the master weights
// instead of carrying error feedback. Throws std::invalid_argument naming `what` and the text.
round_wires parse_round_wires(std::string_view text, std::string_view what);
// A precision setting's text: nullopt for "auto" (the algorithm and topology choose), else
// parse_round_wires's (its error names auto too).
std::optional<round_wires> parse_wires_or_auto(std::string_view text, std::string_view what);
// The flag's form of `wires`: "P" where both are P, else "P,Q".
std::string round_wires_name(const round_wires& wires);

std::uint16_t to_bf16(float value);
float from_bf16(std::uint16_t bits);
std::uint16_t to_fp16(float value);
float from_fp16(std::uint16_t bits);

// The 16-bit precisions over spans of equal length (fp32 and the block-quantized codes are
// refused: they need no packing, or a packing of their own).
void to_wire(wire_precision precision, std::span<const float> values, std::span<std::uint16_t> wire);
void from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> values);
// sums[i] += the value of wire[i], in fp32.
void add_from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> sums);
// Each value becomes what it would be after a trip over the wire (fp32: unchanged; the
// block-quantized codes are refused: a value's trip depends on its block).
void round_to_wire(wire_precision precision, std::span<float> values);

}  // namespace accord
