// The in-process transport: the conformance suite on an unlimited and on a limited link, then
// what only it has (the link model, fail(), interrupt() next to fail(), the receive timeout,
// channels and the collectives in flight on them) and the sign-vote helpers.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>

#include "transport/inproc.hpp"
#include "transport/link_model.hpp"
#include "transport/sign_vote.hpp"
#include "transport/wire_precision.hpp"
#include "transport/hierarchical.hpp"
#include "transport_conformance.hpp"

using namespace accord;
using namespace std::chrono_literals;
using accord::testing::byte_pattern;
using accord::testing::make_world;
using accord::testing::run_ranks;
using accord::testing::run_ranks_catching;

TEST_CASE("inproc transport conformance, unlimited link") {
  testing::run_transport_conformance("inproc, unlimited", [](int world) { return inproc_fabric(world).endpoints(); });
}

TEST_CASE("inproc transport conformance, 2 gbit/s and 20 us link") {
  // The timeout only turns a bug into a failure instead of a hung test run.
  testing::run_transport_conformance("inproc, 2gbit,20us", [](int world) {
    return inproc_fabric(world, link_model::parse("2gbit,20us"), 60s).endpoints();
  });
}

namespace {

// Worlds whose collectives run in groups of `group` (the last one short when it does not
// divide), inside and across over different links. Their traffic differs from a ring's by
// design, so the conformance suite's traffic subcases do not apply.
testing::transport_factory hierarchical_world(int group) {
  return [group](int world) {
    inproc_fabric fabric(world, link_layout{link_model::parse("2gbit,20us"), link_model::parse("1gbit,50us"), group}, 60s);
    testing::world_endpoints grouped;
    for (auto& flat : fabric.endpoints()) grouped.push_back(make_hierarchical_transport(std::move(flat), group));
    return grouped;
  };
}

void check_hierarchical(int group) {
  const testing::transport_factory make = hierarchical_world(group);
  SUBCASE("point to point") { testing::check_point_to_point(make); }
  SUBCASE("reductions: exact sums, bit-identical on every rank") { testing::check_reductions(make); }
  SUBCASE("sign votes: the flat vote's majority, ties and counts") { testing::check_sign_votes(make); }
  SUBCASE("peer failure") { testing::check_peer_failure(make); }
  SUBCASE("interrupt") { testing::check_interrupt(make); }
}

}  // namespace

TEST_CASE("hierarchical collectives in groups of 2 pass the conformance suite") { check_hierarchical(2); }
TEST_CASE("hierarchical collectives in groups of 3 pass the conformance suite") { check_hierarchical(3); }

TEST_CASE("link_model::parse reads bandwidth and latency") {
  const auto check = [](const char* spec, double bytes_per_second, double seconds) {
    CAPTURE(spec);
    const link_model link = link_model::parse(spec);
    CHECK(link.bandwidth_bytes_per_second == doctest::Approx(bytes_per_second));
    CHECK(link.latency_seconds == doctest::Approx(seconds));
  };
  check("1gbit,50us", 1.25e8, 50e-6);
  check("10gbit", 1.25e9, 0);
  check("100mbit,1ms", 12.5e6, 1e-3);
  check("unlimited", 0, 0);
  check("unlimited,20us", 0, 20e-6);
  check("50us", 0, 50e-6);
  check(" 2GB , 5us ", 2e9, 5e-6);
  check("1ms,1.5Gbit", 1.5e9 / 8, 1e-3);
  check("500kB,250ns", 5e5, 250e-9);
  check("8bit,1s", 1, 1);
  CHECK(link_model::parse("unlimited").unlimited());
  CHECK_FALSE(link_model::parse("10gbit").unlimited());
}

