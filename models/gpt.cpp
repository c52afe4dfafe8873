#include "models/gpt.hpp"

#include "models/layers.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace accord {

namespace {

using std::size_t;
using std::to_string;

void check_positive(int value, const char* name) {
  if (value <= 0)
    throw std::invalid_argument("gpt config: " + std::string(name) + " must be positive, got " +
                                to_string(value));
}

const gpt_config& validated(const gpt_config& config) {
  check_positive(config.vocab, "vocab");
  check_positive(config.context, "context");
  check_positive(config.layers, "layers");
  check_positive(config.heads, "heads");
  check_positive(config.width, "width");
  if (config.width % config.heads != 0)
    throw std::invalid_argument("gpt config: width " + to_string(config.width) +
                                " is not divisible by heads " + to_string(config.heads));
  return config;
}

void check_ids(const std::vector<std::int32_t>& ids, int vocab, const std::string& who, const char* what) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::invalid_argument(who + ": batch " + std::string(what) + " " + to_string(ids[i]) +
                                  " at index " + to_string(i) + " is outside the vocabulary [0, " +
                                  to_string(vocab) + ")");
}

void zero(std::vector<float>& values) { std::fill(values.begin(), values.end(), 0.0f); }

void add_into(float* target, const float* addend, size_t count) {
  for (size_t i = 0; i < count; ++i) target[i] += addend[i];
}

}  // namespace

gpt::gpt(const gpt_config& config, layers::operand_rounding round_operands)
    : config_(validated(config)), round_operands_(round_operands) {
  const size_t C = config_.width, V = config_.vocab;
  // GPT-2 initialisation: N(0, 0.02) weights, with the projections that write into the
  // residual stream scaled down by 1/sqrt(2 layers) so the stream's variance stays put.
  const float stddev = 0.02f;
  const float residual_stddev = stddev / std::sqrt(2.0f * config_.layers);
  using enum initial_values;
  token_embedding_ = layout_.add("token_embedding", V * C, normal, stddev);
  position_embedding_ = layout_.add("position_embedding", size_t(config_.context) * C, normal, stddev);
  for (int l = 0; l < config_.layers; ++l) {
    const std::string p = "block" + to_string(l) + ".";
    block_offsets b{};
    b.ln1_gain = layout_.add(p + "ln1_gain", C, ones);
    b.ln1_bias = layout_.add(p + "ln1_bias", C, zeros);
    b.qkv_weight = layout_.add(p + "qkv_weight", 3 * C * C, normal, stddev);
    b.qkv_bias = layout_.add(p + "qkv_bias", 3 * C, zeros);
    b.attn_proj_weight = layout_.add(p + "attn_proj_weight", C * C, normal, residual_stddev);
    b.attn_proj_bias = layout_.add(p + "attn_proj_bias", C, zeros);
    b.ln2_gain = layout_.add(p + "ln2_gain", C, ones);
    b.ln2_bias = layout_.add(p + "ln2_bias", C, zeros);
    b.fc_weight = layout_.add(p + "fc_weight", 4 * C * C, normal, stddev);
    b.fc_bias = layout_.add(p + "fc_bias", 4 * C, zeros);
    b.fc_proj_weight = layout_.add(p + "fc_proj_weight", 4 * C * C, normal, residual_stddev);
    b.fc_proj_bias = layout_.add(p + "fc_proj_bias", C, zeros);
    blocks_.push_back(b);
  }
  final_ln_gain_ = layout_.add("final_ln_gain", C, ones);
  final_ln_bias_ = layout_.add("final_ln_bias", C, zeros);
  head_weight_ = config_.tied_head ? token_embedding_
                                   : layout_.add("head_weight", V * C, normal, stddev);
}

std::string gpt::signature() const {
  return "gpt(vocab=" + to_string(config_.vocab) + ",context=" + to_string(config_.context) +
         ",layers=" + to_string(config_.layers) + ",heads=" + to_string(config_.heads) +
         ",width=" + to_string(config_.width) + (config_.tied_head ? ",tied)" : ",untied)");
}

void gpt::initialize(std::span<float> parameters, std::uint64_t seed) const {
  if (parameters.size() != parameter_count())
    throw std::invalid_argument("gpt: initialize got " + to_string(parameters.size()) +
                                " parameters, expected " + to_string(parameter_count()));
  layout_.initialize(parameters, seed);
}

