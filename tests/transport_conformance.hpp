#pragma once
// The transport conformance suite, written once and run against every backend (TensorPipe
// style). A backend plugs in with a factory that builds the connected endpoints of a world of
// `world` ranks, endpoint i being rank i, and one test case per configuration:
//
//   #include "transport_conformance.hpp"
//   TEST_CASE("ucx transport conformance") {
//     accord::testing::run_transport_conformance("ucx", [](int world) { return make_my_world(world); });
//   }
//
// Every SUBCASE builds fresh worlds (sizes 1 to 5) through the factory and runs one thread per
// rank with run_ranks. What the suite expects of a backend beyond the interface comments:
// - Errors name the peer as "peer <rank>".
// - Destroying an endpoint is a graceful close: messages it sent before stay receivable, then a
//   recv from it throws transport_error instead of waiting. run_ranks relies on this to turn a
//   failing rank into errors on its peers rather than a hang.
// - transfer_stats count payload bytes; a backend may add a little framing, not much more.
// - interrupt() from another thread wakes a blocked call within well under a second.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algorithms/collective_channel.hpp"
#include "algorithms/transport_peers.hpp"
#include "transport/block_quantize.hpp"
#include "transport/shard.hpp"
#include "transport/sign_vote.hpp"
#include "transport/transport.hpp"

namespace accord::testing {

using transport_factory = std::function<std::vector<std::unique_ptr<transport>>(int world)>;
using world_endpoints = std::vector<std::unique_ptr<transport>>;

// Runs body(endpoint) for every rank on its own thread and returns each rank's exception (null
// where the body returned). A rank whose body throws closes its endpoint at once, so peers
// that wait on it fail too instead of hanging.
inline std::vector<std::exception_ptr> run_ranks_catching(world_endpoints& endpoints,
                                                          const std::function<void(transport&)>& body) {
  std::vector<std::exception_ptr> errors(endpoints.size());
  std::vector<std::thread> threads;
  for (std::size_t rank = 0; rank < endpoints.size(); ++rank)
    threads.emplace_back([&, rank] {
      try {
        body(*endpoints[rank]);
      } catch (...) {
        errors[rank] = std::current_exception();
        endpoints[rank].reset();
      }
    });
  for (auto& thread : threads) thread.join();
  return errors;
}

// As run_ranks_catching, then rethrows the exception of the rank that failed first (the cause;
// the others are usually its consequences).
inline void run_ranks(world_endpoints& endpoints, const std::function<void(transport&)>& body) {
  std::mutex mutex;
  std::exception_ptr first;
  run_ranks_catching(endpoints, [&](transport& t) {
    try {
      body(t);
    } catch (...) {
      std::lock_guard lock(mutex);
      if (!first) first = std::current_exception();
      throw;
    }
  });
  if (first) std::rethrow_exception(first);
}

inline world_endpoints make_world(const transport_factory& make, int world) {
  world_endpoints endpoints = make(world);
  REQUIRE(endpoints.size() == static_cast<std::size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    REQUIRE(endpoints[rank] != nullptr);
    REQUIRE(endpoints[rank]->rank() == rank);
    REQUIRE(endpoints[rank]->size() == world);
  }
  return endpoints;
}

// Deterministic test data: splitmix64 of the inputs.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Small integers: sums over ranks are exact in float whatever the order.
inline float small_integer(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>(mix(mix(rank) ^ i) % 41) - 20);
}
// Uniform in [-1, 1): sums depend on the order, so they test bit-identity across ranks.
inline double unit_random(std::uint64_t seed, std::size_t i) {
  return static_cast<double>(mix(mix(seed) ^ i) >> 11) * 0x1p-52 - 1.0;
}
inline std::vector<std::byte> byte_pattern(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(mix(seed ^ mix(i)));
  return bytes;
}

// "" when equal, else where and how they first differ (bitwise: -0.0 differs from 0.0).
template <class T>
std::string first_difference(const std::vector<T>& actual, const std::vector<T>& expected) {
  if (actual.size() != expected.size())
    return "size " + std::to_string(actual.size()) + " vs expected " + std::to_string(expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0)
      return "element " + std::to_string(i) + ": " + std::to_string(actual[i]) + " vs expected " +
             std::to_string(expected[i]);
  return {};
}

// Packs a row of '+'/'-' votes; with `garbage_padding` the padding bits are set, which the
// collectives must ignore.
inline std::vector<std::uint64_t> pack_votes(std::string_view votes, bool garbage_padding) {
  std::vector<std::uint64_t> packed(packed_words(votes.size()));
  pack_signs(votes.size(), [&](std::size_t i) { return votes[i] == '+'; }, packed);
  if (garbage_padding && !packed.empty()) packed.back() |= ~valid_bits(packed.size() - 1, votes.size());
  return packed;
}

struct vote_outcome {
  std::vector<std::uint64_t> majority;
  std::vector<std::uint16_t> counts;
};

inline std::vector<vote_outcome> run_votes(world_endpoints& endpoints, const std::vector<std::string>& votes,
                                           std::uint64_t round, bool garbage_padding) {
  std::vector<vote_outcome> outcome(endpoints.size());
  run_ranks(endpoints, [&](transport& t) {
    const std::string& mine = votes[t.rank()];
    const std::vector<std::uint64_t> packed = pack_votes(mine, garbage_padding);
    vote_outcome& out = outcome[t.rank()];
    out.majority.assign(packed.size(), 0xdeadbeefull);
    out.counts.assign(mine.size(), 0xffff);
    t.sign_majority(packed, mine.size(), round, out.majority);
    t.sign_counts(packed, mine.size(), out.counts);
  });
  return outcome;
}

inline std::vector<std::string> random_votes(int world, std::size_t count, std::uint64_t seed) {
  std::vector<std::string> votes(world, std::string(count, '-'));
  for (int rank = 0; rank < world; ++rank)
    for (std::size_t i = 0; i < count; ++i)
      if (mix(mix(seed + rank) ^ i) & 1) votes[rank][i] = '+';
  return votes;
}

