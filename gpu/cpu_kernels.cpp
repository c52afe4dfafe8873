// The CPU reference kernels (built from the optimizers' own per-element pieces), and the size
// checks every implementation shares.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "gpu/kernels.hpp"
#include "optim/lion.hpp"  // the Lion pieces and the tie rule, shared with the optimizers
#include "transport/transport.hpp"
#include "transport/wire_precision.hpp"

#include "gpu/cuda_backend.hpp"

namespace accord {
namespace {

void require(bool condition, const char* kernel, const std::string& problem) {
  if (!condition) throw std::invalid_argument(std::string("kernels::") + kernel + ": " + problem);
}

std::string sizes(std::size_t a, std::size_t b) {
  return std::to_string(a) + " vs " + std::to_string(b);
}

bool bit(std::span<const std::uint64_t> words, std::size_t i) {
  return (words[i / 64] >> (i % 64)) & 1u;
}

// Packs predicate(i) for i < count into words, clearing the padding bits of the last word.
template <class Predicate>
void pack_bits(std::size_t count, std::span<std::uint64_t> words, Predicate predicate) {
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::uint64_t word = 0;
    for (std::size_t b = 0; b < 64 && w * 64 + b < count; ++b)
      word |= std::uint64_t{predicate(w * 64 + b)} << b;
    words[w] = word;
  }
}

class cpu_kernels final : public kernels {
public:
  device_kind kind() const override { return device_kind::cpu; }
  void synchronize() override {}
  std::shared_ptr<const device_event> record() override { return std::make_shared<device_event>(); }
  void wait_for(const device_event&) override {}

protected:
  void do_fill(std::span<float> values, float value) override { std::fill(values.begin(), values.end(), value); }
  void do_copy(std::span<const float> from, std::span<float> to) override {
    std::copy(from.begin(), from.end(), to.begin());
  }
  void do_scale(std::span<float> values, float factor) override {
    for (float& v : values) v *= factor;
  }
  double do_square_sum(std::span<const float> values) override {
    double sum = 0;  // in order, as the host rules add it
    for (float v : values) sum += static_cast<double>(v) * v;
    return sum;
  }
  void do_convert(wire_precision precision, wire_direction direction, std::span<float> values,
                  std::span<std::uint16_t> wire) override {
    switch (direction) {
      case wire_direction::narrow: return accord::to_wire(precision, values, wire);
      case wire_direction::widen: return accord::from_wire(precision, wire, values);
      case wire_direction::add_widened: return accord::add_from_wire(precision, wire, values);
    }
  }
  void do_lion_signs(std::span<const float> gradients, std::span<float> momentum, float beta1, float beta2,
                     std::uint64_t round, std::span<std::uint64_t> bits) override {
    lion_local_direction(gradients, momentum, beta1, beta2, bits, round);
  }
  void do_sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority,
                      std::span<const std::uint16_t> plus_votes, int voters, float learning_rate,
                      float weight_decay) override {
    if (plus_votes.empty()) return apply_sign_update(parameters, majority, learning_rate, weight_decay);
    apply_sign_update(parameters, plus_votes, voters, learning_rate, weight_decay);
  }
  void do_accumulate(std::span<float> into, std::span<const float> values, float scale) override {
    for (std::size_t i = 0; i < into.size(); ++i) into[i] += scale * values[i];
  }

  void do_widen_bf16(std::span<const std::uint16_t> bf16, std::span<float> values) override {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = from_bf16(bf16[i]);
  }

  void do_pack_signs(std::span<const float> values, std::uint64_t round,
                     std::span<std::uint64_t> bits) override {
    pack_bits(values.size(), bits, [&](std::size_t i) { return sign_bit(values[i], i, round); });
  }

  void do_unpack_signs(std::span<const std::uint64_t> bits, std::span<float> signs) override {
    for (std::size_t i = 0; i < signs.size(); ++i) signs[i] = bit(bits, i) ? 1.0f : -1.0f;
  }

  void do_count_votes(std::span<const std::uint64_t> vectors, std::size_t voters,
                      std::span<std::uint16_t> plus_votes) override {
    const std::size_t words = packed_words(plus_votes.size());
    for (std::size_t i = 0; i < plus_votes.size(); ++i) {
      unsigned count = 0;
      for (std::size_t v = 0; v < voters; ++v) count += bit(vectors.subspan(v * words, words), i);
      plus_votes[i] = static_cast<std::uint16_t>(count);
    }
  }

  void do_majority(std::span<const std::uint16_t> plus_votes, std::size_t voters,
                   std::uint64_t first_element, std::uint64_t round,
                   std::span<std::uint64_t> bits) override {
    pack_bits(plus_votes.size(), bits, [&](std::size_t i) {
      const std::size_t twice = 2 * std::size_t{plus_votes[i]};
      return twice > voters || (twice == voters && tie_vote(first_element + i, round));
    });
  }