std::unique_ptr<model> gpt::clone() const { return std::make_unique<gpt>(config_, round_operands_); }

const float* gpt::operand(int slot, const float* values, size_t count) {
  if (!round_operands_) return values;
  std::vector<float>& copy = rounded_[slot];
  copy.assign(values, values + count);
  round_operands_(copy);
  return copy.data();
}

void gpt::product_forward(float* out, const float* in, const float* weight, const float* bias, size_t rows,
                          int inputs, int outputs) {
  layers::matmul_forward(out, operand(0, in, rows * inputs), operand(1, weight, size_t(outputs) * inputs), bias,
                         int(rows), inputs, outputs);
}

void gpt::product_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                           const float* weight, size_t rows, int inputs, int outputs) {
  if (!round_operands_)
    return layers::matmul_backward(din, dweight, dbias, dout, in, weight, int(rows), inputs, outputs);
  layers::matmul_backward(din, dweight, nullptr, operand(2, dout, rows * outputs), operand(0, in, rows * inputs),
                          operand(1, weight, size_t(outputs) * inputs), int(rows), inputs, outputs);
  if (dbias) layers::bias_backward(dbias, dout, int(rows), outputs);  // from the unrounded gradient
}

int gpt_sequence_length(const batch& input, const gpt_config& config, const std::string& who) {
  if (input.examples == 0 || input.tokens.empty())
    throw std::invalid_argument(who + ": batch is empty");
  if (input.tokens.size() % input.examples != 0)
    throw std::invalid_argument(who + ": batch has " + to_string(input.tokens.size()) +
                                " tokens, not a multiple of its " + to_string(input.examples) +
                                " examples");
  const size_t sequence = input.tokens.size() / input.examples;
  if (sequence > size_t(config.context))
    throw std::invalid_argument(who + ": batch sequence length " + to_string(sequence) +
                                " exceeds the context " + to_string(config.context));
  if (input.targets.size() != input.tokens.size())
    throw std::invalid_argument(who + ": batch has " + to_string(input.targets.size()) +
                                " targets for " + to_string(input.tokens.size()) + " tokens");
  check_ids(input.tokens, config.vocab, who, "token");
  check_ids(input.targets, config.vocab, who, "target");
  return int(sequence);
}

int gpt::prepare(std::span<const float> parameters, const batch& input) {
  if (parameters.size() != parameter_count())
    throw std::invalid_argument("gpt: got " + to_string(parameters.size()) +
                                " parameters, expected " + to_string(parameter_count()));
  const size_t sequence = size_t(gpt_sequence_length(input, config_, "gpt"));

  const size_t L = config_.layers, C = config_.width, V = config_.vocab;
  const size_t B = input.examples, T = sequence, rows = B * T;
  activations& a = acts_;
  a.stream.resize((L + 1) * rows * C);
  a.attn_residual.resize(L * rows * C);
  a.ln1.resize(L * rows * C);
  a.ln1_mean.resize(L * rows);
  a.ln1_rstd.resize(L * rows);
  a.qkv.resize(L * rows * 3 * C);
  a.attn_probs.resize(L * B * config_.heads * T * T);
  a.attn_out.resize(L * rows * C);
  a.ln2.resize(L * rows * C);
  a.ln2_mean.resize(L * rows);
  a.ln2_rstd.resize(L * rows);
  a.fc.resize(L * rows * 4 * C);
  a.fc_gelu.resize(L * rows * 4 * C);
  a.final_ln.resize(rows * C);
  a.final_mean.resize(rows);
  a.final_rstd.resize(rows);
  a.probs.resize(rows * V);
  return int(sequence);
}

