// Short real training runs (one process, a plain loop, no actors): the built-in models learn
// from the real data sets with the real optimizers.
#include <doctest/doctest.h>

#include "data/fashion_mnist.hpp"
#include "data/text.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "optim/optimizer.hpp"

#include <cmath>
#include <numeric>
#include <vector>

using namespace accord;

namespace {

// Mean loss over `batches` consecutive micro-batches of `size` examples from position 0.
double held_out_loss(model& m, std::span<const float> parameters, const dataset& data,
                     std::size_t batches, std::size_t size) {
  double total = 0.0;
  for (std::size_t k = 0; k < batches; ++k)
    total += m.evaluate(parameters, data.examples(k * size, size));
  return total / batches;
}

// Trains with AdamW at a constant rate for `steps` micro-batches of `size` examples.
void train(model& m, std::vector<float>& parameters, const dataset& data, int steps,
           std::size_t size, float learning_rate) {
  // beta2 0.99 rather than 0.999: the second-moment estimate settles within a short run
  optimizer_config settings;
  settings.kind = "adamw";
  settings.learning_rate = learning_rate;
  settings.beta2 = 0.99f;
  auto optimizer = make_optimizer(settings, parameters.size());
  std::vector<float> gradients(parameters.size());
  const micro_batch_stream stream{.size = size};
  for (int k = 0; k < steps; ++k) {
    m.forward_backward(parameters, data.examples(stream.first_position(k), size), gradients);
    optimizer->step(parameters, gradients, learning_rate);
  }
}

}  // namespace

TEST_CASE("the GPT learns the default corpus: held-out loss beats any context-free model") {
  const gpt_config config{.context = 32, .layers = 2, .heads = 4, .width = 64};
  const auto train_split = load_default_corpus(config.context, true, 1);
  const auto held_out = load_default_corpus(config.context, false, 2);
  const std::size_t eval_batches = 8, eval_size = 16;

  // The best a model ignoring context can do: byte frequencies of the training split
  // (add-one smoothed), scored on the same held-out targets the GPT is scored on.
  std::vector<double> counts(256, 1.0);
  for (std::size_t i = 0; i < train_split->token_count(); ++i) counts[train_split->token(i)] += 1.0;
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  double unigram_loss = 0.0;
  for (std::size_t k = 0; k < eval_batches; ++k)
    for (std::int32_t target : held_out->examples(k * eval_size, eval_size).targets)
      unigram_loss -= std::log(counts[target] / total);
  unigram_loss /= double(eval_batches * eval_size * config.context);

  gpt m(config);
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, 3);
  const double before = held_out_loss(m, parameters, *held_out, eval_batches, eval_size);
  CHECK(before == doctest::Approx(std::log(256.0)).epsilon(0.02));
  train(m, parameters, *train_split, 500, 16, 3e-3f);
  const double after = held_out_loss(m, parameters, *held_out, eval_batches, eval_size);
  MESSAGE("GPT held-out loss " << before << " -> " << after << " (byte unigram model "
                               << unigram_loss << ")");
  CHECK(after < 3.0);
  CHECK(after < unigram_loss - 0.4);
}

TEST_CASE("the MLP reaches a sane Fashion-MNIST test accuracy") {
  const auto train_split = load_fashion_mnist(default_fashion_mnist_directory, true, 1);
  const auto test_split = load_fashion_mnist(default_fashion_mnist_directory, false, 2);
  mlp m(mlp_config{});
  std::vector<float> parameters(m.parameter_count());
  m.initialize(parameters, 3);

  const batch test = test_split->examples(0, test_split->size());
  const double chance = m.accuracy(parameters, test);
  train(m, parameters, *train_split, 500, 128, 1e-3f);
  const double accuracy = m.accuracy(parameters, test);
  MESSAGE("MLP test accuracy " << chance << " -> " << accuracy);
  CHECK(chance < 0.3);
  CHECK(accuracy > 0.82);
}
