// The built-in models: every layer and both whole models against central finite differences,
// forward results against plain reference loops, initialisation, clones and input checking.
#include <doctest/doctest.h>

#include "models/gpt.hpp"
#include "models/layers.hpp"
#include "models/memory.hpp"
#include "models/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace accord;

namespace {

std::vector<float> normal_values(std::size_t count, std::mt19937& rng, float stddev = 1.0f,
                                 float mean = 0.0f) {
  std::normal_distribution<float> normal(mean, stddev);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

std::vector<std::int32_t> random_ids(std::size_t count, int limit, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> id(0, limit - 1);
  std::vector<std::int32_t> ids(count);
  for (auto& v : ids) v = id(rng);
  return ids;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += double(a[i]) * b[i];
  return sum;
}

// Compares `analytic` with central differences of `loss` with respect to `values[i]` for every
// i in `indices` (all entries when empty). The error of one entry is |a - n| / (floor +
// max(|a|, |n|)): relative for gradients well above `floor`, absolute below it.
struct difference_check {
  float step = 1e-2f;
  double floor = 1e-3;
  double tolerance = 1e-2;
};

void check_gradient(const std::string& what, std::span<float> values, std::span<const float> analytic,
                    const std::function<double()>& loss, const difference_check& check,
                    std::vector<std::size_t> indices = {}) {
  REQUIRE(values.size() == analytic.size());
  if (indices.empty()) {
    indices.resize(values.size());
    std::iota(indices.begin(), indices.end(), std::size_t{0});
  }
  double worst = 0.0, worst_analytic = 0.0, worst_numeric = 0.0;
  std::size_t worst_index = 0;
  for (std::size_t i : indices) {
    const float original = values[i];
    values[i] = original + check.step;
    const float up = values[i];
    const double loss_up = loss();
    values[i] = original - check.step;
    const float down = values[i];
    const double loss_down = loss();
    values[i] = original;
    // the step actually taken, after rounding to float
    const double numeric = (loss_up - loss_down) / (double(up) - double(down));
    const double a = analytic[i];
    const double error =
        std::abs(a - numeric) / (check.floor + std::max(std::abs(a), std::abs(numeric)));
    if (error >= worst) {
      worst = error;
      worst_index = i;
      worst_analytic = a;
      worst_numeric = numeric;
    }
  }
  INFO(what << ": worst at index " << worst_index << ", analytic " << worst_analytic
            << ", numeric " << worst_numeric);
  CHECK(worst < check.tolerance);
}

}  // namespace

TEST_CASE("embedding gradients match finite differences") {
  std::mt19937 rng(1);
  const int vocab = 7, context = 4, examples = 2, sequence = 3, width = 5;
  auto tokens = random_ids(examples * sequence, vocab, rng);
  auto token_table = normal_values(vocab * width, rng);
  auto position_table = normal_values(context * width, rng);
  const auto weights = normal_values(examples * sequence * width, rng);
  std::vector<float> out(weights.size());
  auto loss = [&] {
    layers::embedding_forward(out.data(), tokens.data(), token_table.data(), position_table.data(),
                              examples, sequence, width);
    return dot(out, weights);
  };
  loss();
  CHECK(out[width + 2] == token_table[tokens[1] * width + 2] + position_table[width + 2]);

  std::vector<float> dtoken(token_table.size()), dposition(position_table.size());
  layers::embedding_backward(dtoken.data(), dposition.data(), weights.data(), tokens.data(),
                             examples, sequence, width);
  check_gradient("token table", token_table, dtoken, loss, {});
  check_gradient("position table", position_table, dposition, loss, {});
  // positions beyond the sequence are untouched
  CHECK(std::all_of(dposition.begin() + sequence * width, dposition.end(),
                    [](float g) { return g == 0.0f; }));
}

TEST_CASE("layernorm normalises rows and its gradients match finite differences") {
  std::mt19937 rng(2);
  const int rows = 3, width = 8;
  auto in = normal_values(rows * width, rng, 2.0f, 0.5f);
  auto gain = normal_values(width, rng, 0.3f, 1.0f);
  auto bias = normal_values(width, rng, 0.3f);
  const auto weights = normal_values(rows * width, rng);
  std::vector<float> out(in.size()), mean(rows), rstd(rows);
  auto loss = [&] {
    layers::layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), gain.data(),
                              bias.data(), rows, width);
    return dot(out, weights);
  };
  loss();
  for (int r = 0; r < rows; ++r) {
    double m = 0.0, v = 0.0;
    for (int i = 0; i < width; ++i) m += in[r * width + i];
    m /= width;
    for (int i = 0; i < width; ++i) v += (in[r * width + i] - m) * (in[r * width + i] - m);
    v /= width;
    for (int i = 0; i < width; ++i) {
      const double expected = (in[r * width + i] - m) / std::sqrt(v + 1e-5) * gain[i] + bias[i];
      CHECK(out[r * width + i] == doctest::Approx(expected).epsilon(1e-5));
    }
  }

  std::vector<float> din(in.size()), dgain(width), dbias(width);
  layers::layernorm_backward(din.data(), dgain.data(), dbias.data(), weights.data(), in.data(),
                             gain.data(), mean.data(), rstd.data(), rows, width);
  check_gradient("input", in, din, loss, {.step = 1e-2f, .floor = 1e-3, .tolerance = 1e-2});
  check_gradient("gain", gain, dgain, loss, {});
  check_gradient("bias", bias, dbias, loss, {});
}

