#pragma once
// A decoder-only byte-level transformer (GPT-2 shape) over one flat parameter buffer, forward
// and backward written by hand with the functions of models/layers.hpp.
//
// Parameter layout (offsets fixed by the config, see layout()), C = width, V = vocab:
//   token_embedding     (V, C)
//   position_embedding  (context, C)
//   for each block l = 0 .. layers-1, contiguously, named "block<l>.<tensor>":
//     ln1_gain (C), ln1_bias (C)
//     qkv_weight (3C, C), qkv_bias (3C)          query, key, value rows stacked in that order
//     attn_proj_weight (C, C), attn_proj_bias (C)
//     ln2_gain (C), ln2_bias (C)
//     fc_weight (4C, C), fc_bias (4C)
//     fc_proj_weight (C, 4C), fc_proj_bias (C)
//   final_ln_gain (C), final_ln_bias (C)
//   head_weight (V, C)                            only when the head is untied
// Weights are (outputs, inputs) row-major; a tied head reuses token_embedding.
//
// Batch: `tokens` holds examples x T inputs and `targets` the next token of each, for any
// 1 <= T <= context. The loss is the mean next-token cross-entropy over all positions.
//
// Threading: matrix products call OpenBLAS, whose thread pool is the caller's to size
// (openblas_set_num_threads); several compute threads each running a clone usually want 1.
#include <accord/model.hpp>

#include "models/layers.hpp"
#include "models/parameter_layout.hpp"

#include <memory>
#include <vector>

namespace accord {

struct gpt_config {
  int vocab = 256;
  int context = 64;
  int layers = 2;
  int heads = 4;
  int width = 128;
  bool tied_head = true;
};

// The sequence length T of a batch valid for `config`: tokens and targets both examples × T,
// 1 <= T <= context, every id inside the vocabulary. Otherwise std::invalid_argument, its
// message starting with `who` (the CPU and CUDA models check batches the same way).
int gpt_sequence_length(const batch& input, const gpt_config& config, const std::string& who);

class gpt final : public model {
public:
  // Throws std::invalid_argument when a size is not positive or heads do not divide width.
  // `round_operands`, when given, rounds every matrix product's operands (weights, inputs,
  // output gradients; inside attention as layers::attention_forward says) on copies, and the
  // bias gradients are taken from the unrounded output gradients: the bf16 compute of the CUDA
  // gpt emulated on the cpu (make_bf16_reference_gpt). Not part of the signature.
  explicit gpt(const gpt_config& config, layers::operand_rounding round_operands = nullptr);

  std::string signature() const override;
  std::size_t parameter_count() const override { return layout_.total(); }
  void initialize(std::span<float> parameters, std::uint64_t seed) const override;
  double forward_backward(std::span<const float> parameters, const batch& input,
                          std::span<float> gradients) override;
  double accumulate_gradients(std::span<const float> parameters, const batch& input,
                              std::span<float> gradients) override;
  double evaluate(std::span<const float> parameters, const batch& input) override;
  std::unique_ptr<model> clone() const override;

  const gpt_config& config() const { return config_; }
  const parameter_layout& layout() const { return layout_; }

private:
  struct block_offsets {
    std::size_t ln1_gain, ln1_bias, qkv_weight, qkv_bias, attn_proj_weight, attn_proj_bias;
    std::size_t ln2_gain, ln2_bias, fc_weight, fc_bias, fc_proj_weight, fc_proj_bias;
  };
  // Activations of one forward pass, kept for the backward pass; resized per batch shape.
  struct activations {
    std::vector<float> stream;          // (layers + 1, rows, C): input of each block, then output
    std::vector<float> attn_residual;   // (layers, rows, C): stream after each attention branch
    std::vector<float> ln1, ln1_mean, ln1_rstd;
    std::vector<float> qkv;             // (layers, rows, 3C)
    std::vector<float> attn_probs;      // (layers, examples, heads, T, T)
    std::vector<float> attn_out;        // (layers, rows, C), before the output projection
    std::vector<float> ln2, ln2_mean, ln2_rstd;
    std::vector<float> fc, fc_gelu;     // (layers, rows, 4C)
    std::vector<float> final_ln, final_mean, final_rstd;
    std::vector<float> probs;           // (rows, V)
  };
  // Gradient scratch for the activations of one block, reused from block to block.
  struct activation_gradients {
    std::vector<float> stream, ln, qkv, attn_out, fc, fc_gelu, logits;
  };

  // Validates the batch and parameter span, sizes scratch; returns the sequence length T.
  int prepare(std::span<const float> parameters, const batch& input);
  double forward(const float* parameters, const batch& input, int sequence);
  // The products of layers.hpp, with round_operands_ applied when set.
  const float* operand(int slot, const float* values, std::size_t count);
  void product_forward(float* out, const float* in, const float* weight, const float* bias,
                       std::size_t rows, int inputs, int outputs);
  void product_backward(float* din, float* dweight, float* dbias, const float* dout,
                        const float* in, const float* weight, std::size_t rows, int inputs,
                        int outputs);

  gpt_config config_;
  parameter_layout layout_;
  std::size_t token_embedding_ = 0, position_embedding_ = 0;
  std::vector<block_offsets> blocks_;
  std::size_t final_ln_gain_ = 0, final_ln_bias_ = 0;
  std::size_t head_weight_ = 0;  // equals token_embedding_ when the head is tied
  activations acts_;
  activation_gradients grads_;
  layers::operand_rounding round_operands_ = nullptr;
  std::vector<float> rounded_[3];  // rounded operand copies: input, weight, output gradient
};

std::unique_ptr<model> make_gpt(const gpt_config& config);

// Sizes of a GPT of this shape without building one, as doubles (models/memory.hpp): its
// parameter count, and the bytes one instance allocates for a forward and backward pass over
// `examples` full-context sequences (activations kept for the backward pass, and its scratch).
double gpt_parameter_estimate(const gpt_config& config);
double gpt_activation_bytes(const gpt_config& config, double examples);

}  // namespace accord
