#include "models/layers.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace accord::layers {

namespace {
using std::size_t;
constexpr float layernorm_epsilon = 1e-5f;
}  // namespace

void embedding_forward(float* out, const std::int32_t* tokens, const float* token_table,
                       const float* position_table, int examples, int sequence, int width) {
  for (size_t r = 0; r < size_t(examples) * sequence; ++r) {
    const float* token_row = token_table + size_t(tokens[r]) * width;
    const float* position_row = position_table + (r % sequence) * width;
    float* out_row = out + r * width;
    for (int i = 0; i < width; ++i) out_row[i] = token_row[i] + position_row[i];
  }
}

void embedding_backward(float* dtoken_table, float* dposition_table, const float* dout,
                        const std::int32_t* tokens, int examples, int sequence, int width) {
  for (size_t r = 0; r < size_t(examples) * sequence; ++r) {
    float* dtoken_row = dtoken_table + size_t(tokens[r]) * width;
    float* dposition_row = dposition_table + (r % sequence) * width;
    const float* dout_row = dout + r * width;
    for (int i = 0; i < width; ++i) {
      dtoken_row[i] += dout_row[i];
      dposition_row[i] += dout_row[i];
    }
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* gain,
                       const float* bias, int rows, int width) {
  for (size_t r = 0; r < size_t(rows); ++r) {
    const float* x = in + r * width;
    float* y = out + r * width;
    float sum = 0.0f;
    for (int i = 0; i < width; ++i) sum += x[i];
    const float m = sum / width;
    float squares = 0.0f;
    for (int i = 0; i < width; ++i) squares += (x[i] - m) * (x[i] - m);
    const float s = 1.0f / std::sqrt(squares / width + layernorm_epsilon);
    for (int i = 0; i < width; ++i) y[i] = (x[i] - m) * s * gain[i] + bias[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

void layernorm_backward(float* din, float* dgain, float* dbias, const float* dout,
                        const float* in, const float* gain, const float* mean,
                        const float* rstd, int rows, int width) {
  for (size_t r = 0; r < size_t(rows); ++r) {
    const float* x = in + r * width;
    const float* dy = dout + r * width;
    float* dx = din + r * width;
    const float m = mean[r], s = rstd[r];
    // Two reductions of the normalised-input gradient: its mean and its projection on the
    // normalised input, which together undo the mean and variance normalisation.
    float dnorm_mean = 0.0f, dnorm_dot_norm = 0.0f;
    for (int i = 0; i < width; ++i) {
      const float norm = (x[i] - m) * s;
      const float dnorm = dy[i] * gain[i];
      dnorm_mean += dnorm;
      dnorm_dot_norm += dnorm * norm;
    }
    dnorm_mean /= width;
    dnorm_dot_norm /= width;
    for (int i = 0; i < width; ++i) {
      const float norm = (x[i] - m) * s;
      const float dnorm = dy[i] * gain[i];
      dbias[i] += dy[i];
      dgain[i] += norm * dy[i];
      dx[i] += (dnorm - dnorm_mean - norm * dnorm_dot_norm) * s;
    }
  }
}

void matmul_forward(float* out, const float* in, const float* weight, const float* bias,
                    int rows, int inputs, int outputs) {
  float beta = 0.0f;
  if (bias) {
    for (size_t r = 0; r < size_t(rows); ++r) std::copy_n(bias, outputs, out + r * outputs);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, outputs, inputs, 1.0f, in, inputs,
              weight, inputs, beta, out, outputs);
}

void matmul_backward(float* din, float* dweight, float* dbias, const float* dout,
                     const float* in, const float* weight, int rows, int inputs, int outputs) {
  if (din)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, inputs, outputs, 1.0f, dout,
                outputs, weight, inputs, 1.0f, din, inputs);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outputs, inputs, rows, 1.0f, dout,
              outputs, in, inputs, 1.0f, dweight, inputs);
  if (dbias) bias_backward(dbias, dout, rows, outputs);
}

void bias_backward(float* dbias, const float* dout, int rows, int outputs) {
  for (size_t r = 0; r < size_t(rows); ++r) {
    const float* dy = dout + r * outputs;
    for (int o = 0; o < outputs; ++o) dbias[o] += dy[o];
  }
}

// Per (example, head), with T = sequence and the head's slices strided by 3*width inside qkv:
// scores = q k^T / sqrt(head width) over the full T x T square (one sgemm; the upper triangle
// is then masked), probs = causal row softmax, out = probs v.
void attention_forward(float* out, float* probs, const float* qkv, int examples, int sequence,
                       int width, int heads, operand_rounding round) {
  const int head_width = width / heads;
  const int stride = 3 * width;
  const float scale = 1.0f / std::sqrt(float(head_width));
  const size_t square = size_t(sequence) * sequence;
  std::vector<float> rounded_probs(round ? square : 0);
  for (int b = 0; b < examples; ++b)
    for (int h = 0; h < heads; ++h) {
      const float* q = qkv + size_t(b) * sequence * stride + size_t(h) * head_width;
      const float* k = q + width;
      const float* v = q + 2 * width;
      float* p = probs + (size_t(b) * heads + h) * square;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sequence, sequence, head_width, scale,
                  q, stride, k, stride, 0.0f, p, sequence);
      for (int t = 0; t < sequence; ++t) {
        float* row = p + size_t(t) * sequence;
        const float peak = *std::max_element(row, row + t + 1);
        float sum = 0.0f;
        for (int j = 0; j <= t; ++j) {
          row[j] = std::exp(row[j] - peak);
          sum += row[j];
        }
        const float inverse = 1.0f / sum;
        for (int j = 0; j <= t; ++j) row[j] *= inverse;
        std::fill(row + t + 1, row + sequence, 0.0f);
      }
      const float* value_weights = p;  // the fp32 probabilities stay for the backward pass
      if (round) {
        std::copy(p, p + square, rounded_probs.begin());
        round(rounded_probs);
        value_weights = rounded_probs.data();
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sequence, head_width, sequence, 1.0f,
                  value_weights, sequence, v, stride, 0.0f,
                  out + size_t(b) * sequence * width + size_t(h) * head_width, width);
    }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                        int examples, int sequence, int width, int heads, operand_rounding round) {
  const int head_width = width / heads;
  const int stride = 3 * width;
  const float scale = 1.0f / std::sqrt(float(head_width));
  const size_t square = size_t(sequence) * sequence;
  std::vector<float> dscores(square), rounded_probs(round ? square : 0);
  for (int b = 0; b < examples; ++b)
    for (int h = 0; h < heads; ++h) {
      const size_t head_offset = size_t(b) * sequence * stride + size_t(h) * head_width;
      const float* q = qkv + head_offset;
      const float* k = q + width;
      const float* v = q + 2 * width;
      float* dq = dqkv + head_offset;
      float* dk = dq + width;
      float* dv = dq + 2 * width;
      const float* p = probs + (size_t(b) * heads + h) * square;
      const float* dy = dout + size_t(b) * sequence * width + size_t(h) * head_width;
      // dprobs = dy v^T and dv += probs^T dy
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sequence, sequence, head_width, 1.0f,
                  dy, width, v, stride, 0.0f, dscores.data(), sequence);
      const float* value_weights = p;
      if (round) {
        std::copy(p, p + square, rounded_probs.begin());
        round(rounded_probs);
        value_weights = rounded_probs.data();
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sequence, head_width, sequence, 1.0f,
                  value_weights, sequence, dy, width, 1.0f, dv, stride);
      // Softmax backward in place: dscores = probs * (dprobs - <probs, dprobs>); masked
      // entries have probs 0 and so get no gradient.
      for (int t = 0; t < sequence; ++t) {
        const float* p_row = p + size_t(t) * sequence;
        float* d_row = dscores.data() + size_t(t) * sequence;
        float dot = 0.0f;
        for (int j = 0; j <= t; ++j) dot += p_row[j] * d_row[j];
        for (int j = 0; j <= t; ++j) d_row[j] = p_row[j] * (d_row[j] - dot);
        std::fill(d_row + t + 1, d_row + sequence, 0.0f);
      }
      if (round) round(dscores);
      // dq += scale dscores k and dk += scale dscores^T q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sequence, head_width, sequence,
                  scale, dscores.data(), sequence, k, stride, 1.0f, dq, stride);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sequence, head_width, sequence,
                  scale, dscores.data(), sequence, q, stride, 1.0f, dk, stride);
    }
}

