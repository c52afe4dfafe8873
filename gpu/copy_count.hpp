#pragma once
// How many host<->device copies of tensors (parameters, gradients, optimizer state, the
// transport's staged messages) the CUDA plugin's code has made in this process: the device
// path's tests assert that a micro-batch adds none. A micro-batch's inputs (tokens, targets)
// and its loss necessarily cross and are not counted. Read through cuda_backend.
#include <atomic>
#include <cstdint>

namespace accord {

inline std::atomic<std::uint64_t> tensor_copies_made{0};

inline void count_tensor_copy() { tensor_copies_made.fetch_add(1, std::memory_order_relaxed); }

}  // namespace accord
