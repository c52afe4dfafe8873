#pragma once
// CUDA kernels on a chosen stream (CUDA builds only): the NCCL transport runs the vote kernels
// on its own communication stream, the model on the compute stream.
#include <cuda_runtime_api.h>

#include <memory>

#include "gpu/kernels.hpp"

namespace accord {

// Kernels on `stream` of the current device (nullptr: the legacy default stream).
std::unique_ptr<kernels> make_cuda_kernels(cudaStream_t stream);

}  // namespace accord