// The vote by definition, element by element: 2·count > N wins, a tie follows tie_vote.
inline void check_votes_against_reference(const std::vector<vote_outcome>& outcome,
                                          const std::vector<std::string>& votes, std::uint64_t round) {
  const std::size_t world = votes.size(), count = votes[0].size();
  std::vector<std::uint16_t> counts(count, 0);
  for (const auto& row : votes)
    for (std::size_t i = 0; i < count; ++i) counts[i] += row[i] == '+';
  std::vector<std::uint64_t> majority(packed_words(count));
  pack_signs(
      count,
      [&](std::size_t i) { return 2u * counts[i] > world || (2u * counts[i] == world && tie_vote(i, round)); },
      majority);
  for (std::size_t rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    const std::string majority_difference = first_difference(outcome[rank].majority, majority);
    CHECK_MESSAGE(majority_difference.empty(), majority_difference);
    const std::string count_difference = first_difference(outcome[rank].counts, counts);
    CHECK_MESSAGE(count_difference.empty(), count_difference);
  }
}

inline void check_point_to_point(const transport_factory& make) {
  SUBCASE("messages of many sizes, both directions") {
    world_endpoints endpoints = make_world(make, 2);
    const std::vector<std::size_t> sizes{0, 1, 3, 8, 4096, 65537, 1000003};
    std::vector<std::vector<std::byte>> echoed(sizes.size());
    run_ranks(endpoints, [&](transport& t) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        std::vector<std::byte> buffer(sizes[k]);
        if (t.rank() == 0) {
          t.send(1, k, byte_pattern(sizes[k], k));
          t.recv(1, k, buffer);
          echoed[k] = std::move(buffer);
        } else {
          t.recv(0, k, buffer);
          for (auto& b : buffer) b = ~b;
          t.send(0, k, buffer);
        }
      }
    });
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      CAPTURE(sizes[k]);
      std::vector<std::byte> expected = byte_pattern(sizes[k], k);
      for (auto& b : expected) b = ~b;
      CHECK(echoed[k] == expected);
    }
  }
  SUBCASE("send_recv around a ring of odd sizes") {
    for (int world : {2, 3, 5}) {
      CAPTURE(world);
      world_endpoints endpoints = make_world(make, world);
      std::vector<std::vector<std::byte>> received(world);
      run_ranks(endpoints, [&](transport& t) {
        const int next = (t.rank() + 1) % world, prev = (t.rank() + world - 1) % world;
        received[t.rank()].resize(1000 + 7 * prev);
        t.send_recv(next, byte_pattern(1000 + 7 * t.rank(), t.rank()), prev, received[t.rank()], 42);
      });
      for (int rank = 0; rank < world; ++rank) {
        const int prev = (rank + world - 1) % world;
        CHECK(received[rank] == byte_pattern(1000 + 7 * prev, prev));
      }
    }
  }
  SUBCASE("FIFO per peer and tag, matching on peer and tag") {
    world_endpoints endpoints = make_world(make, 3);
    std::vector<std::string> seen;
    run_ranks(endpoints, [&](transport& t) {
      const auto send_text = [&](int peer, std::uint64_t tag, std::string_view text) {
        t.send(peer, tag, std::as_bytes(std::span(text.data(), text.size())));
      };
      const auto recv_text = [&](int peer, std::uint64_t tag, std::size_t size) {
        std::string text(size, '?');
        t.recv(peer, tag, std::as_writable_bytes(std::span(text.data(), text.size())));
        seen.push_back(text);
      };
      if (t.rank() == 0) {
        for (const char* text : {"a", "bb", "ccc"}) send_text(1, 7, text);
        send_text(1, 9, "x");
        for (int i = 0; i < 100; ++i) send_text(1, 11, std::to_string(100 + i));
      } else if (t.rank() == 2) {
        send_text(1, 7, "from two");
      } else {
        recv_text(2, 7, 8);  // rank 0's tag-7 messages do not match peer 2
        recv_text(0, 9, 1);  // sent after the tag-7 ones, received before them
        for (std::size_t size : {1, 2, 3}) recv_text(0, 7, size);
        for (int i = 0; i < 100; ++i) recv_text(0, 11, 3);
      }
    });
    std::vector<std::string> expected{"from two", "x", "a", "bb", "ccc"};
    for (int i = 0; i < 100; ++i) expected.push_back(std::to_string(100 + i));
    CHECK(seen == expected);
  }
  SUBCASE("posted sends and receives: many in flight, waited for in any order") {
    world_endpoints endpoints = make_world(make, 2);
    constexpr std::size_t messages = 24;
    const auto size_of = [](std::size_t k) { return (k * 7919) % 70000 + k; };  // 0 bytes to ~70 KB
    std::vector<std::vector<std::byte>> received(messages);
    run_ranks(endpoints, [&](transport& t) {
      std::vector<transport::request> handles;
      if (t.rank() == 0) {
        std::vector<std::vector<std::byte>> out(messages);
        for (std::size_t k = 0; k < messages; ++k) {
          out[k] = byte_pattern(size_of(k), k);
          handles.push_back(t.post_send(1, k % 3, out[k]));  // three tags, each FIFO
        }
        for (std::size_t k = messages; k-- > 0;) t.wait(handles[k]);
        return;
      }
      for (std::size_t k = 0; k < messages; ++k) {
        received[k].resize(size_of(k));
        handles.push_back(t.post_recv(0, k % 3, received[k]));
      }
      for (std::size_t k : {5, 0, 23, 11}) t.wait(handles[k]);
      for (std::size_t k = 0; k < messages; ++k)
        if (k != 5 && k != 0 && k != 23 && k != 11) t.wait(handles[k]);
    });
    for (std::size_t k = 0; k < messages; ++k) {
      CAPTURE(k);
      CHECK(received[k] == byte_pattern(size_of(k), k));
    }
  }
  SUBCASE("a size mismatch is a transport_error naming the peer; the endpoint stays usable") {
    world_endpoints endpoints = make_world(make, 2);
    std::vector<std::string> errors;
    std::vector<std::byte> after(5);
    run_ranks(endpoints, [&](transport& t) {
      if (t.rank() == 0) {
        t.send(1, 1, byte_pattern(8, 1));
        t.send(1, 2, byte_pattern(8, 2));
        t.send(1, 3, byte_pattern(5, 3));
        return;
      }
      for (auto [tag, size] : {std::pair<std::uint64_t, std::size_t>{1, 4}, {2, 16}}) {
        std::vector<std::byte> buffer(size);
        try {
          t.recv(0, tag, buffer);
        } catch (const transport_error& e) {
          errors.push_back(e.what());
        }
      }
      t.recv(0, 3, after);
    });
    REQUIRE(errors.size() == 2);
    for (const std::string& error : errors) CHECK_MESSAGE(error.find("peer 0") != std::string::npos, error);
    CHECK(after == byte_pattern(5, 3));
  }
}

