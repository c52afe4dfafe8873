#pragma once
// Fashion-MNIST (or any IDX image/label pair, e.g. MNIST) as a shuffled example stream.
// Files may be gzip-compressed or plain. Features are pixel/255 in [0, 1], row-major,
// one row of rows*cols floats per example; targets are the class labels 0..9.
#include <accord/model.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/idx.hpp"
#include "data/shuffle.hpp"

namespace accord {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* default_fashion_mnist_directory = "/usr/share/datasets/fashion-mnist";

class idx_classification final : public dataset {
public:
  static constexpr int classes = 10;

  // Reads and validates both files; throws data_error naming the file and the problem.
  idx_classification(const std::string& images_path, const std::string& labels_path,
                     std::uint64_t seed);

  std::string describe() const override;
  std::uint64_t size() const override { return labels_.size(); }
  batch examples(std::uint64_t first, std::size_t count) const override;

  std::size_t feature_count() const { return images_.feature_count; }
  // Unshuffled access, e.g. for class statistics.
  int label(std::size_t index) const { return labels_[index]; }
  // Which stored example stream position `position` shows.
  std::uint64_t index_at(std::uint64_t position) const { return order_(position); }

private:
  std::string images_path_;
  idx_image_file images_;
  std::vector<std::uint8_t> labels_;
  shuffled_order order_;
};

// `{directory}/{train|t10k}-{images-idx3|labels-idx1}-ubyte.gz`, or the same names without
// `.gz` when only uncompressed files are there.
std::shared_ptr<const idx_classification> load_fashion_mnist(const std::string& directory,
                                                             bool train, std::uint64_t seed);

}  // namespace accord
