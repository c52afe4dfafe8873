#pragma once
// Models on the device chosen at run time (--device), in every build: callers need no #ifdefs.
#include <accord/model.hpp>

#include "gpu/device.hpp"
#include "models/gpt.hpp"

#include <memory>

namespace accord {

// The CPU gpt (models/gpt.hpp) or the CUDA one (gpu/cuda_gpt.hpp, on the current CUDA device);
// both have the same signature and parameter layout. Throws std::invalid_argument for a bad
// config and, for device_kind::cuda without a usable device or in a build without CUDA,
// std::runtime_error saying why ("--device cuda: no usable CUDA device: ...").
std::unique_ptr<model> make_gpt_on(device_kind device, const gpt_config& config);

}  // namespace accord
