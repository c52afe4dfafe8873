// Parameter groups and gradient clipping (job_config::parameter_groups, max_gradient_norm) at
// the level of the sharded and sign-vote update rules, one thread per rank over an in-process
// fabric: every rank ends with what one optimizer over the whole buffer computes from the clipped
// mean gradient (D-Lion: each worker's own, then the vote), the groups' scales applied; the
// values the app keeps take the mean over every worker (averaged) or rank 0's (broadcast) and
// leave the optimizer's state for them at zero. And an app's own optimizer
// (job_config::app_optimizer) stepping the sharded rule's shards.
#include <doctest/doctest.h>

#include "algorithms/update_rule.hpp"
#include "optim/lion.hpp"
#include "transport/inproc.hpp"
#include "transport_conformance.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace accord;
using accord::testing::run_ranks;

namespace {

constexpr std::size_t count = 101;  // 3 ranks: shards of 34, 34 and 33
constexpr int world = 3;

float value(int rank, std::uint64_t round, std::size_t i) {
  return 0.3f * std::sin(0.7f * static_cast<float>(i) + static_cast<float>(rank) + 0.1f * static_cast<float>(round));
}

// `kind` with a no-decay group at half the learning rate crossing the first shard boundary,
// buffers of both kinds (one crossing the second boundary), and a norm the gradients exceed.
optimizer_config grouped(const std::string& kind, float beta2, float weight_decay, float max_gradient_norm) {
  optimizer_config config;
  config.kind = kind;
  config.learning_rate = 1e-2f;
  config.beta1 = 0.9f;
  config.beta2 = beta2;
  config.weight_decay = weight_decay;
  config.groups = {{30, 40, 0.5f, 0.0f, "trained"}, {60, 70, 1, 1, "averaged"}, {95, 101, 1, 1, "broadcast"}};
  config.max_gradient_norm = max_gradient_norm;
  return config;
}

// Whether grouped()'s flat parameter i is a kept value: 1 averaged, 2 broadcast, 0 trained.
int kept(std::size_t i) { return i >= 60 && i < 70 ? 1 : i >= 95 ? 2 : 0; }

// What a rank's rule ends with: the parameters, the estimate round's (if any) and its state.
struct rank_end {
  std::vector<float> parameters, estimate;
  rule_state state;
  double learning_rate = 0;  // the last round's, as the rule observed it
};

// make_rule(rank)'s rule on every rank, one thread each, over `rounds` rounds of value()'s
// gradients (one micro-batch per worker) at `learning_rate`; round `estimate_round` an estimate.
template <class Make>
std::vector<rank_end> run_rule(Make make_rule, std::uint64_t rounds, float learning_rate,
                               std::uint64_t estimate_round = std::numeric_limits<std::uint64_t>::max()) {
  std::vector<rank_end> ends(world);
  auto endpoints = inproc_fabric(world, {}, std::chrono::seconds(10)).endpoints();
  run_ranks(endpoints, [&](transport& link) {
    const int rank = link.rank();
    const std::unique_ptr<update_rule> rule = make_rule(rank);
    std::vector<float> buffer(count);
    const round_totals local{1, 0, 0, 0}, global{static_cast<double>(world), 0, 0, 0};
    for (std::uint64_t t = 0; t < rounds; ++t) {
      for (std::size_t i = 0; i < count; ++i) buffer[i] = value(rank, t, i);
      rule->apply(link, buffer, local, global, learning_rate, t, t == estimate_round, {});
      if (t == estimate_round) ends[rank].estimate = buffer;
    }
    ends[rank].parameters = buffer;
    ends[rank].state = rule->snapshot();
    ends[rank].learning_rate = rule->observations().learning_rate;
  });
  return ends;
}

}  // namespace

