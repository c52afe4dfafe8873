#pragma once
// The building blocks of the built-in models, written plainly over raw row-major float arrays
// (llm.c style) so each one can be gradient-checked on its own.
//
// Conventions shared by every function here:
// - `rows` counts independent vectors (examples x positions); `width` is their length.
// - Backward functions ADD into their gradient outputs; callers zero them first. That makes
//   residual branches and tied weights (one table used twice) accumulate without extra code.
// - Matrix products go through cblas_sgemm. OpenBLAS may use its own thread pool for them;
//   these functions set no threading policy, the caller does (openblas_set_num_threads).
#include <cstdint>
#include <span>

namespace accord::layers {

// out[r, :] = token_table[tokens[r], :] + position_table[r % sequence, :]
// tokens: examples*sequence ids, tables: (vocab, width) and (context >= sequence, width).
void embedding_forward(float* out, const std::int32_t* tokens, const float* token_table,
                       const float* position_table, int examples, int sequence, int width);
void embedding_backward(float* dtoken_table, float* dposition_table, const float* dout,
                        const std::int32_t* tokens, int examples, int sequence, int width);

// Normalises each row to zero mean and unit variance, then applies gain and bias.
// mean and rstd (1/stddev) are per-row outputs the backward pass needs.
void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* gain,
                       const float* bias, int rows, int width);
void layernorm_backward(float* din, float* dgain, float* dbias, const float* dout,
                        const float* in, const float* gain, const float* mean,
                        const float* rstd, int rows, int width);

// out[rows, outputs] = in[rows, inputs] * weight[outputs, inputs]^T + bias[outputs].
// bias may be null (no bias). In the backward pass din may be null when the input needs
// no gradient (a model's first layer) and dbias null when there is no bias.
void matmul_forward(float* out, const float* in, const float* weight, const float* bias,
                    int rows, int inputs, int outputs);
void matmul_backward(float* din, float* dweight, float* dbias, const float* dout,
                     const float* in, const float* weight, int rows, int inputs, int outputs);
// dbias[outputs] += the column sums of dout[rows, outputs] (matmul_backward's bias gradient).
void bias_backward(float* dbias, const float* dout, int rows, int outputs);

// Rounds matrix product operands in place (the CUDA gpt's bf16 compute, emulated); null: none.
using operand_rounding = void (*)(std::span<float> operand);

// Causal multi-head self-attention. qkv: (examples, sequence, 3*width) holding the query,
// key and value of each position side by side; out: (examples, sequence, width).
// probs: (examples, heads, sequence, sequence) softmax weights, kept for the backward pass.
// `round`, when given, rounds the operands made inside (a copy of the probabilities for the
// value products, the score gradients); rounding qkv and dout is the caller's.
void attention_forward(float* out, float* probs, const float* qkv, int examples, int sequence,
                       int width, int heads, operand_rounding round = nullptr);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        int examples, int sequence, int width, int heads,
                        operand_rounding round = nullptr);

// GELU, tanh approximation (as GPT-2), elementwise over `count` values.
void gelu_forward(float* out, const float* in, int count);
void gelu_backward(float* din, const float* dout, const float* in, int count);

// ReLU elementwise over `count` values; the backward pass reads the forward output.
void relu_forward(float* out, const float* in, int count);
void relu_backward(float* din, const float* dout, const float* out, int count);

// Softmax over each row of logits (rows, classes) into probs, returns the mean over rows of
// -log probs[r, targets[r]]. Targets must lie in [0, classes) (callers validate).
// probs may be the logits buffer itself (softmax in place).
double softmax_crossentropy_forward(float* probs, const float* logits,
                                    const std::int32_t* targets, int rows, int classes);
// Gradient of that mean loss with respect to the logits.
void softmax_crossentropy_backward(float* dlogits, const float* probs,
                                   const std::int32_t* targets, int rows, int classes);

}  // namespace accord::layers