TEST_CASE("matmul matches a reference product and its gradients match finite differences") {
  std::mt19937 rng(3);
  const int rows = 4, inputs = 5, outputs = 3;
  auto in = normal_values(rows * inputs, rng);
  auto weight = normal_values(outputs * inputs, rng);
  auto bias = normal_values(outputs, rng);
  const auto weights = normal_values(rows * outputs, rng);
  std::vector<float> out(rows * outputs);
  auto loss = [&] {
    layers::matmul_forward(out.data(), in.data(), weight.data(), bias.data(), rows, inputs,
                           outputs);
    return dot(out, weights);
  };
  loss();
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < outputs; ++o) {
      double expected = bias[o];
      for (int i = 0; i < inputs; ++i) expected += double(in[r * inputs + i]) * weight[o * inputs + i];
      CHECK(out[r * outputs + o] == doctest::Approx(expected).epsilon(1e-5));
    }

  std::vector<float> din(in.size()), dweight(weight.size()), dbias(bias.size());
  layers::matmul_backward(din.data(), dweight.data(), dbias.data(), weights.data(), in.data(),
                          weight.data(), rows, inputs, outputs);
  check_gradient("input", in, din, loss, {});
  check_gradient("weight", weight, dweight, loss, {});
  check_gradient("bias", bias, dbias, loss, {});

  SUBCASE("without bias and without an input gradient") {
    loss();  // out as of the unperturbed values
    std::vector<float> plain(out.size());
    layers::matmul_forward(plain.data(), in.data(), weight.data(), nullptr, rows, inputs, outputs);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < outputs; ++o)
        CHECK(plain[r * outputs + o] == doctest::Approx(out[r * outputs + o] - bias[o]).epsilon(1e-5));
    std::vector<float> dweight_only(weight.size());
    layers::matmul_backward(nullptr, dweight_only.data(), nullptr, weights.data(), in.data(),
                            weight.data(), rows, inputs, outputs);
    CHECK(dweight_only == dweight);
  }
}

