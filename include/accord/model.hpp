#pragma once
// Public embedder API: a model is a pure function of one flat parameter buffer (llm.c style).
// It owns only scratch memory (activations), so the framework decides where parameters and
// gradients live: a compute actor can run on parameters that the communicator is not touching.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace accord {

// One micro-batch. Classifiers use `features` (examples x width) and one target per example;
// language models use `tokens` (examples x context) and one target per token.
struct batch {
  std::size_t examples = 0;
  std::vector<float> features;
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> targets;

  // What throughput is counted in: tokens for a language model, images for a classifier.
  std::size_t items() const { return targets.size(); }
};

class model {
public:
  virtual ~model() = default;

  // A description of the architecture; two workers may train together only if equal.
  virtual std::string signature() const = 0;
  virtual std::size_t parameter_count() const = 0;

  // Fills `parameters` (size parameter_count()) with the model's seeded initialisation.
  virtual void initialize(std::span<float> parameters, std::uint64_t seed) const = 0;

  // Mean loss over the batch; overwrites `gradients` with d(mean loss)/d(parameters).
  virtual double forward_backward(std::span<const float> parameters, const batch& input,
                                  std::span<float> gradients) = 0;

  // Accumulate mode: as forward_backward, but adds d(mean loss)/d(parameters) to `gradients`
  // (a running sum over micro-batches) instead of overwriting it. Workers sum micro-batches
  // straight into their accumulation buffer with it, so they keep no gradient buffer of their
  // own. The default runs forward_backward into a scratch buffer of the model's and adds that;
  // a model whose backward pass sums into its gradients anyway (llm.c style) overrides it and
  // needs no scratch. The result may differ from forward_backward-then-add in rounding only.
  virtual double accumulate_gradients(std::span<const float> parameters, const batch& input,
                                      std::span<float> gradients) {
    accumulate_scratch_.resize(gradients.size());
    const double loss = forward_backward(parameters, input, accumulate_scratch_);
    for (std::size_t i = 0; i < gradients.size(); ++i) gradients[i] += accumulate_scratch_[i];
    return loss;
  }

  // Mean loss over the batch, no gradients.
  virtual double evaluate(std::span<const float> parameters, const batch& input) = 0;

  // An independent instance (own scratch memory) for another compute thread.
  virtual std::unique_ptr<model> clone() const = 0;

private:
  std::vector<float> accumulate_scratch_;  // the default accumulate_gradients' gradient
};

// A data set seen as an endless, seeded, shuffled stream of examples. Position p always maps
// to the same example, so sharding, replay and resume are arithmetic on positions.
// Implementations are immutable after construction and safe to share between threads.
class dataset {
public:
  virtual ~dataset() = default;
  virtual std::string describe() const = 0;
  // Distinct examples in one pass (an "epoch" of the stream).
  virtual std::uint64_t size() const = 0;
  // Examples at stream positions [first, first + count).
  virtual batch examples(std::uint64_t first, std::size_t count) const = 0;
};

// Worker `rank` of `world` takes micro-batch k from positions [(k*world + rank)*size, +size):
// workers see disjoint streams, and one worker with world*size examples sees their union.
// A resumed job adds `offset`, the positions its predecessor consumed.
struct micro_batch_stream {
  int rank = 0;
  int world = 1;
  std::size_t size = 1;
  std::uint64_t offset = 0;
  std::uint64_t first_position(std::uint64_t k) const {
    return offset + (k * static_cast<std::uint64_t>(world) + static_cast<std::uint64_t>(rank)) * size;
  }
};

}  // namespace accord
