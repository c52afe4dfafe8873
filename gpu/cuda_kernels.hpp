#pragma once
// CUDA kernels on a chosen stream (CUDA builds only): the NCCL transport runs the vote kernels
// on its own communication stream, the model on the compute stream.
#include <cuda_runtime_api.h>

#include <memory>

#include "gpu/kernels.hpp"

namespace accord {

// An event recorded on `stream` after the work queued so far; a stream waiting for it
// (wait_for_cuda_event) waits on the device, the host does not. Events of CPU kernels are
// always reached: waiting for one does nothing.
std::shared_ptr<const device_event> record_cuda_event(cudaStream_t stream);
void wait_for_cuda_event(cudaStream_t stream, const device_event& event);

// Kernels on `stream` of the current device (nullptr: the legacy default stream).
std::unique_ptr<kernels> make_cuda_kernels(cudaStream_t stream);

}  // namespace accord