TEST_CASE("link_model::parse rejects bad specs with a message naming them") {
  for (const char* spec : {"", "fast", "1gbt", "10", "1gbit,", ",1gbit", "1gbit,2gbit", "50us,1ms", "-1gbit",
                           "0gbit", "1mb", "nan gbit", "unlimited,unlimited", "1gbit;50us"}) {
    CAPTURE(spec);
    try {
      link_model::parse(spec);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      CHECK(message.find("'" + std::string(spec) + "'") != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("link_model describes itself and computes wire times") {
  CHECK(link_model::parse("1gbit,50us").to_string() == "1 gbit/s, 50 us");
  CHECK(link_model::parse("100mbit,1ms").to_string() == "100 mbit/s, 1 ms");
  CHECK(link_model::parse("unlimited,20us").to_string() == "unlimited, 20 us");
  CHECK(link_model{}.to_string() == "unlimited");
  const link_model link = link_model::parse("1gbit,50us");
  CHECK(link.wire_time(125'000'000) == 1s);
  CHECK(link.wire_time(0) == 0ns);
  CHECK(link.latency() == 50us);
  CHECK(link_model{}.wire_time(1'000'000) == 0ns);
}

TEST_CASE("the link model delays delivery: serialised per sender, plus latency") {
  inproc_fabric fabric(3, link_model::parse("100mbit,2ms"));
  const link_model& link = fabric.link();
  std::vector<std::unique_ptr<inproc_transport>> endpoints;
  for (int rank = 0; rank < 3; ++rank) endpoints.push_back(fabric.endpoint(rank));
  constexpr std::size_t bytes = 10'000;
  inproc_transport::clock::time_point sent, first_arrival, second_arrival, third_arrival, first_returned;
  std::thread receiver1([&] {
    std::vector<std::byte> buffer(bytes);
    endpoints[1]->recv(0, 1, buffer);
    first_returned = inproc_transport::clock::now();
    first_arrival = endpoints[1]->last_arrival();
    endpoints[1]->recv(0, 1, buffer);
    second_arrival = endpoints[1]->last_arrival();
  });
  std::thread receiver2([&] {
    std::vector<std::byte> buffer(bytes);
    endpoints[2]->recv(0, 1, buffer);
    third_arrival = endpoints[2]->last_arrival();
  });
  sent = inproc_transport::clock::now();
  for (int peer : {1, 1, 2}) endpoints[0]->send(peer, 1, byte_pattern(bytes, 0));
  receiver1.join();
  receiver2.join();
  const auto wire = link.wire_time(bytes);
  CHECK(wire == 800us);
  CHECK(first_arrival >= sent + wire + link.latency());
  CHECK(first_returned >= first_arrival);  // recv waited for the emulated wire
  CHECK(second_arrival >= first_arrival + wire);  // the second message queued behind the first
  CHECK(third_arrival >= second_arrival + wire);  // one outgoing link for all destinations
  CHECK(endpoints[0]->stats().bytes_sent == 3 * bytes);
  CHECK(endpoints[1]->stats().bytes_received == 2 * bytes);
  CHECK(endpoints[0]->stats().messages_sent == 3);
}

TEST_CASE("fail(rank) emulates a crash: recvs from it and sends to it throw") {
  inproc_fabric fabric(3);
  std::vector<std::unique_ptr<transport>> endpoints = fabric.endpoints();
  std::latch crashed(1);
  std::string receive_error, send_error;
  const auto errors = run_ranks_catching(endpoints, [&](transport& t) {
    std::byte byte{};
    if (t.rank() == 0) {
      t.send(1, 9, byte_pattern(4, 9));  // still in the mailbox: lost in the crash
      fabric.fail(0);
      crashed.count_down();
      t.send(2, 2, std::span(&byte, 1));  // the crashed rank's own calls throw
    } else if (t.rank() == 1) {
      crashed.wait();
      std::vector<std::byte> buffer(4);
      try {
        t.recv(0, 9, buffer);
      } catch (const transport_error& e) {
        receive_error = e.what();
      }
      t.send(2, 3, std::span(&byte, 1));
    } else {
      t.recv(1, 3, std::span(&byte, 1));  // sent after the crash
      try {
        t.send(0, 4, std::span(&byte, 1));
      } catch (const transport_error& e) {
        send_error = e.what();
      }
    }
  });
  REQUIRE(errors[0]);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[0]), doctest::Contains("this rank failed"), transport_error);
  CHECK_FALSE(errors[1]);
  CHECK_FALSE(errors[2]);
  CHECK_MESSAGE(receive_error.find("peer 0 failed") != std::string::npos, receive_error);
  CHECK_MESSAGE(send_error.find("peer 0, which failed") != std::string::npos, send_error);
}

TEST_CASE("a recv waiting on a peer that fails is woken with a transport_error") {
  inproc_fabric fabric(2);
  std::vector<std::unique_ptr<transport>> endpoints = fabric.endpoints();
  const auto errors = run_ranks_catching(endpoints, [&](transport& t) {
    std::byte signal{};
    if (t.rank() == 0) {
      t.recv(1, 1, std::span(&signal, 1));  // rank 1 is about to wait on tag 2
      fabric.fail(0);
    } else {
      t.send(0, 1, std::span(&signal, 1));
      t.recv(0, 2, std::span(&signal, 1));
    }
  });
  CHECK_FALSE(errors[0]);
  REQUIRE(errors[1]);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[1]), doctest::Contains("peer 0 failed while this rank waited for tag 2"),
                       transport_error);
}