inline void check_reductions(const transport_factory& make) {
  SUBCASE("against a serial reference, worlds 1 to 5, lengths 0 to 262147") {
    for (int world = 1; world <= 5; ++world) {
      world_endpoints endpoints = make_world(make, world);
      std::vector<std::size_t> lengths{0, 1, 2, 7, 1000, 100003};
      if (world == 2 || world == 3) lengths.push_back(262147);  // several pieces per ring step
      for (std::size_t n : lengths) {
        CAPTURE(world);
        CAPTURE(n);
        std::vector<std::vector<float>> scattered(world), gathered(world), exact(world), random_floats(world);
        std::vector<std::vector<double>> random_doubles(world);
        run_ranks(endpoints, [&](transport& t) {
          const int rank = t.rank();
          const shard own = shard_of(n, world, rank);
          auto& s = scattered[rank];
          for (std::size_t i = 0; i < n; ++i) s.push_back(small_integer(rank, i));
          t.reduce_scatter(s);
          auto& g = gathered[rank];
          g.assign(n, std::numeric_limits<float>::quiet_NaN());
          for (std::size_t i = own.begin; i < own.end; ++i) g[i] = small_integer(rank, i) + 0.5f;
          t.all_gather(g);
          auto& e = exact[rank];
          for (std::size_t i = 0; i < n; ++i) e.push_back(small_integer(rank, i));
          t.all_reduce(e);
          auto& f = random_floats[rank];
          for (std::size_t i = 0; i < n; ++i) f.push_back(static_cast<float>(unit_random(rank, i)));
          t.all_reduce(f);
          auto& d = random_doubles[rank];
          for (std::size_t i = 0; i < n; ++i) d.push_back(unit_random(rank + 100, i));
          t.all_reduce(d);
        });

        std::vector<float> exact_sum(n, 0.0f), gather_expected(n);
        std::vector<double> float_sum(n, 0.0), double_sum(n, 0.0);
        for (int rank = 0; rank < world; ++rank) {
          const shard own = shard_of(n, world, rank);
          for (std::size_t i = 0; i < n; ++i) {
            exact_sum[i] += small_integer(rank, i);
            float_sum[i] += static_cast<float>(unit_random(rank, i));
            double_sum[i] += unit_random(rank + 100, i);
          }
          for (std::size_t i = own.begin; i < own.end; ++i) gather_expected[i] = small_integer(rank, i) + 0.5f;
        }
        for (int rank = 0; rank < world; ++rank) {
          CAPTURE(rank);
          const shard own = shard_of(n, world, rank);
          const std::vector<float> shard_sum(exact_sum.begin() + own.begin, exact_sum.begin() + own.end);
          const std::vector<float> shard_result(scattered[rank].begin() + own.begin, scattered[rank].begin() + own.end);
          std::string difference = first_difference(shard_result, shard_sum);
          CHECK_MESSAGE(difference.empty(), "reduce_scatter: " << difference);
          difference = first_difference(gathered[rank], gather_expected);
          CHECK_MESSAGE(difference.empty(), "all_gather: " << difference);
          difference = first_difference(exact[rank], exact_sum);
          CHECK_MESSAGE(difference.empty(), "all_reduce of integers: " << difference);
          difference = first_difference(random_floats[rank], random_floats[0]);
          CHECK_MESSAGE(difference.empty(), "float all_reduce differs from rank 0: " << difference);
          difference = first_difference(random_doubles[rank], random_doubles[0]);
          CHECK_MESSAGE(difference.empty(), "double all_reduce differs from rank 0: " << difference);
        }
        double float_error = 0, double_error = 0;
        for (std::size_t i = 0; i < n; ++i) {
          float_error = std::max(float_error, std::abs(random_floats[0][i] - float_sum[i]));
          double_error = std::max(double_error, std::abs(random_doubles[0][i] - double_sum[i]));
        }
        CHECK(float_error <= 4e-6);  // ≤ 5 float roundings of sums below 5
        CHECK(double_error <= 1e-14);
      }
    }
  }
  SUBCASE("pipelined: many pieces per step, lengths off piece multiples, worlds 1 to 3") {
    // Large enough for dozens of pieces per ring step on every backend; the odd lengths leave
    // short last pieces and unequal shards, and 3 * 32768 + 1 straddles the smallest piece.
    for (int world = 1; world <= 3; ++world) {
      world_endpoints endpoints = make_world(make, world);
      for (std::size_t n : {std::size_t{3 * 32768 + 1}, std::size_t{(3 << 20) + 7}}) {
        CAPTURE(world);
        CAPTURE(n);
        std::vector<std::vector<float>> reduced(world), scattered(world);
        run_ranks(endpoints, [&](transport& t) {
          auto& r = reduced[t.rank()];
          for (std::size_t i = 0; i < n; ++i) r.push_back(small_integer(t.rank(), i));
          scattered[t.rank()] = r;
          t.all_reduce(r);
          t.reduce_scatter(scattered[t.rank()]);
        });
        std::vector<float> expected(n, 0.0f);
        for (int rank = 0; rank < world; ++rank)
          for (std::size_t i = 0; i < n; ++i) expected[i] += small_integer(rank, i);
        for (int rank = 0; rank < world; ++rank) {
          CAPTURE(rank);
          std::string difference = first_difference(reduced[rank], expected);
          CHECK_MESSAGE(difference.empty(), "all_reduce: " << difference);
          const shard own = shard_of(n, world, rank);
          difference = first_difference(std::vector<float>(scattered[rank].begin() + own.begin, scattered[rank].begin() + own.end),
                                        std::vector<float>(expected.begin() + own.begin, expected.begin() + own.end));
          CHECK_MESSAGE(difference.empty(), "reduce_scatter: " << difference);
        }
      }
    }
  }
  SUBCASE("different lengths on different ranks give transport_errors, not a hang") {
    world_endpoints endpoints = make_world(make, 3);
    const auto errors = run_ranks_catching(endpoints, [&](transport& t) {
      std::vector<float> data(10 + t.rank());
      t.all_reduce(data);
    });
    for (const auto& error : errors) {
      REQUIRE(error);
      CHECK_THROWS_AS(std::rethrow_exception(error), transport_error);
    }
  }
}

