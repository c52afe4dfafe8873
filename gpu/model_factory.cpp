#include "gpu/model_factory.hpp"

#include <stdexcept>

#include "gpu/cuda_backend.hpp"

namespace accord {

std::unique_ptr<model> make_gpt_on(device_kind device, const gpt_config& config) {
  if (device == device_kind::cpu) return make_gpt(config);
  // parse_device throws the reason (no driver, no GPU, build without CUDA) when there is none.
  parse_device("cuda");
  return require_cuda_backend("--device cuda").make_gpt(config);
}

}  // namespace accord
