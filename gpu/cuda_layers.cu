// CUDA twins of models/layers.cpp. cuBLAS is column-major: a row-major (m, n) matrix is its
// column-major transpose, so each row-major product C = A B below is issued as C^T = B^T A^T.
// Row-wise work (layernorm, softmax) takes one warp per row; per-column sums (bias, gain and
// position gradients) take one thread column per output with a fixed-order tree reduction, so
// nothing depends on the order in which blocks run.
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_layers.hpp"
#include "gpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace accord::cuda_layers {
namespace {

using std::size_t;
constexpr float layernorm_epsilon = 1e-5f;  // as models/layers.cpp
constexpr float gelu_scale = 0.7978845608028654f;
constexpr float gelu_cubic = 0.044715f;
constexpr unsigned warp = 32;
constexpr unsigned block_size = 256;
constexpr unsigned rows_per_block = block_size / warp;
constexpr unsigned column_block_rows = 8;  // column sums: blocks of warp x 8 threads

unsigned blocks_for(size_t threads, unsigned per_block = block_size) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

template <class... Parameters, class... Arguments>
void launch(const context& c, dim3 grid, dim3 block, const char* name,
            void (*kernel)(Parameters...), Arguments... arguments) {
  if (grid.x == 0 || grid.y == 0) return;
  kernel<<<grid, block, 0, c.stream>>>(arguments...);
  cuda_check(cudaGetLastError(), name);
}

__device__ size_t global_index() { return blockIdx.x * size_t{blockDim.x} + threadIdx.x; }

// The row a warp of a warp-per-row kernel works on, and the lane within it.
__device__ size_t warp_row() { return blockIdx.x * size_t{blockDim.x / warp} + threadIdx.x / warp; }
__device__ unsigned lane() { return threadIdx.x % warp; }

__device__ float warp_sum(float v) {
  for (unsigned offset = warp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ float warp_max(float v) {
  for (unsigned offset = warp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces one value per thread of a one-dimensional block; every thread gets the result.
template <class Warp_reduce>
__device__ float block_reduce(float v, float identity, Warp_reduce reduce) {
  __shared__ float partial[warp];
  v = reduce(v);
  if (lane() == 0) partial[threadIdx.x / warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / warp ? partial[threadIdx.x] : identity;
  if (threadIdx.x < warp) v = reduce(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  const float result = partial[0];
  __syncthreads();  // partial is reused by the next call
  return result;
}

// Sums `value` over the column_block_rows threads of a column (threadIdx.y) of a warp x 8
// block; the result is valid in the threads with threadIdx.y == 0.
__device__ float column_block_sum(float value) {
  __shared__ float partial[column_block_rows][warp + 1];
  partial[threadIdx.y][threadIdx.x] = value;
  __syncthreads();
  for (unsigned half = column_block_rows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  return partial[0][threadIdx.x];
}

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* token_table,
                                         const float* position_table, size_t rows, int sequence, int width) {
  const size_t i = global_index();
  if (i >= rows * width) return;
  const size_t r = i / width, column = i % width;
  out[i] = token_table[size_t(tokens[r]) * width + column] + position_table[(r % sequence) * width + column];
}

__global__ void token_embedding_backward_kernel(float* dtoken_table, const float* dout,
                                                const std::int32_t* positions, const std::int32_t* token_ids,
                                                const std::int32_t* group_starts, int width) {
  const unsigned group = blockIdx.x;
  const unsigned column = blockIdx.y * blockDim.x + threadIdx.x;
  if (column >= unsigned(width)) return;
  float sum = 0.0f;
  for (int k = group_starts[group]; k < group_starts[group + 1]; ++k)
    sum += dout[size_t(positions[k]) * width + column];
  dtoken_table[size_t(token_ids[group]) * width + column] += sum;
}

__global__ void position_embedding_backward_kernel(float* dposition_table, const float* dout, int examples,
                                                   int sequence, int width) {
  const size_t i = global_index();  // (position, column) of the table
  if (i >= size_t(sequence) * width) return;
  float sum = 0.0f;
  for (int b = 0; b < examples; ++b) sum += dout[size_t(b) * sequence * width + i];
  dposition_table[i] += sum;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* in, const float* gain,
                                         const float* bias, int rows, int width) {
  const size_t row = warp_row();
  if (row >= size_t(rows)) return;  // whole warps leave together
  const float* x = in + row * width;
  float* y = out + row * width;
  float sum = 0.0f;
  for (int i = lane(); i < width; i += warp) sum += x[i];
  const float m = warp_sum(sum) / width;
  float squares = 0.0f;
  for (int i = lane(); i < width; i += warp) squares += (x[i] - m) * (x[i] - m);
  const float s = 1.0f / sqrtf(warp_sum(squares) / width + layernorm_epsilon);
  for (int i = lane(); i < width; i += warp) y[i] = (x[i] - m) * s * gain[i] + bias[i];
  if (lane() == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_input_backward_kernel(float* din, const float* dout, const float* in, const float* gain,
                                                const float* mean, const float* rstd, int rows, int width) {
  const size_t row = warp_row();
  if (row >= size_t(rows)) return;
  const float* x = in + row * width;
  const float* dy = dout + row * width;
  float* dx = din + row * width;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0.0f, dnorm_dot_norm = 0.0f;
  for (int i = lane(); i < width; i += warp) {
    const float dnorm = dy[i] * gain[i];
    dnorm_mean += dnorm;
    dnorm_dot_norm += dnorm * (x[i] - m) * s;
  }
  dnorm_mean = warp_sum(dnorm_mean) / width;
  dnorm_dot_norm = warp_sum(dnorm_dot_norm) / width;
  for (int i = lane(); i < width; i += warp) {
    const float norm = (x[i] - m) * s;
    dx[i] += (dy[i] * gain[i] - dnorm_mean - norm * dnorm_dot_norm) * s;
  }
}

// dgain[i] += sum_r norm[r, i] dout[r, i] and dbias[i] += sum_r dout[r, i].
__global__ void layernorm_parameter_backward_kernel(float* dgain, float* dbias, const float* dout, const float* in,
                                                    const float* mean, const float* rstd, int rows, int width) {
  const unsigned column = blockIdx.x * warp + threadIdx.x;
  float gain_sum = 0.0f, bias_sum = 0.0f;
  if (column < unsigned(width))
    for (size_t r = threadIdx.y; r < size_t(rows); r += column_block_rows) {
      const size_t i = r * width + column;
      gain_sum += (in[i] - mean[r]) * rstd[r] * dout[i];
      bias_sum += dout[i];
    }
  gain_sum = column_block_sum(gain_sum);
  __syncthreads();  // the shared partials are reused
  bias_sum = column_block_sum(bias_sum);
  if (threadIdx.y == 0 && column < unsigned(width)) {
    dgain[column] += gain_sum;
    dbias[column] += bias_sum;
  }
}

__global__ void column_sums_kernel(float* into, const float* matrix, int rows, int columns) {
  const unsigned column = blockIdx.x * warp + threadIdx.x;
  float sum = 0.0f;
  if (column < unsigned(columns))
    for (size_t r = threadIdx.y; r < size_t(rows); r += column_block_rows) sum += matrix[r * columns + column];
  sum = column_block_sum(sum);
  if (threadIdx.y == 0 && column < unsigned(columns)) into[column] += sum;
}

__global__ void broadcast_rows_kernel(float* out, const float* row, size_t rows, int width) {
  const size_t i = global_index();
  if (i < rows * width) out[i] = row[i % width];
}

// Rows are (example, head, query t) of T x T score squares; key j > t is masked out.
__global__ void causal_softmax_kernel(float* probs, size_t rows, int sequence) {
  const size_t row = warp_row();
  if (row >= rows) return;
  const int t = int(row % sequence);
  float* p = probs + row * sequence;
  float peak = -INFINITY;
  for (int j = lane(); j <= t; j += warp) peak = fmaxf(peak, p[j]);
  peak = warp_max(peak);
  float sum = 0.0f;
  for (int j = lane(); j <= t; j += warp) {
    p[j] = expf(p[j] - peak);
    sum += p[j];
  }
  const float inverse = 1.0f / warp_sum(sum);
  for (int j = lane(); j < sequence; j += warp) p[j] = j <= t ? p[j] * inverse : 0.0f;
}

// dscores = probs * (dprobs - <probs, dprobs>) in place over dprobs, zero where masked.
__global__ void causal_softmax_backward_kernel(float* dscores, const float* probs, size_t rows, int sequence) {
  const size_t row = warp_row();
  if (row >= rows) return;
  const int t = int(row % sequence);
  const float* p = probs + row * sequence;
  float* d = dscores + row * sequence;
  float dot = 0.0f;
  for (int j = lane(); j <= t; j += warp) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane(); j < sequence; j += warp) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

__device__ float gelu_gate(float x) {
  const float u = gelu_scale * (x + gelu_cubic * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

__global__ void gelu_forward_kernel(float* out, const float* in, size_t count) {
  const size_t i = global_index();
  if (i < count) out[i] = in[i] * gelu_gate(in[i]);
}

__global__ void gelu_backward_kernel(float* din, const float* dout, const float* in, size_t count) {
  const size_t i = global_index();
  if (i >= count) return;
  const float x = in[i];
  const float s = gelu_gate(x);
  const float du = gelu_scale * (1.0f + 3.0f * gelu_cubic * x * x);
  din[i] += (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
}

// One block per row of logits.
__global__ void crossentropy_forward_kernel(float* probs, double* row_losses, const float* logits,
                                            const std::int32_t* targets, int classes) {
  const size_t row = blockIdx.x;
  const float* z = logits + row * classes;
  float* p = probs + row * classes;
  // Read before the in-place softmax overwrites it; the reductions below synchronise first.
  const float target_logit = z[targets[row]];
  float peak = -INFINITY;
  for (int c = threadIdx.x; c < classes; c += blockDim.x) peak = fmaxf(peak, z[c]);
  peak = block_reduce(peak, -INFINITY, warp_max);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < classes; c += blockDim.x) {
    p[c] = expf(z[c] - peak);
    sum += p[c];
  }
  sum = block_reduce(sum, 0.0f, warp_sum);
  const float inverse = 1.0f / sum;
  for (int c = threadIdx.x; c < classes; c += blockDim.x) p[c] *= inverse;
  if (threadIdx.x == 0) row_losses[row] = double(peak) + log(double(sum)) - double(target_logit);
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const std::int32_t* targets,
                                             size_t rows, int classes) {
  const size_t i = global_index();
  if (i >= rows * classes) return;
  const float per_row = 1.0f / rows;
  const size_t r = i / classes;
  const float d = __fmul_rn(probs[i], per_row);
  dlogits[i] = int(i % classes) == targets[r] ? d - per_row : d;
}

}  // namespace

void cublas_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(status));
}

namespace {

const float one = 1.0f, zero = 0.0f;

bool bf16_compute(const context& c) { return c.bf16_rounding != nullptr; }

// A matrix product operand: fp32 values, or under bf16 compute their bf16 rounding.
using operand = const void*;

// `values` as an operand: as they are, or rounded (queued on the stream) into scratch `slot`.
operand operand_of(const context& c, int slot, const float* values, size_t count) {
  if (!bf16_compute(c)) return values;
  const std::span<std::uint16_t> scratch = c.bf16_scratch[size_t(slot)];
  if (scratch.size() < count)
    throw std::logic_error("cuda_layers: bf16 scratch slot " + std::to_string(slot) + " holds " +
                           std::to_string(scratch.size()) + " values, needs " + std::to_string(count));
  c.bf16_rounding->to_wire(wire_precision::bf16, std::span<const float>(values, count), scratch.first(count));
  return scratch.data();
}

operand operand_of(const context& c, weight w) {
  if (!bf16_compute(c)) return w.fp32;
  if (!w.bf16) throw std::logic_error("cuda_layers: bf16 compute without the weight's bf16 copy");
  return w.bf16;
}

// `elements` values past `base`, an operand of c's precision.
operand advance(const context& c, operand base, size_t elements) {
  return static_cast<const char*>(base) + elements * (bf16_compute(c) ? sizeof(std::uint16_t) : sizeof(float));
}

// Row-major C (m x n, leading dimension ldc) = alpha op(A) op(B) + beta C, each matrix given by
// its row-major pointer and leading dimension, issued to cuBLAS as C^T = op(B)^T op(A)^T.
// transpose_a: A is stored (k x m); otherwise (m x k). Likewise transpose_b: B is (n x k).
// `batches` products follow each other at the given element strides. A and B are fp32, or
// bf16 under bf16 compute (fp32 accumulation); C is fp32 either way.
void row_major_gemm(const context& c, bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                    operand a, int lda, long long stride_a, operand b, int ldb, long long stride_b,
                    float beta, float* out, int ldc, long long stride_c, int batches, const char* what) {
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (bf16_compute(c))
    cublas_check(cublasGemmStridedBatchedEx(c.blas, op_b, op_a, n, m, k, &alpha, b, CUDA_R_16BF, ldb, stride_b, a,
                                            CUDA_R_16BF, lda, stride_a, &beta, out, CUDA_R_32F, ldc, stride_c,
                                            batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 what);
  else
    cublas_check(cublasSgemmStridedBatched(c.blas, op_b, op_a, n, m, k, &alpha, static_cast<const float*>(b), ldb,
                                           stride_b, static_cast<const float*>(a), lda, stride_a, &beta, out, ldc,
                                           stride_c, batches),
                 what);
}

void row_major_gemm(const context& c, bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                    operand a, int lda, operand b, int ldb, float beta, float* out, int ldc, const char* what) {
  row_major_gemm(c, transpose_a, transpose_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, out, ldc, 0, 1, what);
}

void column_sums(const context& c, float* into, const float* matrix, int rows, int columns) {
  launch(c, dim3(blocks_for(columns, warp)), dim3(warp, column_block_rows), "column_sums", column_sums_kernel,
         into, matrix, rows, columns);
}

}  // namespace

void embedding_forward(const context& c, float* out, const std::int32_t* tokens, const float* token_table,
                       const float* position_table, int examples, int sequence, int width) {
  const size_t rows = size_t(examples) * sequence;
  launch(c, dim3(blocks_for(rows * width)), dim3(block_size), "embedding_forward", embedding_forward_kernel, out,
         tokens, token_table, position_table, rows, sequence, width);
}

void embedding_backward(const context& c, float* dtoken_table, float* dposition_table, const float* dout,
                        const std::int32_t* positions, const std::int32_t* token_ids,
                        const std::int32_t* group_starts, int groups, int examples, int sequence, int width) {
  constexpr unsigned columns_per_block = 128;
  launch(c, dim3(unsigned(groups), blocks_for(width, columns_per_block)), dim3(columns_per_block),
         "token_embedding_backward", token_embedding_backward_kernel, dtoken_table, dout, positions, token_ids,
         group_starts, width);
  launch(c, dim3(blocks_for(size_t(sequence) * width)), dim3(block_size), "position_embedding_backward",
         position_embedding_backward_kernel, dposition_table, dout, examples, sequence, width);
}

void layernorm_forward(const context& c, float* out, float* mean, float* rstd, const float* in, const float* gain,
                       const float* bias, int rows, int width) {
  launch(c, dim3(blocks_for(rows, rows_per_block)), dim3(block_size), "layernorm_forward",
         layernorm_forward_kernel, out, mean, rstd, in, gain, bias, rows, width);
}

void layernorm_backward(const context& c, float* din, float* dgain, float* dbias, const float* dout,
                        const float* in, const float* gain, const float* mean, const float* rstd, int rows,
                        int width) {
  launch(c, dim3(blocks_for(rows, rows_per_block)), dim3(block_size), "layernorm_backward",
         layernorm_input_backward_kernel, din, dout, in, gain, mean, rstd, rows, width);
  launch(c, dim3(blocks_for(width, warp)), dim3(warp, column_block_rows), "layernorm_parameter_backward",
         layernorm_parameter_backward_kernel, dgain, dbias, dout, in, mean, rstd, rows, width);
}

std::array<std::size_t, 3> bf16_scratch_sizes(std::size_t rows, std::size_t width, std::size_t vocab,
                                              std::size_t attention_scores) {
  // Slot 0: a product's input or output gradient (the logits' gradient is the largest), the
  // attention's qkv or output gradient; slot 1: a weight gradient's input, the probabilities,
  // the backward pass's qkv; slot 2: the backward pass's probabilities and score gradients.
  return {rows * std::max(vocab, 4 * width), std::max(rows * 4 * width, attention_scores), attention_scores};
}

void matmul_forward(const context& c, float* out, const float* in, weight w, const float* bias, int rows,
                    int inputs, int outputs) {
  if (bias)
    launch(c, dim3(blocks_for(size_t(rows) * outputs)), dim3(block_size), "matmul_forward bias",
           broadcast_rows_kernel, out, bias, size_t(rows), outputs);
  // out (rows x outputs) = in (rows x inputs) weight^T, weight stored (outputs x inputs)
  row_major_gemm(c, false, true, rows, outputs, inputs, 1.0f, operand_of(c, 0, in, size_t(rows) * inputs), inputs,
                 operand_of(c, w), inputs, bias ? one : zero, out, outputs, "matmul_forward");
}

void matmul_backward(const context& c, float* din, float* dweight, float* dbias, const float* dout,
                     const float* in, weight w, int rows, int inputs, int outputs) {
  const operand dout_operand = operand_of(c, 0, dout, size_t(rows) * outputs);
  if (din)  // din (rows x inputs) += dout (rows x outputs) weight (outputs x inputs)
    row_major_gemm(c, false, false, rows, inputs, outputs, 1.0f, dout_operand, outputs, operand_of(c, w), inputs,
                   1.0f, din, inputs, "matmul_backward input");
  // dweight (outputs x inputs) += dout^T in, dout stored (rows x outputs)
  row_major_gemm(c, true, false, outputs, inputs, rows, 1.0f, dout_operand, outputs,
                 operand_of(c, 1, in, size_t(rows) * inputs), inputs, 1.0f, dweight, inputs,
                 "matmul_backward weight");
  if (dbias) column_sums(c, dbias, dout, rows, outputs);  // from the fp32 gradient
}

// One strided-batched product per head, batched over the examples: a head's query, key and
// value rows sit at a stride of 3*width inside qkv, its output rows at a stride of width.
void attention_forward(const context& c, float* out, float* probs, const float* qkv, int examples, int sequence,
                       int width, int heads) {
  const int T = sequence, head_width = width / heads, stride = 3 * width;
  const long long qkv_batch = (long long)T * stride, square = (long long)T * T;
  const long long probs_batch = square * heads, out_batch = (long long)T * width;
  const float scale = 1.0f / std::sqrt(float(head_width));
  const size_t rows = size_t(examples) * heads * T;
  const operand qkv_operand = operand_of(c, 0, qkv, size_t(examples) * T * stride);
  for (int h = 0; h < heads; ++h) {
    const operand q = advance(c, qkv_operand, size_t(h) * head_width);
    // scores (T x T) = scale q k^T
    row_major_gemm(c, false, true, T, T, head_width, scale, q, stride, qkv_batch, advance(c, q, width), stride,
                   qkv_batch, 0.0f, probs + h * square, T, probs_batch, examples, "attention scores");
  }
  launch(c, dim3(blocks_for(rows, rows_per_block)), dim3(block_size), "causal_softmax", causal_softmax_kernel,
         probs, rows, T);
  const operand probs_operand = operand_of(c, 1, probs, rows * T);
  for (int h = 0; h < heads; ++h) {
    const operand v = advance(c, qkv_operand, size_t(h) * head_width + 2 * width);
    // out (T x head_width) = probs v
    row_major_gemm(c, false, false, T, head_width, T, 1.0f, advance(c, probs_operand, h * square), T, probs_batch,
                   v, stride, qkv_batch, 0.0f, out + size_t(h) * head_width, width, out_batch, examples,
                   "attention values");
  }
}

void attention_backward(const context& c, float* dqkv, float* dscores, const float* dout, const float* qkv,
                        const float* probs, int examples, int sequence, int width, int heads) {
  const int T = sequence, head_width = width / heads, stride = 3 * width;
  const long long qkv_batch = (long long)T * stride, square = (long long)T * T;
  const long long probs_batch = square * heads, out_batch = (long long)T * width;
  const float scale = 1.0f / std::sqrt(float(head_width));
  const size_t rows = size_t(examples) * heads * T;
  const operand dout_operand = operand_of(c, 0, dout, size_t(examples) * T * width);
  const operand qkv_operand = operand_of(c, 1, qkv, size_t(examples) * T * stride);
  const operand probs_operand = operand_of(c, 2, probs, rows * T);
  for (int h = 0; h < heads; ++h) {
    const size_t offset = size_t(h) * head_width;
    const operand dy = advance(c, dout_operand, offset);
    // dprobs (T x T) = dy v^T and dv += probs^T dy
    row_major_gemm(c, false, true, T, T, head_width, 1.0f, dy, width, out_batch,
                   advance(c, qkv_operand, offset + 2 * width), stride, qkv_batch, 0.0f, dscores + h * square, T,
                   probs_batch, examples, "attention dprobs");
    row_major_gemm(c, true, false, T, head_width, T, 1.0f, advance(c, probs_operand, h * square), T, probs_batch,
                   dy, width, out_batch, 1.0f, dqkv + offset + 2 * width, stride, qkv_batch, examples,
                   "attention dvalues");
  }
  launch(c, dim3(blocks_for(rows, rows_per_block)), dim3(block_size), "causal_softmax_backward",
         causal_softmax_backward_kernel, dscores, probs, rows, T);
  // The rounded probabilities are no longer read (the stream runs in order): their slot takes
  // the rounded score gradients.
  const operand dscores_operand = operand_of(c, 2, dscores, rows * T);
  for (int h = 0; h < heads; ++h) {
    const size_t offset = size_t(h) * head_width;
    const operand ds = advance(c, dscores_operand, h * square);
    // dq += scale dscores k and dk += scale dscores^T q
    row_major_gemm(c, false, false, T, head_width, T, scale, ds, T, probs_batch,
                   advance(c, qkv_operand, offset + width), stride, qkv_batch, 1.0f, dqkv + offset, stride, qkv_batch,
                   examples, "attention dqueries");
    row_major_gemm(c, true, false, T, head_width, T, scale, ds, T, probs_batch, advance(c, qkv_operand, offset),
                   stride, qkv_batch, 1.0f, dqkv + offset + width, stride, qkv_batch, examples, "attention dkeys");
  }
}

void gelu_forward(const context& c, float* out, const float* in, int count) {
  launch(c, dim3(blocks_for(size_t(count))), dim3(block_size), "gelu_forward", gelu_forward_kernel, out, in,
         size_t(count));
}

void gelu_backward(const context& c, float* din, const float* dout, const float* in, int count) {
  launch(c, dim3(blocks_for(size_t(count))), dim3(block_size), "gelu_backward", gelu_backward_kernel, din, dout,
         in, size_t(count));
}

void add_into(const context& c, float* target, const float* addend, int count) {
  cublas_check(cublasSaxpy(c.blas, count, &one, addend, 1, target, 1), "add_into");
}

void softmax_crossentropy_forward(const context& c, float* probs, double* row_losses, const float* logits,
                                  const std::int32_t* targets, int rows, int classes) {
  launch(c, dim3(unsigned(rows)), dim3(block_size), "softmax_crossentropy_forward", crossentropy_forward_kernel,
         probs, row_losses, logits, targets, classes);
}

void softmax_crossentropy_backward(const context& c, float* dlogits, const float* probs,
                                   const std::int32_t* targets, int rows, int classes) {
  launch(c, dim3(blocks_for(size_t(rows) * classes)), dim3(block_size), "softmax_crossentropy_backward",
         crossentropy_backward_kernel, dlogits, probs, targets, size_t(rows), classes);
}

}  // namespace accord::cuda_layers