TEST_CASE("causal attention matches a reference and its gradients match finite differences") {
  std::mt19937 rng(4);
  const int examples = 2, sequence = 4, width = 6, heads = 2, head_width = width / heads;
  auto qkv = normal_values(examples * sequence * 3 * width, rng);
  const auto weights = normal_values(examples * sequence * width, rng);
  std::vector<float> out(weights.size()), probs(examples * heads * sequence * sequence);
  auto loss = [&] {
    layers::attention_forward(out.data(), probs.data(), qkv.data(), examples, sequence, width,
                              heads);
    return dot(out, weights);
  };
  loss();

  // Reference: per example, head and position, softmax over the positions up to it.
  auto at = [&](int b, int t, int part, int h, int i) {
    return double(qkv[(b * sequence + t) * 3 * width + part * width + h * head_width + i]);
  };
  for (int b = 0; b < examples; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < sequence; ++t) {
        std::vector<double> scores(t + 1);
        for (int j = 0; j <= t; ++j) {
          for (int i = 0; i < head_width; ++i) scores[j] += at(b, t, 0, h, i) * at(b, j, 1, h, i);
          scores[j] /= std::sqrt(double(head_width));
        }
        const double peak = *std::max_element(scores.begin(), scores.end());
        double total = 0.0;
        for (double& s : scores) total += (s = std::exp(s - peak));
        for (int i = 0; i < head_width; ++i) {
          double expected = 0.0;
          for (int j = 0; j <= t; ++j) expected += scores[j] / total * at(b, j, 2, h, i);
          CHECK(out[(b * sequence + t) * width + h * head_width + i] ==
                doctest::Approx(expected).epsilon(1e-5));
        }
        for (int j = t + 1; j < sequence; ++j)
          CHECK(probs[((b * heads + h) * sequence + t) * sequence + j] == 0.0f);
      }

  std::vector<float> dqkv(qkv.size());
  layers::attention_backward(dqkv.data(), weights.data(), qkv.data(), probs.data(), examples,
                             sequence, width, heads);
  check_gradient("qkv", qkv, dqkv, loss, {});
}

TEST_CASE("gelu matches known values and its gradient matches finite differences") {
  std::mt19937 rng(5);
  auto in = normal_values(40, rng, 2.0f);
  const auto weights = normal_values(in.size(), rng);
  std::vector<float> out(in.size());
  auto loss = [&] {
    layers::gelu_forward(out.data(), in.data(), int(in.size()));
    return dot(out, weights);
  };
  const float probe[] = {0.0f, 1.0f, -1.0f, 3.0f};
  float value[4];
  layers::gelu_forward(value, probe, 4);
  CHECK(value[0] == 0.0f);
  CHECK(value[1] == doctest::Approx(0.8411920).epsilon(1e-6));
  CHECK(value[2] == doctest::Approx(-0.1588080).epsilon(1e-5));
  CHECK(value[3] == doctest::Approx(2.9963627).epsilon(1e-6));

  loss();
  std::vector<float> din(in.size());
  layers::gelu_backward(din.data(), weights.data(), in.data(), int(in.size()));
  check_gradient("input", in, din, loss, {.step = 1e-3f, .floor = 1e-3, .tolerance = 1e-2});
}

TEST_CASE("relu gradient matches finite differences away from the kink") {
  std::mt19937 rng(6);
  auto in = normal_values(30, rng);
  for (float& x : in) x += x > 0 ? 0.1f : -0.1f;  // no input within a step of 0
  const auto weights = normal_values(in.size(), rng);
  std::vector<float> out(in.size());
  auto loss = [&] {
    layers::relu_forward(out.data(), in.data(), int(in.size()));
    return dot(out, weights);
  };
  loss();
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(out[i] == std::max(in[i], 0.0f));
  std::vector<float> din(in.size());
  layers::relu_backward(din.data(), weights.data(), out.data(), int(in.size()));
  check_gradient("input", in, din, loss, {});
}