TEST_CASE("a round with parameter groups and clipping equals one optimizer over the clipped mean gradient") {
  const optimizer_config config = grouped("adamw", 0.95f, 0.1f, 0.05f);

  std::vector<float> initial(count);
  for (std::size_t i = 0; i < count; ++i) initial[i] = std::cos(0.3f * static_cast<float>(i));
  // The reference: the whole buffer's optimizer, stepped with every group's run.
  const auto whole = make_optimizer(config, count);
  const std::vector<scaled_run> runs = shard_runs(config.groups, count, 0, count);
  std::vector<float> expected = initial;

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
  const auto ends = run_rule(
      [&](int rank) { return make_sharded_optimizer_rule(config, initial, world, rank); }, rounds, config.learning_rate);
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    CHECK(ends[rank].parameters == ends[0].parameters);  // replicas identical
    CHECK(ends[rank].learning_rate == -1);  // a built-in optimizer's rate is the schedule's
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(i);
      CHECK(ends[rank].parameters[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    }
    // The optimizer's state (m, then v) for the kept values stays zero.
    const rule_state& state = ends[rank].state;
    const std::size_t size = state.values.size() / state.slots;
    for (std::size_t slot = 0; slot < state.slots; ++slot)
      for (std::size_t j = 0; j < size; ++j)
        if (kept(state.begin + j)) CHECK(state.values[slot * size + j] == 0.f);
  }
}