namespace {
constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float gelu_cubic = 0.044715f;

// 0.5 (1 + tanh(u)) equals the logistic sigmoid of 2u: one expf instead of tanhf, which
// costs several times more and dominated the GPT's profile.
inline float gelu_gate(float x) {
  const float u = gelu_scale * (x + gelu_cubic * x * x * x);
  return 1.0f / (1.0f + std::exp(-2.0f * u));
}
}  // namespace

void gelu_forward(float* out, const float* in, int count) {
  for (size_t i = 0; i < size_t(count); ++i) out[i] = in[i] * gelu_gate(in[i]);
}

// d/dx [x s(2u)] = s + x 2 s (1 - s) u'(x), with s = sigmoid(2u).
void gelu_backward(float* din, const float* dout, const float* in, int count) {
  for (size_t i = 0; i < size_t(count); ++i) {
    const float x = in[i];
    const float s = gelu_gate(x);
    const float du = gelu_scale * (1.0f + 3.0f * gelu_cubic * x * x);
    din[i] += (s + 2.0f * x * s * (1.0f - s) * du) * dout[i];
  }
}

void relu_forward(float* out, const float* in, int count) {
  for (size_t i = 0; i < size_t(count); ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float* din, const float* dout, const float* out, int count) {
  for (size_t i = 0; i < size_t(count); ++i)
    if (out[i] > 0.0f) din[i] += dout[i];
}

double softmax_crossentropy_forward(float* probs, const float* logits,
                                    const std::int32_t* targets, int rows, int classes) {
  double total = 0.0;
  for (size_t r = 0; r < size_t(rows); ++r) {
    const float* z = logits + r * classes;
    float* p = probs + r * classes;
    const float peak = *std::max_element(z, z + classes);
    const float target_logit = z[targets[r]];  // read before an in-place softmax overwrites it
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) {
      p[c] = std::exp(z[c] - peak);
      sum += p[c];
    }
    const float inverse = 1.0f / sum;
    for (int c = 0; c < classes; ++c) p[c] *= inverse;
    // log-sum-exp form: exact even when the target's probability underflows to 0
    total += double(peak) + std::log(double(sum)) - double(target_logit);
  }
  return total / rows;
}

void softmax_crossentropy_backward(float* dlogits, const float* probs,
                                   const std::int32_t* targets, int rows, int classes) {
  const float per_row = 1.0f / rows;
  for (size_t r = 0; r < size_t(rows); ++r) {
    const float* p = probs + r * classes;
    float* d = dlogits + r * classes;
    for (int c = 0; c < classes; ++c) d[c] += p[c] * per_row;
    d[targets[r]] -= per_row;
  }
}

}  // namespace accord::layers