  void do_pack_counts(std::span<const std::uint16_t> counts, unsigned bits_per_count,
                      std::span<std::uint64_t> planes) override {
    const std::size_t words = packed_words(counts.size());
    for (unsigned k = 0; k < bits_per_count; ++k)
      pack_bits(counts.size(), planes.subspan(k * words, words),
                [&](std::size_t i) { return (counts[i] >> k) & 1u; });
  }

  void do_unpack_counts(std::span<const std::uint64_t> planes, unsigned bits_per_count,
                        std::span<std::uint16_t> counts) override {
    const std::size_t words = packed_words(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i) {
      unsigned count = 0;
      for (unsigned k = 0; k < bits_per_count; ++k)
        count |= unsigned{bit(planes.subspan(k * words, words), i)} << k;
      counts[i] = static_cast<std::uint16_t>(count);
    }
  }

  void do_adamw_step(std::span<float> p, std::span<const float> g, std::span<float> m,
                     std::span<float> v, const adamw_step_config& c) override {
    const adamw_factors f = adamw_factors::of(c);
    for (std::size_t i = 0; i < p.size(); ++i) {
      m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g[i] * g[i];
      p[i] = p[i] * f.decay - f.step_size * m[i] / (std::sqrt(v[i]) * f.inv_sqrt_correction2 + c.epsilon);
    }
  }

  void do_lion_step(std::span<float> p, std::span<const float> g, std::span<float> m,
                    const lion_step_config& c) override {
    const float decay = sign_step_decay(c.learning_rate, c.weight_decay);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const float direction = lion_direction(m[i], g[i], c.beta1);
      const float sign = static_cast<float>((direction > 0.0f) - (direction < 0.0f));
      p[i] = sign_step(p[i], sign, decay, c.learning_rate);
      m[i] = lion_momentum(m[i], g[i], c.beta2);
    }
  }
};

}  // namespace

adamw_factors adamw_factors::of(const adamw_step_config& c) {
  const double t = static_cast<double>(c.step);
  return {static_cast<float>(c.learning_rate / (1.0 - std::pow(double{c.beta1}, t))),
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{c.beta2}, t))),
          1.0f - c.learning_rate * c.weight_decay};
}

void kernels::fill(std::span<float> values, float value) { do_fill(values, value); }

void kernels::copy(std::span<const float> from, std::span<float> to) {
  require(from.size() == to.size(), "copy", "sizes differ: " + sizes(from.size(), to.size()));
  do_copy(from, to);
}

void kernels::scale(std::span<float> values, float factor) { do_scale(values, factor); }

double kernels::square_sum(std::span<const float> values) { return do_square_sum(values); }

namespace {
void require_wire(wire_precision precision, std::size_t values, std::size_t wire, const char* kernel) {
  require(precision != wire_precision::fp32, kernel, "fp32 values travel unconverted");
  require(values == wire, kernel, "sizes differ: " + sizes(values, wire));
}
}  // namespace

void kernels::to_wire(wire_precision precision, std::span<const float> values, std::span<std::uint16_t> wire) {
  require_wire(precision, values.size(), wire.size(), "to_wire");
  // Narrowing only reads the values.
  do_convert(precision, wire_direction::narrow, {const_cast<float*>(values.data()), values.size()}, wire);
}

void kernels::from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> values) {
  require_wire(precision, values.size(), wire.size(), "from_wire");
  do_convert(precision, wire_direction::widen, values, {const_cast<std::uint16_t*>(wire.data()), wire.size()});
}

void kernels::add_from_wire(wire_precision precision, std::span<const std::uint16_t> wire, std::span<float> sums) {
  require_wire(precision, sums.size(), wire.size(), "add_from_wire");
  do_convert(precision, wire_direction::add_widened, sums, {const_cast<std::uint16_t*>(wire.data()), wire.size()});
}

void kernels::lion_signs(std::span<const float> gradients, std::span<float> momentum, float beta1, float beta2,
                         std::uint64_t round, std::span<std::uint64_t> bits) {
  require(momentum.size() == gradients.size(), "lion_signs",
          "gradients and momentum differ: " + sizes(gradients.size(), momentum.size()));
  require(bits.size() == packed_words(gradients.size()), "lion_signs",
          "need packed_words(gradients) words: " + sizes(bits.size(), packed_words(gradients.size())));
  do_lion_signs(gradients, momentum, beta1, beta2, round, bits);
}

void kernels::sign_update(std::span<float> parameters, std::span<const std::uint64_t> majority,
                          float learning_rate, float weight_decay) {
  require(majority.size() == packed_words(parameters.size()), "sign_update",
          "need packed_words(parameters) words: " + sizes(majority.size(), packed_words(parameters.size())));
  do_sign_update(parameters, majority, {}, 0, learning_rate, weight_decay);
}

