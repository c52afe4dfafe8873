#include "models/mlp.hpp"

#include "models/layers.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace accord {

namespace {

using std::size_t;
using std::to_string;

const mlp_config& validated(const mlp_config& config) {
  auto check = [](int value, const std::string& name) {
    if (value <= 0)
      throw std::invalid_argument("mlp config: " + name + " must be positive, got " +
                                  to_string(value));
  };
  check(config.inputs, "inputs");
  for (size_t i = 0; i < config.hidden.size(); ++i)
    check(config.hidden[i], "hidden[" + to_string(i) + "]");
  check(config.classes, "classes");
  return config;
}

}  // namespace

mlp::mlp(const mlp_config& config) : config_(validated(config)) {
  std::vector<int> widths{config_.inputs};
  widths.insert(widths.end(), config_.hidden.begin(), config_.hidden.end());
  widths.push_back(config_.classes);
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const int in = widths[i], out = widths[i + 1];
    // He initialisation keeps activations' variance through ReLU layers; the output layer,
    // with no ReLU after it, gets variance 1/inputs.
    const bool hidden = i + 2 < widths.size();
    const float stddev = std::sqrt((hidden ? 2.0f : 1.0f) / in);
    const std::string name = "layer" + to_string(i) + ".";
    const size_t weight =
        layout_.add(name + "weight", size_t(in) * out, initial_values::normal, stddev);
    const size_t bias = layout_.add(name + "bias", size_t(out), initial_values::zeros);
    layers_.push_back({in, out, weight, bias});
  }
  outputs_.resize(layers_.size());
}

std::string mlp::signature() const {
  std::string s = "mlp(inputs=" + to_string(config_.inputs) + ",hidden=[";
  for (size_t i = 0; i < config_.hidden.size(); ++i) {
    if (i) s += ',';
    s += to_string(config_.hidden[i]);
  }
  return s + "],classes=" + to_string(config_.classes) + ")";
}

void mlp::initialize(std::span<float> parameters, std::uint64_t seed) const {
  if (parameters.size() != parameter_count())
    throw std::invalid_argument("mlp: initialize got " + to_string(parameters.size()) +
                                " parameters, expected " + to_string(parameter_count()));
  layout_.initialize(parameters, seed);
}

std::unique_ptr<model> mlp::clone() const { return std::make_unique<mlp>(config_); }

void mlp::prepare(std::span<const float> parameters, const batch& input) {
  if (parameters.size() != parameter_count())
    throw std::invalid_argument("mlp: got " + to_string(parameters.size()) +
                                " parameters, expected " + to_string(parameter_count()));
  if (input.examples == 0) throw std::invalid_argument("mlp: batch is empty");
  if (input.features.size() != input.examples * size_t(config_.inputs))
    throw std::invalid_argument("mlp: batch has " + to_string(input.features.size()) +
                                " features, expected " + to_string(input.examples) +
                                " examples x " + to_string(config_.inputs) + " inputs");
  if (input.targets.size() != input.examples)
    throw std::invalid_argument("mlp: batch has " + to_string(input.targets.size()) +
                                " targets for " + to_string(input.examples) + " examples");
  for (size_t i = 0; i < input.targets.size(); ++i)
    if (input.targets[i] < 0 || input.targets[i] >= config_.classes)
      throw std::invalid_argument("mlp: batch target " + to_string(input.targets[i]) +
                                  " at index " + to_string(i) + " is outside the classes [0, " +
                                  to_string(config_.classes) + ")");
  for (size_t i = 0; i < layers_.size(); ++i)
    outputs_[i].resize(input.examples * size_t(layers_[i].outputs));
}

double mlp::forward(const float* p, const batch& input) {
  const int rows = int(input.examples);
  const float* in = input.features.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const dense_layer& layer = layers_[i];
    float* out = outputs_[i].data();
    layers::matmul_forward(out, in, p + layer.weight, p + layer.bias, rows, layer.inputs,
                           layer.outputs);
    if (i + 1 < layers_.size()) layers::relu_forward(out, out, rows * layer.outputs);
    in = out;
  }
  return layers::softmax_crossentropy_forward(outputs_.back().data(), outputs_.back().data(),
                                              input.targets.data(), rows, config_.classes);
}

double mlp::evaluate(std::span<const float> parameters, const batch& input) {
  prepare(parameters, input);
  return forward(parameters.data(), input);
}

double mlp::accuracy(std::span<const float> parameters, const batch& input) {
  evaluate(parameters, input);
  const float* probs = outputs_.back().data();
  size_t correct = 0;
  for (size_t r = 0; r < input.examples; ++r) {
    const float* row = probs + r * config_.classes;
    correct += std::max_element(row, row + config_.classes) - row == input.targets[r];
  }
  return double(correct) / double(input.examples);
}

double mlp::forward_backward(std::span<const float> parameters, const batch& input,
                             std::span<float> gradients) {
  if (gradients.size() == parameter_count()) std::fill(gradients.begin(), gradients.end(), 0.0f);
  return accumulate_gradients(parameters, input, gradients);
}

// Every layer's backward adds into its parameters' gradients, so accumulating is the pass itself.
double mlp::accumulate_gradients(std::span<const float> parameters, const batch& input,
                                 std::span<float> gradients) {
  if (gradients.size() != parameter_count())
    throw std::invalid_argument("mlp: got " + to_string(gradients.size()) +
                                " gradients, expected " + to_string(parameter_count()));
  const double loss = evaluate(parameters, input);
  const int rows = int(input.examples);
  const float* p = parameters.data();
  float* g = gradients.data();

  doutput_.assign(size_t(rows) * config_.classes, 0.0f);
  layers::softmax_crossentropy_backward(doutput_.data(), outputs_.back().data(),
                                        input.targets.data(), rows, config_.classes);
  for (size_t i = layers_.size(); i-- > 0;) {
    const dense_layer& layer = layers_[i];
    if (i == 0) {  // the features need no gradient
      layers::matmul_backward(nullptr, g + layer.weight, g + layer.bias, doutput_.data(),
                              input.features.data(), p + layer.weight, rows, layer.inputs,
                              layer.outputs);
      gradients_final_from(0);
      break;
    }
    const float* in = outputs_[i - 1].data();
    dinput_.assign(size_t(rows) * layer.inputs, 0.0f);
    layers::matmul_backward(dinput_.data(), g + layer.weight, g + layer.bias, doutput_.data(), in,
                            p + layer.weight, rows, layer.inputs, layer.outputs);
    gradients_final_from(layer.weight);  // layers lie in order, each its weight then its bias
    doutput_.assign(dinput_.size(), 0.0f);
    layers::relu_backward(doutput_.data(), dinput_.data(), in, int(dinput_.size()));
  }
  return loss;
}

std::unique_ptr<model> make_mlp(const mlp_config& config) { return std::make_unique<mlp>(config); }

double mlp_parameter_estimate(const mlp_config& config) {
  double parameters = 0, inputs = config.inputs;
  for (const int width : config.hidden) {
    parameters += (inputs + 1) * width;
    inputs = width;
  }
  return parameters + (inputs + 1) * config.classes;
}

double mlp_activation_bytes(const mlp_config& config, double examples) {
  double outputs = config.classes, widest = std::max(config.inputs, config.classes);
  for (const int width : config.hidden) {
    outputs += width;
    widest = std::max<double>(widest, width);
  }
  return sizeof(float) * examples * (outputs + 2 * widest);
}

}  // namespace accord
