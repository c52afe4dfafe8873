#include "data/idx.hpp"

#include <array>

#include "data/file_bytes.hpp"

namespace accord {
namespace {

constexpr std::uint32_t image_magic = 2051;  // 0x00000803: unsigned bytes, 3 dimensions
constexpr std::uint32_t label_magic = 2049;  // 0x00000801: unsigned bytes, 1 dimension

std::uint32_t big_endian_u32(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

// Checks the header and returns its big-endian dimension fields.
template <std::size_t dimensions>
std::array<std::size_t, dimensions> idx_header(const std::vector<std::uint8_t>& bytes,
                                               const std::string& path, std::uint32_t magic,
                                               const char* kind) {
  const std::size_t header_bytes = 4 * (1 + dimensions);
  if (bytes.size() < header_bytes)
    throw data_error(path, "truncated IDX header (" + std::to_string(bytes.size()) + " bytes)");
  const std::uint32_t found = big_endian_u32(bytes, 0);
  if (found != magic)
    throw data_error(path, "wrong IDX magic " + std::to_string(found) + " (expected " +
                               std::to_string(magic) + " for " + kind + ")");
  std::array<std::size_t, dimensions> sizes{};
  for (std::size_t d = 0; d < dimensions; ++d) sizes[d] = big_endian_u32(bytes, 4 + 4 * d);
  return sizes;
}

void check_payload(const std::vector<std::uint8_t>& bytes, const std::string& path,
                   std::size_t header_bytes, std::size_t expected_payload) {
  const std::size_t payload = bytes.size() - header_bytes;
  if (payload < expected_payload)
    throw data_error(path, "truncated: header promises " + std::to_string(expected_payload) +
                               " data bytes, file holds " + std::to_string(payload));
  if (payload > expected_payload)
    throw data_error(path, std::to_string(payload - expected_payload) +
                               " unexpected bytes after the data");
}

}  // namespace

idx_image_file parse_idx_images(std::vector<std::uint8_t> bytes, const std::string& path) {
  const auto [count, rows, cols] = idx_header<3>(bytes, path, image_magic, "images");
  if (count == 0) throw data_error(path, "holds no images");
  if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096)
    throw data_error(path, "implausible image size " + std::to_string(rows) + "x" +
                               std::to_string(cols));
  check_payload(bytes, path, 16, count * rows * cols);
  bytes.erase(bytes.begin(), bytes.begin() + 16);
  return {count, rows, cols, rows * cols, std::move(bytes)};
}

std::vector<std::uint8_t> parse_idx_labels(std::vector<std::uint8_t> bytes, const std::string& path, int classes) {
  const auto [count] = idx_header<1>(bytes, path, label_magic, "labels");
  check_payload(bytes, path, 8, count);
  bytes.erase(bytes.begin(), bytes.begin() + 8);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] >= classes)
      throw data_error(path, "label " + std::to_string(bytes[i]) + " of example " +
                                 std::to_string(i) + " is not a class 0.." +
                                 std::to_string(classes - 1));
  return bytes;
}

}  // namespace accord