TEST_CASE("softmax cross-entropy: loss by hand, in-place softmax, gradient by differences") {
  std::mt19937 rng(7);
  const int rows = 3, classes = 5;
  auto logits = normal_values(rows * classes, rng, 2.0f);
  const auto targets = random_ids(rows, classes, rng);
  std::vector<float> probs(logits.size());
  auto loss = [&] {
    return layers::softmax_crossentropy_forward(probs.data(), logits.data(), targets.data(), rows,
                                                classes);
  };
  double expected = 0.0;
  for (int r = 0; r < rows; ++r) {
    double total = 0.0;
    for (int c = 0; c < classes; ++c) total += std::exp(double(logits[r * classes + c]));
    expected -= std::log(std::exp(double(logits[r * classes + targets[r]])) / total);
  }
  expected /= rows;
  CHECK(loss() == doctest::Approx(expected).epsilon(1e-6));
  for (int r = 0; r < rows; ++r)
    CHECK(std::accumulate(&probs[r * classes], &probs[r * classes] + classes, 0.0) ==
          doctest::Approx(1.0).epsilon(1e-6));

  std::vector<float> in_place = logits;
  CHECK(layers::softmax_crossentropy_forward(in_place.data(), in_place.data(), targets.data(),
                                             rows, classes) == loss());
  CHECK(in_place == probs);

  std::vector<float> dlogits(logits.size());
  layers::softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), rows,
                                        classes);
  check_gradient("logits", logits, dlogits, loss, {.step = 1e-2f, .floor = 1e-4, .tolerance = 1e-2});
}

namespace {

// Parameters of a small model made generic: seeded initialisation plus noise, so LayerNorm
// gains and biases are not exactly 1 and 0 and every path carries gradient.
std::vector<float> perturbed_parameters(const model& m, std::uint64_t seed, float noise) {
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, seed);
  std::mt19937 rng{static_cast<unsigned>(seed)};
  std::normal_distribution<float> normal(0.0f, noise);
  for (float& p : parameters) p += normal(rng);
  return parameters;
}

batch token_batch(std::size_t examples, std::size_t sequence, int vocab, std::mt19937& rng) {
  batch b;
  b.examples = examples;
  b.tokens = random_ids(examples * sequence, vocab, rng);
  b.targets = random_ids(examples * sequence, vocab, rng);
  return b;
}

batch image_batch(std::size_t examples, int inputs, int classes, std::mt19937& rng) {
  batch b;
  b.examples = examples;
  b.features = normal_values(examples * inputs, rng);
  b.targets = random_ids(examples, classes, rng);
  return b;
}

void check_whole_model(model& m, std::vector<float> parameters, const batch& input,
                       const difference_check& check) {
  std::vector<float> gradients(parameters.size());
  const double loss = m.forward_backward(parameters, input, gradients);
  CHECK(std::isfinite(loss));
  CHECK(m.evaluate(parameters, input) == loss);
  check_gradient(m.signature(), parameters, gradients,
                 [&] { return m.evaluate(parameters, input); }, check);
}

}  // namespace

TEST_CASE("whole GPT gradients match finite differences in every parameter") {
  std::mt19937 rng(8);
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    gpt_config config{.vocab = 11, .context = 6, .layers = 2, .heads = 2, .width = 8,
                      .tied_head = tied};
    gpt m(config);
    // Sequence length 5 < context 6: shorter sequences are valid input.
    check_whole_model(m, perturbed_parameters(m, 11, 0.2f), token_batch(3, 5, config.vocab, rng),
                      {.step = 3e-3f, .floor = 2e-3, .tolerance = 2e-2});
  }
}

TEST_CASE("whole MLP gradients match finite differences in every parameter") {
  std::mt19937 rng(9);
  mlp m({.inputs = 6, .hidden = {5, 4}, .classes = 3});
  check_whole_model(m, perturbed_parameters(m, 12, 0.2f), image_batch(4, 6, 3, rng),
                    {.step = 1e-3f, .floor = 1e-3, .tolerance = 1e-2});
  mlp linear({.inputs = 4, .hidden = {}, .classes = 3});
  check_whole_model(linear, perturbed_parameters(linear, 13, 0.2f), image_batch(5, 4, 3, rng),
                    {.step = 1e-3f, .floor = 1e-3, .tolerance = 1e-2});
}

