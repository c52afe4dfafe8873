#include "gpu/model_factory.hpp"

#include <stdexcept>

#if ACCORD_HAVE_CUDA
#include "gpu/cuda_gpt.hpp"
#endif

namespace accord {

std::unique_ptr<model> make_gpt_on(device_kind device, const gpt_config& config) {
  if (device == device_kind::cpu) return make_gpt(config);
  // parse_device throws the reason (no driver, no GPU, build without CUDA) when there is none.
  parse_device("cuda");
#if ACCORD_HAVE_CUDA
  return std::make_unique<cuda_gpt>(config);
#else
  throw std::logic_error("make_gpt_on: parse_device accepted cuda in a build without CUDA");
#endif
}

}  // namespace accord