double gpt::forward(const float* p, const batch& input, int sequence) {
  const int B = int(input.examples), T = sequence, C = config_.width, V = config_.vocab;
  const int H = config_.heads;
  const size_t rows = size_t(B) * T;
  activations& a = acts_;

  layers::embedding_forward(a.stream.data(), input.tokens.data(), p + token_embedding_,
                            p + position_embedding_, B, T, C);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const block_offsets& w = blocks_[l];
    const float* in = a.stream.data() + l * rows * C;
    float* mid = a.attn_residual.data() + l * rows * C;
    float* out = a.stream.data() + (l + 1) * rows * C;
    float* ln1 = a.ln1.data() + l * rows * C;
    float* qkv = a.qkv.data() + l * rows * 3 * C;
    float* probs = a.attn_probs.data() + l * size_t(B) * H * T * T;
    float* attn = a.attn_out.data() + l * rows * C;
    float* ln2 = a.ln2.data() + l * rows * C;
    float* fc = a.fc.data() + l * rows * 4 * C;
    float* fc_gelu = a.fc_gelu.data() + l * rows * 4 * C;

    layers::layernorm_forward(ln1, a.ln1_mean.data() + l * rows, a.ln1_rstd.data() + l * rows,
                              in, p + w.ln1_gain, p + w.ln1_bias, int(rows), C);
    product_forward(qkv, ln1, p + w.qkv_weight, p + w.qkv_bias, rows, C, 3 * C);
    layers::attention_forward(attn, probs, operand(0, qkv, rows * 3 * C), B, T, C, H, round_operands_);
    product_forward(mid, attn, p + w.attn_proj_weight, p + w.attn_proj_bias, rows, C, C);
    add_into(mid, in, rows * C);

    layers::layernorm_forward(ln2, a.ln2_mean.data() + l * rows, a.ln2_rstd.data() + l * rows,
                              mid, p + w.ln2_gain, p + w.ln2_bias, int(rows), C);
    product_forward(fc, ln2, p + w.fc_weight, p + w.fc_bias, rows, C, 4 * C);
    layers::gelu_forward(fc_gelu, fc, int(rows) * 4 * C);
    product_forward(out, fc_gelu, p + w.fc_proj_weight, p + w.fc_proj_bias, rows, 4 * C, C);
    add_into(out, mid, rows * C);
  }
  const float* last = a.stream.data() + blocks_.size() * rows * C;
  layers::layernorm_forward(a.final_ln.data(), a.final_mean.data(), a.final_rstd.data(), last,
                            p + final_ln_gain_, p + final_ln_bias_, int(rows), C);
  // Logits are written into probs and turned into probabilities in place.
  product_forward(a.probs.data(), a.final_ln.data(), p + head_weight_, nullptr, rows, C, V);
  return layers::softmax_crossentropy_forward(a.probs.data(), a.probs.data(),
                                              input.targets.data(), int(rows), V);
}

double gpt::evaluate(std::span<const float> parameters, const batch& input) {
  const int sequence = prepare(parameters, input);
  return forward(parameters.data(), input, sequence);
}

double gpt::forward_backward(std::span<const float> parameters, const batch& input,
                             std::span<float> gradients) {
  if (gradients.size() == parameter_count()) std::fill(gradients.begin(), gradients.end(), 0.0f);
  return accumulate_gradients(parameters, input, gradients);
}