// 16-bit wire precisions: every rank's values are rounded once on the way, sums are fp32, so
// results are within a few 16-bit roundings of the fp32 sums, and all ranks agree bit for bit.
inline void check_precision_reductions(const transport_factory& make) {
  for (wire_precision precision : {wire_precision::bf16, wire_precision::fp16}) {
    CAPTURE(precision_name(precision));
    // Relative error of one rounding (half an ulp): bf16 keeps 8 significant bits, fp16 11.
    const double rounding = precision == wire_precision::bf16 ? 0x1p-8 : 0x1p-11;
    for (int world = 1; world <= 5; ++world) {
      world_endpoints endpoints = make_world(make, world);
      std::vector<std::size_t> lengths{0, 1, 7, 1000, 100003};
      if (world == 2 || world == 3) lengths.push_back(262147);
      for (std::size_t n : lengths) {
        CAPTURE(world);
        CAPTURE(n);
        std::vector<std::vector<float>> scattered(world), gathered(world), reduced(world);
        std::vector<transfer_stats> scatter_traffic(world);
        run_ranks(endpoints, [&](transport& t) {
          const int rank = t.rank();
          auto& s = scattered[rank];
          for (std::size_t i = 0; i < n; ++i) s.push_back(static_cast<float>(unit_random(rank, i)));
          const transfer_stats before = t.stats();
          t.reduce_scatter(s, precision);
          scatter_traffic[rank].bytes_sent = t.stats().bytes_sent - before.bytes_sent;
          auto& g = gathered[rank];
          g.assign(n, std::numeric_limits<float>::quiet_NaN());
          const shard own = shard_of(n, world, rank);
          for (std::size_t i = own.begin; i < own.end; ++i) g[i] = static_cast<float>(unit_random(rank + 7, i));
          t.all_gather(g, precision);
          auto& r = reduced[rank];
          for (std::size_t i = 0; i < n; ++i) r.push_back(static_cast<float>(unit_random(rank + 50, i)));
          t.all_reduce(r, precision);
        });
        std::vector<float> gather_expected(n);
        std::vector<double> scatter_sum(n, 0.0), reduce_sum(n, 0.0), magnitude(n, 0.0);
        for (int rank = 0; rank < world; ++rank) {
          const shard own = shard_of(n, world, rank);
          for (std::size_t i = 0; i < n; ++i) {
            scatter_sum[i] += static_cast<float>(unit_random(rank, i));
            reduce_sum[i] += static_cast<float>(unit_random(rank + 50, i));
          }
          for (std::size_t i = own.begin; i < own.end; ++i) {
            std::vector<float> value{static_cast<float>(unit_random(rank + 7, i))};
            if (world > 1) round_to_wire(precision, value);
            gather_expected[i] = value[0];
          }
        }
        // Each of `world` addends rounded once, plus fp32 sums: Σ|x| ≤ world.
        const double scatter_bound = world * (rounding + 1e-6);
        const double reduce_bound = scatter_bound + (world + scatter_bound) * rounding;  // rounded once more
        for (int rank = 0; rank < world; ++rank) {
          CAPTURE(rank);
          const shard own = shard_of(n, world, rank);
          double scatter_error = 0, reduce_error = 0;
          for (std::size_t i = own.begin; i < own.end; ++i)
            scatter_error = std::max(scatter_error, std::abs(scattered[rank][i] - scatter_sum[i]));
          for (std::size_t i = 0; i < n; ++i)
            reduce_error = std::max(reduce_error, std::abs(reduced[rank][i] - reduce_sum[i]));
          CHECK(scatter_error <= scatter_bound);
          CHECK(reduce_error <= reduce_bound);
          std::string difference = first_difference(gathered[rank], gather_expected);
          CHECK_MESSAGE(difference.empty(), "all_gather: " << difference);
          difference = first_difference(reduced[rank], reduced[0]);
          CHECK_MESSAGE(difference.empty(), "all_reduce differs from rank 0: " << difference);
          // Two bytes per value of the other ranks' shards, as many values as the fp32 ring sends
          // (backends may count a few header bytes per message).
          const double payload = 2.0 * static_cast<double>(n - own.size());
          if (n >= 1000) CHECK(static_cast<double>(scatter_traffic[rank].bytes_sent) <= payload * 1.01);
          CHECK(static_cast<double>(scatter_traffic[rank].bytes_sent) >= payload);
        }
      }
    }
  }
}

inline void check_sign_votes(const transport_factory& make) {
  SUBCASE("hand-built vote tables") {
    struct table {
      std::vector<std::string> votes;
      std::vector<std::uint16_t> counts;
      std::string majority_round_0, majority_round_1;
    };
    const std::vector<table> tables{
        {{"+-+"}, {1, 0, 1}, "+-+", "+-+"},
        {{"+-+", "--+"}, {1, 0, 2}, "+-+", "--+"},  // element 0 ties
        {{"++--+", "+-+--", "--+-+"}, {2, 1, 2, 0, 2}, "+-+-+", "+-+-+"},
        {{"+++---", "++--+-", "+-+--+", "+--+++"}, {4, 2, 2, 1, 2, 2}, "+-+-+-", "++---+"},
    };
    for (const table& t : tables) {
      const int world = static_cast<int>(t.votes.size());
      CAPTURE(world);
      world_endpoints endpoints = make_world(make, world);
      for (std::uint64_t round : {0, 1}) {
        CAPTURE(round);
        const auto outcome = run_votes(endpoints, t.votes, round, true);
        const auto expected = pack_votes(round == 0 ? t.majority_round_0 : t.majority_round_1, false);
        for (const vote_outcome& rank : outcome) {
          CHECK(rank.majority == expected);  // padding bits come back zero
          CHECK(rank.counts == t.counts);
        }
      }
    }
  }
  SUBCASE("random votes against the definition, lengths around word boundaries") {
    for (int world = 1; world <= 5; ++world) {
      world_endpoints endpoints = make_world(make, world);
      for (std::size_t count : {0, 1, 7, 63, 64, 65, 130, 1000, 4099}) {
        for (std::uint64_t round : {0, 1, 6}) {
          CAPTURE(world);
          CAPTURE(count);
          CAPTURE(round);
          const auto votes = random_votes(world, count, count * 31 + round);
          check_votes_against_reference(run_votes(endpoints, votes, round, count % 2 == 1), votes, round);
        }
      }
    }
  }
  SUBCASE("votes large enough for several pieces per step, worlds 2 and 3") {
    for (int world : {2, 3}) {
      CAPTURE(world);
      world_endpoints endpoints = make_world(make, world);
      const std::size_t count = 64 * 70000 + 5;
      const auto votes = random_votes(world, count, 99);
      check_votes_against_reference(run_votes(endpoints, votes, 3, true), votes, 3);
    }
  }
}

