#pragma once
// A multilayer perceptron classifier (ReLU hidden layers, softmax cross-entropy) over one flat
// parameter buffer, built from the same layer functions as the GPT (models/layers.hpp).
//
// Parameter layout: for each layer i (hidden layers, then the output layer), contiguously,
//   layer<i>.weight (outputs, inputs) row-major, layer<i>.bias (outputs).
// Batch: `features` holds examples x inputs floats, `targets` one class label per example.
//
// Threading: matrix products call OpenBLAS, whose thread pool is the caller's to size.
#include <accord/model.hpp>

#include "models/parameter_layout.hpp"

#include <memory>
#include <vector>

namespace accord {

struct mlp_config {
  int inputs = 784;
  std::vector<int> hidden{256, 128};
  int classes = 10;
};

class mlp final : public model {
public:
  // Throws std::invalid_argument when a size is not positive.
  explicit mlp(const mlp_config& config);

  std::string signature() const override;
  std::size_t parameter_count() const override { return layout_.total(); }
  void initialize(std::span<float> parameters, std::uint64_t seed) const override;
  double forward_backward(std::span<const float> parameters, const batch& input,
                          std::span<float> gradients) override;
  double accumulate_gradients(std::span<const float> parameters, const batch& input,
                              std::span<float> gradients) override;
  double evaluate(std::span<const float> parameters, const batch& input) override;
  std::unique_ptr<model> clone() const override;

  // Fraction of the batch's examples whose most probable class is the target.
  double accuracy(std::span<const float> parameters, const batch& input);

  const mlp_config& config() const { return config_; }
  const parameter_layout& layout() const { return layout_; }

private:
  struct dense_layer {
    int inputs, outputs;
    std::size_t weight, bias;
  };

  void prepare(std::span<const float> parameters, const batch& input);
  double forward(const float* parameters, const batch& input);

  mlp_config config_;
  parameter_layout layout_;
  std::vector<dense_layer> layers_;
  // outputs_[i]: layer i's output (after ReLU for hidden layers; class probabilities for the
  // last), so layer i's input is outputs_[i - 1] or the batch features.
  std::vector<std::vector<float>> outputs_;
  std::vector<float> doutput_, dinput_;  // gradient scratch, swapped layer to layer
};

std::unique_ptr<model> make_mlp(const mlp_config& config);

// Sizes of an MLP of this shape without building one, as doubles (models/memory.hpp): its
// parameter count, and the bytes one instance allocates for a forward and backward pass over
// `examples` examples (each layer's outputs and the gradient scratch).
double mlp_parameter_estimate(const mlp_config& config);
double mlp_activation_bytes(const mlp_config& config, double examples);

}  // namespace accord
