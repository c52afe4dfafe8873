// The device abstraction, the kernels (CPU reference by hand values and against the optimizers,
// CUDA against the CPU), and the NCCL transport. Tests that need a GPU print ACCORD_SKIPPED and
// return on machines without one; ctest reports them as skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/device.hpp"
#include "gpu/kernels.hpp"
#include "optim/optimizer.hpp"
#include "transport/shard.hpp"
#include "transport/transport.hpp"

#if ACCORD_HAVE_CUDA
#include "gpu/nccl_transport.hpp"
#include "transport_conformance.hpp"
#endif

using namespace accord;

namespace {

bool skip_without_cuda() {
  if (cuda_available()) return false;
  MESSAGE("ACCORD_SKIPPED: no CUDA device on this machine");
  return true;
}

// Normal values with exact zeros sprinkled in, so sign ties are exercised.
std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = i % 17 == 3 ? 0.0f : normal(generator);
  return values;
}

std::vector<std::uint64_t> random_words(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<std::uint64_t> words(n);
  for (auto& w : words) w = generator();
  return words;
}

// Relative difference within `tolerance` (plus a tiny absolute floor for values near 0).
void check_close(const std::vector<float>& actual, const std::vector<float>& expected, float tolerance) {
  REQUIRE(actual.size() == expected.size());
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance * std::fabs(expected[i]) + 1e-30f) && bad++ == 0)
      first_bad = i;
  CHECK_MESSAGE(bad == 0, bad << " of " << actual.size() << " differ; first at " << first_bad << ": "
                              << (bad ? actual[first_bad] : 0.0f) << " vs " << (bad ? expected[first_bad] : 0.0f));
}

}  // namespace