// Byte counts against what the ring algorithms must move: within 1% (uneven shards, a little
// framing), and not suspiciously less.
inline void check_traffic(const transport_factory& make) {
  for (int world = 2; world <= 5; ++world) {
    CAPTURE(world);
    world_endpoints endpoints = make_world(make, world);
    const std::size_t floats = 10000 * world + 3, signs = 64 * 1000 * world + 37;
    std::vector<transfer_stats> reduce(world), majority(world), counts(world);
    run_ranks(endpoints, [&](transport& t) {
      const auto delta = [&](transfer_stats& out, auto&& collective) {
        const transfer_stats before = t.stats();
        collective();
        const transfer_stats after = t.stats();
        out = {after.bytes_sent - before.bytes_sent, after.bytes_received - before.bytes_received,
               after.messages_sent - before.messages_sent};
      };
      std::vector<float> data(floats, 1.0f);
      delta(reduce[t.rank()], [&] { t.all_reduce(data); });
      const auto packed = pack_votes(random_votes(world, signs, 5)[t.rank()], false);
      std::vector<std::uint64_t> result(packed.size());
      delta(majority[t.rank()], [&] { t.sign_majority(packed, signs, 0, result); });
      std::vector<std::uint16_t> plus(signs);
      delta(counts[t.rank()], [&] { t.sign_counts(packed, signs, plus); });
    });
    const double ring = 2.0 * (world - 1) / world, count_bits = std::bit_width(static_cast<unsigned>(world));
    const auto check = [&](const char* collective, const std::vector<transfer_stats>& stats, double bytes_expected) {
      INFO(collective);
      std::uint64_t sent = 0, received = 0;
      for (const transfer_stats& s : stats) {
        CHECK(static_cast<double>(s.bytes_sent) <= bytes_expected * 1.01);
        CHECK(static_cast<double>(s.bytes_sent) >= bytes_expected * 0.99);
        CHECK(s.messages_sent > 0);
        sent += s.bytes_sent;
        received += s.bytes_received;
      }
      CHECK(sent == received);
    };
    check("all_reduce: 2(N-1)/N floats per element", reduce, ring * 4 * floats);
    check("sign_majority: 2(N-1)/N bits per element", majority, ring * signs / 8);
    check("sign_counts: (N-1)/N (1 + ceil(log2(N+1))) bits per element", counts,
          ring / 2 * (1 + count_bits) * signs / 8);
  }
}

inline void check_peer_failure(const transport_factory& make) {
  SUBCASE("a closed peer gives transport_errors, not a hang; what it sent first arrives") {
    world_endpoints endpoints = make_world(make, 3);
    std::vector<std::byte> farewell(3);
    const auto errors = run_ranks_catching(endpoints, [&](transport& t) {
      if (t.rank() == 2) {
        t.send(0, 5, byte_pattern(3, 5));
        endpoints[2].reset();
        return;
      }
      if (t.rank() == 0) t.recv(2, 5, farewell);
      std::vector<float> data(100, 1.0f);
      t.all_reduce(data);  // needs rank 2
    });
    CHECK(farewell == byte_pattern(3, 5));
    CHECK_FALSE(errors[2]);
    for (int rank : {0, 1}) {
      CAPTURE(rank);
      REQUIRE(errors[rank]);
      CHECK_THROWS_AS(std::rethrow_exception(errors[rank]), transport_error);
    }
  }
}

// The result of `call`, which must finish within a generous 10 s. A thread stuck in a transport
// call cannot be cancelled, so a hang ends the test run with a message instead of blocking it.
template <class T>
T within_hang_guard(std::future<T>& call, const char* what) {
  if (call.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::fprintf(stderr, "hang guard: %s did not finish within 10 s\n", what);
    std::abort();
  }
  return call.get();
}

inline std::string transport_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const transport_error& e) {
    return e.what();
  }
  return "no transport_error";
}

