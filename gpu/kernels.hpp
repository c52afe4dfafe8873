#pragma once
// The element-wise kernels of the training loop, once as the CPU reference and once for CUDA,
// behind one interface. Spans point into the memory of the kernels' device (device_array);
// CUDA kernels are queued on a stream and run asynchronously until synchronize().
//
// Bit layouts are those of transport.hpp: element i of a packed vector lives in word i/64,
// bit i%64 (LSB first); a set bit is +1.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "gpu/device.hpp"
#include "transport/wire_precision.hpp"

namespace accord {

// One AdamW step as optim/optimizer.cpp takes it (PyTorch's arrangement): p *= 1 - lr*wd, then
// p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). `step` (t) counts from 1.
struct adamw_step_config {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  std::uint64_t step = 1;
};

// One Lion step: p *= 1 - lr*wd; c = b1*m + (1-b1)*g; p -= lr*sign(c), sign(0) = 0;
// m = b2*m + (1-b2)*g.
struct lion_step_config {
  float learning_rate = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.99f;
  float weight_decay = 0.0f;
};

// The per-step scalars of AdamW, computed on the host once, identically for every device.
struct adamw_factors {
  float step_size;             // lr / (1 - b1^t)
  float inv_sqrt_correction2;  // 1 / sqrt(1 - b2^t)
  float decay;                 // 1 - lr*wd
  static adamw_factors of(const adamw_step_config& config);
};

// A point in a stream's queued work (kernels::record). CUDA: an event; the CPU's kernels run
// as they are called, so their points are always reached.
class device_event {
public:
  virtual ~device_event() = default;
};

class kernels {
public:
  virtual ~kernels() = default;
  virtual device_kind kind() const = 0;
  // Waits until every queued kernel has finished (no-op on the CPU).
  virtual void synchronize() = 0;

  // Stream ordering without a host wait: record() marks the work queued so far on this stream
  // (cudaEventRecord); wait_for(e) makes the work queued here from now on wait on the device
  // until e is reached (cudaStreamWaitEvent). An event of another kind (a CPU one) is reached.
  virtual std::shared_ptr<const device_event> record() = 0;
  virtual void wait_for(const device_event& event) = 0;

  // values[i] = value; to[i] = from[i]; values[i] *= factor.
  void fill(std::span<float> values, float value);
  void copy(std::span<const float> from, std::span<float> to);
  void scale(std::span<float> values, float factor);
  // Sum of squares in double (the gradient norm's share a round reports). Waits for the stream:
  // the one host wait inside a device round, for 8 bytes.
  double square_sum(std::span<const float> values);
  // The 16-bit wire conversions of transport/wire_precision.hpp, bit for bit (bf16 or fp16):
  // wire = to_wire(values); values = from_wire(wire); sums += from_wire(wire).
  void to_wire(wire_precision precision, std::span<const float> values, std::span<std::uint16_t> wire);
  void from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> values);
  void add_from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> sums);
  // Distributed Lion's local half, lion_local_direction of optim/lion.hpp: the direction
  // b1*m + (1-b1)*g packed into sign bits (ties by tie_vote(i, round)), then m = b2*m + (1-b2)*g.
  void lion_signs(std::span<const float> gradients, std::span<float> momentum, float beta1, float beta2,
                  std::uint64_t round, std::span<std::uint64_t> bits);
  // Its shared half, apply_sign_update of optim/lion.hpp: p = p*(1 - lr*wd) - lr*delta, delta
  // = +-1 by the majority bit, or (2*plus_votes - voters)/voters when averaging.
  void sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority, float learning_rate,
                   float weight_decay);
  void sign_update(std::span<float> parameters, std::span<const std::uint16_t> plus_votes, int voters,
                   float learning_rate, float weight_decay);

  // into += scale * values (gradient accumulation into fp32).
  void accumulate(std::span<float> into, std::span<const float> values, float scale = 1.0f);
  // values[i] = the bf16 value bf16[i] (from_bf16 of transport/wire_precision.hpp: exact), so
  // that fp32 values which are bf16 values cross to the device in half the bytes.
  void widen_bf16(std::span<const std::uint16_t> bf16, std::span<float> values);
  // bits[i] = values[i] > 0; a zero takes +1 when (i + round) is even, so zeros do not all
  // vote the same way and the choice alternates over rounds. bits: packed_words(values.size()).
  void pack_signs(std::span<const float> values, std::uint64_t round, std::span<std::uint64_t> bits);
  // signs[i] = bit i ? +1 : -1, for i < signs.size().
  void unpack_signs(std::span<const std::uint64_t> bits, std::span<float> signs);
  // plus_votes[i] = number of the `voters` packed vectors with bit i set. The vectors lie one
  // after another, packed_words(plus_votes.size()) words each.
  void count_votes(std::span<const std::uint64_t> vectors, std::size_t voters,
                   std::span<std::uint16_t> plus_votes);
  // bits[i] = 2*plus_votes[i] > voters; a tie takes +1 when (first_element + i + round) is
  // even (first_element: the global index of plus_votes[0] when voting on a shard).
  void majority(std::span<const std::uint16_t> plus_votes, std::size_t voters,
                std::uint64_t first_element, std::uint64_t round, std::span<std::uint64_t> bits);
  // Vote counts as `bits_per_count` bit planes: bit k of counts[i] goes to plane k (each plane
  // packed_words(counts.size()) words, plane after plane), so counts travel in
  // ceil(log2(voters + 1)) bits per element.
  void pack_counts(std::span<const std::uint16_t> counts, unsigned bits_per_count,
                   std::span<std::uint64_t> planes);
  void unpack_counts(std::span<const std::uint64_t> planes, unsigned bits_per_count,
                     std::span<std::uint16_t> counts);
  // Optimizer steps over one shard, fused into one pass over parameters, gradient and state.
  void adamw_step(std::span<float> parameters, std::span<const float> gradients,
                  std::span<float> m, std::span<float> v, const adamw_step_config& config);
  void lion_step(std::span<float> parameters, std::span<const float> gradients,
                 std::span<float> m, const lion_step_config& config);

