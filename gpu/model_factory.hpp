#pragma once
// Models on the device chosen at run time (--device), in every build: callers need no #ifdefs.
#include <accord/model.hpp>

#include "gpu/compute_precision.hpp"
#include "gpu/device.hpp"
#include "models/gpt.hpp"

#include <memory>

namespace accord {

// The CPU gpt (models/gpt.hpp) or the CUDA one (gpu/cuda_gpt.hpp, on the current CUDA device);
// both have the same signature and parameter layout. Throws std::invalid_argument for a bad
// config and, for device_kind::cuda without a usable device or in a build without CUDA,
// std::runtime_error saying why ("--device cuda: no usable CUDA device: ..."). bf16 compute is
// for the CUDA gpt only: on the cpu it is std::invalid_argument naming --compute-precision.
std::unique_ptr<model> make_gpt_on(device_kind device, const gpt_config& config,
                                   compute_precision precision = compute_precision::fp32);

// The CPU gpt with the CUDA gpt's bf16 compute rounding points (gpu/cuda_layers.hpp): every
// matrix product's operands rounded to bf16, the products themselves fp32. The reference the
// bf16 CUDA gpt is checked against; slow (it rounds each weight at each use), not for training.
std::unique_ptr<model> make_bf16_reference_gpt(const gpt_config& config);

}  // namespace accord
