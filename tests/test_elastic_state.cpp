// Elastic state: the layout-independent checksum, buddy copies and where they go, the state keeper's two
// generations, and transfer_state re-sharding a kept step onto a smaller or larger epoch
// (ZeRO-1 shards) or handing the parameters to a joiner (sign votes). One thread per rank over
// an in-process fabric whose receive timeout turns a hang into an error.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "recovery/elastic_state.hpp"
#include "recovery/parameter_hash.hpp"
#include "transport/inproc.hpp"
#include "transport/shard.hpp"
#include "transport_conformance.hpp"

using namespace accord;
using accord::testing::run_ranks;

namespace {

// Does not divide by 3 or 4, so the last shard of either world is short.
constexpr std::size_t parameter_count = 1003;
constexpr std::uint32_t adamw_slots = 2;
constexpr std::uint64_t kept_layout = 7;
constexpr std::uint64_t kept_steps = 120;

std::vector<float> random_floats(std::mt19937& generator, std::size_t count) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(generator);
  return values;
}

// A full job state as a checkpoint holds it: AdamW's two slots, and one Lion momentum per worker.
checkpoint random_checkpoint(std::uint32_t seed, int momenta = 0) {
  std::mt19937 generator(seed);
  checkpoint c;
  c.steps = kept_steps;
  c.parameters = random_floats(generator, parameter_count);
  c.optimizer_step = kept_steps;
  c.slots = adamw_slots;
  c.optimizer = random_floats(generator, adamw_slots * parameter_count);
  for (int m = 0; m < momenta; ++m) c.momenta.push_back(random_floats(generator, parameter_count));
  return c;
}

// One fabric per world; a recv waiting on a peer that will never send fails instead of hanging.
std::vector<std::unique_ptr<transport>> world_of(int world) {
  return inproc_fabric(world, {}, std::chrono::seconds(5)).endpoints();
}

void check_same_state(const rule_state& actual, const rule_state& expected) {
  CHECK(actual.present == expected.present);
  CHECK(actual.momentum == expected.momentum);
  CHECK(actual.optimizer_step == expected.optimizer_step);
  CHECK(actual.slots == expected.slots);
  CHECK(actual.begin == expected.begin);
  CHECK(actual.values == expected.values);
}

std::uint64_t sharded_checksum(const checkpoint& c, int world) {
  std::uint64_t sum = 0;
  for (int rank = 0; rank < world; ++rank)
    sum += state_checksum(slice_checkpoint(c, true, world, rank), c.parameters.size());
  return sum;
}

// What every worker of a ZeRO-1 epoch of `world` keeps at a step boundary: the parameters, its
// shard, and the copies that replicate_to_buddies brought it (`traffic`: each rank's bytes).
std::vector<kept_state> replicated_world(const checkpoint& c, int world,
                                         std::vector<transfer_stats>* traffic = nullptr) {
  std::vector<kept_state> kept(static_cast<std::size_t>(world));
  if (traffic) traffic->assign(static_cast<std::size_t>(world), {});
  auto endpoints = world_of(world);
  run_ranks(endpoints, [&](transport& link) {
    kept_state& state = kept[static_cast<std::size_t>(link.rank())];
    state.layout = kept_layout;
    state.world = world;
    state.rank = link.rank();
    state.steps = kept_steps;
    state.parameters = c.parameters;
    state.own = slice_checkpoint(c, true, world, link.rank());
    state.copies = replicate_to_buddies(link, state.own, c.parameters.size());
    if (traffic) (*traffic)[static_cast<std::size_t>(link.rank())] = link.stats();
  });
  return kept;
}

// Runs transfer_state on a fresh epoch of held.size() ranks, new rank r holding held[r].
std::vector<restored_state> transfer(const state_source& source, const std::vector<std::optional<kept_state>>& held,
                                     bool sharded, std::vector<transfer_stats>* traffic = nullptr,
                                     const std::string& feedback = {}) {
  const int world = static_cast<int>(held.size());
  std::vector<restored_state> restored(held.size());
  if (traffic) traffic->assign(held.size(), {});
  auto endpoints = world_of(world);
  run_ranks(endpoints, [&](transport& link) {
    const auto rank = static_cast<std::size_t>(link.rank());
    restored[rank] = transfer_state(link, source, held[rank], parameter_count, sharded, feedback);
    if (traffic) (*traffic)[rank] = link.stats();
  });
  return restored;
}

