#pragma once
// The GPT of models/gpt.hpp on a CUDA device (CUDA builds only; make_gpt_on in
// gpu/model_factory.hpp is the way to get one in any build). Same config, signature,
// initialisation and flat parameter layout as the CPU gpt, so parameters, gradients and
// workers move between devices unchanged and CPU and GPU workers can train together.
//
// memory() is the model's device: accumulate_gradients_at and evaluate_at on memory of that
// device copy no tensor (only the batch's tokens and the loss cross). The host forms stage:
// each call copies the parameters to the device (always: the caller's optimizer updates them
// in place between calls, so neither the pointer nor the size says whether they changed), runs
// on the device, and copies the whole gradient back (accumulate_gradients first uploads the
// running sum and adds on the device). Activations stay on the device, grown to the largest
// batch shape seen.
//
// Arithmetic: fp32 throughout (cuBLAS without TF32), kernels without atomics, so a given batch
// gives bitwise identical results on every call; against the CPU gpt the differences come from
// summation order only (see tests/test_cuda_gpt.cpp for the tolerances).
//
// bf16 compute (compute_precision::bf16): the model keeps a bf16 copy of the parameters on the
// device, rounded from the fp32 parameters it is given by a kernel on its own stream at the
// start of every call (after the host form's upload, before the first product, in stream
// order): the interface does not say when parameters changed (the caller updates them in place
// or swaps in another buffer), so each call rounds, one pass of 6 bytes per parameter. The
// matrix products take bf16 operands with fp32 accumulation (gpu/cuda_layers.hpp); LayerNorm,
// softmax, the loss and the embeddings stay fp32, and the gradients are fp32, added into the
// caller's buffer as in fp32 compute. Against make_bf16_reference_gpt (the same rounding points
// on the cpu) the differences come from summation order and the bf16 roundings it moves.
//
// Threading: an instance runs on the CUDA device that was current when it was constructed, on
// its own stream, and may be called from any thread (one call at a time); clone() for more.
#include <accord/model.hpp>

#include "gpu/compute_precision.hpp"
#include "models/gpt.hpp"

#include <memory>

namespace accord {

class cuda_gpt final : public model {
public:
  // Throws std::invalid_argument for a bad config, std::runtime_error when CUDA fails (no device).
  explicit cuda_gpt(const gpt_config& config, compute_precision precision = compute_precision::fp32);
  ~cuda_gpt() override;

  std::string signature() const override { return reference_.signature(); }
  std::size_t parameter_count() const override { return reference_.parameter_count(); }
  void initialize(std::span<float> parameters, std::uint64_t seed) const override {
    reference_.initialize(parameters, seed);
  }
  double forward_backward(std::span<const float> parameters, const batch& input,
                          std::span<float> gradients) override;
  double accumulate_gradients(std::span<const float> parameters, const batch& input,
                              std::span<float> gradients) override;
  double evaluate(std::span<const float> parameters, const batch& input) override;
  memory_location memory() const override;
  double accumulate_gradients_at(device_span<const float> parameters, const batch& input,
                                 device_span<float> gradients) override;
  double evaluate_at(device_span<const float> parameters, const batch& input) override;
  std::unique_ptr<model> clone() const override;

  const gpt_config& config() const { return reference_.config(); }
  compute_precision precision() const { return precision_; }
  // Device memory this instance holds now: activations (grown to the largest batch seen),
  // staging for the host forms and, under bf16 compute, the parameters' bf16 copy and the
  // rounded operands' scratch.
  std::size_t device_bytes() const;
  const parameter_layout& layout() const { return reference_.layout(); }

private:
  struct device_state;

  // The CPU model, for the config checks, layout, signature and initialisation; its own
  // activation buffers stay empty because it never runs.
  gpt reference_;
  compute_precision precision_;
  std::unique_ptr<device_state> state_;

  // std::invalid_argument unless `where` is this model's device.
  void check_device_memory(const memory_location& where, const char* what) const;
  // forward_backward (`accumulate` false) and accumulate_gradients (true).
  double run_backward(std::span<const float> parameters, const batch& input, std::span<float> gradients,
                      bool accumulate);
};

}  // namespace accord
