// The CUDA GPT: the CPU gpt's forward and backward (models/gpt.cpp) step for step, with the
// layer functions of gpu/cuda_layers.hpp over device buffers.
#include "gpu/cuda_gpt.hpp"

#include "gpu/copy_count.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_kernels.hpp"
#include "gpu/cuda_layers.hpp"
#include "gpu/device.hpp"

#include <array>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord {

namespace {

using std::size_t;
using std::to_string;

size_t offset_of(const parameter_layout& layout, const std::string& name) {
  for (const parameter_tensor& t : layout.tensors())
    if (t.name == name) return t.offset;
  throw std::logic_error("cuda_gpt: the gpt parameter layout has no tensor '" + name + "'");
}

// Grows `array` to at least `size` elements (contents are not kept) and returns its data.
template <class T>
T* at_least(device_array<T>& array, size_t size) {
  if (array.size() < size) {
    array = device_array<T>();  // free first: the old and new buffers need not fit together
    array = device_array<T>(device_kind::cuda, size);
  }
  return array.span().data();
}

// A tensor from the host (counted, see gpu/copy_count.hpp).
void upload_tensor(cudaStream_t stream, float* to, std::span<const float> from) {
  count_tensor_copy();
  cuda_check(cudaMemcpyAsync(to, from.data(), from.size_bytes(), cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync tensor to device");
}

// Batch data from the host: the inputs always come from there.
template <class T>
void upload(cudaStream_t stream, device_array<T>& to, std::span<const T> from) {
  cuda_check(cudaMemcpyAsync(at_least(to, from.size()), from.data(), from.size_bytes(),
                             cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync to device");
}

void check_size(size_t got, size_t expected, const char* what) {
  if (got != expected)
    throw std::invalid_argument("cuda_gpt: got " + to_string(got) + " " + what + ", expected " +
                                to_string(expected));
}

}  // namespace

struct cuda_gpt::device_state {
  struct block_offsets {
    size_t ln1_gain, ln1_bias, qkv_weight, qkv_bias, attn_proj_weight, attn_proj_bias;
    size_t ln2_gain, ln2_bias, fc_weight, fc_bias, fc_proj_weight, fc_proj_bias;
  };
  // Rows of the batch grouped by token for the embedding backward (a counting sort on the
  // host, where the tokens are anyway): group g is token ids[g] at positions[starts[g]..starts[g+1]).
  struct token_groups {
    std::vector<std::int32_t> positions, ids, starts;
    void build(const std::vector<std::int32_t>& tokens, int vocab) {
      std::vector<std::int32_t> first(size_t(vocab) + 1, 0);
      for (std::int32_t t : tokens) ++first[size_t(t) + 1];
      std::partial_sum(first.begin(), first.end(), first.begin());
      ids.clear();
      starts.clear();
      for (int v = 0; v < vocab; ++v)
        if (first[v + 1] > first[v]) {
          ids.push_back(v);
          starts.push_back(first[v]);
        }
      starts.push_back(std::int32_t(tokens.size()));
      positions.resize(tokens.size());
      for (size_t r = 0; r < tokens.size(); ++r) positions[size_t(first[tokens[r]]++)] = std::int32_t(r);
    }
  };

  struct stream_release {
    void operator()(cudaStream_t stream) const { cudaStreamDestroy(stream); }
  };
  struct blas_release {
    void operator()(cublasHandle_t handle) const { cublasDestroy(handle); }
  };

  int device = 0;
  cuda_layers::context context;
  // Own the stream and handle of `context`, also when the constructor fails half-way.
  std::unique_ptr<CUstream_st, stream_release> owned_stream;
  std::unique_ptr<cublasContext, blas_release> owned_blas;
  std::vector<block_offsets> blocks;
  size_t token_embedding = 0, position_embedding = 0, final_ln_gain = 0, final_ln_bias = 0, head_weight = 0;

  // Staging for the host forms only: the *_at forms work on the caller's device memory.
  device_array<float> parameters, gradients;
  const float* current_parameters = nullptr;  // the staged copy or the caller's device memory
  device_array<std::int32_t> tokens, targets, group_positions, group_ids, group_starts;
  // Activations, laid out as gpt::activations.
  device_array<float> stream, attn_residual, ln1, ln1_mean, ln1_rstd, qkv, attn_probs, attn_out;
  device_array<float> ln2, ln2_mean, ln2_rstd, fc, fc_gelu, final_ln, final_mean, final_rstd, probs;
  device_array<double> row_losses;
  // Gradient scratch, as gpt::activation_gradients; the logits gradient reuses probs.
  device_array<float> d_stream, d_ln, d_qkv, d_attn_out, d_fc, d_fc_gelu, d_scores;
  // bf16 compute only: the rounding kernels on `context.stream`, the parameters' bf16 copy and
  // the scratch of the rounded operands (context.bf16_scratch points into it).
  std::unique_ptr<kernels> rounding;
  device_array<std::uint16_t> parameters_bf16;
  std::array<device_array<std::uint16_t>, 3> operand_scratch;

  token_groups groups;
  std::vector<double> host_row_losses;

  device_state(const parameter_layout& layout, const gpt_config& config, compute_precision precision) {
    if (!cuda_available()) throw std::runtime_error("cuda_gpt: no usable CUDA device on this machine");
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    for (int l = 0; l < config.layers; ++l) {
      const std::string p = "block" + to_string(l) + ".";
      auto at = [&](const char* name) { return offset_of(layout, p + name); };
      blocks.push_back({at("ln1_gain"), at("ln1_bias"), at("qkv_weight"), at("qkv_bias"), at("attn_proj_weight"),
                        at("attn_proj_bias"), at("ln2_gain"), at("ln2_bias"), at("fc_weight"), at("fc_bias"),
                        at("fc_proj_weight"), at("fc_proj_bias")});
    }
    token_embedding = offset_of(layout, "token_embedding");
    position_embedding = offset_of(layout, "position_embedding");
    final_ln_gain = offset_of(layout, "final_ln_gain");
    final_ln_bias = offset_of(layout, "final_ln_bias");
    head_weight = config.tied_head ? token_embedding : offset_of(layout, "head_weight");

    // Non-blocking: kernels of other streams (the NCCL transport's) need not wait for ours.
    cuda_check(cudaStreamCreateWithFlags(&context.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    owned_stream.reset(context.stream);
    cuda_layers::cublas_check(cublasCreate(&context.blas), "cublasCreate");
    owned_blas.reset(context.blas);
    cuda_layers::cublas_check(cublasSetStream(context.blas, context.stream), "cublasSetStream");
    // Plain fp32 products (no TF32 tensor cores), so CPU and GPU workers agree closely.
    cuda_layers::cublas_check(cublasSetMathMode(context.blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if (precision == compute_precision::bf16) {
      rounding = make_cuda_kernels(context.stream);  // in stream order with everything else
      context.bf16_rounding = rounding.get();
    }
  }
  ~device_state() { cudaSetDevice(device); }  // before the members are released
  device_state(const device_state&) = delete;
  device_state& operator=(const device_state&) = delete;

  // A weight at `offset` of the current parameters, with its bf16 copy under bf16 compute.
  cuda_layers::weight weight(size_t offset) const {
    return {current_parameters + offset, rounding ? parameters_bf16.span().data() + offset : nullptr};
  }

  template <class... T>
  static size_t bytes_of(const device_array<T>&... arrays) {
    return (size_t{0} + ... + (arrays.size() * sizeof(T)));
  }
  size_t bytes() const {
    return bytes_of(parameters, gradients, tokens, targets, group_positions, group_ids, group_starts, stream,
                    attn_residual, ln1, ln1_mean, ln1_rstd, qkv, attn_probs, attn_out, ln2, ln2_mean, ln2_rstd, fc,
                    fc_gelu, final_ln, final_mean, final_rstd, probs, row_losses, d_stream, d_ln, d_qkv, d_attn_out,
                    d_fc, d_fc_gelu, d_scores, parameters_bf16, operand_scratch[0], operand_scratch[1],
                    operand_scratch[2]);
  }

  // Sizes the activations for (examples, sequence) and queues the uploads of the batch and,
  // from host memory, of the parameters; under bf16 compute then the parameters' rounding.
  void prepare(device_span<const float> given_parameters, const batch& input, int sequence,
               const gpt_config& config) {
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    const size_t L = config.layers, C = config.width, V = config.vocab, H = config.heads;
    const size_t B = input.examples, T = size_t(sequence), rows = B * T;
    at_least(stream, (L + 1) * rows * C);
    at_least(attn_residual, L * rows * C);
    at_least(ln1, L * rows * C);
    at_least(ln1_mean, L * rows);
    at_least(ln1_rstd, L * rows);
    at_least(qkv, L * rows * 3 * C);
    at_least(attn_probs, L * B * H * T * T);
    at_least(attn_out, L * rows * C);
    at_least(ln2, L * rows * C);
    at_least(ln2_mean, L * rows);
    at_least(ln2_rstd, L * rows);
    at_least(fc, L * rows * 4 * C);
    at_least(fc_gelu, L * rows * 4 * C);
    at_least(final_ln, rows * C);
    at_least(final_mean, rows);
    at_least(final_rstd, rows);
    at_least(probs, rows * V);
    at_least(row_losses, rows);
    if (given_parameters.on_host()) {
      upload_tensor(context.stream, at_least(parameters, given_parameters.size()), given_parameters.values);
      current_parameters = parameters.span().data();
    } else {
      current_parameters = given_parameters.data();
    }
    if (rounding) {
      // Queued after the upload above (or with the caller's device memory, whose writes have
      // finished), before any product of this call reads the copy: one stream orders it all.
      const size_t count = given_parameters.size();
      rounding->to_wire(wire_precision::bf16, std::span<const float>(current_parameters, count),
                        std::span<std::uint16_t>(at_least(parameters_bf16, count), count));
      // Growing the scratch frees nothing in use: the previous call waited for its stream.
      const auto sizes = cuda_layers::bf16_scratch_sizes(rows, C, V, B * H * T * T);
      for (size_t slot = 0; slot < sizes.size(); ++slot)
        context.bf16_scratch[slot] = {at_least(operand_scratch[slot], sizes[slot]), sizes[slot]};
    }
    upload<std::int32_t>(context.stream, tokens, input.tokens);
    upload<std::int32_t>(context.stream, targets, input.targets);
  }

  // Queues the forward pass and the copy of the per-row losses to the host.
  void forward(const gpt_config& config, int examples, int sequence) {
    const int B = examples, T = sequence, C = config.width, V = config.vocab, H = config.heads;
    const size_t rows = size_t(B) * T;
    const int n = int(rows);
    const cuda_layers::context& c = context;
    const float* p = current_parameters;
    float* s = stream.span().data();

    cuda_layers::embedding_forward(c, s, tokens.span().data(), p + token_embedding, p + position_embedding, B, T, C);
    for (size_t l = 0; l < blocks.size(); ++l) {
      const block_offsets& w = blocks[l];
      const float* in = s + l * rows * C;
      float* mid = attn_residual.span().data() + l * rows * C;
      float* out = s + (l + 1) * rows * C;
      float* l1 = ln1.span().data() + l * rows * C;
      float* q = qkv.span().data() + l * rows * 3 * C;
      float* pr = attn_probs.span().data() + l * size_t(B) * H * T * T;
      float* attn = attn_out.span().data() + l * rows * C;
      float* l2 = ln2.span().data() + l * rows * C;
      float* f = fc.span().data() + l * rows * 4 * C;
      float* fg = fc_gelu.span().data() + l * rows * 4 * C;

      cuda_layers::layernorm_forward(c, l1, ln1_mean.span().data() + l * rows, ln1_rstd.span().data() + l * rows,
                                     in, p + w.ln1_gain, p + w.ln1_bias, n, C);
      cuda_layers::matmul_forward(c, q, l1, weight(w.qkv_weight), p + w.qkv_bias, n, C, 3 * C);
      cuda_layers::attention_forward(c, attn, pr, q, B, T, C, H);
      cuda_layers::matmul_forward(c, mid, attn, weight(w.attn_proj_weight), p + w.attn_proj_bias, n, C, C);
      cuda_layers::add_into(c, mid, in, n * C);

      cuda_layers::layernorm_forward(c, l2, ln2_mean.span().data() + l * rows, ln2_rstd.span().data() + l * rows,
                                     mid, p + w.ln2_gain, p + w.ln2_bias, n, C);
      cuda_layers::matmul_forward(c, f, l2, weight(w.fc_weight), p + w.fc_bias, n, C, 4 * C);
      cuda_layers::gelu_forward(c, fg, f, n * 4 * C);
      cuda_layers::matmul_forward(c, out, fg, weight(w.fc_proj_weight), p + w.fc_proj_bias, n, 4 * C, C);
      cuda_layers::add_into(c, out, mid, n * C);
    }
    const float* last = s + blocks.size() * rows * C;
    cuda_layers::layernorm_forward(c, final_ln.span().data(), final_mean.span().data(), final_rstd.span().data(),
                                   last, p + final_ln_gain, p + final_ln_bias, n, C);
    float* logits = probs.span().data();  // softmax in place, as the CPU gpt
    cuda_layers::matmul_forward(c, logits, final_ln.span().data(), weight(head_weight), nullptr, n, C, V);
    cuda_layers::softmax_crossentropy_forward(c, logits, row_losses.span().data(), logits, targets.span().data(), n,
                                              V);
    host_row_losses.resize(rows);
    cuda_check(cudaMemcpyAsync(host_row_losses.data(), row_losses.span().data(), rows * sizeof(double),
                               cudaMemcpyDeviceToHost, context.stream),
               "cudaMemcpyAsync losses to host");
  }

  // Queues the backward pass, which adds into the device gradients `g` (all parameter_count
  // of them); forward() must have run.
  void backward(const gpt_config& config, const batch& input, int sequence, float* g) {
    const int B = int(input.examples), T = sequence, C = config.width, V = config.vocab, H = config.heads;
    const size_t rows = size_t(B) * T;
    const int n = int(rows);
    const cuda_layers::context& c = context;
    const cudaStream_t st = context.stream;
    const float* p = current_parameters;
    float* ds = at_least(d_stream, rows * C);
    float* dln = at_least(d_ln, rows * C);
    float* dqkv = at_least(d_qkv, rows * 3 * C);
    float* dattn = at_least(d_attn_out, rows * C);
    float* dfc = at_least(d_fc, rows * 4 * C);
    float* dfg = at_least(d_fc_gelu, rows * 4 * C);
    float* dscores = at_least(d_scores, size_t(B) * H * T * T);
    const float* s = stream.span().data();
    auto zero = [&](float* data, size_t count) {
      cuda_check(cudaMemsetAsync(data, 0, count * sizeof(float), st), "cudaMemsetAsync");
    };

    groups.build(input.tokens, V);
    upload<std::int32_t>(st, group_positions, groups.positions);
    upload<std::int32_t>(st, group_ids, groups.ids);
    upload<std::int32_t>(st, group_starts, groups.starts);

    zero(ds, rows * C);
    float* dlogits = probs.span().data();  // overwrites the probabilities
    cuda_layers::softmax_crossentropy_backward(c, dlogits, dlogits, targets.span().data(), n, V);
    zero(dln, rows * C);
    cuda_layers::matmul_backward(c, dln, g + head_weight, nullptr, dlogits, final_ln.span().data(),
                                 weight(head_weight), n, C, V);
    cuda_layers::layernorm_backward(c, ds, g + final_ln_gain, g + final_ln_bias, dln, s + blocks.size() * rows * C,
                                    p + final_ln_gain, final_mean.span().data(), final_rstd.span().data(), n, C);

    for (size_t l = blocks.size(); l-- > 0;) {
      const block_offsets& w = blocks[l];
      const float* in = s + l * rows * C;
      const float* mid = attn_residual.span().data() + l * rows * C;
      const float* l1 = ln1.span().data() + l * rows * C;
      const float* q = qkv.span().data() + l * rows * 3 * C;
      const float* pr = attn_probs.span().data() + l * size_t(B) * H * T * T;
      const float* attn = attn_out.span().data() + l * rows * C;
      const float* l2 = ln2.span().data() + l * rows * C;
      const float* f = fc.span().data() + l * rows * 4 * C;
      const float* fg = fc_gelu.span().data() + l * rows * 4 * C;

      zero(dfg, rows * 4 * C);
      cuda_layers::matmul_backward(c, dfg, g + w.fc_proj_weight, g + w.fc_proj_bias, ds, fg,
                                   weight(w.fc_proj_weight), n, 4 * C, C);
      zero(dfc, rows * 4 * C);
      cuda_layers::gelu_backward(c, dfc, dfg, f, n * 4 * C);
      zero(dln, rows * C);
      cuda_layers::matmul_backward(c, dln, g + w.fc_weight, g + w.fc_bias, dfc, l2, weight(w.fc_weight), n, C, 4 * C);
      cuda_layers::layernorm_backward(c, ds, g + w.ln2_gain, g + w.ln2_bias, dln, mid, p + w.ln2_gain,
                                      ln2_mean.span().data() + l * rows, ln2_rstd.span().data() + l * rows, n, C);

      zero(dattn, rows * C);
      cuda_layers::matmul_backward(c, dattn, g + w.attn_proj_weight, g + w.attn_proj_bias, ds, attn,
                                   weight(w.attn_proj_weight), n, C, C);
      zero(dqkv, rows * 3 * C);
      cuda_layers::attention_backward(c, dqkv, dscores, dattn, q, pr, B, T, C, H);
      zero(dln, rows * C);
      cuda_layers::matmul_backward(c, dln, g + w.qkv_weight, g + w.qkv_bias, dqkv, l1, weight(w.qkv_weight), n, C,
                                   3 * C);
      cuda_layers::layernorm_backward(c, ds, g + w.ln1_gain, g + w.ln1_bias, dln, in, p + w.ln1_gain,
                                      ln1_mean.span().data() + l * rows, ln1_rstd.span().data() + l * rows, n, C);
    }
    cuda_layers::embedding_backward(c, g + token_embedding, g + position_embedding, ds, group_positions.span().data(),
                                    group_ids.span().data(), group_starts.span().data(), int(groups.ids.size()), B,
                                    T, C);
  }

  // Waits for the queued work and returns the mean of the row losses.
  double finish() {
    cuda_check(cudaStreamSynchronize(context.stream), "cuda_gpt step");
    double total = 0.0;
    for (double loss : host_row_losses) total += loss;
    return total / double(host_row_losses.size());
  }
};

cuda_gpt::cuda_gpt(const gpt_config& config, compute_precision precision)
    : reference_(config),
      precision_(precision),
      state_(std::make_unique<device_state>(reference_.layout(), reference_.config(), precision)) {}

cuda_gpt::~cuda_gpt() = default;

std::unique_ptr<model> cuda_gpt::clone() const {
  cuda_check(cudaSetDevice(state_->device), "cudaSetDevice");
  return std::make_unique<cuda_gpt>(config(), precision_);
}

std::size_t cuda_gpt::device_bytes() const { return state_->bytes(); }

memory_location cuda_gpt::memory() const { return {memory_space::cuda, state_->device}; }

void cuda_gpt::check_device_memory(const memory_location& where, const char* what) const {
  if (where != memory())
    throw std::invalid_argument("cuda_gpt: " + std::string(what) + " in " + describe_location(where) +
                                ", but this model runs on " + describe_location(memory()));
}

double cuda_gpt::evaluate(std::span<const float> parameters, const batch& input) {
  return evaluate_at(parameters, input);
}

double cuda_gpt::evaluate_at(device_span<const float> parameters, const batch& input) {
  check_size(parameters.size(), parameter_count(), "parameters");
  if (!parameters.on_host()) check_device_memory(parameters.where, "parameters");
  const int sequence = gpt_sequence_length(input, config(), "cuda_gpt");
  state_->prepare(parameters, input, sequence, config());
  state_->forward(config(), int(input.examples), sequence);
  return state_->finish();
}

double cuda_gpt::forward_backward(std::span<const float> parameters, const batch& input,
                                  std::span<float> gradients) {
  return run_backward(parameters, input, gradients, false);
}

double cuda_gpt::accumulate_gradients(std::span<const float> parameters, const batch& input,
                                      std::span<float> gradients) {
  return run_backward(parameters, input, gradients, true);
}

double cuda_gpt::accumulate_gradients_at(device_span<const float> parameters, const batch& input,
                                         device_span<float> gradients) {
  if (parameters.on_host() && gradients.on_host())
    return run_backward(parameters.values, input, gradients.values, true);
  check_size(parameters.size(), parameter_count(), "parameters");
  check_size(gradients.size(), parameter_count(), "gradients");
  check_device_memory(parameters.where, "parameters");
  check_device_memory(gradients.where, "gradients");
  const int sequence = gpt_sequence_length(input, config(), "cuda_gpt");
  device_state& d = *state_;
  d.prepare(parameters, input, sequence, config());
  d.forward(config(), int(input.examples), sequence);
  d.backward(config(), input, sequence, gradients.data());
  return d.finish();
}

double cuda_gpt::run_backward(std::span<const float> parameters, const batch& input, std::span<float> gradients,
                              bool accumulate) {
  check_size(parameters.size(), parameter_count(), "parameters");
  check_size(gradients.size(), parameter_count(), "gradients");
  const int sequence = gpt_sequence_length(input, config(), "cuda_gpt");
  device_state& d = *state_;
  d.prepare(parameters, input, sequence, config());
  d.forward(config(), int(input.examples), sequence);
  // Host gradients: staged on the device, starting from the host's running sum or from zero.
  float* staged = at_least(d.gradients, parameter_count());
  if (accumulate)
    upload_tensor(d.context.stream, staged, gradients);
  else
    cuda_check(cudaMemsetAsync(staged, 0, gradients.size_bytes(), d.context.stream), "cudaMemsetAsync");
  d.backward(config(), input, sequence, staged);
  count_tensor_copy();
  cuda_check(cudaMemcpyAsync(gradients.data(), staged, gradients.size_bytes(), cudaMemcpyDeviceToHost,
                             d.context.stream),
             "cudaMemcpyAsync gradients to host");
  return d.finish();
}

}  // namespace accord
