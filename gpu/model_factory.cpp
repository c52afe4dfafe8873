#include "gpu/model_factory.hpp"

#include <stdexcept>

#include "gpu/cuda_backend.hpp"
#include "transport/wire_precision.hpp"

namespace accord {

std::unique_ptr<model> make_gpt_on(device_kind device, const gpt_config& config, compute_precision precision) {
  if (device == device_kind::cpu) {
    if (precision != compute_precision::fp32)
      throw std::invalid_argument("--compute-precision bf16: the cpu gpt computes in fp32 only (bf16 compute is "
                                  "for --device cuda)");
    return make_gpt(config);
  }
  // parse_device throws the reason (no driver, no GPU, build without CUDA) when there is none.
  parse_device("cuda");
  return require_cuda_backend("--device cuda").make_gpt(config, precision);
}

std::unique_ptr<model> make_bf16_reference_gpt(const gpt_config& config) {
  return std::make_unique<gpt>(config, [](std::span<float> operand) { round_to_wire(wire_precision::bf16, operand); });
}

}  // namespace accord