TEST_CASE("Distributed Lion with parameter groups, clipping and kept values equals the vote over clipped Lions") {
  const optimizer_config config = grouped("lion", 0.99f, 0.5f, 0.5f);
  const std::vector<scaled_run> runs = shard_runs(config.groups, count, 0, count);

  std::vector<float> initial(count);
  for (std::size_t i = 0; i < count; ++i) initial[i] = std::cos(0.3f * static_cast<float>(i));
  // The reference: each rank's Lion direction from its own clipped gradient and momentum, the
  // majority of their signs, the step scaled run by run; kept values set to their means.
  std::vector<float> expected = initial;
  std::vector<std::vector<float>> momenta(world, std::vector<float>(count));
  constexpr std::uint64_t rounds = 3;
  bool clipped = false;
  for (std::uint64_t t = 0; t < rounds; ++t) {
    std::vector<int> votes(count);
    for (int r = 0; r < world; ++r) {
      std::vector<float> gradient(count);
      double square_sum = 0;
      for (std::size_t i = 0; i < count; ++i) {
        gradient[i] = kept(i) ? 0.f : value(r, t, i);
        square_sum += static_cast<double>(gradient[i]) * gradient[i];
      }
      const double factor = std::min(1.0, config.max_gradient_norm / (std::sqrt(square_sum) + 1e-6));
      clipped = clipped || factor < 1;
      for (std::size_t i = 0; i < count; ++i) {
        const float g = gradient[i] * static_cast<float>(factor);
        const float direction = lion_direction(momenta[r][i], g, config.beta1);
        votes[i] += direction > 0 ? 1 : -1;
        momenta[r][i] = lion_momentum(momenta[r][i], g, config.beta2);
      }
    }
    for (const scaled_run& run : runs) {
      const float lr = config.learning_rate * run.learning_rate_scale;
      const float decay = sign_step_decay(lr, config.weight_decay * run.weight_decay_scale);
      for (std::size_t i = run.offset; i < run.offset + run.count; ++i)
        expected[i] = sign_step(expected[i], votes[i] > 0 ? 1.0f : -1.0f, decay, lr);
    }
    for (std::size_t i = 0; i < count; ++i) {
      if (kept(i) == 1) expected[i] = (value(0, t, i) + value(1, t, i) + value(2, t, i)) / world;
      if (kept(i) == 2) expected[i] = value(0, t, i);
    }
  }
  REQUIRE(clipped);

  CHECK_FALSE(make_sign_vote_rule(false, config, initial)->has_device_form());
  const auto ends = run_rule([&](int) { return make_sign_vote_rule(false, config, initial); }, rounds,
                             config.learning_rate);
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    CHECK(ends[rank].parameters == ends[0].parameters);  // replicas identical
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(i);
      CHECK(ends[rank].parameters[i] == doctest::Approx(expected[i]).epsilon(1e-6));
      // Each worker's own momentum: the clipped gradients', zero for the kept values.
      CHECK(ends[rank].state.values[i] == doctest::Approx(momenta[rank][i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("an app's elementwise optimizer steps each shard once per round, and an estimate commits nothing") {
  // SGD with momentum as an app would write it: its state one slot, its rate the factor's share.
  constexpr float momentum = 0.9f;
  std::mutex mutex;
  std::vector<std::uint64_t> begins, steps;
  elementwise_optimizer app;
  app.name = "app sgd";
  app.slots = 1;
  app.step = [&](std::uint64_t begin, std::span<float> parameters, std::span<const float> gradients,
                 std::span<float> state, std::uint64_t step, float learning_rate_factor) {
    {
      std::lock_guard lock(mutex);
      begins.push_back(begin);
      steps.push_back(step);
    }
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      state[i] = momentum * state[i] + gradients[i];
      parameters[i] -= 0.1f * learning_rate_factor * state[i];
    }
    return 0.1 * learning_rate_factor;  // the rate it used, which the metrics report
  };
  optimizer_config config;
  config.kind = app.name;
  config.app = &app;
  config.learning_rate = 0.1f;  // the schedule's peak: a round at 0.05 scales the app's rates by 0.5
  optimizer_config builtin;
  builtin.kind = "sgd";
  builtin.beta1 = momentum;

  std::vector<float> initial(count);
  for (std::size_t i = 0; i < count; ++i) initial[i] = std::cos(0.3f * static_cast<float>(i));
  const auto mean_gradient = [](std::uint64_t t) {
    std::vector<float> mean(count);
    for (std::size_t i = 0; i < count; ++i)
      for (int r = 0; r < world; ++r) mean[i] += value(r, t, i) / world;
    return mean;
  };
  // The reference: the built-in SGD over the whole buffer at the round's rate, real rounds only;
  // the estimate (round 1) steps a copy.
  const auto whole = make_optimizer(builtin, count);
  std::vector<float> expected = initial, estimated;
  const std::uint64_t rounds = 4, estimate_round = 1;
  for (std::uint64_t t = 0; t < rounds; ++t) {
    if (t == estimate_round) {
      const auto copy = make_optimizer(builtin, count);
      copy->restore(whole->state());
      estimated = expected;
      copy->step(estimated, mean_gradient(t), 0.05f);
    } else {
      whole->step(expected, mean_gradient(t), 0.05f);
    }
  }

  CHECK_FALSE(make_sharded_optimizer_rule(config, initial, world, 0)->has_device_form());
  const auto ends = run_rule(
      [&](int rank) { return make_sharded_optimizer_rule(config, initial, world, rank); }, rounds, 0.05f,
      estimate_round);
  // One call per rank and round, from each shard's start; the estimate's at the committed step + 1.
  std::sort(begins.begin(), begins.end());
  CHECK(begins == std::vector<std::uint64_t>{0, 0, 0, 0, 34, 34, 34, 34, 68, 68, 68, 68});
  std::sort(steps.begin(), steps.end());
  CHECK(steps == std::vector<std::uint64_t>{1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3});
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    const rule_state& state = ends[rank].state;
    CHECK(state.slots == 1);
    CHECK(state.optimizer_step == 3);
    CHECK(ends[rank].learning_rate == doctest::Approx(0.05));
    for (std::size_t i = 0; i < count; ++i) {
      CAPTURE(i);
      CHECK(ends[rank].estimate[i] == doctest::Approx(estimated[i]).epsilon(1e-6));
      CHECK(ends[rank].parameters[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    }
    for (std::size_t j = 0; j < state.values.size(); ++j)
      CHECK(state.values[j] == doctest::Approx(whole->state().values[state.begin + j]).epsilon(1e-6));
  }
}
