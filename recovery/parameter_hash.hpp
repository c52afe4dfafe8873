#pragma once
// Replicas and kept generations are compared by a hash of their parameters.
#include <cstdint>
#include <vector>

namespace accord {

// 64-bit hash of a parameter vector, to compare replicas cheaply.
std::uint64_t hash_parameters(const std::vector<float>& parameters);

}  // namespace accord