TEST_CASE("GPT layout, signature and GPT-2 initialisation") {
  const gpt_config config;  // defaults: vocab 256, context 64, 2 layers, 4 heads, width 128
  gpt m(config);
  const std::size_t C = 128;
  CHECK(m.parameter_count() == 256 * C + 64 * C + 2 * (12 * C * C + 13 * C) + 2 * C);
  CHECK(gpt({.tied_head = false}).parameter_count() == m.parameter_count() + 256 * C);
  CHECK(m.signature() == "gpt(vocab=256,context=64,layers=2,heads=4,width=128,tied)");
  CHECK(make_gpt({.layers = 3, .tied_head = false})->signature() ==
        "gpt(vocab=256,context=64,layers=3,heads=4,width=128,untied)");

  std::vector<float> a(m.parameter_count()), b(a.size()), c(a.size());
  m.initialize(a, 42);
  m.initialize(b, 42);
  m.initialize(c, 43);
  CHECK(a == b);
  CHECK(a != c);

  auto stddev_of = [&](const parameter_tensor& t) {
    double sum = 0.0, squares = 0.0;
    for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
      sum += a[i];
      squares += double(a[i]) * a[i];
    }
    const double mean = sum / t.size;
    return std::sqrt(squares / t.size - mean * mean);
  };
  for (const parameter_tensor& t : m.layout().tensors()) {
    CAPTURE(t.name);
    const auto first = a.begin() + t.offset, last = first + t.size;
    if (t.name.ends_with("gain")) {
      CHECK(std::all_of(first, last, [](float v) { return v == 1.0f; }));
    } else if (t.name.ends_with("bias")) {
      CHECK(std::all_of(first, last, [](float v) { return v == 0.0f; }));
    } else if (t.name.ends_with("proj_weight")) {
      CHECK(stddev_of(t) == doctest::Approx(0.02 / std::sqrt(4.0)).epsilon(0.05));
    } else {
      CHECK(stddev_of(t) == doctest::Approx(0.02).epsilon(0.05));
    }
  }
}

TEST_CASE("GPT initial loss on random bytes is close to ln 256") {
  gpt m(gpt_config{});
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, 1);
  std::mt19937 rng(10);
  const double loss = m.evaluate(parameters, token_batch(4, 64, 256, rng));
  CHECK(loss == doctest::Approx(std::log(256.0)).epsilon(0.02));
}

TEST_CASE("forward_backward overwrites the gradient buffer") {
  std::mt19937 rng(11);
  gpt m({.vocab = 13, .context = 8, .layers = 1, .heads = 2, .width = 8});
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, 3);
  const batch input = token_batch(2, 8, 13, rng);
  std::vector<float> clean(parameters.size()), dirty(parameters.size(), 1e30f);
  m.forward_backward(parameters, input, clean);
  m.forward_backward(parameters, input, dirty);
  CHECK(clean == dirty);
}

TEST_CASE("host models take device_span forms of host memory and refuse device memory in one line") {
  std::mt19937 rng(13);
  gpt m({.vocab = 13, .context = 8, .layers = 1, .heads = 2, .width = 8});
  CHECK(m.memory() == memory_location{});
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, 4);
  const batch input = token_batch(2, 8, 13, rng);
  std::vector<float> expected(parameters.size(), 0.5f), sum(parameters.size(), 0.5f);
  const double loss = m.accumulate_gradients(parameters, input, expected);
  CHECK(m.accumulate_gradients_at(std::span<const float>(parameters), input, std::span<float>(sum)) == loss);
  CHECK(sum == expected);
  CHECK(m.evaluate_at(std::span<const float>(parameters), input) == m.evaluate(parameters, input));

  // A device pointer is never dereferenced: the call stops at the memory it names.
  const memory_location gpu{memory_space::cuda, 1};
  const device_span<const float> on_gpu{parameters, gpu};
  const std::string refused = m.signature() + ": accumulate_gradients_at takes host memory only, got ";
  CHECK_THROWS_WITH_AS(m.accumulate_gradients_at(on_gpu, input, std::span<float>(sum)),
                       (refused + "parameters in cuda:1").c_str(), std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.accumulate_gradients_at(std::span<const float>(parameters), input,
                                                 device_span<float>{sum, gpu}),
                       (refused + "gradients in cuda:1").c_str(), std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.evaluate_at(on_gpu, input),
                       (m.signature() + ": evaluate_at takes host memory only, got parameters in cuda:1").c_str(),
                       std::invalid_argument);
  CHECK(sum == expected);
}