// Runs blocked(endpoint) for each of `ranks` on its own thread, interrupts those endpoints from
// this thread once the calls had ~100 ms to block, and returns their errors.
inline std::vector<std::string> interrupt_blocked_calls(world_endpoints& endpoints, const std::vector<int>& ranks,
                                                        const std::function<void(transport&)>& blocked) {
  std::vector<std::future<std::string>> calls;
  for (int rank : ranks)
    calls.push_back(std::async(std::launch::async, [&, rank] {
      return transport_error_of([&] { blocked(*endpoints[rank]); });
    }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int rank : ranks) endpoints[rank]->interrupt("member lost");
  std::vector<std::string> errors;
  for (auto& call : calls) errors.push_back(within_hang_guard(call, "an interrupted call"));
  return errors;
}

inline void destroy_within_hang_guard(world_endpoints& endpoints) {
  auto teardown = std::async(std::launch::async, [&] { endpoints.clear(); });
  within_hang_guard(teardown, "destroying the endpoints");
}

inline void check_interrupt(const transport_factory& make) {
  const auto names_reason = [](const std::string& error) {
    CHECK_MESSAGE(error.find("interrupted: member lost") != std::string::npos, error);
  };
  SUBCASE("interrupt wakes a recv from a silent peer; later calls throw; the others carry on") {
    world_endpoints endpoints = make_world(make, 3);
    const auto errors = interrupt_blocked_calls(endpoints, {0}, [](transport& t) {
      std::vector<std::byte> never(8);
      t.recv(1, 3, never);
    });
    names_reason(errors[0]);

    transport& interrupted = *endpoints[0];
    std::vector<std::byte> bytes(8);
    std::vector<float> floats(10, 1.0f);
    names_reason(transport_error_of([&] { interrupted.recv(1, 3, bytes); }));
    names_reason(transport_error_of([&] { interrupted.send(2, 3, bytes); }));
    names_reason(transport_error_of([&] { interrupted.all_reduce(floats); }));

    // Only rank 0 was interrupted: ranks 1 and 2 still talk to each other.
    auto echo = std::async(std::launch::async, [&] {
      std::vector<std::byte> got(8);
      endpoints[2]->recv(1, 4, got);
      endpoints[2]->send(1, 5, got);
    });
    std::vector<std::byte> echoed(8);
    endpoints[1]->send(2, 4, byte_pattern(8, 4));
    endpoints[1]->recv(2, 5, echoed);
    within_hang_guard(echo, "rank 2's echo");
    CHECK(echoed == byte_pattern(8, 4));
    destroy_within_hang_guard(endpoints);
  }
  SUBCASE("interrupt wakes an all_reduce blocked on a silent rank") {
    world_endpoints endpoints = make_world(make, 3);
    // Large enough for several ring pieces and, on UCX, rendezvous sends left in flight.
    const auto errors = interrupt_blocked_calls(endpoints, {0, 1}, [](transport& t) {
      std::vector<float> data(3 * 600'000, 1.0f);
      t.all_reduce(data);
    });
    for (const std::string& error : errors) names_reason(error);
    std::vector<float> floats(10, 1.0f);
    for (int rank : {0, 1}) names_reason(transport_error_of([&] { endpoints[rank]->all_reduce(floats); }));
    destroy_within_hang_guard(endpoints);
  }
  SUBCASE("a world of one: after interrupt its collectives throw too") {
    world_endpoints endpoints = make_world(make, 1);
    endpoints[0]->interrupt("member lost");
    endpoints[0]->interrupt("a later reason");
    std::vector<float> floats(10, 1.0f);
    const std::vector<std::uint64_t> signs(1);
    std::vector<std::uint64_t> majority(1);
    names_reason(transport_error_of([&] { endpoints[0]->all_reduce(floats); }));
    names_reason(transport_error_of([&] { endpoints[0]->sign_majority(signs, 10, 0, majority); }));
  }
}

// Block-quantized codes (ACCO's estimate rounds): each rank's shard for owner s is quantized on
// its own and the owner adds the decoded values to its own fp32 ones in the order s-1, s-2, ...;
// all_gather_delta leaves every rank, the owner too, with base + the decoded difference. Both
// are checked bit for bit against the same arithmetic done here, plus the bytes sent: whole
// records of the other ranks' shards. all_gather and all_reduce refuse the codes.
template <class Block>
void check_block_quantized_code(const transport_factory& make, wire_precision precision) {
  CAPTURE(precision_name(precision));
  const auto encoded = [](std::span<const float> values) {
    std::vector<Block> blocks(quantized_blocks(values.size()));
    quantize(values, std::span<Block>(blocks));
    return blocks;
  };
  const auto records = [](std::size_t n, int world, int except) {
    std::size_t count = 0;
    for (int s = 0; s < world; ++s)
      if (s != except) count += quantized_blocks(shard_of(n, world, s).size());
    return count;
  };
  for (int world = 1; world <= 4; ++world) {
    world_endpoints endpoints = make_world(make, world);
    for (std::size_t n : {0ul, 1ul, 7ul, 255ul, 257ul, 1000ul, 100003ul}) {
      CAPTURE(world);
      CAPTURE(n);
      const auto gradient = [](int rank, std::size_t i) { return static_cast<float>(unit_random(rank, i)); };
      const auto base = [](std::size_t i) { return static_cast<float>(unit_random(99, i)); };
      const auto update = [&](std::size_t i) { return base(i) + 0.01f * static_cast<float>(unit_random(7, i)); };
      std::vector<std::vector<float>> scattered(world), gathered(world);
      std::vector<std::uint64_t> scatter_bytes(world), gather_bytes(world);
      std::vector<float> bases(n);
      for (std::size_t i = 0; i < n; ++i) bases[i] = base(i);
      run_ranks(endpoints, [&](transport& t) {
        const int rank = t.rank();
        const shard own = shard_of(n, world, rank);
        auto& s = scattered[rank];
        for (std::size_t i = 0; i < n; ++i) s.push_back(gradient(rank, i));
        std::uint64_t before = t.stats().bytes_sent;
        t.reduce_scatter(s, precision);
        scatter_bytes[rank] = t.stats().bytes_sent - before;
        auto& g = gathered[rank];
        g.assign(n, std::numeric_limits<float>::quiet_NaN());
        for (std::size_t i = own.begin; i < own.end; ++i) g[i] = update(i);
        before = t.stats().bytes_sent;
        t.all_gather_delta(g, bases, precision);
        gather_bytes[rank] = t.stats().bytes_sent - before;
        std::vector<float> values(n, 1.f);
        CHECK_THROWS_AS(t.all_gather(values, precision), std::invalid_argument);
        CHECK_THROWS_AS(t.all_reduce(values, precision), std::invalid_argument);
      });
      std::vector<float> gather_expected(n);
      for (int owner = 0; owner < world; ++owner) {
        const shard own = shard_of(n, world, owner);
        std::vector<float> difference, own_base(bases.begin() + own.begin, bases.begin() + own.end);
        for (std::size_t i = own.begin; i < own.end; ++i) difference.push_back(update(i) - base(i));
        std::vector<float> decoded(own.size());
        if (world > 1)
          add_dequantized(std::span<const Block>(encoded(difference)), own_base, decoded);
        else
          for (std::size_t i = own.begin; i < own.end; ++i) decoded[i - own.begin] = update(i);
        std::copy(decoded.begin(), decoded.end(), gather_expected.begin() + own.begin);
      }
      for (int rank = 0; rank < world; ++rank) {
        CAPTURE(rank);
        const shard own = shard_of(n, world, rank);
        std::vector<float> sums;
        for (std::size_t i = own.begin; i < own.end; ++i) sums.push_back(gradient(rank, i));
        for (int step = 1; step < world; ++step) {
          const int from = (rank - step + world) % world;
          std::vector<float> theirs;
          for (std::size_t i = own.begin; i < own.end; ++i) theirs.push_back(gradient(from, i));
          add_dequantized(std::span<const Block>(encoded(theirs)), sums, sums);
        }
        const std::vector<float> got(scattered[rank].begin() + own.begin, scattered[rank].begin() + own.end);
        std::string difference = first_difference(got, sums);
        CHECK_MESSAGE(difference.empty(), "reduce_scatter: " << difference);
        // Within a quantization step of each other rank's values (|x| < 1).
        const double step_bound = precision == wire_precision::int8 ? 0.5 / 127 : precision == wire_precision::fp8 ? 1.0 / 16 : 2.0;
        for (std::size_t i = own.begin; i < own.end; ++i) {
          double exact = 0;
          for (int r = 0; r < world; ++r) exact += gradient(r, i);
          CHECK(std::abs(scattered[rank][i] - exact) <= (world - 1) * step_bound + 1e-5);
        }
        difference = first_difference(gathered[rank], gather_expected);
        CHECK_MESSAGE(difference.empty(), "all_gather_delta: " << difference);
        // Whole records of the others' shards up, the own shard's records to each other rank.
        const double up = static_cast<double>(records(n, world, rank) * sizeof(Block));
        const double down = static_cast<double>((world - 1) * quantized_blocks(own.size()) * sizeof(Block));
        CHECK(static_cast<double>(scatter_bytes[rank]) >= up);
        CHECK(static_cast<double>(gather_bytes[rank]) >= down);
        if (n >= 1000) {
          CHECK(static_cast<double>(scatter_bytes[rank]) <= up * 1.01);
          CHECK(static_cast<double>(gather_bytes[rank]) <= down * 1.01);
        }
      }
    }
  }
  // A NaN is never hidden: its block reaches the owner as all-NaN.
  world_endpoints endpoints = make_world(make, 2);
  std::vector<std::vector<float>> sums(2, std::vector<float>(600, 1.f));
  run_ranks(endpoints, [&](transport& t) {
    if (t.rank() == 1) sums[1][10] = std::numeric_limits<float>::quiet_NaN();
    t.reduce_scatter(sums[t.rank()], precision);
  });
  CHECK(std::all_of(sums[0].begin(), sums[0].begin() + 256, [](float v) { return std::isnan(v); }));
  CHECK(std::none_of(sums[0].begin() + 256, sums[0].begin() + 300, [](float v) { return std::isnan(v); }));
}

// Error feedback (int8, fp8 and sign real rounds): each rank encodes scale·x + e of every other
// owner's shard with quantize_with_feedback, keeping what the records missed as its new e (only
// with commit); the owner's shard is scale·x + e exactly, its own e paid (zeroed), plus the
// others' decoded records in the order s-1, s-2, ... Checked bit for bit against the same
// arithmetic here; and nothing is lost: the owner's sums plus every rank's new residuals over
// the shard equal Σ (scale·x + e) up to float rounding.
template <class Block>
void check_error_feedback_code(const transport_factory& make, wire_precision precision) {
  CAPTURE(precision_name(precision));
  for (int world = 1; world <= 4; ++world) {
    world_endpoints endpoints = make_world(make, world);
    for (std::size_t n : {0ul, 7ul, 257ul, 1000ul, 100003ul})
      for (const bool commit : {true, false}) {
        CAPTURE(world);
        CAPTURE(n);
        CAPTURE(commit);
        const float scale = 0.25f;
        const auto gradient = [](int rank, std::size_t i) { return static_cast<float>(unit_random(rank, i)); };
        const auto residual = [](int rank, std::size_t i) { return 0.1f * static_cast<float>(unit_random(rank + 50, i)); };
        std::vector<std::vector<float>> data(world), residuals(world);
        run_ranks(endpoints, [&](transport& t) {
          const int rank = t.rank();
          auto& x = data[rank];
          auto& e = residuals[rank];
          for (std::size_t i = 0; i < n; ++i) {
            x.push_back(gradient(rank, i));
            e.push_back(residual(rank, i));
          }
          t.reduce_scatter_feedback(x, scale, e, precision, commit);
        });
        for (int rank = 0; rank < world; ++rank) {
          CAPTURE(rank);
          // What rank `rank` left in its residuals, and what its records decode to, shard by shard.
          std::vector<float> expected_residual(n);
          for (int s = 0; s < world; ++s) {
            const shard part = shard_of(n, world, s);
            std::vector<float> x, e;
            for (std::size_t i = part.begin; i < part.end; ++i) {
              x.push_back(gradient(rank, i));
              e.push_back(residual(rank, i));
            }
            if (s == rank || world == 1) {
              for (std::size_t i = part.begin; i < part.end; ++i) expected_residual[i] = commit ? 0.f : residual(rank, i);
              continue;
            }
            std::vector<Block> blocks(quantized_blocks(x.size()));
            quantize_with_feedback(x, scale, e, std::span<Block>(blocks), commit);
            std::copy(e.begin(), e.end(), expected_residual.begin() + part.begin);
          }
          std::string difference = first_difference(residuals[rank], expected_residual);
          CHECK_MESSAGE(difference.empty(), "residuals: " << difference);

          const shard own = shard_of(n, world, rank);
          std::vector<float> sums;
          for (std::size_t i = own.begin; i < own.end; ++i) sums.push_back(scale * gradient(rank, i) + residual(rank, i));
          for (int step = 1; step < world; ++step) {
            const int from = (rank - step + world) % world;
            std::vector<float> x, e;
            for (std::size_t i = own.begin; i < own.end; ++i) {
              x.push_back(gradient(from, i));
              e.push_back(residual(from, i));
            }
            std::vector<Block> blocks(quantized_blocks(x.size()));
            quantize_with_feedback(x, scale, e, std::span<Block>(blocks), commit);
            add_dequantized(std::span<const Block>(blocks), sums, sums);
          }
          const std::vector<float> got(data[rank].begin() + own.begin, data[rank].begin() + own.end);
          difference = first_difference(got, sums);
          CHECK_MESSAGE(difference.empty(), "reduce_scatter_feedback: " << difference);
          if (!commit) continue;
          for (std::size_t i = own.begin; i < own.end; ++i) {
            double owed = 0, sent = data[rank][i];
            for (int r = 0; r < world; ++r) {
              owed += scale * static_cast<double>(gradient(r, i)) + residual(r, i);
              sent += residuals[r][i];
            }
            CHECK(std::abs(sent - owed) <= 1e-5);
          }
        }
      }
  }
}

inline void check_block_quantized(const transport_factory& make) {
  check_block_quantized_code<int8_block>(make, wire_precision::int8);
  check_block_quantized_code<fp8_block>(make, wire_precision::fp8);
  check_block_quantized_code<fp4_block>(make, wire_precision::fp4);
  check_block_quantized_code<sign_block>(make, wire_precision::sign);
  check_block_quantized_code<sign2_block>(make, wire_precision::sign2);
  check_block_quantized_code<sign3_block>(make, wire_precision::sign3);
  check_error_feedback_code<int8_block>(make, wire_precision::int8);
  check_error_feedback_code<fp8_block>(make, wire_precision::fp8);
  check_error_feedback_code<fp4_block>(make, wire_precision::fp4);
  check_error_feedback_code<sign_block>(make, wire_precision::sign);
  check_error_feedback_code<sign2_block>(make, wire_precision::sign2);
  check_error_feedback_code<sign3_block>(make, wire_precision::sign3);
}

// A backend's channel (transport::open_channel): one at a time; its collectives run beside the
// endpoint's on another thread, each summing its own; an all-reduce started on it
// (round_peers::start_all_reduce) completes while its caller never calls into the transport;
// interrupting the endpoint interrupts it.
inline void check_channel(const transport_factory& make) {
  constexpr int world = 3;
  world_endpoints endpoints = make_world(make, world);
  run_ranks(endpoints, [&](transport& t) {
    constexpr std::size_t count = 100'000;
    std::vector<float> on_channel(count), on_endpoint(count);
    for (std::size_t i = 0; i < count; ++i) {
      on_channel[i] = small_integer(t.rank(), i);
      on_endpoint[i] = 2 * small_integer(t.rank(), i);
    }
    {
      const std::shared_ptr<transport> channel = t.open_channel();
      REQUIRE(channel);
      CHECK_THROWS_WITH_AS(t.open_channel(), doctest::Contains("one channel at a time"), std::logic_error);
      CHECK_THROWS_WITH_AS(channel->open_channel(), doctest::Contains("a channel has no channel"), std::logic_error);
      std::thread beside([&] {
        for (int repeat = 0; repeat < 3; ++repeat) channel->all_reduce(on_channel);
      });
      for (int repeat = 0; repeat < 3; ++repeat) t.all_reduce(on_endpoint);
      beside.join();
    }
    for (std::size_t i = 0; i < count; i += 997) {
      float sum = 0;
      for (int rank = 0; rank < world; ++rank) sum += small_integer(rank, i);
      CHECK(on_channel[i] == 9 * sum);  // summed three times over three ranks
      CHECK(on_endpoint[i] == 18 * sum);
    }

    std::unique_ptr<collective_channel> in_flight;  // reopens a channel: the first is closed
    transport_peers peers(t, &in_flight);
    std::vector<float> values(50'000, static_cast<float>(t.rank() + 1));
    double squares[1] = {static_cast<double>(t.rank())};
    const auto sums = peers.start_all_reduce(values);
    const auto doubles = peers.start_all_reduce(std::span<double>(squares));
    REQUIRE(in_flight);
    // done() only looks: without a thread of its own nothing would ever move.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((!sums->done() || !doubles->done()) && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(sums->done());
    REQUIRE(doubles->done());
    sums->wait();
    doubles->wait();
    CHECK(values.front() == 6.f);
    CHECK(values.back() == 6.f);
    CHECK(squares[0] == 3.0);
  });
  // Interrupting the endpoint interrupts its channel's waits too.
  const std::shared_ptr<transport> channel = endpoints[0]->open_channel();
  endpoints[0]->interrupt("worker stopped");
  std::vector<std::byte> never(4);
  CHECK_THROWS_WITH_AS(channel->recv(1, 5, never), doctest::Contains("worker stopped"), transport_error);
}

// The whole suite against one backend configuration.
// DDP's gradient buckets: reduce-scatters of ranges, from the buffer's end to its start as
// backward finishes them, leave every rank's shard with the bits one reduce_scatter gives it
// (each element summed in the same order), in fp32 and over 16-bit wires; run one by one, or
// started together and finished later, with another collective between.
inline void check_bucket_reductions(const transport_factory& make) {
  for (const bool started : {false, true}) {
    for (wire_precision precision : {wire_precision::fp32, wire_precision::bf16, wire_precision::fp16}) {
      for (int world = 1; world <= 4; ++world) {
        world_endpoints endpoints = make_world(make, world);
        for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
          CAPTURE(started);
          CAPTURE(precision_name(precision));
          CAPTURE(world);
          CAPTURE(n);
          std::vector<std::vector<float>> whole(world), bucketed(world);
          run_ranks(endpoints, [&](transport& t) {
            auto& w = whole[t.rank()];
            w.clear();
            for (std::size_t i = 0; i < n; ++i) w.push_back(static_cast<float>(unit_random(t.rank(), i)));
            bucketed[t.rank()] = w;
            t.reduce_scatter(w, precision);
            // Buckets of uneven sizes that straddle shard bounds, plus an empty one.
            std::vector<shard> ranges;
            for (std::size_t end = n, size = n / 7 + 1; end > 0; size = size * 3 / 2 + 1) {
              ranges.push_back({end > size ? end - size : 0, end});
              end = ranges.back().begin;
            }
            ranges.push_back({0, 0});
            if (!started) {
              for (const shard& range : ranges) t.reduce_scatter_range(bucketed[t.rank()], range, precision);
              return;
            }
            std::vector<std::unique_ptr<transport::range_reduction>> traveling;
            for (const shard& range : ranges)
              traveling.push_back(t.start_reduce_scatter_range(bucketed[t.rank()], range, precision));
            double other[2] = {1.0, static_cast<double>(t.rank())};
            t.all_reduce(std::span<double>(other));
            REQUIRE(other[0] == world);
            for (auto& bucket : traveling) bucket->finish();
          });
          for (int rank = 0; rank < world; ++rank) {
            const shard own = shard_of(n, world, rank);
            for (std::size_t i = own.begin; i < own.end; ++i)
              REQUIRE(std::bit_cast<std::uint32_t>(bucketed[rank][i]) == std::bit_cast<std::uint32_t>(whole[rank][i]));
          }
        }
      }
    }
  }
  SUBCASE("a started range dropped unfinished interrupts its endpoint") {
    world_endpoints endpoints = make_world(make, 2);
    std::vector<std::string> errors(2);
    run_ranks(endpoints, [&](transport& t) {
      std::vector<float> data(100003, 1.f);
      t.start_reduce_scatter_range(data, {0, data.size()}, wire_precision::bf16).reset();
      try {
        t.all_reduce(std::span<float>(data));
      } catch (const transport_error& e) {
        errors[t.rank()] = e.what();
      }
    });
    for (const std::string& error : errors) CHECK(error.find("interrupted: an exchange was left unfinished") != std::string::npos);
  }
}

inline void run_transport_conformance(const char* backend_name, const transport_factory& make) {
  INFO("backend: " << backend_name);
  SUBCASE("point to point") { check_point_to_point(make); }
  SUBCASE("reduce-scatter, all-gather, all-reduce") { check_reductions(make); }
  SUBCASE("bf16 and fp16 on the wire") { check_precision_reductions(make); }
  SUBCASE("gradient buckets: ranges reduced one by one or in flight together") { check_bucket_reductions(make); }
  SUBCASE("int8, fp8 and sign blocks (estimate rounds; real rounds with error feedback)") { check_block_quantized(make); }
  SUBCASE("sign votes") { check_sign_votes(make); }
  SUBCASE("traffic") { check_traffic(make); }
  SUBCASE("peer failure") { check_peer_failure(make); }
  SUBCASE("interrupt") { check_interrupt(make); }
}

}  // namespace accord::testing
