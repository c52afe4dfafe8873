// Parameter groups and gradient clipping (job_config::parameter_groups, max_gradient_norm) at
// the level of the sharded update rule, one thread per rank over an in-process fabric: every
// rank ends with what one optimizer over the whole buffer computes from the clipped mean
// gradient, the groups' scales applied; the values the app keeps take the mean over every
// worker (averaged) or rank 0's (broadcast) and leave the optimizer's state for them at zero.
#include <doctest/doctest.h>

#include "algorithms/update_rule.hpp"
#include "transport/inproc.hpp"
#include "transport_conformance.hpp"

#include <chrono>
#include <cmath>
#include <vector>

using namespace accord;
using accord::testing::run_ranks;

namespace {

constexpr std::size_t count = 101;  // 3 ranks: shards of 34, 34 and 33
constexpr int world = 3;

float value(int rank, std::uint64_t round, std::size_t i) {
  return 0.3f * std::sin(0.7f * static_cast<float>(i) + static_cast<float>(rank) + 0.1f * static_cast<float>(round));
}

}  // namespace

TEST_CASE("a round with parameter groups and clipping equals one optimizer over the clipped mean gradient") {
  optimizer_config config;
  config.kind = "adamw";
  config.learning_rate = 1e-2f;
  config.beta1 = 0.9f;
  config.beta2 = 0.95f;
  config.weight_decay = 0.1f;
  // A no-decay group at half the learning rate crossing the first shard boundary, buffers of
  // both kinds (one crossing the second boundary), and a norm the gradients exceed.
  config.groups = {{30, 40, 0.5f, 0.0f, "trained"}, {60, 70, 1, 1, "averaged"}, {95, 101, 1, 1, "broadcast"}};
  config.max_gradient_norm = 0.05f;
  const auto kept = [&](std::size_t i) { return i >= 60 && i < 70 ? 1 : i >= 95 ? 2 : 0; };

  std::vector<float> initial(count);
  for (std::size_t i = 0; i < count; ++i) initial[i] = std::cos(0.3f * static_cast<float>(i));
  // The reference: the whole buffer's optimizer, stepped with every group's run.
  const auto whole = make_optimizer(config, count);
  const std::vector<scaled_run> runs = shard_runs(config.groups, count, 0, count);
  std::vector<float> expected = initial;

  std::vector<std::vector<float>> results(world);
  std::vector<rule_state> states(world);
  auto endpoints = inproc_fabric(world, {}, std::chrono::seconds(10)).endpoints();
  constexpr std::uint64_t rounds = 3;
  for (std::uint64_t t = 0; t < rounds; ++t) {
    std::vector<float> mean(count);
    double square_sum = 0;
    for (std::size_t i = 0; i < count; ++i) {
      for (int r = 0; r < world; ++r) mean[i] += value(r, t, i) / world;
      if (kept(i) == 0) square_sum += static_cast<double>(mean[i]) * mean[i];
    }
    const double factor = std::min(1.0, config.max_gradient_norm / (std::sqrt(square_sum) + 1e-6));
    REQUIRE(factor < 1);
    std::vector<float> gradient(count);
    for (std::size_t i = 0; i < count; ++i) gradient[i] = kept(i) ? 0.f : static_cast<float>(mean[i] * factor);
    whole->step(expected, gradient, config.learning_rate, runs);
    for (std::size_t i = 0; i < count; ++i)
      if (kept(i)) expected[i] = kept(i) == 1 ? mean[i] : value(0, t, i);
  }
  run_ranks(endpoints, [&](transport& link) {
    const int rank = link.rank();
    auto rule = make_sharded_optimizer_rule(config, initial, world, rank);
    std::vector<float> buffer(count);
    const round_totals local{1, 0, 0, 0}, global{static_cast<double>(world), 0, 0, 0};
    for (std::uint64_t t = 0; t < rounds; ++t) {
      for (std::size_t i = 0; i < count; ++i) buffer[i] = value(rank, t, i);
      rule->apply(link, buffer, local, global, config.learning_rate, t, false, {});
    }
    results[rank] = buffer;
    states[rank] = rule->snapshot();
  });
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    CHECK(results[rank] == results[0]);  // replicas identical
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(i);
      CHECK(results[rank][i] == doctest::Approx(expected[i]).epsilon(1e-5));
    }
    // The optimizer's state (m, then v) for the kept values stays zero.
    const rule_state& state = states[rank];
    const std::size_t size = state.values.size() / state.slots;
    for (std::size_t slot = 0; slot < state.slots; ++slot)
      for (std::size_t j = 0; j < size; ++j)
        if (kept(state.begin + j)) CHECK(state.values[slot * size + j] == 0.f);
  }
}