TEST_CASE("clones are independent and agree with the original") {
  std::mt19937 rng(12);
  const gpt_config config{.vocab = 50, .context = 16, .layers = 2, .heads = 2, .width = 16};
  auto original = make_gpt(config);
  auto copy = original->clone();
  CHECK(copy->signature() == original->signature());
  std::vector<float> parameters(original->parameter_count());
  original->initialize(parameters, 5);
  const batch first = token_batch(3, 16, config.vocab, rng);
  const batch second = token_batch(5, 9, config.vocab, rng);

  // Sequential results of the original on both batches...
  std::vector<float> g_first(parameters.size()), g_second(parameters.size());
  const double loss_first = original->forward_backward(parameters, first, g_first);
  const double loss_second = original->forward_backward(parameters, second, g_second);
  // ...equal those of the original and the clone running at the same time on different shapes.
  std::vector<float> h_first(parameters.size()), h_second(parameters.size());
  double l_first = 0.0, l_second = 0.0;
  for (int round = 0; round < 3; ++round) {
    std::thread other([&] { l_second = copy->forward_backward(parameters, second, h_second); });
    l_first = original->forward_backward(parameters, first, h_first);
    other.join();
    CHECK(l_first == loss_first);
    CHECK(l_second == loss_second);
    CHECK(h_first == g_first);
    CHECK(h_second == g_second);
  }

  mlp classifier({.inputs = 10, .hidden = {7}, .classes = 4});
  auto classifier_copy = classifier.clone();
  std::vector<float> weights(classifier.parameter_count());
  classifier.initialize(weights, 6);
  const batch images = image_batch(6, 10, 4, rng);
  CHECK(classifier_copy->evaluate(weights, images) == classifier.evaluate(weights, images));
}

TEST_CASE("MLP layout, signature, initialisation and accuracy") {
  mlp m(mlp_config{});
  CHECK(m.parameter_count() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  CHECK(m.signature() == "mlp(inputs=784,hidden=[256,128],classes=10)");
  CHECK(make_mlp({.inputs = 3, .hidden = {}, .classes = 2})->signature() ==
        "mlp(inputs=3,hidden=[],classes=2)");
  std::vector<float> a(m.parameter_count()), b(a.size());
  m.initialize(a, 7);
  m.initialize(b, 7);
  CHECK(a == b);

  // Accuracy counts the arg-max class: a linear model that copies its inputs to the logits
  // gets every example whose largest feature is at the target index.
  mlp identity({.inputs = 3, .hidden = {}, .classes = 3});
  std::vector<float> eye{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0};
  batch input;
  input.examples = 4;
  input.features = {5, 1, 0, 0, 2, 1, 0, 0, 3, 1, 2, 0};
  input.targets = {0, 1, 2, 2};
  CHECK(identity.accuracy(eye, input) == 0.75);
}

TEST_CASE("bad configurations are rejected with a message naming the problem") {
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no exception";
  };
  CHECK(message([] { gpt({.heads = 3}); }) ==
        "gpt config: width 128 is not divisible by heads 3");
  CHECK(message([] { make_gpt({.layers = 0}); }) == "gpt config: layers must be positive, got 0");
  CHECK(message([] { gpt({.vocab = -1}); }) == "gpt config: vocab must be positive, got -1");
  CHECK(message([] { mlp({.hidden = {64, 0}}); }) ==
        "mlp config: hidden[1] must be positive, got 0");
  CHECK(message([] { make_mlp({.classes = 0}); }) == "mlp config: classes must be positive, got 0");
}