TEST_CASE("interrupt fails only the interrupted endpoint's calls, unlike fail()") {
  inproc_fabric fabric(2);
  std::vector<std::unique_ptr<transport>> endpoints = fabric.endpoints();
  endpoints[0]->interrupt("member lost");
  std::byte byte{};
  CHECK_THROWS_WITH_AS(endpoints[0]->recv(1, 1, std::span(&byte, 1)), "rank 0: interrupted: member lost",
                       transport_error);
  endpoints[1]->send(0, 2, std::span(&byte, 1));  // the interrupted rank is not failed for its peers
  endpoints[0].reset();
  CHECK_THROWS_WITH_AS(endpoints[1]->recv(0, 3, std::span(&byte, 1)), doctest::Contains("peer 0 closed its endpoint"),
                       transport_error);
}

TEST_CASE("the receive timeout names the peer and the tag") {
  std::vector<std::unique_ptr<transport>> endpoints = inproc_fabric(2, {}, 50ms).endpoints();
  std::byte byte{};
  CHECK_THROWS_WITH_AS(endpoints[1]->recv(0, 4, std::span(&byte, 1)),
                       "rank 1: no message with tag 4 from peer 0 within 50 ms", transport_error);
  std::vector<float> data(10);
  const auto errors = run_ranks_catching(endpoints, [&](transport& t) {
    if (t.rank() == 0) t.all_reduce(data);  // rank 1 never joins
  });
  REQUIRE(errors[0]);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[0]), doctest::Contains("from peer 1 within 50 ms"), transport_error);
}

TEST_CASE("inproc_fabric rejects bad ranks and hands each endpoint out once") {
  CHECK_THROWS_AS(inproc_fabric(0), std::invalid_argument);
  inproc_fabric fabric(2);
  CHECK_THROWS_AS(fabric.endpoint(2), std::invalid_argument);
  CHECK_THROWS_AS(fabric.fail(-1), std::invalid_argument);
  auto first = fabric.endpoint(0);
  CHECK_THROWS_AS(fabric.endpoint(0), std::logic_error);
  CHECK_THROWS_WITH_AS(first->send(2, 0, {}), "rank 0: cannot send to peer 2, outside [0, 2)", transport_error);
}

TEST_CASE("collectives reject packed buffers of the wrong size") {
  auto endpoints = inproc_fabric(1).endpoints();
  transport& t = *endpoints[0];
  std::vector<std::uint64_t> signs(2), result(2);
  std::vector<std::uint16_t> counts(100);
  CHECK_THROWS_WITH_AS(t.sign_majority(signs, 200, 0, result),
                       "sign_majority: signs has 2 packed words for 200 elements, expected 4", std::invalid_argument);
  CHECK_THROWS_AS(t.sign_majority(signs, 100, 0, std::span(result).first(1)), std::invalid_argument);
  CHECK_THROWS_AS(t.sign_counts(signs, 100, std::span(counts).first(99)), std::invalid_argument);
  CHECK_NOTHROW(t.sign_counts(signs, 100, counts));
}

