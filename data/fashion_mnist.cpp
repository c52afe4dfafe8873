#include "data/fashion_mnist.hpp"

#include <array>
#include <filesystem>

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

idx_classification::image_file idx_classification::read_images(const std::string& path) {
  std::vector<std::uint8_t> bytes = read_file_bytes(path);
  const auto [count, rows, cols] = idx_header<3>(bytes, path, image_magic, "images");
  if (count == 0) throw data_error(path, "holds no images");
  if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096)
    throw data_error(path, "implausible image size " + std::to_string(rows) + "x" +
                               std::to_string(cols));
  check_payload(bytes, path, 16, count * rows * cols);
  bytes.erase(bytes.begin(), bytes.begin() + 16);
  return {count, rows, cols, rows * cols, std::move(bytes)};
}

std::vector<std::uint8_t> idx_classification::read_labels(const std::string& path) {
  std::vector<std::uint8_t> bytes = read_file_bytes(path);
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

idx_classification::idx_classification(const std::string& images_path,
                                       const std::string& labels_path, std::uint64_t seed)
    : images_path_(images_path),
      images_(read_images(images_path)),
      labels_(read_labels(labels_path)),
      order_([&] {
        if (labels_.size() != images_.count)
          throw data_error(labels_path, std::to_string(labels_.size()) + " labels but " +
                                            images_path + " holds " +
                                            std::to_string(images_.count) + " images");
        return shuffled_order(images_.count, seed);
      }()) {}

std::string idx_classification::describe() const {
  return images_path_ + " (" + std::to_string(images_.count) + " images of " +
         std::to_string(images_.rows) + "x" + std::to_string(images_.cols) + ", " +
         std::to_string(classes) + " classes)";
}

batch idx_classification::examples(std::uint64_t first, std::size_t count) const {
  const std::size_t width = images_.feature_count;
  batch out;
  out.examples = count;
  out.features.resize(count * width);
  out.targets.resize(count);
  for (std::size_t e = 0; e < count; ++e) {
    const std::uint64_t index = order_(first + e);
    const std::uint8_t* pixels = images_.pixels.data() + index * width;
    float* features = out.features.data() + e * width;
    for (std::size_t i = 0; i < width; ++i) features[i] = static_cast<float>(pixels[i]) / 255.0f;
    out.targets[e] = labels_[index];
  }
  return out;
}

std::shared_ptr<const idx_classification> load_fashion_mnist(const std::string& directory,
                                                             bool train, std::uint64_t seed) {
  const std::string prefix = directory + "/" + (train ? "train" : "t10k");
  // Prefer the package's .gz files; fall back to uncompressed copies of the same name.
  const auto pick = [](const std::string& base) {
    const std::string compressed = base + ".gz";
    return std::filesystem::exists(compressed) || !std::filesystem::exists(base) ? compressed
                                                                                 : base;
  };
  return std::make_shared<const idx_classification>(pick(prefix + "-images-idx3-ubyte"),
                                                    pick(prefix + "-labels-idx1-ubyte"), seed);
}

}  // namespace accord
