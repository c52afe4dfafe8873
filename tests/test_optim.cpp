#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "optim/lion.hpp"
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "transport/shard.hpp"

using namespace accord;

namespace {

optimizer_config make_config(const std::string& kind, float beta1, float beta2, float weight_decay) {
  optimizer_config config;
  config.kind = kind;
  config.beta1 = beta1;
  config.beta2 = beta2;
  config.weight_decay = weight_decay;
  return config;
}

std::vector<float> random_values(std::size_t count, std::uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& x : out) x = normal(engine);
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("AdamW matches hand-computed steps") {
  // lr 0.01, b1 0.9, b2 0.999, eps 1e-8, wd 0.1. Element 0 sees g = 0.5 then -0.5,
  // element 1 sees g = -2 then -1, element 2 sees no gradient at all (only decays).
  const auto opt = make_optimizer(make_config("adamw", 0.9f, 0.999f, 0.1f), 3);
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  opt->step(p, std::vector<float>{0.5f, -2.0f, 0.0f}, 0.01f);
  // Step 1: m = 0.1g, v = 0.001g^2; m/(1-0.9) = g, sqrt(v/(1-0.999)) = |g|: a step of lr*sign(g).
  CHECK(p[0] == doctest::Approx(1.0 * (1 - 0.001) - 0.01 * 0.5 / (0.5 + 1e-8)).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(-2.0 * (1 - 0.001) + 0.01 * 2.0 / (2.0 + 1e-8)).epsilon(1e-6));
  CHECK(p[2] == doctest::Approx(0.5 * (1 - 0.001)).epsilon(1e-6));
  const double p0 = p[0], p1 = p[1], p2 = p[2];

  opt->step(p, std::vector<float>{-0.5f, -1.0f, 0.0f}, 0.01f);
  // Step 2: element 0: m = 0.9*0.05 + 0.1*(-0.5) = -0.005, v = 0.999*0.00025 + 0.001*0.25
  const double m0 = -0.005, v0 = 0.999 * 0.00025 + 0.001 * 0.25;
  const double m1 = 0.9 * -0.2 + 0.1 * -1.0, v1 = 0.999 * 0.004 + 0.001 * 1.0;
  const double c1 = 1 - 0.9 * 0.9, c2 = 1 - 0.999 * 0.999;
  CHECK(p[0] == doctest::Approx(p0 * 0.999 - 0.01 * (m0 / c1) / (std::sqrt(v0 / c2) + 1e-8)).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(p1 * 0.999 - 0.01 * (m1 / c1) / (std::sqrt(v1 / c2) + 1e-8)).epsilon(1e-6));
  CHECK(p[2] == doctest::Approx(p2 * 0.999).epsilon(1e-6));
  const optimizer_state& state = opt->state();
  CHECK(state.step == 2);
  REQUIRE(state.slots == 2);
  REQUIRE(state.values.size() == 6);
  CHECK(state.values[0] == doctest::Approx(m0));
  CHECK(state.values[1] == doctest::Approx(m1));
  CHECK(state.values[3] == doctest::Approx(v0));
  CHECK(state.values[4] == doctest::Approx(v1));
}

TEST_CASE("Lion matches the reference rule, including sign(0) = 0") {
  // lr 0.1, wd 0.5 (decay factor 0.95), b1 0.9, b2 0.99.
  const auto opt = make_optimizer(make_config("lion", 0.9f, 0.99f, 0.5f), 4);
  std::vector<float> p = {1.0f, -1.0f, 0.25f, 2.0f};
  opt->step(p, std::vector<float>{0.3f, -0.2f, 0.0f, 0.1f}, 0.1f);
  // m = 0, so c = 0.1g: sign(g); element 2 has c = 0 exactly and only decays.
  CHECK(p[0] == doctest::Approx(1.0 * 0.95 - 0.1));
  CHECK(p[1] == doctest::Approx(-1.0 * 0.95 + 0.1));
  CHECK(p[2] == 0.25f * 0.95f);
  CHECK(p[3] == doctest::Approx(2.0 * 0.95 - 0.1));
  // m = 0.01g, updated after the sign was taken.
  CHECK(opt->state().values[0] == doctest::Approx(0.003));
  CHECK(opt->state().values[3] == doctest::Approx(0.001));

  opt->step(p, std::vector<float>{-0.3f, 0.05f, 0.0f, -0.0085f}, 0.1f);
  // Element 0: c = 0.9*0.003 - 0.03 < 0. Element 1: c = 0.9*(-0.002) + 0.005 > 0.
  // Element 3: c = 0.9*0.001 - 0.00085 = 0.00005 > 0 although g < 0: the old momentum wins
  // (updating m before taking c would give 0.9*0.000905 - 0.00085 < 0).
  CHECK(p[0] == doctest::Approx((1.0 * 0.95 - 0.1) * 0.95 + 0.1));
  CHECK(p[1] == doctest::Approx((-1.0 * 0.95 + 0.1) * 0.95 - 0.1));
  CHECK(p[2] == 0.25f * 0.95f * 0.95f);
  CHECK(p[3] == doctest::Approx((2.0 * 0.95 - 0.1) * 0.95 - 0.1));
  CHECK(opt->state().values[3] == doctest::Approx(0.99 * 0.001 + 0.01 * -0.0085));
  CHECK(opt->state().step == 2);
}

TEST_CASE("SGD with momentum and L2 weight decay matches hand-computed steps") {
  // lr 0.1, momentum 0.9, wd 0.01.
  const auto opt = make_optimizer(make_config("sgd", 0.9f, 0.0f, 0.01f), 2);
  std::vector<float> p = {1.0f, -3.0f};
  opt->step(p, std::vector<float>{0.5f, 0.0f}, 0.1f);
  const double b0 = 0.5 + 0.01 * 1.0, b1 = 0.0 + 0.01 * -3.0;
  CHECK(p[0] == doctest::Approx(1.0 - 0.1 * b0));
  CHECK(p[1] == doctest::Approx(-3.0 - 0.1 * b1));
  const double q0 = 1.0 - 0.1 * b0, q1 = -3.0 - 0.1 * b1;
  opt->step(p, std::vector<float>{-1.0f, 2.0f}, 0.1f);
  const double b0_2 = 0.9 * b0 + (-1.0 + 0.01 * q0), b1_2 = 0.9 * b1 + (2.0 + 0.01 * q1);
  CHECK(p[0] == doctest::Approx(q0 - 0.1 * b0_2));
  CHECK(p[1] == doctest::Approx(q1 - 0.1 * b1_2));
  opt->step(p, std::vector<float>{0.0f, 0.0f}, 0.1f);
  CHECK(p[0] == doctest::Approx(q0 - 0.1 * b0_2 - 0.1 * (0.9 * b0_2 + 0.01 * (q0 - 0.1 * b0_2))));
}

TEST_CASE("a step over k shards equals the unsharded step bit for bit") {
  for (const char* kind : {"adamw", "lion", "sgd"}) {
    for (const std::size_t total : {std::size_t{37}, std::size_t{7}, std::size_t{1000}}) {
      const optimizer_config config = make_config(kind, 0.9f, 0.99f, 0.05f);
      std::vector<float> whole = random_values(total, 1);
      const auto reference = make_optimizer(config, total);
      std::vector<std::vector<float>> gradients;
      for (std::uint32_t s = 0; s < 3; ++s) gradients.push_back(random_values(total, 10 + s));
      const std::vector<float> start = whole;
      for (const auto& g : gradients) reference->step(whole, g, 0.01f);

      for (const int world : {1, 2, 3, 5}) {
        CAPTURE(kind);
        CAPTURE(total);
        CAPTURE(world);
        std::vector<float> sharded = start;
        for (int rank = 0; rank < world; ++rank) {
          const shard bounds = shard_of(total, world, rank);
          const auto part = make_optimizer(config, bounds.size());
          for (const auto& g : gradients)
            part->step(std::span<float>(sharded).subspan(bounds.begin, bounds.size()),
                       std::span<const float>(g).subspan(bounds.begin, bounds.size()), 0.01f);
          // The shard's state is the same slice of every slot of the unsharded state.
          const optimizer_state& mine = part->state();
          const optimizer_state& full = reference->state();
          REQUIRE(mine.slots == full.slots);
          for (std::size_t slot = 0; slot < full.slots; ++slot)
            CHECK(std::memcmp(mine.values.data() + slot * bounds.size(),
                              full.values.data() + slot * total + bounds.begin,
                              bounds.size() * sizeof(float)) == 0);
        }
        CHECK(bitwise_equal(sharded, whole));
      }
    }
  }
}

TEST_CASE("optimizer state restores and is validated") {
  for (const char* kind : {"adamw", "lion", "sgd"}) {
    const optimizer_config config = make_config(kind, 0.9f, 0.99f, 0.01f);
    std::vector<float> p = random_values(50, 2);
    const auto original = make_optimizer(config, 50);
    original->step(p, random_values(50, 3), 0.01f);
    original->step(p, random_values(50, 4), 0.01f);

    const auto restored = make_optimizer(config, 50);
    restored->restore(original->state());
    std::vector<float> q = p;
    const std::vector<float> g = random_values(50, 5);
    original->step(p, g, 0.01f);
    restored->step(q, g, 0.01f);
    CHECK(bitwise_equal(p, q));
    CHECK(restored->state().step == 3);
    CHECK(bitwise_equal(restored->state().values, original->state().values));

    optimizer_state wrong = original->state();
    wrong.values.pop_back();
    CHECK_THROWS_AS(restored->restore(wrong), std::invalid_argument);
    wrong = original->state();
    wrong.slots += 1;
    CHECK_THROWS_AS(restored->restore(wrong), std::invalid_argument);
    CHECK_THROWS_AS(restored->step(std::span<float>(q).first(49), g, 0.01f), std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(make_optimizer(make_config("adam", 0.9f, 0.99f, 0.0f), 4),
                       "unknown optimizer kind 'adam' (expected adamw, lion or sgd)",
                       std::invalid_argument);
  CHECK_THROWS_AS(make_optimizer(make_config("adamw", 1.0f, 0.99f, 0.0f), 4), std::invalid_argument);
  CHECK_THROWS_AS(make_optimizer(make_config("lion", 0.9f, 1.5f, 0.0f), 4), std::invalid_argument);
}

TEST_CASE("sign packing round-trips with zero padding and the shared tie rule") {
  for (const std::size_t n : {1, 7, 8, 63, 64, 65, 1000}) {
    CAPTURE(n);
    std::vector<float> signs(n);
    std::mt19937 engine(static_cast<std::uint32_t>(n));
    for (float& s : signs) s = engine() & 1 ? 1.0f : -1.0f;
    std::vector<std::uint64_t> packed(packed_words(n), ~0ull);
    pack_signs(signs, 0, packed);
    if (n % 64 != 0) CHECK((packed.back() >> (n % 64)) == 0);
    for (std::size_t i = 0; i < n; ++i)
      CHECK(((packed[i / 64] >> (i % 64)) & 1) == (signs[i] > 0 ? 1u : 0u));
    std::vector<float> back(n, 0.0f);
    unpack_signs(packed, back);
    CHECK(bitwise_equal(back, signs));
  }
  // Zeros follow tie_vote: +1 on even (index + round), -1 on odd.
  const std::vector<float> zeros(5, 0.0f);
  std::vector<std::uint64_t> packed(1);
  pack_signs(zeros, 0, packed);
  CHECK(packed[0] == 0b10101u);
  pack_signs(zeros, 1, packed);
  CHECK(packed[0] == 0b01010u);
  CHECK_THROWS_AS(pack_signs(zeros, 0, std::span<std::uint64_t>()), std::invalid_argument);
}

TEST_CASE("Distributed Lion with one worker equals the Lion optimizer bit for bit") {
  const std::size_t n = 300;
  const float beta1 = 0.9f, beta2 = 0.99f, lr = 0.01f, weight_decay = 0.3f;
  const auto lion = make_optimizer(make_config("lion", beta1, beta2, weight_decay), n);
  std::vector<float> reference = random_values(n, 6);
  std::vector<float> majority = reference, averaged = reference;
  std::vector<float> momentum(n, 0.0f);
  std::vector<std::uint64_t> signs(packed_words(n));
  std::vector<std::uint16_t> plus_votes(n);
  for (std::uint64_t round = 0; round < 4; ++round) {
    const std::vector<float> g = random_values(n, 20 + static_cast<std::uint32_t>(round));
    lion->step(reference, g, lr);
    lion_local_direction(g, momentum, beta1, beta2, signs, round);
    // A majority of one vote is that vote; its count of +1 votes is the bit.
    apply_sign_update(majority, signs, lr, weight_decay);
    for (std::size_t i = 0; i < n; ++i) plus_votes[i] = (signs[i / 64] >> (i % 64)) & 1;
    apply_sign_update(averaged, plus_votes, 1, lr, weight_decay);
    CHECK(bitwise_equal(majority, reference));
    CHECK(bitwise_equal(averaged, reference));
    CHECK(bitwise_equal(momentum, lion->state().values));
  }
}

TEST_CASE("D-Lion pieces: ties, averaging and validation") {
  // A zero direction (zero gradient and momentum) packs by tie_vote; momentum stays zero.
  std::vector<float> momentum(3, 0.0f);
  std::vector<std::uint64_t> signs(1);
  lion_local_direction(std::vector<float>{0.0f, 0.0f, -1.0f}, momentum, 0.9f, 0.99f, signs, 1);
  CHECK(signs[0] == 0b010u);
  CHECK(momentum[2] == doctest::Approx(-0.01));
  CHECK(tie_vote(4, 2));
  CHECK_FALSE(tie_vote(4, 3));

  // Averaging over 4 voters: counts 0..4 give deltas -1, -0.5, 0, 0.5, 1.
  std::vector<float> p(5, 1.0f);
  apply_sign_update(p, std::vector<std::uint16_t>{0, 1, 2, 3, 4}, 4, 0.1f, 0.0f);
  CHECK(p == std::vector<float>{1.1f, 1.05f, 1.0f, 0.95f, 0.9f});
  CHECK_THROWS_AS(apply_sign_update(p, std::vector<std::uint16_t>{0, 1, 2, 3, 5}, 4, 0.1f, 0.0f),
                  std::invalid_argument);
  CHECK_THROWS_AS(apply_sign_update(p, std::vector<std::uint16_t>{0, 1}, 4, 0.1f, 0.0f),
                  std::invalid_argument);
}

TEST_CASE("learning-rate schedules") {
  schedule_config cosine;
  cosine.kind = "cosine";
  cosine.peak_learning_rate = 1e-3f;
  cosine.warmup_steps = 10;
  cosine.total_steps = 110;
  cosine.final_fraction = 0.1f;
  CHECK(learning_rate_at(cosine, 0) == doctest::Approx(1e-4));
  CHECK(learning_rate_at(cosine, 4) == doctest::Approx(5e-4));
  CHECK(learning_rate_at(cosine, 9) == doctest::Approx(1e-3));
  CHECK(learning_rate_at(cosine, 10) == doctest::Approx(1e-3));
  CHECK(learning_rate_at(cosine, 60) == doctest::Approx(1e-4 + 0.9e-3 * 0.5));
  CHECK(learning_rate_at(cosine, 110) == doctest::Approx(1e-4));
  CHECK(learning_rate_at(cosine, 100000) == doctest::Approx(1e-4));
  CHECK(learning_rate_at(cosine, 35) > learning_rate_at(cosine, 36));

  schedule_config constant;
  constant.peak_learning_rate = 3e-4f;
  CHECK(learning_rate_at(constant, 0) == 3e-4f);
  CHECK(learning_rate_at(constant, 1000000) == 3e-4f);
  constant.warmup_steps = 4;
  CHECK(learning_rate_at(constant, 1) == doctest::Approx(1.5e-4));

  cosine.total_steps = 10;
  CHECK_THROWS_AS(learning_rate_at(cosine, 0), std::invalid_argument);
  constant.kind = "linear";
  CHECK_THROWS_WITH_AS(learning_rate_at(constant, 0),
                       "unknown learning-rate schedule 'linear' (expected constant or cosine)",
                       std::invalid_argument);
}

TEST_CASE("a shard stepped in runs equals each run stepped alone with its scaled settings") {
  // Flat parameters [0, 10): group [2, 5) without decay at half the learning rate; the shard
  // [3, 9) sees the tail of that group, then scales 1 (an averaged group's runs have scales 0).
  const std::vector<parameter_group> groups = {{2, 5, 0.5f, 0.0f, "trained"}, {7, 8, 1.0f, 1.0f, "averaged"}};
  const std::vector<scaled_run> runs = shard_runs(groups, 10, 3, 9);
  REQUIRE(runs.size() == 4);
  CHECK((runs[0].offset == 0 && runs[0].count == 2 && runs[0].learning_rate_scale == 0.5f &&
         runs[0].weight_decay_scale == 0.0f));
  CHECK((runs[1].offset == 2 && runs[1].count == 2 && runs[1].learning_rate_scale == 1.0f));
  CHECK((runs[2].offset == 4 && runs[2].count == 1 && runs[2].learning_rate_scale == 0.0f &&
         runs[2].weight_decay_scale == 0.0f));
  CHECK((runs[3].offset == 5 && runs[3].count == 1 && runs[3].weight_decay_scale == 1.0f));

  for (const char* kind : {"adamw", "lion", "sgd"}) {
    CAPTURE(kind);
    const optimizer_config config = make_config(kind, 0.9f, 0.99f, 0.1f);
    optimizer_config undecayed = config;
    undecayed.weight_decay = 0;
    const auto whole = make_optimizer(config, 6);
    const auto head = make_optimizer(undecayed, 2);  // the first run: half the learning rate, no decay
    const auto tail = make_optimizer(config, 1);     // the last run: the job's settings
    std::vector<float> p = random_values(6, 1);
    std::vector<float> head_values(p.begin(), p.begin() + 2), tail_values = {p[5]};
    const float averaged = p[4];
    for (std::uint32_t step = 0; step < 3; ++step) {
      const std::vector<float> g = random_values(6, 10 + step);
      whole->step(p, g, 0.01f, runs);
      head->step(head_values, std::vector<float>(g.begin(), g.begin() + 2), 0.005f);
      tail->step(tail_values, std::vector<float>{g[5]}, 0.01f);
    }
    CHECK(bitwise_equal(std::vector<float>(p.begin(), p.begin() + 2), head_values));
    CHECK(p[5] == tail_values[0]);
    CHECK(p[4] == averaged);  // the averaged group's element: the optimizer leaves it be
  }

  CHECK_THROWS_WITH(shard_runs({{4, 2}}, 10, 0, 10), doctest::Contains("parameter group 0 [4, 2) is empty"));
  CHECK_THROWS_WITH(shard_runs({{0, 11}}, 10, 0, 10), doctest::Contains("beyond the 10 parameters"));
  CHECK_THROWS_WITH(shard_runs({{0, 5}, {4, 6}}, 10, 0, 10), doctest::Contains("overlaps"));
  CHECK_THROWS_WITH(shard_runs({{0, 5, -1.0f}}, 10, 0, 10), doctest::Contains("must be finite and >= 0"));
  CHECK_THROWS_WITH(shard_runs({{0, 5, 1.0f, 1.0f, "frozen"}}, 10, 0, 10), doctest::Contains("role 'frozen'"));
}
