#pragma once
// Checkpoints: everything a job needs to continue, with any number of workers.
//
// File format (little-endian, version 1):
//   "ACCORDCK"                        8 bytes magic
//   u32 version, u32 reserved (0)
//   u64 steps                          optimizer steps completed
//   u64 data_position                  stream positions every worker has consumed
//   u64 parameter_count
//   u32 length + bytes                 model signature
//   u32 length + bytes                 algorithm name
//   f32 × parameter_count              parameters
//   u64 optimizer_step, u32 slots      sharded optimizer state reassembled over all shards:
//   f32 × slots × parameter_count        slot after slot (AdamW m then v; Lion m; SGD momentum)
//   u32 momenta                        Distributed Lion: each worker's own momentum
//   f32 × momenta × parameter_count
// A resumed job re-shards the optimizer state for its own worker count; worker r of a resumed
// Distributed Lion job takes momentum r if the checkpoint has one, else starts from zero.
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

struct checkpoint {
  std::uint64_t steps = 0;
  std::uint64_t data_position = 0;
  std::string signature;
  std::string algorithm;
  std::vector<float> parameters;
  std::uint64_t optimizer_step = 0;
  std::uint32_t slots = 0;
  std::vector<float> optimizer;       // slots × parameters.size()
  std::vector<std::vector<float>> momenta;
};

// Writes atomically (a temporary file renamed over `path`); throws std::runtime_error naming the path.
void write_checkpoint(const std::string& path, const checkpoint& c);
// Throws std::runtime_error "<path>: <problem>" for a missing, truncated or malformed file.
checkpoint read_checkpoint(const std::string& path);

}  // namespace accord