state_source source_of(const checkpoint& c, int old_world, std::vector<int> shard_senders,
                       std::vector<int> parameter_holders) {
  state_source source;
  source.layout = kept_layout;
  source.steps = kept_steps;
  source.world = old_world;
  source.shard_senders = std::move(shard_senders);
  source.parameter_holders = std::move(parameter_holders);
  source.optimizer_step = c.optimizer_step;
  source.slots = c.slots;
  source.parameter_hash = hash_parameters(c.parameters);
  source.state_checksum = sharded_checksum(c, old_world);
  return source;
}

// Every new rank holds the kept parameters and exactly its shard of the new world.
void check_resharded(const checkpoint& c, const std::vector<restored_state>& restored, std::uint64_t old_checksum) {
  const int world = static_cast<int>(restored.size());
  std::uint64_t new_checksum = 0;
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    const restored_state& state = restored[static_cast<std::size_t>(rank)];
    CHECK(state.parameters == c.parameters);
    const rule_state expected = slice_checkpoint(c, true, world, rank);
    check_same_state(state.own, expected);
    CHECK(state.own.feedback == expected.feedback);
    CHECK(state.own.residual == expected.residual);
    CHECK(state.own.master == expected.master);
    new_checksum += state_checksum(state.own, parameter_count);
  }
  CHECK(new_checksum == old_checksum);
}

}  // namespace

TEST_CASE("state_checksum of any sharding adds up to the same sum, and sees a one-ulp change") {
  checkpoint c = random_checkpoint(11);
  const std::uint64_t four = sharded_checksum(c, 4);
  CHECK(four != 0);
  CHECK(four == sharded_checksum(c, 3));
  CHECK(four == sharded_checksum(c, 1));

  float& second_slot_value = c.optimizer[parameter_count + 500];
  second_slot_value = std::nextafter(second_slot_value, 2.f);
  CHECK(sharded_checksum(c, 4) != four);
  CHECK(sharded_checksum(c, 4) == sharded_checksum(c, 3));
}

TEST_CASE("buddy copies: every shard outlives the coordinator's process (rank 0) and any one other member lost "
          "together, for one shard more on the wire") {
  CHECK(copy_holders(0, 1).empty());
  CHECK(copy_holders(0, 2) == std::vector<int>{1});
  CHECK(copy_holders(1, 2) == std::vector<int>{0});
  CHECK(copy_holders(0, 4) == std::vector<int>{1, 2});
  CHECK(copy_holders(3, 4) == std::vector<int>{1});  // not rank 0, as the ring's next rank was
  CHECK(copies_kept_by(0, 4).empty());
  CHECK(copies_kept_by(1, 4) == std::vector<int>{0, 3});
  for (int world = 2; world <= 9; ++world) {
    CAPTURE(world);
    // Any one member lost, or (from 3 ranks, where someone survives) rank 0 with any other.
    std::vector<std::vector<int>> losses;
    for (int m = 0; m < world; ++m) losses.push_back({m});
    for (int m = 1; m < world && world >= 3; ++m) losses.push_back({0, m});
    for (const auto& lost : losses) {
      CAPTURE(lost);
      const auto gone = [&](int rank) { return std::find(lost.begin(), lost.end(), rank) != lost.end(); };
      for (int shard = 0; shard < world; ++shard) {
        const std::vector<int> holders = copy_holders(shard, world);
        CHECK((!gone(shard) || std::any_of(holders.begin(), holders.end(), [&](int h) { return !gone(h); })));
      }
    }
  }

  const checkpoint c = random_checkpoint(12);
  for (const int world : {2, 4, 5}) {
    CAPTURE(world);
    std::vector<transfer_stats> traffic;
    const std::vector<kept_state> kept = replicated_world(c, world, &traffic);
    std::uint64_t sent = 0, copies = 0;
    for (int rank = 0; rank < world; ++rank) {
      CAPTURE(rank);
      const kept_state& state = kept[static_cast<std::size_t>(rank)];
      check_same_state(state.own, slice_checkpoint(c, true, world, rank));
      const std::vector<int> expected = copies_kept_by(rank, world);
      REQUIRE(state.copies.size() == expected.size());
      for (std::size_t k = 0; k < expected.size(); ++k) {
        check_same_state(state.copies[k], slice_checkpoint(c, true, world, expected[k]));
        CHECK(state.shard(expected[k]) == &state.copies[k]);
      }
      sent += traffic[static_cast<std::size_t>(rank)].bytes_sent;
      copies += expected.size();
    }
    // Each rank's shard once, and rank 0's once more from 3 ranks on.
    CHECK(copies == static_cast<std::uint64_t>(world + (world >= 3 ? 1 : 0)));
    const std::uint64_t shard_bytes = sizeof(float) * adamw_slots * shard_of(parameter_count, world, 0).size();
    MESSAGE(world << " ranks: " << sent << " bytes of copies per keep (rank 0's shard: " << shard_bytes << ")");
    CHECK(traffic[0].bytes_sent == (world >= 3 ? 2 : 1) * shard_bytes);
  }
}