TEST_CASE("bad batches and buffers are rejected with a message naming the problem") {
  std::mt19937 rng(13);
  gpt m({.vocab = 20, .context = 8, .layers = 1, .heads = 2, .width = 8});
  std::vector<float> parameters(m.parameter_count()), gradients(parameters.size());
  m.initialize(parameters, 1);
  auto message = [&](const batch& input) -> std::string {
    try {
      m.forward_backward(parameters, input, gradients);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no exception";
  };
  const batch good = token_batch(2, 8, 20, rng);
  CHECK(message(good) == "no exception");

  batch b = good;
  b.tokens[3] = 20;
  CHECK(message(b) == "gpt: batch token 20 at index 3 is outside the vocabulary [0, 20)");
  b = good;
  b.targets[15] = -1;
  CHECK(message(b) == "gpt: batch target -1 at index 15 is outside the vocabulary [0, 20)");
  b = good;
  b.targets.pop_back();
  CHECK(message(b) == "gpt: batch has 15 targets for 16 tokens");
  b = good;
  b.examples = 3;
  CHECK(message(b) == "gpt: batch has 16 tokens, not a multiple of its 3 examples");
  CHECK(message(token_batch(1, 9, 20, rng)) == "gpt: batch sequence length 9 exceeds the context 8");
  CHECK(message(batch{}) == "gpt: batch is empty");

  std::vector<float> short_gradients(gradients.size() - 1);
  CHECK_THROWS_WITH_AS(m.forward_backward(parameters, good, short_gradients),
                       ("gpt: got " + std::to_string(short_gradients.size()) +
                        " gradients, expected " + std::to_string(gradients.size())).c_str(),
                       std::invalid_argument);
  CHECK_THROWS_AS(m.evaluate(std::span(parameters).first(10), good), std::invalid_argument);
  CHECK_THROWS_AS(m.initialize(short_gradients, 1), std::invalid_argument);

  mlp classifier({.inputs = 4, .hidden = {3}, .classes = 2});
  std::vector<float> weights(classifier.parameter_count());
  batch images = image_batch(3, 4, 2, rng);
  images.features.pop_back();
  CHECK_THROWS_WITH_AS(classifier.evaluate(weights, images),
                       "mlp: batch has 11 features, expected 3 examples x 4 inputs",
                       std::invalid_argument);
  images = image_batch(3, 4, 2, rng);
  images.targets[1] = 2;
  CHECK_THROWS_WITH_AS(classifier.evaluate(weights, images),
                       "mlp: batch target 2 at index 1 is outside the classes [0, 2)",
                       std::invalid_argument);
}

TEST_CASE("memory estimates: parameter counts from the config match the models, absurd sizes stay finite") {
  for (const gpt_config& config : {gpt_config{}, gpt_config{.vocab = 50, .context = 7, .layers = 3, .heads = 2,
                                                              .width = 6, .tied_head = false}}) {
    CHECK(gpt_parameter_estimate(config) == static_cast<double>(gpt(config).parameter_count()));
    CHECK(gpt_activation_bytes(config, 8) == doctest::Approx(2 * gpt_activation_bytes(config, 4)));
  }
  for (const mlp_config& config : {mlp_config{}, mlp_config{.inputs = 3, .hidden = {5, 7, 2}, .classes = 4}}) {
    CHECK(mlp_parameter_estimate(config) == static_cast<double>(mlp(config).parameter_count()));
    CHECK(mlp_activation_bytes(config, 6) > 0);
  }
  const gpt_config absurd{.context = 1 << 20, .layers = 1 << 20, .heads = 1 << 20, .width = 1 << 30};
  CHECK(std::isfinite(gpt_activation_bytes(absurd, 1e6)));
  CHECK(gpt_parameter_estimate(absurd) > 1e20);

  // 4 workers of a 1000-parameter model: 4 fp32 buffers each and the initial parameters.
  CHECK(worker_buffer_bytes(1000, 4) == 17 * 4 * 1000);
  CHECK(available_memory_bytes() > 0);
  CHECK_NOTHROW(require_memory(1, "a byte"));
  CHECK_THROWS_WITH_AS(require_memory(1e30, "--width 7"), doctest::Contains("--width 7: needs about 1.0e+12 EB"),
                       std::invalid_argument);
  CHECK(format_bytes(999) == "999 bytes");
  CHECK(format_bytes(1.5e9) == "1.5 GB");
}