void kernels::sign_update(std::span<float> parameters, std::span<const std::uint16_t> plus_votes, int voters,
                          float learning_rate, float weight_decay) {
  require(plus_votes.size() == parameters.size(), "sign_update",
          "parameters and vote counts differ: " + sizes(parameters.size(), plus_votes.size()));
  require(voters >= 1 && voters <= 0xffff, "sign_update", "voters must be 1..65535");
  if (parameters.empty()) return;  // the empty vote span means the majority form
  do_sign_update(parameters, {}, plus_votes, voters, learning_rate, weight_decay);
}

void kernels::accumulate(std::span<float> into, std::span<const float> values, float scale) {
  require(into.size() == values.size(), "accumulate", "sizes differ: " + sizes(into.size(), values.size()));
  do_accumulate(into, values, scale);
}

void kernels::widen_bf16(std::span<const std::uint16_t> bf16, std::span<float> values) {
  require(bf16.size() == values.size(), "widen_bf16", "sizes differ: " + sizes(bf16.size(), values.size()));
  do_widen_bf16(bf16, values);
}

void kernels::pack_signs(std::span<const float> values, std::uint64_t round,
                         std::span<std::uint64_t> bits) {
  require(bits.size() == packed_words(values.size()), "pack_signs",
          "need packed_words(values) words: " + sizes(bits.size(), packed_words(values.size())));
  do_pack_signs(values, round, bits);
}

void kernels::unpack_signs(std::span<const std::uint64_t> bits, std::span<float> signs) {
  require(bits.size() == packed_words(signs.size()), "unpack_signs",
          "need packed_words(signs) words: " + sizes(bits.size(), packed_words(signs.size())));
  do_unpack_signs(bits, signs);
}

void kernels::count_votes(std::span<const std::uint64_t> vectors, std::size_t voters,
                          std::span<std::uint16_t> plus_votes) {
  require(voters > 0 && voters <= 0xffff, "count_votes", "voters must be 1..65535");
  require(vectors.size() == voters * packed_words(plus_votes.size()), "count_votes",
          "need voters*packed_words(count) words: " +
              sizes(vectors.size(), voters * packed_words(plus_votes.size())));
  do_count_votes(vectors, voters, plus_votes);
}

void kernels::majority(std::span<const std::uint16_t> plus_votes, std::size_t voters,
                       std::uint64_t first_element, std::uint64_t round,
                       std::span<std::uint64_t> bits) {
  require(voters > 0, "majority", "no voters");
  require(bits.size() == packed_words(plus_votes.size()), "majority",
          "need packed_words(count) words: " + sizes(bits.size(), packed_words(plus_votes.size())));
  do_majority(plus_votes, voters, first_element, round, bits);
}

void kernels::pack_counts(std::span<const std::uint16_t> counts, unsigned bits_per_count,
                          std::span<std::uint64_t> planes) {
  require(bits_per_count >= 1 && bits_per_count <= 16, "pack_counts", "bits_per_count must be 1..16");
  require(planes.size() == bits_per_count * packed_words(counts.size()), "pack_counts",
          "need bits_per_count*packed_words(count) words: " +
              sizes(planes.size(), bits_per_count * packed_words(counts.size())));
  do_pack_counts(counts, bits_per_count, planes);
}

void kernels::unpack_counts(std::span<const std::uint64_t> planes, unsigned bits_per_count,
                            std::span<std::uint16_t> counts) {
  require(bits_per_count >= 1 && bits_per_count <= 16, "unpack_counts", "bits_per_count must be 1..16");
  require(planes.size() == bits_per_count * packed_words(counts.size()), "unpack_counts",
          "need bits_per_count*packed_words(count) words: " +
              sizes(planes.size(), bits_per_count * packed_words(counts.size())));
  do_unpack_counts(planes, bits_per_count, counts);
}

void kernels::adamw_step(std::span<float> parameters, std::span<const float> gradients,
                         std::span<float> m, std::span<float> v, const adamw_step_config& config) {
  const std::size_t n = parameters.size();
  require(gradients.size() == n && m.size() == n && v.size() == n, "adamw_step",
          "parameters, gradients, m and v must have equal sizes");
  require(config.step >= 1, "adamw_step", "step counts from 1");
  do_adamw_step(parameters, gradients, m, v, config);
}

void kernels::lion_step(std::span<float> parameters, std::span<const float> gradients,
                        std::span<float> m, const lion_step_config& config) {
  const std::size_t n = parameters.size();
  require(gradients.size() == n && m.size() == n, "lion_step",
          "parameters, gradients and m must have equal sizes");
  do_lion_step(parameters, gradients, m, config);
}

std::unique_ptr<kernels> make_kernels(device_kind kind) {
  if (kind == device_kind::cpu) return std::make_unique<cpu_kernels>();
  parse_device("cuda");  // throws a clear error when there is no usable device
  return require_cuda_backend("--device cuda").make_kernels();
}

}  // namespace accord