// Every layer's backward adds into its parameters' gradients, so accumulating is the pass itself.
double gpt::accumulate_gradients(std::span<const float> parameters, const batch& input,
                                 std::span<float> gradients) {
  if (gradients.size() != parameter_count())
    throw std::invalid_argument("gpt: got " + to_string(gradients.size()) +
                                " gradients, expected " + to_string(parameter_count()));
  const int sequence = prepare(parameters, input);
  const double loss = forward(parameters.data(), input, sequence);

  const int B = int(input.examples), T = sequence, C = config_.width, V = config_.vocab;
  const int H = config_.heads;
  const size_t rows = size_t(B) * T;
  const float* p = parameters.data();
  float* g = gradients.data();
  activations& a = acts_;
  activation_gradients& d = grads_;
  d.stream.assign(rows * C, 0.0f);
  d.ln.resize(rows * C);
  d.qkv.resize(rows * 3 * C);
  d.attn_out.resize(rows * C);
  d.fc.resize(rows * 4 * C);
  d.fc_gelu.resize(rows * 4 * C);
  d.logits.assign(rows * V, 0.0f);

  layers::softmax_crossentropy_backward(d.logits.data(), a.probs.data(), input.targets.data(),
                                        int(rows), V);
  zero(d.ln);
  product_backward(d.ln.data(), g + head_weight_, nullptr, d.logits.data(), a.final_ln.data(),
                   p + head_weight_, rows, C, V);
  layers::layernorm_backward(d.stream.data(), g + final_ln_gain_, g + final_ln_bias_, d.ln.data(),
                             a.stream.data() + blocks_.size() * rows * C, p + final_ln_gain_,
                             a.final_mean.data(), a.final_rstd.data(), int(rows), C);
  // The layout runs embeddings, blocks, final layernorm, head: backward finishes it from the end
  // (a tied head adds into the token embedding, which finishes last anyway).
  gradients_final_from(final_ln_gain_);

  // d.stream holds the gradient of the residual stream; each branch reads it and each
  // layernorm backward adds the branch's contribution, walking the stream back to the input.
  for (size_t l = blocks_.size(); l-- > 0;) {
    const block_offsets& w = blocks_[l];
    const float* in = a.stream.data() + l * rows * C;
    const float* mid = a.attn_residual.data() + l * rows * C;
    const float* ln1 = a.ln1.data() + l * rows * C;
    const float* qkv = a.qkv.data() + l * rows * 3 * C;
    const float* probs = a.attn_probs.data() + l * size_t(B) * H * T * T;
    const float* attn = a.attn_out.data() + l * rows * C;
    const float* ln2 = a.ln2.data() + l * rows * C;
    const float* fc = a.fc.data() + l * rows * 4 * C;
    const float* fc_gelu = a.fc_gelu.data() + l * rows * 4 * C;

    zero(d.fc_gelu);
    product_backward(d.fc_gelu.data(), g + w.fc_proj_weight, g + w.fc_proj_bias, d.stream.data(),
                     fc_gelu, p + w.fc_proj_weight, rows, 4 * C, C);
    zero(d.fc);
    layers::gelu_backward(d.fc.data(), d.fc_gelu.data(), fc, int(rows) * 4 * C);
    zero(d.ln);
    product_backward(d.ln.data(), g + w.fc_weight, g + w.fc_bias, d.fc.data(), ln2,
                     p + w.fc_weight, rows, C, 4 * C);
    layers::layernorm_backward(d.stream.data(), g + w.ln2_gain, g + w.ln2_bias, d.ln.data(), mid,
                               p + w.ln2_gain, a.ln2_mean.data() + l * rows,
                               a.ln2_rstd.data() + l * rows, int(rows), C);

    zero(d.attn_out);
    product_backward(d.attn_out.data(), g + w.attn_proj_weight, g + w.attn_proj_bias,
                     d.stream.data(), attn, p + w.attn_proj_weight, rows, C, C);
    zero(d.qkv);
    layers::attention_backward(d.qkv.data(), operand(2, d.attn_out.data(), rows * C),
                               operand(0, qkv, rows * 3 * C), probs, B, T, C, H, round_operands_);
    zero(d.ln);
    product_backward(d.ln.data(), g + w.qkv_weight, g + w.qkv_bias, d.qkv.data(), ln1,
                     p + w.qkv_weight, rows, C, 3 * C);
    layers::layernorm_backward(d.stream.data(), g + w.ln1_gain, g + w.ln1_bias, d.ln.data(), in,
                               p + w.ln1_gain, a.ln1_mean.data() + l * rows,
                               a.ln1_rstd.data() + l * rows, int(rows), C);
    gradients_final_from(w.ln1_gain);  // block l's tensors are contiguous from its first layernorm
  }
  layers::embedding_backward(g + token_embedding_, g + position_embedding_, d.stream.data(),
                             input.tokens.data(), B, T, C);
  gradients_final_from(0);
  return loss;
}

std::unique_ptr<model> make_gpt(const gpt_config& config) { return std::make_unique<gpt>(config); }

// Mirrors the constructor's layout and the sizes prepare() gives the activations.
double gpt_parameter_estimate(const gpt_config& config) {
  const double C = config.width, V = config.vocab, L = config.layers;
  return V * C + double(config.context) * C + L * (12 * C * C + 13 * C) + 2 * C + (config.tied_head ? 0 : V * C);
}

double gpt_activation_bytes(const gpt_config& config, double examples) {
  const double C = config.width, V = config.vocab, L = config.layers, T = config.context;
  const double rows = examples * T;
  const double kept = rows * C * (16 * L + 2) + rows * (4 * L + 2) + L * examples * config.heads * T * T + rows * V;
  const double scratch = rows * C * 14 + rows * V;
  return sizeof(float) * (kept + scratch);
}

}  // namespace accord
