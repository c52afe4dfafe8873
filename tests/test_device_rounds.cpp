// The update rules' device forms (update_rule::apply_on_device) against their host forms, per
// rule and wire precision, over rounds that include an ACCO estimate. Without a GPU they run on
// the reference device collectives (host memory, CPU kernels) and must equal the host forms bit
// for bit; with GPUs, on NCCL device collectives (one rank per local GPU) against the host forms
// over an in-process world of the same size, within fp32 summation-order tolerance, and the
// rounds copy no tensor between host and device. GPU parts print ACCORD_SKIPPED without one.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "algorithms/update_rule.hpp"
#include "gpu/device.hpp"
#include "gpu/device_collectives.hpp"
#include "transport/inproc.hpp"
#include "transport_conformance.hpp"
#if ACCORD_HAVE_CUDA
#include "gpu/nccl_transport.hpp"
#endif

using namespace accord;

namespace {

constexpr std::size_t parameters = 1000;  // three uneven shards: 334, 334, 332
constexpr double micro_batches = 2;

struct rule_case {
  std::string name;
  std::function<std::unique_ptr<update_rule>(std::span<const float> initial, int world, int rank)> make;
};

std::vector<rule_case> rule_cases(wire_precision wire) {
  optimizer_config adamw;
  adamw.kind = "adamw";
  adamw.weight_decay = 0.1f;
  optimizer_config lion;
  lion.kind = "lion";
  lion.beta2 = 0.99f;
  lion.weight_decay = 0.1f;
  const round_precision precision{wire, wire};
  auto sharded = [precision](optimizer_config config) {
    return [=](std::span<const float> initial, int world, int rank) {
      return make_sharded_optimizer_rule(config, initial, world, rank, precision);
    };
  };
  auto vote = [lion](bool average) {
    return [=](std::span<const float> initial, int, int) { return make_sign_vote_rule(average, lion, initial); };
  };
  return {{"sharded adamw", sharded(adamw)}, {"sharded lion", sharded(lion)},
          {"sign vote, majority", vote(false)}, {"sign vote, average", vote(true)}};
}

std::vector<float> values(std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(parameters);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 13 == 5 ? 0.0f : normal(generator);
  return v;
}

struct round_plan {
  std::uint64_t step;
  bool estimate;
};
// ACCO's shape: a real round, then a step's estimate and its real round, then one more.
constexpr round_plan rounds[] = {{0, false}, {1, true}, {1, false}, {2, false}};

// One round on a rank: gradient sum in, parameters out (where the buffer lives is the runner's).
using run_round = std::function<void(update_rule&, transport&, std::vector<float>& buffer, const round_totals& local,
                                     const round_totals& global, const round_plan&)>;

// Every rank's buffer after every round, each rank on its own thread.
std::vector<std::vector<float>> run_world(testing::world_endpoints& endpoints, const rule_case& rule,
                                          const run_round& round) {
  const int world = static_cast<int>(endpoints.size());
  std::vector<std::vector<float>> results(world);
  testing::run_ranks(endpoints, [&](transport& link) {
    const int rank = link.rank();
    const std::vector<float> initial = values(7);
    auto instance = rule.make(initial, world, rank);
    const round_totals local{micro_batches, 0, 0, 0}, global{micro_batches * world, 0, 0, 0};
    for (const round_plan& plan : rounds) {
      std::vector<float> buffer = values(100 + 10 * static_cast<std::uint32_t>(rank) + static_cast<std::uint32_t>(plan.step));
      round(*instance, link, buffer, local, global, plan);
      results[rank].insert(results[rank].end(), buffer.begin(), buffer.end());
    }
  });
  return results;
}

constexpr float learning_rate = 1e-2f;

void host_round(update_rule& rule, transport& link, std::vector<float>& buffer, const round_totals& local,
                const round_totals& global, const round_plan& plan) {
  rule.apply(link, buffer, local, global, learning_rate, plan.step, plan.estimate, {});  // no block-quantized estimates here: θ_t is not needed
}

}  // namespace