protected:
  // Called with sizes already checked.
  virtual void do_fill(std::span<float> values, float value) = 0;
  virtual void do_copy(std::span<const float> from, std::span<float> to) = 0;
  virtual void do_scale(std::span<float> values, float factor) = 0;
  virtual double do_square_sum(std::span<const float> values) = 0;
  // narrow reads `values` and writes `wire`; widen and add_widened read `wire`, write `values`.
  enum class wire_direction { narrow, widen, add_widened };
  virtual void do_convert(wire_precision precision, wire_direction direction, std::span<float> values,
                          std::span<std::uint16_t> wire) = 0;
  virtual void do_lion_signs(std::span<const float> gradients, std::span<float> momentum, float beta1,
                             float beta2, std::uint64_t round, std::span<std::uint64_t> bits) = 0;
  // plus_votes empty: the majority form (delta +-1 by `majority`'s bit).
  virtual void do_sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority,
                              std::span<const std::uint16_t> plus_votes, int voters, float learning_rate,
                              float weight_decay) = 0;
  virtual void do_accumulate(std::span<float> into, std::span<const float> values, float scale) = 0;
  virtual void do_widen_bf16(std::span<const std::uint16_t> bf16, std::span<float> values) = 0;
  virtual void do_pack_signs(std::span<const float> values, std::uint64_t round,
                             std::span<std::uint64_t> bits) = 0;
  virtual void do_unpack_signs(std::span<const std::uint64_t> bits, std::span<float> signs) = 0;
  virtual void do_count_votes(std::span<const std::uint64_t> vectors, std::size_t voters,
                              std::span<std::uint16_t> plus_votes) = 0;
  virtual void do_majority(std::span<const std::uint16_t> plus_votes, std::size_t voters,
                           std::uint64_t first_element, std::uint64_t round,
                           std::span<std::uint64_t> bits) = 0;
  virtual void do_pack_counts(std::span<const std::uint16_t> counts, unsigned bits_per_count,
                              std::span<std::uint64_t> planes) = 0;
  virtual void do_unpack_counts(std::span<const std::uint64_t> planes, unsigned bits_per_count,
                                std::span<std::uint16_t> counts) = 0;
  virtual void do_adamw_step(std::span<float> parameters, std::span<const float> gradients,
                             std::span<float> m, std::span<float> v,
                             const adamw_step_config& config) = 0;
  virtual void do_lion_step(std::span<float> parameters, std::span<const float> gradients,
                            std::span<float> m, const lion_step_config& config) = 0;
};

// The CPU reference kernels, or CUDA kernels on the current device's default stream (ordered
// with device_array copies). Throws std::runtime_error for cuda without a usable device.
std::unique_ptr<kernels> make_kernels(device_kind kind);

}  // namespace accord
