#pragma once
// The layer functions of models/layers.hpp on a CUDA device (CUDA builds only), for the CUDA
// GPT. Same shapes, row-major layouts and conventions as the CPU functions: backward functions
// ADD into their gradient outputs, callers zero them first. Everything is queued on the
// context's stream; matrix products go through cuBLAS in full fp32 (no TF32), so results match
// the CPU up to summation order. No kernel uses atomics: gradients are bitwise reproducible.
//
// bf16 compute (context::bf16_rounding set): every matrix product takes bf16 operands and
// accumulates in fp32 (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F) into fp32 outputs.
// Weights come as the caller's bf16 copy; fp32 activations and gradients that are operands are
// rounded to bf16 (round to nearest even, the wire's to_bf16) by a kernel on the context's
// stream into its scratch slots, right before the product. Everything else (LayerNorm,
// softmax, GELU, the loss, bias and LayerNorm parameter gradients) stays fp32. The CPU twin of
// these rounding points is the gpt with bf16 operand rounding (make_bf16_reference_gpt).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace accord {
class kernels;
}

namespace accord::cuda_layers {

// Throws std::runtime_error naming the call and cuBLAS's description of the status.
void cublas_check(cublasStatus_t status, const char* what);

// The stream every function queues on, and a cuBLAS handle bound to that stream.
struct context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  // bf16 compute: kernels on `stream` that round operands; null for fp32 compute.
  kernels* bf16_rounding = nullptr;
  // Where the rounded operands go (bf16 compute), three at a time at most; the caller sizes
  // them with bf16_scratch_sizes.
  std::array<std::span<std::uint16_t>, 3> bf16_scratch{};
};

// The scratch slots bf16 compute needs for a GPT pass of `rows` rows, `width` C, `vocab` V and
// `attention_scores` (examples*heads*T*T) score entries.
std::array<std::size_t, 3> bf16_scratch_sizes(std::size_t rows, std::size_t width, std::size_t vocab,
                                              std::size_t attention_scores);

// A weight matrix: its fp32 values, and its bf16 copy (used, and required, under bf16 compute).
struct weight {
  const float* fp32 = nullptr;
  const std::uint16_t* bf16 = nullptr;
};

// out[r, :] = token_table[tokens[r], :] + position_table[r % sequence, :]; tokens on the device.
void embedding_forward(const context& c, float* out, const std::int32_t* tokens,
                       const float* token_table, const float* position_table, int examples,
                       int sequence, int width);
// The token rows are summed per distinct token in a fixed order (no atomics): `positions` lists
// the rows r = 0 .. examples*sequence-1 grouped by token, group g (token token_ids[g]) being
// positions[group_starts[g] .. group_starts[g+1]); see token_groups in cuda_gpt.cpp.
void embedding_backward(const context& c, float* dtoken_table, float* dposition_table,
                        const float* dout, const std::int32_t* positions,
                        const std::int32_t* token_ids, const std::int32_t* group_starts,
                        int groups, int examples, int sequence, int width);

void layernorm_forward(const context& c, float* out, float* mean, float* rstd, const float* in,
                       const float* gain, const float* bias, int rows, int width);
void layernorm_backward(const context& c, float* din, float* dgain, float* dbias,
                        const float* dout, const float* in, const float* gain, const float* mean,
                        const float* rstd, int rows, int width);

// out[rows, outputs] = in[rows, inputs] * weight[outputs, inputs]^T + bias (bias may be null).
void matmul_forward(const context& c, float* out, const float* in, weight w, const float* bias,
                    int rows, int inputs, int outputs);
// din may be null (no input gradient), dbias null (no bias).
void matmul_backward(const context& c, float* din, float* dweight, float* dbias,
                     const float* dout, const float* in, weight w, int rows, int inputs,
                     int outputs);

// Causal multi-head self-attention, layouts as in layers::attention_forward. The backward
// pass needs `dscores`, scratch of examples*heads*sequence*sequence floats. Under bf16
// compute the softmax runs on fp32 scores; its probabilities (and in the backward pass the
// score gradients) are rounded to bf16 for the products that follow.
void attention_forward(const context& c, float* out, float* probs, const float* qkv,
                       int examples, int sequence, int width, int heads);
void attention_backward(const context& c, float* dqkv, float* dscores, const float* dout,
                        const float* qkv, const float* probs, int examples, int sequence,
                        int width, int heads);

// GELU in the CPU's form: x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)).
void gelu_forward(const context& c, float* out, const float* in, int count);
void gelu_backward(const context& c, float* din, const float* dout, const float* in, int count);

// target += addend, elementwise.
void add_into(const context& c, float* target, const float* addend, int count);

// Row softmax of logits into probs (may be the logits buffer itself); row_losses[r] =
// -log probs[r, targets[r]] in log-sum-exp form, in double like the CPU's sum. The caller
// averages them on the host. Targets must lie in [0, classes).
void softmax_crossentropy_forward(const context& c, float* probs, double* row_losses,
                                  const float* logits, const std::int32_t* targets, int rows,
                                  int classes);
// dlogits = d(mean loss)/d(logits). Unlike the other backward functions it OVERWRITES dlogits,
// so it may be the probs buffer itself (the probabilities are not needed afterwards).
void softmax_crossentropy_backward(const context& c, float* dlogits, const float* probs,
                                   const std::int32_t* targets, int rows, int classes);

}  // namespace accord::cuda_layers
