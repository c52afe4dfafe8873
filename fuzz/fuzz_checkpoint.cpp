// Checkpoint files (recovery/checkpoint.hpp) through the public reader: any bytes give a
// checkpoint or one std::runtime_error, never a crash, a leak or an allocation the file cannot back.
#include "recovery/checkpoint.hpp"
#include "fuzz/memory_file.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static accord::fuzz::memory_file file;
  try {
    (void)accord::read_checkpoint(file.hold(data, size));
  } catch (const std::runtime_error&) {
  }
  return 0;
}