TEST_CASE("transfer_state re-shards world 4 onto world 3 after rank 2 died, shard 2 from its buddy") {
  const checkpoint c = random_checkpoint(13);
  const std::vector<kept_state> old = replicated_world(c, 4);
  // New ranks 0, 1, 2 are old ranks 0, 1, 3; old rank 3 keeps shard 2 as its buddy copy.
  const std::vector<std::optional<kept_state>> held{old[0], old[1], old[3]};
  const state_source source = source_of(c, 4, {0, 1, 2, 2}, {0, 1, 2});
  check_resharded(c, transfer(source, held, true), source.state_checksum);
}

TEST_CASE("transfer_state re-shards world 5 onto world 3 after the coordinator (rank 0) and rank 4 died together") {
  // Rank 4's copy used to be on rank 0 only. New ranks 0, 1, 2 are old ranks 1, 2, 3: old rank 1
  // keeps copies of shards 0 and 4, old rank 2 of shards 0 and 1.
  const checkpoint c = random_checkpoint(18);
  const std::vector<kept_state> old = replicated_world(c, 5);
  CHECK(old[1].shard(4));
  CHECK(old[1].shard(0));
  const std::vector<std::optional<kept_state>> held{old[1], old[2], old[3]};
  const state_source source = source_of(c, 5, {0, 0, 1, 2, 0}, {0, 1, 2});
  check_resharded(c, transfer(source, held, true), source.state_checksum);
}

TEST_CASE("transfer_state brings a joiner the parameters and its shard when world 3 grows to 4") {
  const checkpoint c = random_checkpoint(14);
  const std::vector<kept_state> old = replicated_world(c, 3);
  const std::vector<std::optional<kept_state>> held{old[0], old[1], old[2], std::nullopt};
  const state_source source = source_of(c, 3, {0, 1, 2}, {0, 1, 2});
  std::vector<transfer_stats> traffic;
  check_resharded(c, transfer(source, held, true, &traffic), source.state_checksum);
  // The joiner received the parameters, whether the topology keeps state of its own (two u64:
  // it does not here) and its own shard, nothing more.
  const std::size_t joiner_shard = shard_of(parameter_count, 4, 3).size();
  CHECK(traffic[3].bytes_received == sizeof(float) * (parameter_count + adamw_slots * joiner_shard) + 16);
  CHECK(traffic[3].bytes_sent == 0);
}

TEST_CASE("transfer_state: a topology's own state stays with each holder, and a joiner gets the shared values and "
          "starts its own share afresh") {
  const checkpoint c = random_checkpoint(15);
  std::vector<kept_state> old = replicated_world(c, 3);
  const std::vector<float> shared{0.5f, -0.25f, 0.125f};
  for (int rank = 0; rank < 3; ++rank) {
    kept_topology& topology = old[static_cast<std::size_t>(rank)].own.topology;
    topology.present = true;
    topology.shared = shared;
    topology.own.assign(parameter_count, static_cast<float>(rank + 1));
    topology.local_step = 7;
    topology.local_slots = 1;
    topology.local_values.assign(parameter_count, static_cast<float>(-rank));
  }
  // Old rank 0 (the coordinator's process) is gone; old ranks 1 and 2 are new ranks 0 and 1, rank 2 joins.
  const std::vector<std::optional<kept_state>> held{old[1], old[2], std::nullopt};
  const state_source source = source_of(c, 3, {0, 0, 1}, {0, 1});
  const std::vector<restored_state> restored = transfer(source, held, true);
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(rank);
    const kept_topology& topology = restored[static_cast<std::size_t>(rank)].own.topology;
    CHECK(topology.present);
    CHECK(topology.shared == shared);
    CHECK(topology.parameters == restored[static_cast<std::size_t>(rank)].parameters);
  }
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const kept_topology& topology = restored[static_cast<std::size_t>(rank)].own.topology;
    CHECK(topology.own == old[static_cast<std::size_t>(rank + 1)].own.topology.own);
    CHECK(topology.local_values == old[static_cast<std::size_t>(rank + 1)].own.topology.local_values);
  }
  CHECK(restored[2].own.topology.own.empty());
  CHECK(restored[2].own.topology.local_slots == 0);
}