TEST_CASE("parse_device accepts cpu, cuda, cuda:N and auto and names a bad value") {
  CHECK(parse_device("cpu") == device_kind::cpu);
  CHECK(parse_device("auto") == default_device());
  CHECK(to_string(device_kind::cuda) == "cuda");
  CHECK(cuda_index("cuda:3") == 3);
  for (const char* name : {"cpu", "cuda", "auto"}) CHECK_FALSE(cuda_index(name));
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CPU", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(check_device_name(bad), ("--device: '" + std::string(bad) + "' is not cpu, cuda, cuda:N or auto").c_str(),
                         std::invalid_argument);
    CHECK_THROWS_AS(parse_device(bad), std::invalid_argument);
  }
  if (cuda_available()) {
    CHECK(parse_device("cuda") == device_kind::cuda);
    CHECK(parse_device("cuda:0") == device_kind::cuda);
    CHECK_THROWS_WITH_AS(parse_device("cuda:" + std::to_string(cuda_device_count())),
                         doctest::Contains("does not exist: this machine has"), std::runtime_error);
  } else {
    CHECK_THROWS_WITH_AS(parse_device("cuda"), doctest::Contains("--device cuda: no usable CUDA device"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(parse_device("cuda:1"), doctest::Contains("--device cuda:1: no usable CUDA device"),
                         std::runtime_error);
    CHECK_THROWS_AS(make_kernels(device_kind::cuda), std::runtime_error);
  }
}

TEST_CASE("cuda_available is consistent and safe on a machine without a driver") {
  // Without a driver cudaGetDeviceCount fails (error 35) and leaves the count unwritten.
  CHECK(cuda_available() == (cuda_device_count() > 0));
  CHECK(default_device() == (cuda_available() ? device_kind::cuda : device_kind::cpu));
  CHECK(describe_device(device_kind::cpu).starts_with("cpu ("));
  if (cuda_available()) {
    const std::string line = describe_device(device_kind::cuda);
    CHECK(line.starts_with("cuda:"));
    MESSAGE(line);
    CHECK(cuda_properties().memory_bandwidth > 1e11);  // any GPU of sm_80 or later
  } else {
    CHECK_THROWS_AS(cuda_properties(), std::runtime_error);
  }
}

TEST_CASE("device_array on the cpu copies in and out and checks sizes") {
  const std::vector<float> host{1.0f, 2.0f, 3.0f};
  device_array<float> array(device_kind::cpu, std::span<const float>(host));
  CHECK(array.to_host() == host);
  std::vector<float> wrong(2);
  CHECK_THROWS_AS(array.copy_to(wrong), std::invalid_argument);
  device_array<float> moved = std::move(array);
  CHECK(moved.size() == 3);
  CHECK(array.size() == 0);
}

TEST_CASE("cpu kernels: accumulate, bf16 widening, sign packing with the tie rule, unpacking") {
  auto k = make_kernels(device_kind::cpu);
  std::vector<float> into{1.0f, 2.0f, -3.0f};
  k->accumulate(into, std::vector<float>{0.5f, 0.5f, 1.0f});
  CHECK(into == std::vector<float>{1.5f, 2.5f, -2.0f});
  k->accumulate(into, std::vector<float>{2.0f, 0.0f, 4.0f}, 0.25f);
  CHECK(into == std::vector<float>{2.0f, 2.5f, -1.0f});
  std::vector<float> widened(3);
  k->widen_bf16(std::vector<std::uint16_t>{0x3f80, 0xc040, 0x8000}, widened);
  CHECK(widened == std::vector<float>{1.0f, -3.0f, -0.0f});
  CHECK(std::signbit(widened[2]));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values{1.0f, -1.0f, 0.0f, 0.0f, -0.0f, nan};
  std::vector<std::uint64_t> bits(1);
  k->pack_signs(values, 0, bits);
  CHECK(bits[0] == 0b010101u);  // zeros at even index+round vote +1; NaN packs as -1
  k->pack_signs(values, 1, bits);
  CHECK(bits[0] == 0b001001u);

  std::vector<float> many(130, -2.0f);
  many[0] = many[64] = many[129] = 5.0f;
  std::vector<std::uint64_t> words(3);
  k->pack_signs(many, 0, words);
  CHECK(words == std::vector<std::uint64_t>{1, 1, 2});
  std::vector<float> signs(130);
  k->unpack_signs(words, signs);
  for (std::size_t i = 0; i < signs.size(); ++i) CHECK(signs[i] == (many[i] > 0 ? 1.0f : -1.0f));
}

TEST_CASE("cpu kernels: vote counts, majority with ties, counts as bit planes") {
  auto k = make_kernels(device_kind::cpu);
  // Four voters on 3 elements (one word each): element 0: 4 plus, 1: 2 plus (tie), 2: 1 plus.
  const std::vector<std::uint64_t> vectors{0b011, 0b001, 0b111, 0b001};
  std::vector<std::uint16_t> counts(3);
  k->count_votes(vectors, 4, counts);
  CHECK(counts == std::vector<std::uint16_t>{4, 2, 1});
  std::vector<std::uint64_t> majority(1);
  k->majority(counts, 4, 0, 0, majority);
  CHECK(majority[0] == 0b001u);  // element 1 ties, odd index + round 0: -1
  k->majority(counts, 4, 0, 1, majority);
  CHECK(majority[0] == 0b011u);  // round 1: +1
  k->majority(counts, 4, 1, 0, majority);
  CHECK(majority[0] == 0b011u);  // a shard starting at element 1 shifts the parity
  k->majority(counts, 3, 0, 0, majority);
  CHECK(majority[0] == 0b011u);  // 2 of 3 is a majority

  std::vector<std::uint16_t> many(200);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::uint16_t>(i % 6);
  std::vector<std::uint64_t> planes(3 * packed_words(many.size()));
  k->pack_counts(many, 3, planes);
  CHECK(((planes[0] >> 5) & 1u) == 1u);                     // count 5: bit 0 set
  CHECK(((planes[2 * packed_words(200)] >> 4) & 1u) == 1u);  // count 4: bit 2 set
  std::vector<std::uint16_t> back(200);
  k->unpack_counts(planes, 3, back);
  CHECK(back == many);
}

TEST_CASE("cpu kernels: Lion by hand, and AdamW and Lion equal optim's optimizers bit for bit") {
  auto k = make_kernels(device_kind::cpu);
  {
    std::vector<float> p{1.0f, 1.0f, 1.0f}, m{0.0f, 0.0f, 1.0f};
    const std::vector<float> g{0.5f, 0.0f, -20.0f};
    k->lion_step(p, g, m, {0.1f, 0.9f, 0.99f, 0.5f});
    // decay 1 - 0.1*0.5 = 0.95; c = 0.05 (+1), exactly 0 (no step, sign(0) = 0), -1.1 (-1)
    CHECK(p[0] == doctest::Approx(0.85f));
    CHECK(p[1] == doctest::Approx(0.95f));
    CHECK(p[2] == doctest::Approx(1.05f));
    CHECK(m[0] == doctest::Approx(0.005f));
    CHECK(m[2] == doctest::Approx(0.99f - 0.2f));
  }
  const std::size_t n = 1000;
  for (const char* kind : {"adamw", "lion"}) {
    CAPTURE(kind);
    optimizer_config config;
    config.kind = kind;
    config.weight_decay = 0.1f;
    auto reference = make_optimizer(config, n);
    std::vector<float> p = random_values(n, 1), p_kernel = p;
    std::vector<float> state(2 * n, 0.0f);
    for (std::uint64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = random_values(n, 10 + static_cast<std::uint32_t>(step));
      const float lr = 1e-3f * static_cast<float>(step);
      reference->step(p, g, lr);
      if (config.kind == "adamw")
        k->adamw_step(p_kernel, g, std::span(state).first(n), std::span(state).subspan(n),
                      {lr, config.beta1, config.beta2, config.epsilon, config.weight_decay, step});
      else
        k->lion_step(p_kernel, g, std::span(state).first(n), {lr, config.beta1, config.beta2, config.weight_decay});
    }
    CHECK(p_kernel == p);
    const std::vector<float>& slots = reference->state().values;
    CHECK(std::equal(slots.begin(), slots.end(), state.begin()));
  }
}

TEST_CASE("kernels refuse mismatched sizes with a message naming the kernel") {
  auto k = make_kernels(device_kind::cpu);
  std::vector<float> a(3), b(4);
  CHECK_THROWS_WITH_AS(k->accumulate(a, b), "kernels::accumulate: sizes differ: 3 vs 4", std::invalid_argument);
  std::vector<std::uint64_t> words(2);
  CHECK_THROWS_AS(k->pack_signs(a, 0, words), std::invalid_argument);
  std::vector<std::uint16_t> counts(3);
  CHECK_THROWS_AS(k->count_votes(words, 3, counts), std::invalid_argument);
  CHECK_THROWS_AS(k->pack_counts(counts, 17, words), std::invalid_argument);
  CHECK_THROWS_AS(k->adamw_step(a, a, a, b, {}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(k->widen_bf16(counts, b), "kernels::widen_bf16: sizes differ: 3 vs 4", std::invalid_argument);
}

// Every kernel on the GPU against the CPU reference. The CUDA kernels avoid FMA contraction
// and use correctly rounded division and square root, so results are expected bit-identical;
// floats are compared at 1e-6 relative so a stray contraction is reported with its size.
TEST_CASE("cuda kernels match the cpu reference") {
  if (skip_without_cuda()) return;
  auto cpu = make_kernels(device_kind::cpu);
  auto gpu = make_kernels(device_kind::cuda);
  const std::size_t n = 100003, words = packed_words(n), voters = 5;
  const auto to_gpu = [](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    return device_array<T>(device_kind::cuda, std::span<const T>(host));
  };

  SUBCASE("accumulate") {
    std::vector<float> into = random_values(n, 1);
    const std::vector<float> values = random_values(n, 2);
    auto d_into = to_gpu(into);
    gpu->accumulate(d_into.span(), to_gpu(values).span(), 0.37f);
    cpu->accumulate(into, values, 0.37f);
    check_close(d_into.to_host(), into, 1e-6f);
  }
  SUBCASE("widen bf16") {
    std::vector<std::uint16_t> bf16(n);
    std::mt19937 generator(9);
    for (auto& b : bf16) b = static_cast<std::uint16_t>(generator());  // NaNs and infinities too
    std::vector<float> values(n);
    cpu->widen_bf16(bf16, values);
    device_array<float> d_values(device_kind::cuda, n);
    gpu->widen_bf16(to_gpu(bf16).span(), d_values.span());
    const std::vector<float> got = d_values.to_host();
    CHECK(std::memcmp(got.data(), values.data(), n * sizeof(float)) == 0);  // bitwise, NaNs included
  }
  SUBCASE("pack and unpack signs") {
    const std::vector<float> values = random_values(n, 3);
    for (std::uint64_t round : {0, 1, 7}) {
      std::vector<std::uint64_t> bits(words);
      cpu->pack_signs(values, round, bits);
      device_array<std::uint64_t> d_bits(device_kind::cuda, words);
      gpu->pack_signs(to_gpu(values).span(), round, d_bits.span());
      CHECK(d_bits.to_host() == bits);
      std::vector<float> signs(n);
      cpu->unpack_signs(bits, signs);
      device_array<float> d_signs(device_kind::cuda, n);
      gpu->unpack_signs(d_bits.span(), d_signs.span());
      CHECK(d_signs.to_host() == signs);
    }
  }
  SUBCASE("vote counts, majority and count planes") {
    const std::vector<std::uint64_t> vectors = random_words(voters * words, 4);
    std::vector<std::uint16_t> counts(n);
    cpu->count_votes(vectors, voters, counts);
    device_array<std::uint16_t> d_counts(device_kind::cuda, n);
    gpu->count_votes(to_gpu(vectors).span(), voters, d_counts.span());
    CHECK(d_counts.to_host() == counts);
    for (std::size_t even_voters : {voters, voters - 1}) {
      std::vector<std::uint64_t> majority(words);
      cpu->majority(counts, even_voters, 12345, 3, majority);
      device_array<std::uint64_t> d_majority(device_kind::cuda, words);
      gpu->majority(d_counts.span(), even_voters, 12345, 3, d_majority.span());
      CHECK(d_majority.to_host() == majority);
    }
    std::vector<std::uint64_t> planes(3 * words);
    cpu->pack_counts(counts, 3, planes);
    device_array<std::uint64_t> d_planes(device_kind::cuda, 3 * words);
    gpu->pack_counts(d_counts.span(), 3, d_planes.span());
    CHECK(d_planes.to_host() == planes);
    device_array<std::uint16_t> d_back(device_kind::cuda, n);
    gpu->unpack_counts(d_planes.span(), 3, d_back.span());
    CHECK(d_back.to_host() == counts);
  }
  SUBCASE("AdamW and Lion steps") {
    std::vector<float> p = random_values(n, 5), m = random_values(n, 6, 0.1f), v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = std::fabs(m[i]) * 0.01f;
    std::vector<float> lion_p = p, lion_m = m;
    auto d_p = to_gpu(p), d_m = to_gpu(m), d_v = to_gpu(v), d_lion_p = to_gpu(lion_p), d_lion_m = to_gpu(lion_m);
    for (std::uint64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = random_values(n, 20 + static_cast<std::uint32_t>(step));
      auto d_g = to_gpu(g);
      const adamw_step_config adamw{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, step};
      cpu->adamw_step(p, g, m, v, adamw);
      gpu->adamw_step(d_p.span(), d_g.span(), d_m.span(), d_v.span(), adamw);
      const lion_step_config lion{1e-4f, 0.9f, 0.99f, 0.1f};
      cpu->lion_step(lion_p, g, lion_m, lion);
      gpu->lion_step(d_lion_p.span(), d_g.span(), d_lion_m.span(), lion);
    }
    check_close(d_p.to_host(), p, 1e-6f);
    check_close(d_m.to_host(), m, 1e-6f);
    check_close(d_v.to_host(), v, 1e-6f);
    check_close(d_lion_p.to_host(), lion_p, 1e-6f);
    check_close(d_lion_m.to_host(), lion_m, 1e-6f);
  }

  SUBCASE("the device rounds' kernels: fill, copy, scale, square sum, wire conversions, Lion signs, sign steps") {
    std::vector<float> values = random_values(n, 30, 1e3f);
    // Conversion edge cases: NaN, infinities, overflow to inf, fp16 subnormals, a bf16 halfway case.
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), 70000.0f, 65519.0f, 65520.0f, 3e-6f, -5.96e-8f,
                              2.9e-8f, 1e-40f, 1.00390625f, 0.0f, -0.0f};
    std::copy(std::begin(specials), std::end(specials), values.begin());
    auto d_values = to_gpu(values);
    for (const wire_precision wire : {wire_precision::bf16, wire_precision::fp16}) {
      CAPTURE(precision_name(wire));
      std::vector<std::uint16_t> expected(n);
      cpu->to_wire(wire, values, expected);
      device_array<std::uint16_t> d_wire(device_kind::cuda, n);
      gpu->to_wire(wire, d_values.span(), d_wire.span());
      CHECK(d_wire.to_host() == expected);
      std::vector<float> widened(n), sums = random_values(n, 31);
      cpu->from_wire(wire, expected, widened);
      device_array<float> d_widened(device_kind::cuda, n);
      auto d_sums = to_gpu(sums);
      gpu->from_wire(wire, d_wire.span(), d_widened.span());
      cpu->add_from_wire(wire, expected, sums);
      gpu->add_from_wire(wire, d_wire.span(), d_sums.span());
      const auto back = d_widened.to_host();
      CHECK(std::memcmp(back.data(), widened.data(), n * sizeof(float)) == 0);  // NaNs too
      const auto summed = d_sums.to_host();
      CHECK(std::memcmp(summed.data(), sums.data(), n * sizeof(float)) == 0);
    }
    std::vector<float> g = random_values(n, 32), m = random_values(n, 33, 0.1f), p = random_values(n, 34);
    auto d_g = to_gpu(g), d_m = to_gpu(m), d_p = to_gpu(p), d_average = to_gpu(p);
    cpu->scale(g, 0.25f);
    gpu->scale(d_g.span(), 0.25f);
    check_close(d_g.to_host(), g, 0.0f);
    CHECK(gpu->square_sum(d_g.span()) == doctest::Approx(cpu->square_sum(g)).epsilon(1e-12));
    std::vector<std::uint64_t> bits(words);
    device_array<std::uint64_t> d_bits(device_kind::cuda, words);
    cpu->lion_signs(g, m, 0.9f, 0.99f, 3, bits);
    gpu->lion_signs(d_g.span(), d_m.span(), 0.9f, 0.99f, 3, d_bits.span());
    CHECK(d_bits.to_host() == bits);
    check_close(d_m.to_host(), m, 0.0f);
    std::vector<float> average = p;
    cpu->sign_update(p, bits, 1e-3f, 0.1f);
    gpu->sign_update(d_p.span(), d_bits.span(), 1e-3f, 0.1f);
    check_close(d_p.to_host(), p, 0.0f);
    std::vector<std::uint16_t> counts(n);
    for (std::size_t i = 0; i < n; ++i) counts[i] = static_cast<std::uint16_t>(i % (voters + 1));
    cpu->sign_update(average, counts, static_cast<int>(voters), 1e-3f, 0.1f);
    gpu->sign_update(d_average.span(), to_gpu(counts).span(), static_cast<int>(voters), 1e-3f, 0.1f);
    check_close(d_average.to_host(), average, 0.0f);
    std::vector<float> copied(n);
    auto d_copied = to_gpu(copied);
    gpu->copy(d_average.span(), d_copied.span());
    gpu->fill(d_average.span(), 2.5f);
    // Events order the legacy stream's work after itself: a trivially met wait, exercised.
    const auto reached = gpu->record();
    gpu->wait_for(*reached);
    gpu->synchronize();
    CHECK(d_copied.to_host() == average);
    CHECK(d_average.to_host() == std::vector<float>(n, 2.5f));
  }
}

TEST_CASE("cpu kernels of the device rounds: fill, copy, scale, square sum, conversions, Lion signs, sign steps") {
  auto k = make_kernels(device_kind::cpu);
  std::vector<float> values{1.0f, -2.0f, 3.0f};
  k->scale(values, 0.5f);
  CHECK(values == std::vector<float>{0.5f, -1.0f, 1.5f});
  CHECK(k->square_sum(values) == 3.5);
  std::vector<float> copied(3);
  k->copy(values, copied);
  CHECK(copied == values);
  k->fill(copied, -1.0f);
  CHECK(copied == std::vector<float>(3, -1.0f));

  // The wire conversions are transport/wire_precision.hpp's: 1.00390625 is halfway between two
  // bf16 values and rounds to even (1.0); 65520 overflows fp16.
  const std::vector<float> edge{1.00390625f, 65520.0f, -0.0f};
  std::vector<std::uint16_t> wire(3);
  k->to_wire(wire_precision::bf16, edge, wire);
  CHECK(wire == std::vector<std::uint16_t>{0x3f80, 0x4780, 0x8000});
  k->to_wire(wire_precision::fp16, edge, wire);
  CHECK(wire == std::vector<std::uint16_t>{0x3c04, 0x7c00, 0x8000});  // 1 + 2^-8 fits fp16
  std::vector<float> sums{1.0f, 1.0f, 1.0f};
  k->add_from_wire(wire_precision::fp16, wire, sums);
  CHECK(sums[0] == 2.00390625f);
  CHECK(std::isinf(sums[1]));
  k->from_wire(wire_precision::fp16, wire, sums);
  CHECK(sums[0] == 1.00390625f);
  CHECK_THROWS_WITH_AS(k->to_wire(wire_precision::fp32, edge, wire),
                       "kernels::to_wire: fp32 values travel unconverted", std::invalid_argument);

  // Lion signs by hand: c = 0.9*m + 0.1*g is taken before m moves; a zero direction ties.
  const std::vector<float> g{1.0f, -1.0f, 0.0f, 0.0f};
  std::vector<float> m{0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<std::uint64_t> bits(1);
  k->lion_signs(g, m, 0.9f, 0.99f, 0, bits);
  CHECK(bits[0] == 0b0101u);  // +, -, tie at even index (+), tie at odd index (-)
  CHECK(m[0] == doctest::Approx(0.01f));
  k->lion_signs(g, m, 0.9f, 0.99f, 1, bits);
  CHECK(bits[0] == 0b1001u);  // c[0] = 0.9*0.01 + 0.1 > 0; round 1 flips the ties
  std::vector<float> p{1.0f, 1.0f, 1.0f, 1.0f};
  k->sign_update(p, bits, 0.1f, 0.5f);  // decay 0.95, then -+0.1
  CHECK(p[0] == doctest::Approx(0.85f));
  CHECK(p[1] == doctest::Approx(1.05f));
  std::vector<float> q{1.0f, 1.0f};
  k->sign_update(q, std::vector<std::uint16_t>{3, 1}, 4, 0.1f, 0.0f);  // delta (2c - 4)/4: 0.5, -0.5
  CHECK(q[0] == doctest::Approx(0.95f));
  CHECK(q[1] == doctest::Approx(1.05f));
  CHECK_THROWS_AS(k->sign_update(q, std::vector<std::uint16_t>{1}, 4, 0.1f, 0.0f), std::invalid_argument);
  CHECK_THROWS_AS(k->lion_signs(g, m, 0.9f, 0.99f, 0, std::span<std::uint64_t>()), std::invalid_argument);
  // CPU events are reached as soon as they are recorded.
  const auto event = k->record();
  k->wait_for(*event);
}

#if ACCORD_HAVE_CUDA
namespace {

// One NCCL rank per local GPU, at most 4.
testing::world_endpoints nccl_world_on_local_gpus() {
  const int world = std::min(cuda_device_count(), 4);
  std::vector<int> devices(world);
  for (int d = 0; d < world; ++d) devices[d] = d;
  auto group = make_nccl_group(devices);
  return testing::world_endpoints(std::make_move_iterator(group.begin()), std::make_move_iterator(group.end()));
}

}  // namespace

TEST_CASE("make_nccl_group refuses unknown and repeated devices") {
  const int devices[] = {0, 0};
  // Without a GPU device 0 does not exist; with one, NCCL forbids one GPU twice.
  CHECK_THROWS_AS(make_nccl_group(devices), std::invalid_argument);
  const int negative[] = {-1};
  CHECK_THROWS_AS(make_nccl_group(negative), std::invalid_argument);
}

// One rank per local GPU (NCCL allows no GPU twice in a communicator, so a one-GPU machine
// runs a world of 1: staging, in-place forms, the all-to-all and the vote kernels still run).
TEST_CASE("nccl transport: collectives, votes and point-to-point on every local GPU") {
  if (skip_without_cuda()) return;
  testing::world_endpoints endpoints = nccl_world_on_local_gpus();
  const int world = static_cast<int>(endpoints.size());
  for (std::size_t n : {1, 7, 1000, 262147}) {
    CAPTURE(n);
    std::vector<std::vector<float>> reduced(world), scattered(world), gathered(world), device_reduced(world);
    testing::run_ranks(endpoints, [&](transport& t) {
      const int r = t.rank();
      std::vector<float> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = testing::small_integer(r, i);
      reduced[r] = scattered[r] = data;
      t.all_reduce(std::span(reduced[r]));
      t.reduce_scatter(std::span(scattered[r]));
      gathered[r].assign(n, -1.0f);
      const shard own = shard_of(n, world, r);
      for (std::size_t i = own.begin; i < own.end; ++i) gathered[r][i] = float(i);
      t.all_gather(std::span(gathered[r]));
      device_array<float> on_device(device_kind::cuda, std::span<const float>(data));
      static_cast<nccl_transport&>(t).all_reduce_device(on_device.span());
      device_reduced[r] = on_device.to_host();
    });
    std::vector<float> sum(n, 0.0f);
    for (int r = 0; r < world; ++r)
      for (std::size_t i = 0; i < n; ++i) sum[i] += testing::small_integer(r, i);
    for (int r = 0; r < world; ++r) {
      CHECK(reduced[r] == sum);
      CHECK(device_reduced[r] == sum);
      const shard own = shard_of(n, world, r);
      CHECK(std::equal(sum.begin() + own.begin, sum.begin() + own.end, scattered[r].begin() + own.begin));
      for (std::size_t i = 0; i < n; ++i) REQUIRE(gathered[r][i] == float(i));
    }
  }
  for (std::size_t count : {1, 63, 64, 65, 4099, 64 * 7000 + 5})
    for (std::uint64_t round : {0, 1}) {
      CAPTURE(count);
      const auto votes = testing::random_votes(world, count, count + round);
      testing::check_votes_against_reference(testing::run_votes(endpoints, votes, round, true), votes, round);
    }
  // Point-to-point around the ring (with one rank: to itself), then a size mismatch.
  std::vector<std::vector<std::byte>> received(world);
  testing::run_ranks(endpoints, [&](transport& t) {
    const int next = (t.rank() + 1) % world, prev = (t.rank() + world - 1) % world;
    const auto out = testing::byte_pattern(1000 + t.rank(), t.rank());
    received[t.rank()].resize(1000 + prev);
    t.send_recv(next, out, prev, received[t.rank()], 7);
  });
  for (int r = 0; r < world; ++r) {
    const int prev = (r + world - 1) % world;
    CHECK(received[r] == testing::byte_pattern(1000 + prev, prev));
  }
  testing::run_ranks(endpoints, [&](transport& t) {
    const int next = (t.rank() + 1) % world, prev = (t.rank() + world - 1) % world;
    std::vector<std::byte> in(17);
    CHECK_THROWS_WITH_AS(t.send_recv(next, testing::byte_pattern(16, 1), prev, in, 9),
                         doctest::Contains(("peer " + std::to_string(prev) + " sent tag 9 of 16 bytes").c_str()),
                         transport_error);
  });
}
#endif

#if ACCORD_HAVE_CUDA
// The device collectives against the same NCCL transport's host-staged collectives (which the
// test above checks against sums by hand). Small integers sum exactly in any order and travel
// exactly in 16 bits, so every result must be equal.
TEST_CASE("nccl device collectives equal the transport's collectives on every local GPU") {
  if (skip_without_cuda()) return;
  testing::world_endpoints endpoints = nccl_world_on_local_gpus();
  const int world = static_cast<int>(endpoints.size());
  for (std::size_t n : {1, 7, 1000, 262147})
    for (const wire_precision wire : {wire_precision::fp32, wire_precision::bf16, wire_precision::fp16}) {
      CAPTURE(n);
      CAPTURE(precision_name(wire));
      testing::run_ranks(endpoints, [&](transport& t) {
        auto& nccl = static_cast<nccl_transport&>(t);
        use_cuda_device(nccl.device());
        auto collectives = make_nccl_collectives(nccl);
        const int r = t.rank();
        const shard own = shard_of(n, world, r);
        std::vector<float> data(n);
        for (std::size_t i = 0; i < n; ++i) data[i] = testing::small_integer(r, i);
        std::vector<float> scattered = data;
        t.reduce_scatter(std::span(scattered), wire);
        device_array<float> on_device(device_kind::cuda, std::span<const float>(data));
        collectives->reduce_scatter(on_device.span(), wire);
        collectives->finish();
        const std::vector<float> device_scattered = on_device.to_host();
        CHECK(std::equal(scattered.begin() + own.begin, scattered.begin() + own.end,
                         device_scattered.begin() + own.begin));
        std::vector<float> gathered(n, -1.0f);
        for (std::size_t i = own.begin; i < own.end; ++i) gathered[i] = testing::small_integer(r + 7, i);
        on_device.copy_from(gathered);
        t.all_gather(std::span(gathered), wire);
        collectives->all_gather(on_device.span(), wire);
        collectives->finish();
        CHECK(on_device.to_host() == gathered);
      });
    }
  for (std::size_t count : {1, 63, 64, 65, 4099, 64 * 7000 + 5})
    for (std::uint64_t round : {0, 1}) {
      CAPTURE(count);
      testing::run_ranks(endpoints, [&](transport& t) {
        auto& nccl = static_cast<nccl_transport&>(t);
        use_cuda_device(nccl.device());
        auto collectives = make_nccl_collectives(nccl);
        const std::size_t words = packed_words(count);
        std::vector<std::uint64_t> signs = random_words(words, static_cast<std::uint32_t>(count + t.rank()));
        if (const std::size_t tail = count % 64) signs.back() &= (std::uint64_t{1} << tail) - 1;
        std::vector<std::uint64_t> majority(words);
        std::vector<std::uint16_t> counts(count);
        t.sign_majority(signs, count, round, majority);
        t.sign_counts(signs, count, counts);
        device_array<std::uint64_t> d_signs(device_kind::cuda, std::span<const std::uint64_t>(signs)),
            d_majority(device_kind::cuda, words);
        device_array<std::uint16_t> d_counts(device_kind::cuda, count);
        collectives->sign_majority(d_signs.span(), count, round, d_majority.span());
        collectives->sign_counts(d_signs.span(), count, d_counts.span());
        collectives->finish();
        CHECK(d_majority.to_host() == majority);
        CHECK(d_counts.to_host() == counts);
      });
    }
}
#endif
