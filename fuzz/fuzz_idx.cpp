// IDX image and label files (data/idx.hpp), read as the Fashion-MNIST loader reads them: through
// read_file_bytes (gzip or plain), then parsed. The first byte picks images or labels.
#include "data/file_bytes.hpp"
#include "data/idx.hpp"
#include "fuzz/memory_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static accord::fuzz::memory_file file;
  const bool images = data[0] & 1;
  try {
    std::vector<std::uint8_t> bytes = accord::read_file_bytes(file.hold(data + 1, size - 1));
    if (images)
      (void)accord::parse_idx_images(std::move(bytes), "fuzz");
    else
      (void)accord::parse_idx_labels(std::move(bytes), "fuzz", 10);
  } catch (const accord::data_error&) {
  }
  return 0;
}
