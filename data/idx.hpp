#pragma once
// IDX files (the MNIST family's format: big-endian magic and dimensions, then unsigned bytes)
// parsed from bytes already read; `name` names the source in errors (data_error).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

struct idx_image_file {
  std::size_t count = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t feature_count = 0;     // rows * cols
  std::vector<std::uint8_t> pixels;  // count x feature_count, as stored
};

// A 3-dimensional image file: at least one image of 1..4096 x 1..4096 pixels, exactly as many
// data bytes as the header promises.
idx_image_file parse_idx_images(std::vector<std::uint8_t> bytes, const std::string& name);

// A 1-dimensional label file whose every label is below `classes`.
std::vector<std::uint8_t> parse_idx_labels(std::vector<std::uint8_t> bytes, const std::string& name, int classes);

}  // namespace accord