TEST_CASE("sign-vote helpers: tie_word agrees with tie_vote, padding masks, packing") {
  for (std::size_t word = 0; word < 4; ++word)
    for (std::uint64_t round = 0; round < 4; ++round)
      for (std::size_t bit = 0; bit < 64; ++bit)
        CHECK(((tie_word(word, round) >> bit) & 1) == tie_vote(word * 64 + bit, round));
  CHECK(tie_vote(0, 0));
  CHECK_FALSE(tie_vote(1, 0));
  CHECK_FALSE(tie_vote(0, 1));
  CHECK(valid_bits(0, 0) == 0);
  CHECK(valid_bits(0, 3) == 0b111);
  CHECK(valid_bits(0, 64) == ~0ull);
  CHECK(valid_bits(1, 64) == 0);
  CHECK(valid_bits(1, 70) == 0b111111);
  std::vector<std::uint64_t> packed(2, ~0ull);
  pack_signs(70, [](std::size_t i) { return i % 3 == 0; }, packed);
  for (std::size_t i = 0; i < 70; ++i) CHECK(packed_bit(packed, i) == (i % 3 == 0));
  CHECK((packed[1] & ~valid_bits(1, 70)) == 0);
  CHECK_THROWS_AS(pack_signs(129, [](std::size_t) { return true; }, packed), std::invalid_argument);
}