TEST_CASE("error feedback: residuals and masters travel with their shards to the buddy, a smaller world and a joiner") {
  // A kept step's residuals (folded: each range's owner holds the sum over workers) and masters
  // are two more shard-sized arrays: replicated to the buddy, re-sharded onto the new ranks, and
  // counted by the checksum; a joiner's own range comes from its holders like the optimizer's.
  checkpoint c = random_checkpoint(16);
  std::mt19937 generator(17);
  c.feedback = "sign";
  c.residuals = random_floats(generator, parameter_count);
  c.replica = random_floats(generator, parameter_count);
  const std::uint64_t four = sharded_checksum(c, 4);
  CHECK(four == sharded_checksum(c, 3));
  checkpoint without = c;
  without.feedback.clear();
  CHECK(four != sharded_checksum(without, 4));
  c.residuals[700] = std::nextafter(c.residuals[700], 2.f);
  CHECK(sharded_checksum(c, 4) != four);

  const std::vector<kept_state> old = replicated_world(c, 4);
  for (int rank = 0; rank < 4; ++rank)
    for (const int shard : copies_kept_by(rank, 4)) {
      CAPTURE(rank);
      CAPTURE(shard);
      const rule_state expected = slice_checkpoint(c, true, 4, shard);
      REQUIRE(old[rank].shard(shard));
      CHECK(old[rank].shard(shard)->residual == expected.residual);
      CHECK(old[rank].shard(shard)->master == expected.master);
    }
  const std::vector<std::optional<kept_state>> survivors{old[0], old[1], old[3]};
  const state_source smaller = source_of(c, 4, {0, 1, 2, 2}, {0, 1, 2});
  check_resharded(c, transfer(smaller, survivors, true, nullptr, "sign"), smaller.state_checksum);

  const std::vector<kept_state> three = replicated_world(c, 3);
  const std::vector<std::optional<kept_state>> held{three[0], three[1], three[2], std::nullopt};
  const state_source larger = source_of(c, 3, {0, 1, 2}, {0, 1, 2});
  std::vector<transfer_stats> traffic;
  check_resharded(c, transfer(larger, held, true, &traffic, "sign"), larger.state_checksum);
  const std::size_t joiner_shard = shard_of(parameter_count, 4, 3).size();
  // (+ 16: that no topology state follows.)
  CHECK(traffic[3].bytes_received == sizeof(float) * (parameter_count + (adamw_slots + 2) * joiner_shard) + 16);
}

TEST_CASE("sign votes: transfer_state stripes the parameters to a joiner, which starts from the mean momentum, holders keep theirs") {
  const int old_world = 3;
  const checkpoint c = random_checkpoint(15, old_world);
  // Old ranks 0, 1, 2 are new ranks 1, 2, 3; the joiner is new rank 0.
  std::vector<std::optional<kept_state>> held(4);
  for (int old_rank = 0; old_rank < old_world; ++old_rank) {
    kept_state state;
    state.layout = kept_layout;
    state.world = old_world;
    state.rank = old_rank;
    state.steps = kept_steps;
    state.parameters = c.parameters;
    state.own = slice_checkpoint(c, false, old_world, old_rank);
    held[static_cast<std::size_t>(old_rank + 1)] = std::move(state);
  }
  state_source source = source_of(c, old_world, {}, {1, 2, 3});
  source.slots = 1;
  source.state_checksum = 0;

  std::vector<transfer_stats> traffic;
  const std::vector<restored_state> restored = transfer(source, held, false, &traffic);
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    CHECK(restored[static_cast<std::size_t>(rank)].parameters == c.parameters);
  }
  // The joiner starts from the mean of the holders' momenta, as a rank beyond a checkpoint's does.
  const rule_state mean = slice_checkpoint(c, false, old_world + 1, old_world);
  CHECK(restored[0].own.present);
  CHECK(restored[0].own.momentum);
  CHECK(restored[0].own.values == mean.values);
  for (std::size_t i = 0; i < parameter_count; ++i) {
    float sum = 0;
    for (const auto& momentum : c.momenta) sum += momentum[i];
    REQUIRE(mean.values[i] == doctest::Approx(sum / old_world).epsilon(1e-6));
  }
  for (int holder = 1; holder <= old_world; ++holder) {
    CAPTURE(holder);
    const rule_state& own = restored[static_cast<std::size_t>(holder)].own;
    CHECK(own.present);
    CHECK(own.momentum);
    CHECK(own.values == c.momenta[static_cast<std::size_t>(holder - 1)]);
    // Striped: holder p of the three sent piece p of the parameters, then its whole momentum.
    // (The first holder also tells the joiner, in two u64, that no topology state follows.)
    CHECK(traffic[static_cast<std::size_t>(holder)].bytes_sent ==
          sizeof(float) * (shard_of(parameter_count, old_world, holder - 1).size() + parameter_count) +
              (holder == 1 ? 16 : 0));
  }
  CHECK(traffic[0].bytes_received == sizeof(float) * (1 + old_world) * parameter_count + 16);
}

