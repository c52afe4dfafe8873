#pragma once
// Checkpoints: everything a job needs to continue, with any number of workers.
//
// File format (little-endian, version 4):
//   "ACCORDCK"                        8 bytes magic
//   u32 version, u32 reserved (0)
//   u64 steps                          optimizer steps completed
//   u64 data_position                  stream positions every worker has consumed
//   u64 parameter_count
//   f64 seconds                        the job's wall clock at that step (resumed jobs go on from it)
//   u64 data_hash                      content hash of the training data (0: not recorded)
//   u32 length + bytes                 model signature
//   u32 length + bytes                 algorithm name
//   f32 × parameter_count              parameters (the fp32 master weights, also with a 16-bit wire)
//   u64 optimizer_step, u32 slots      sharded optimizer state reassembled over all shards:
//   f32 × slots × parameter_count        slot after slot (AdamW m then v; Lion m; SGD momentum)
//   u32 momenta                        Distributed Lion: each worker's own momentum
//   f32 × momenta × parameter_count
//   u32 length + bytes                 error-feedback wire precision: "" (none), "int8", "fp8", "fp4", "sign", "sign2", "sign3"
//   when not "":
//     u64 count                        parameter_count
//     f32 × count                      residuals: by element, the sum over workers of what their
//                                      compressed gradients still owe (mean-gradient units)
//     f32 × count                      replica: the parameters the workers compute with (the
//                                      masters' decoded copy, not a function of them)
//   u32 topology workers               a topology's own state (local-sgd's outer state; 0: none)
//   when not 0:                        (parameters above are then what every worker restarts from)
//     u64 count, f32 × count           what every worker holds the same (local-sgd: outer momentum)
//     per worker: u64 local step, u32 local slots, f32 × local slots × parameter_count
//                                      the optimizer of its local steps on its own copy
//                 u64 count, f32 × count   its own (local-sgd: its outer rounds' residuals)
//   u32 crc32                          zlib's crc32 of every byte before it
// Version 3 is version 4 without the topology section, version 2 version 3 without the
// error-feedback section (read as none). Version 1 (no
// seconds, data hash or crc) is refused with a message naming it: resume such a run from its
// start, or with the build that wrote it.
// A resumed job re-shards the optimizer state for its own worker count; worker r of a resumed
// Distributed Lion job takes momentum r if the checkpoint has one, else starts from zero.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

// One worker's share of a topology's own state (recovery/rule_state.hpp's kept_topology).
struct checkpoint_topology_worker {
  std::uint64_t local_step = 0;
  std::uint32_t local_slots = 0;
  std::vector<float> local_values;  // local_slots × parameter count
  std::vector<float> own;
};

struct checkpoint {
  std::uint64_t steps = 0;
  std::uint64_t data_position = 0;
  double seconds = 0;
  std::uint64_t data_hash = 0;
  std::string signature;
  std::string algorithm;
  std::vector<float> parameters;
  std::uint64_t optimizer_step = 0;
  std::uint32_t slots = 0;
  std::vector<float> optimizer;       // slots × parameters.size()
  std::vector<std::vector<float>> momenta;
  std::string feedback;               // error-feedback wire precision ("": none)
  std::vector<float> residuals;       // with feedback: parameters.size() values each
  std::vector<float> replica;
  // A topology's own state: shared by every worker, and each worker's (empty: the topology keeps none).
  std::vector<float> topology_shared;
  std::vector<checkpoint_topology_worker> topology_workers;
  std::uint32_t crc = 0;              // of the file it was read from (set by the readers)
};

// Writes atomically and durably: a temporary file, fsync'ed, renamed over `path`, and the
// directory fsync'ed. Throws std::runtime_error naming the path.
void write_checkpoint(const std::string& path, const checkpoint& c);
// Throws std::runtime_error "<path>: <problem>" for a missing, truncated, corrupt (crc) or
// malformed file, or one whose values cannot be trained from (non-finite numbers, negative
// AdamW second moments, an optimizer step beyond the step count). Claimed sizes are checked
// against the file's size before anything is allocated.
checkpoint read_checkpoint(const std::string& path);
// The same from bytes in memory (`name` stands for the path in messages).
checkpoint parse_checkpoint(std::string_view bytes, const std::string& name);
// Fails with one line, before a job trains, when no checkpoint can be written at `path`.
void check_checkpoint_path(const std::string& path);

}  // namespace accord
