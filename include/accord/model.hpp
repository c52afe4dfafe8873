#pragma once
// Public embedder API: a model is a pure function of one flat parameter buffer (llm.c style).
// It owns only scratch memory (activations), so the framework decides where parameters and
// gradients live: a compute actor can run on parameters that the communicator is not touching.
#include <accord/device_span.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
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

  // Where this model wants its parameters and gradients: the host for a CPU model, its GPU for
  // a CUDA model. A worker keeps its parameters and gradient sums there and calls the *_at
  // forms below with them, so nothing crosses PCIe per micro-batch.
  virtual memory_location memory() const { return {}; }

  // accumulate_gradients and evaluate on memory that may live on a device. Both spans must be
  // in the same memory; device memory must be of memory()'s device and have no writes pending
  // on other CUDA streams. A call returns once its results are written (the model's own stream
  // is synchronised). The defaults take host memory only and call the host forms; a model
  // whose memory() is a device overrides both.
  virtual double accumulate_gradients_at(device_span<const float> parameters, const batch& input,
                                         device_span<float> gradients) {
    require_host("accumulate_gradients_at", parameters.where, gradients.where);
    return accumulate_gradients(parameters.values, input, gradients.values);
  }
  virtual double evaluate_at(device_span<const float> parameters, const batch& input) {
    require_host("evaluate_at", parameters.where);
    return evaluate(parameters.values, input);
  }

  // An independent instance (own scratch memory) for another compute thread. The listener
  // below is not copied.
  virtual std::unique_ptr<model> clone() const = 0;

  // Gradient progress, for DDP's buckets (job_config::bucket_cap_mb): a model whose backward
  // runs from its last parameters to its first calls gradients_final_from(begin) whenever the
  // gradients [begin, parameter_count()) of the running accumulate call are written for good
  // (begin decreasing within a call, 0 at its end), so that a worker can start reducing them
  // while the rest of backward runs. The listener runs on the compute thread, inside the call.
  // Models that never call it simply have their gradients reduced after backward.
  using gradient_listener = std::function<void(std::size_t begin)>;
  void listen_to_gradients(gradient_listener listener) { gradient_listener_ = std::move(listener); }

protected:
  // std::invalid_argument naming the model and the memory it was handed, unless both are host.
  void require_host(const char* call, const memory_location& parameters,
                    const memory_location& gradients = {}) const {
    if (parameters.on_host() && gradients.on_host()) return;
    const memory_location& device = parameters.on_host() ? gradients : parameters;
    throw std::invalid_argument(signature() + ": " + call + " takes host memory only, got " +
                                (parameters.on_host() ? "gradients" : "parameters") + " in " +
                                describe_location(device));
  }

  void gradients_final_from(std::size_t begin) const {
    if (gradient_listener_) gradient_listener_(begin);
  }

private:
  gradient_listener gradient_listener_;
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
