#include "recovery/parameter_hash.hpp"

#include <xxhash.h>

namespace accord {

std::uint64_t hash_parameters(const std::vector<float>& parameters) {
  // XXH3 runs at memory speed, so checking replicas every round costs next to nothing; any
  // bit difference between replicas shows.
  return XXH3_64bits(parameters.data(), parameters.size() * sizeof(float));
}

}  // namespace accord