TEST_CASE("state_keeper keeps the two newest generations and describes them") {
  const checkpoint c = random_checkpoint(16);
  const std::vector<kept_state> replicated = replicated_world(c, 4);
  state_keeper keeper;
  CHECK(keeper.summaries().empty());

  // Three generations of rank 1; the newest two differ in layout, steps, parameters and copies.
  const auto generation = [&](std::uint64_t layout, std::uint64_t steps, float shift, bool with_copies) {
    kept_state state = replicated[1];
    state.layout = layout;
    state.steps = steps;
    for (float& p : state.parameters) p += shift;
    if (!with_copies) state.copies.clear();
    return state;
  };
  keeper.keep(generation(5, 100, 0.f, true));
  keeper.keep(generation(5, 110, 1.f, false));
  keeper.keep(generation(6, 120, 2.f, true));

  CHECK_FALSE(keeper.find(5, 100));
  CHECK_FALSE(keeper.find(6, 110));
  const std::optional<kept_state> older = keeper.find(5, 110);
  const std::optional<kept_state> newest = keeper.find(6, 120);
  REQUIRE(older);
  REQUIRE(newest);
  CHECK(older->parameters == generation(5, 110, 1.f, false).parameters);
  CHECK(older->copies.empty());
  CHECK(newest->parameters == generation(6, 120, 2.f, true).parameters);
  check_same_state(newest->own, replicated[1].own);
  REQUIRE(newest->copies.size() == 2);  // rank 1 of 4 keeps copies of shards 0 and 3
  check_same_state(newest->copies[1], replicated[1].copies[1]);

  const std::vector<kept_summary> summaries = keeper.summaries();
  REQUIRE(summaries.size() == 2);
  for (const auto& [summary, kept] : {std::pair{summaries[0], *newest}, std::pair{summaries[1], *older}}) {
    CAPTURE(summary.steps);
    CHECK(summary.layout == kept.layout);
    CHECK(summary.steps == kept.steps);
    CHECK(summary.rank == 1);
    CHECK(summary.world == 4);
    CHECK(summary.copies == (kept.copies.empty() ? std::vector<int>{} : std::vector<int>{0, 3}));
    CHECK(summary.optimizer_step == c.optimizer_step);
    CHECK(summary.slots == adamw_slots);
    CHECK(summary.parameter_hash == hash_parameters(kept.parameters));
    CHECK(summary.own_checksum == state_checksum(kept.own, parameter_count));
    CHECK(summary.own_checksum != 0);
    REQUIRE(summary.copy_checksums.size() == kept.copies.size());
    for (std::size_t k = 0; k < kept.copies.size(); ++k)
      CHECK(summary.copy_checksums[k] == state_checksum(kept.copies[k], parameter_count));
  }
  CHECK(summaries[0].steps == 120);
  CHECK(summaries[0].copy_checksums.at(0) != 0);
  CHECK(summaries[1].copy_checksums.empty());
  CHECK(summaries[0].parameter_hash != summaries[1].parameter_hash);
}

TEST_CASE("transfer_state rejects a source naming a rank that does not keep what it should send") {
  const checkpoint c = random_checkpoint(17);
  auto endpoints = world_of(1);
  transport& link = *endpoints[0];

  SUBCASE("a parameter holder without kept state") {
    const state_source source = source_of(c, 1, {0}, {0});
    CHECK_THROWS_AS(transfer_state(link, source, std::nullopt, parameter_count, true), std::logic_error);
    CHECK_THROWS_AS(transfer_state(link, source, std::nullopt, parameter_count, false), std::logic_error);
  }
  SUBCASE("a shard sender that keeps neither that shard nor a copy of it") {
    kept_state state;
    state.layout = kept_layout;
    state.world = 2;
    state.rank = 0;
    state.steps = kept_steps;
    state.parameters = c.parameters;
    state.own = slice_checkpoint(c, true, 2, 0);
    const state_source source = source_of(c, 2, {0, 0}, {0});
    CHECK_THROWS_AS(transfer_state(link, source, state, parameter_count, true), std::logic_error);
  }
  SUBCASE("nobody holding the parameters") {
    const state_source source = source_of(c, 1, {0}, {});
    CHECK_THROWS_AS(transfer_state(link, source, std::nullopt, parameter_count, true), std::invalid_argument);
  }
}
