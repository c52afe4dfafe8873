#include "data/fashion_mnist.hpp"

#include <filesystem>

#include "data/file_bytes.hpp"
#include "data/idx.hpp"

namespace accord {

idx_classification::idx_classification(const std::string& images_path,
                                       const std::string& labels_path, std::uint64_t seed)
    : images_path_(images_path),
      images_(parse_idx_images(read_file_bytes(images_path), images_path)),
      labels_(parse_idx_labels(read_file_bytes(labels_path), labels_path, classes)),
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
