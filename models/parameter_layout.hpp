#pragma once
// Named tensors at fixed offsets inside one flat parameter buffer, each with the rule that
// initialises it. The built-in models build their layout once from the config; tests and
// tools use it to address single tensors.
#include "models/seeded_normal.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace accord {

enum class initial_values { zeros, ones, normal };

struct parameter_tensor {
  std::string name;
  std::size_t offset = 0;
  std::size_t size = 0;
  initial_values init = initial_values::zeros;
  float stddev = 0.0f;  // for initial_values::normal
};

class parameter_layout {
public:
  // Appends a tensor after the previous ones and returns its offset.
  std::size_t add(std::string name, std::size_t size, initial_values init, float stddev = 0.0f) {
    const std::size_t offset = total_;
    tensors_.push_back({std::move(name), offset, size, init, stddev});
    total_ += size;
    return offset;
  }
  std::size_t total() const { return total_; }
  const std::vector<parameter_tensor>& tensors() const { return tensors_; }

  // Fills every tensor by its rule, drawing normals in layout order from one seeded stream.
  void initialize(std::span<float> parameters, std::uint64_t seed) const {
    seeded_normal normal(seed);
    for (const parameter_tensor& t : tensors_) {
      float* first = parameters.data() + t.offset;
      switch (t.init) {
        case initial_values::zeros: std::fill_n(first, t.size, 0.0f); break;
        case initial_values::ones: std::fill_n(first, t.size, 1.0f); break;
        case initial_values::normal:
          for (std::size_t i = 0; i < t.size; ++i) first[i] = normal(t.stddev);
          break;
      }
    }
  }

private:
  std::vector<parameter_tensor> tensors_;
  std::size_t total_ = 0;
};

}  // namespace accord
