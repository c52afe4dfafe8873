#pragma once
// What a GPU worker's matrix products compute in (--compute-precision, job_config::
// compute_precision): fp32 throughout, or bf16 operands with fp32 accumulation on a bf16 copy
// of the parameters (gpu/cuda_gpt.hpp). Master weights, optimizer state and gradient sums stay
// fp32 either way; what travels on the wire is wire_precision's business.
#include <stdexcept>
#include <string>
#include <string_view>

namespace accord {

enum class compute_precision { fp32, bf16 };

inline std::string_view precision_name(compute_precision precision) {
  return precision == compute_precision::bf16 ? "bf16" : "fp32";
}

// Throws std::invalid_argument naming `what` (the flag) and the bad text.
inline compute_precision parse_compute_precision(std::string_view text, std::string_view what) {
  if (text == "fp32") return compute_precision::fp32;
  if (text == "bf16") return compute_precision::bf16;
  throw std::invalid_argument(std::string(what) + ": '" + std::string(text) + "' (expected fp32|bf16)");
}

}  // namespace accord