TEST_CASE("device forms of the rules on the reference collectives equal the host forms bit for bit") {
  for (const wire_precision wire : {wire_precision::fp32, wire_precision::bf16})
    for (const rule_case& rule : rule_cases(wire)) {
      CAPTURE(rule.name);
      CAPTURE(precision_name(wire));
      REQUIRE(rule.make(values(7), 3, 0)->has_device_form());
      auto host_world = inproc_fabric(3).endpoints();
      const auto host = run_world(host_world, rule, host_round);
      auto device_world = inproc_fabric(3).endpoints();
      const auto device = run_world(device_world, rule, [](update_rule& r, transport& link, std::vector<float>& buffer,
                                                            const round_totals& local, const round_totals& global,
                                                            const round_plan& plan) {
        auto collectives = make_device_collectives(link, memory_location{});
        REQUIRE(collectives);
        r.apply_on_device(*collectives, buffer, local, global, learning_rate, plan.step, plan.estimate);
      });
      CHECK(device == host);
      for (const auto& rank : device) CHECK(rank == device[0]);  // replicas agree
    }
  // SGD keeps its rounds on the host.
  optimizer_config sgd;
  sgd.kind = "sgd";
  CHECK_FALSE(make_sharded_optimizer_rule(sgd, values(7), 1, 0)->has_device_form());
}

TEST_CASE("device forms of the rules on NCCL equal the host forms and copy no tensor per round") {
  if (!cuda_available()) {
    MESSAGE("ACCORD_SKIPPED: no CUDA device on this machine");
    return;
  }
#if ACCORD_HAVE_CUDA
  const int world = std::min(cuda_device_count(), 4);
  std::vector<int> devices(world);
  for (int d = 0; d < world; ++d) devices[d] = d;
  for (const wire_precision wire : {wire_precision::fp32, wire_precision::bf16})
    for (const rule_case& rule : rule_cases(wire)) {
      CAPTURE(rule.name);
      CAPTURE(precision_name(wire));
      auto host_world = inproc_fabric(world).endpoints();
      const auto host = run_world(host_world, rule, host_round);
      auto group = make_nccl_group(devices);
      testing::world_endpoints device_world(std::make_move_iterator(group.begin()), std::make_move_iterator(group.end()));
      const std::uint64_t copies_before = tensor_copies_to_and_from_devices();
      const auto device = run_world(device_world, rule, [](update_rule& r, transport& link, std::vector<float>& buffer,
                                                            const round_totals& local, const round_totals& global,
                                                            const round_plan& plan) {
        auto& nccl = static_cast<nccl_transport&>(link);
        use_cuda_device(nccl.device());
        auto collectives = make_nccl_collectives(nccl);
        device_array<float> on_device(device_kind::cuda, std::span<const float>(buffer));
        r.apply_on_device(*collectives, on_device.span(), local, global, learning_rate, plan.step, plan.estimate);
        on_device.copy_to(buffer);
      });
      // The test's own: each round's buffer up and down; the rule's: its state up once.
      const std::uint64_t copies = tensor_copies_to_and_from_devices() - copies_before;
      CHECK(copies <= static_cast<std::uint64_t>(world) * (2 * std::size(rounds) + 4));
      for (int r = 0; r < world; ++r) {
        REQUIRE(device[r].size() == host[r].size());
        std::size_t differing = 0;
        for (std::size_t i = 0; i < host[r].size(); ++i)
          differing += !(std::fabs(device[r][i] - host[r][i]) <= 1e-5f * std::fabs(host[r][i]) + 1e-6f);
        CHECK_MESSAGE(differing == 0, differing << " values differ on rank " << r);
        CHECK(device[r] == device[0]);  // replicas agree bit for bit
      }
    }
#endif
}