TEST_CASE("wire precision: bf16 and fp16 round to nearest even, keep NaN and overflow to inf") {
  // bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and goes to the even one (1).
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);  // halfway above an odd mantissa: up
  CHECK(to_bf16(-2.5f) == 0xc020);
  CHECK(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::max()))));
  // fp16: normal, halfway, largest finite, overflow, subnormal, underflow to zero.
  CHECK(to_fp16(1.0f) == 0x3c00);
  CHECK(to_fp16(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  CHECK(from_fp16(to_fp16(65504.0f)) == 65504.0f);
  CHECK(from_fp16(to_fp16(65519.0f)) == 65504.0f);
  CHECK(std::isinf(from_fp16(to_fp16(65520.0f))));
  CHECK(to_fp16(-0x1p-24f) == 0x8001);
  CHECK(to_fp16(0x1p-25f) == 0x0000);              // halfway to the smallest subnormal: even, 0
  CHECK(to_fp16(0x1p-25f + 0x1p-30f) == 0x0001);
  CHECK(from_fp16(to_fp16(3 * 0x1p-24f)) == 3 * 0x1p-24f);
  CHECK(from_fp16(to_fp16(0x1p-14f - 0x1p-26f)) == 0x1p-14f);  // rounds up into the normals
  CHECK(std::isnan(from_fp16(to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  // Every 16-bit pattern that is a number survives a round trip through fp32.
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    if (!std::isnan(from_bf16(h))) CHECK(to_bf16(from_bf16(h)) == h);
    if (!std::isnan(from_fp16(h))) CHECK(to_fp16(from_fp16(h)) == h);
  }
  CHECK(parse_wire_precision("bf16", "--wire-precision") == wire_precision::bf16);
  CHECK(parse_wire_precision("fp8", "--wire-precision") == wire_precision::fp8);
  CHECK(parse_wire_precision("fp4", "--wire-precision") == wire_precision::fp4);
  // A round's two collectives: one precision for both, or gradients,parameters among the block codes.
  CHECK(parse_round_wires("bf16", "--wire-precision") == round_wires(wire_precision::bf16));
  CHECK(parse_round_wires("fp4,sign", "--wire-precision") == round_wires(wire_precision::fp4, wire_precision::sign));
  CHECK(round_wires_name(parse_round_wires("fp4,sign", "w")) == "fp4,sign");
  CHECK(parse_round_wires("fp4,sign2", "--wire-precision") == round_wires(wire_precision::fp4, wire_precision::sign2));
  CHECK(round_wires_name(parse_round_wires("sign2", "w")) == "sign2");
  CHECK(parse_round_wires("fp4,sign3", "--wire-precision") == round_wires(wire_precision::fp4, wire_precision::sign3));
  CHECK(round_wires_name(parse_round_wires("sign,sign3", "w")) == "sign,sign3");
  CHECK(round_wires_name(parse_round_wires("fp8,fp8", "w")) == "fp8");
  CHECK_THROWS_WITH_AS(parse_round_wires("bf16,sign", "--wire-precision"),
                       "--wire-precision: 'bf16,sign' (gradients and parameters may differ only among "
                       "int8|fp8|fp4|sign|sign2|sign3; fp32|bf16|fp16 apply to both)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_round_wires("fp4,", "--wire-precision"),
                       "--wire-precision: 'fp4,' (expected P or P,Q, each fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_wire_precision("fp2", "--wire-precision"),
                       "--wire-precision: 'fp2' (expected fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3)", std::invalid_argument);
}

TEST_CASE("grouped collectives reduce a range onto every rank's shard of it") {
  const std::size_t n = 1001;
  const shard range{300, 900};
  for (int world : {3, 4}) {
    CAPTURE(world);
    auto endpoints = hierarchical_world(2)(world);
    std::vector<std::vector<float>> data(world);
    run_ranks(endpoints, [&](transport& t) {
      for (std::size_t i = 0; i < n; ++i) data[t.rank()].push_back(testing::small_integer(t.rank(), i));
      t.reduce_scatter_range(data[t.rank()], range);
    });
    for (int rank = 0; rank < world; ++rank) {
      const shard own = shard_of(n, world, rank);
      for (std::size_t i = 0; i < n; ++i) {
        float expected = testing::small_integer(rank, i);  // outside the range: untouched
        if (i >= range.begin && i < range.end && i >= own.begin && i < own.end) {
          expected = 0;
          for (int r = 0; r < world; ++r) expected += testing::small_integer(r, i);
        } else if (i >= range.begin && i < range.end) {
          continue;  // scratch
        }
        REQUIRE(data[rank][i] == expected);
      }
    }
  }
}

TEST_CASE("reduce_scatter_range refuses ranges outside the buffer and block-quantized wires") {
  auto endpoints = inproc_fabric(1).endpoints();
  std::vector<float> data(10);
  CHECK_THROWS_WITH_AS(endpoints[0]->reduce_scatter_range(data, {4, 11}),
                       "reduce_scatter_range: range [4, 11) lies outside 10 values", std::invalid_argument);
  CHECK_THROWS_WITH_AS(endpoints[0]->reduce_scatter_range(data, {0, 4}, wire_precision::int8),
                       "reduce_scatter_range: int8 quantizes whole shards, not a range of them", std::invalid_argument);
}

TEST_CASE("a channel has its own tags, shares its rank's link and byte counts, and is interrupted with its endpoint") {
  inproc_fabric fabric(2, link_model::parse("100mbit,1ms"));
  const link_model& link = fabric.link();
  std::unique_ptr<inproc_transport> sender = fabric.endpoint(0), receiver = fabric.endpoint(1);
  std::shared_ptr<transport> sender_channel = sender->open_channel(), receiver_channel = receiver->open_channel();
  REQUIRE(sender_channel);
  CHECK_THROWS_WITH_AS(sender->open_channel(),
                       doctest::Contains("rank 0: a channel has no channel, and an endpoint one channel at a time"),
                       std::logic_error);
  constexpr std::size_t bulk = 10'000, small = 10;
  const auto sent = inproc_transport::clock::now();
  sender_channel->send(1, 7, byte_pattern(bulk, 1));
  sender->send(1, 7, byte_pattern(small, 2));  // the same tag, on the endpoint
  std::vector<std::byte> small_in(small), bulk_in(bulk);
  receiver->recv(0, 7, small_in);  // the endpoint's message, not the channel's (sizes differ)
  CHECK(small_in == byte_pattern(small, 2));
  // One outgoing link: the endpoint's message queued behind the channel's.
  CHECK(receiver->last_arrival() >= sent + link.wire_time(bulk) + link.wire_time(small) + link.latency());
  receiver_channel->recv(0, 7, bulk_in);
  CHECK(bulk_in == byte_pattern(bulk, 1));
  CHECK(sender->stats().bytes_sent == bulk + small);
  CHECK(sender->stats().messages_sent == 2);
  CHECK(receiver->stats().bytes_received == bulk + small);
  receiver->interrupt("worker stopped");
  CHECK_THROWS_WITH_AS(receiver_channel->recv(0, 7, bulk_in), doctest::Contains("worker stopped"), transport_error);
  // A channel going leaves its rank alive; a new one may open.
  std::weak_ptr<transport> gone = sender_channel;
  sender_channel.reset();
  CHECK(gone.expired());
  CHECK(sender->open_channel());
  sender->send(1, 8, byte_pattern(small, 3));
  receiver.reset();  // closing the endpoint, not the channel, closes the rank
  CHECK_THROWS_AS(sender->send(1, 8, byte_pattern(small, 3)), transport_error);
}

TEST_CASE("inproc channels: collectives beside the endpoint's, an all-reduce in flight without calls, interrupts") {
  testing::check_channel([](int world) { return inproc_fabric(world, link_model::parse("1gbit,1ms")).endpoints(); });
}
