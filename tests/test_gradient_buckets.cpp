// DDP's gradient buckets (job_config::bucket_cap_mb): the feed that cuts a backward's finished
// gradients into buckets, and jobs whose rounds start during backward against the same jobs
// whose rounds start after it (bit for bit: every element is summed in the same order).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <accord/job.hpp>

#include "actors/gradient_buckets.hpp"
#include "data/text.hpp"
#include "models/gpt.hpp"
#include "quadratic_model.hpp"
#include "test_job.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace accord;
using accord::testing::quadratic;
using accord::testing::test_job;
using accord::testing::waves;

namespace {

struct sent_bucket {
  std::uint64_t round;
  shard range;
  bool operator==(const sent_bucket&) const = default;
};

// A feed of `per_bucket` elements over 100 that records what it hands out.
struct recording_feed {
  std::vector<sent_bucket> sent;
  bucket_feed feed;
  explicit recording_feed(std::size_t per_bucket)
      : feed(per_bucket, 100, [this](std::uint64_t round, shard range, const tensor&) { sent.push_back({round, range}); }) {}
};

// Bucket cap in MB for `elements` fp32 gradients.
double cap_of(std::size_t elements) { return static_cast<double>(elements * sizeof(float)) / (1024.0 * 1024.0); }

// The number of spans named `name` in a trace file.
std::size_t spans_named(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::size_t count = 0;
  for (const auto& event : trace["traceEvents"])
    if (event["ph"] == "X" && event["name"] == name) ++count;
  return count;
}

job_result run_quadratic_ddp(job_config job) {
  quadratic net(103);
  auto data = std::make_shared<waves>(103);
  return run_job(net, data, data, job);
}

job_result run_small_gpt(job_config job) {
  gpt_config c;
  c.context = 16;
  c.layers = 2;
  c.heads = 2;
  c.width = 32;
  gpt net(c);
  job.eval_interval = 0;
  job.eval_examples = 16;
  job.blas_threads = 1;  // thread counts change the rounding of matrix products
  return run_job(net, load_default_corpus(16, true, job.seed), load_default_corpus(16, false, job.seed), job);
}

void check_bitwise_equal(const job_result& bucketed, const job_result& whole) {
  CHECK(bucketed.replicas_identical);
  REQUIRE(bucketed.parameters.size() == whole.parameters.size());
  CHECK(bucketed.parameters == whole.parameters);
  REQUIRE(bucketed.steps.size() == whole.steps.size());
  for (std::size_t s = 0; s < whole.steps.size(); ++s) CHECK(bucketed.steps[s].train_loss == whole.steps[s].train_loss);
}

}  // namespace

TEST_CASE("bucket_elements: MB of fp32 gradients, at least one, 0 for off, the first bucket at most 1 MB") {
  CHECK(bucket_elements(25) == 25u * 1024 * 1024 / 4);
  CHECK(bucket_elements(0) == 0);
  CHECK(bucket_elements(1e-9) == 1);
  CHECK(first_bucket_elements(bucket_elements(25)) == 1024u * 1024 / 4);
  CHECK(first_bucket_elements(30) == 30);

  // A model larger than 1 MB: its last MB goes first, then 25 MB buckets.
  std::vector<std::pair<std::size_t, std::size_t>> cuts;
  const std::size_t total = bucket_elements(30);
  bucket_feed feed(bucket_elements(25), total, [&](std::uint64_t, shard range, const tensor&) {
    cuts.emplace_back(range.begin, range.end);
  });
  feed.arm(1, nullptr);
  feed.final_from(0);
  const std::size_t first = total - bucket_elements(1), second = first - bucket_elements(25);
  CHECK(cuts == std::vector<std::pair<std::size_t, std::size_t>>{{first, total}, {second, first}, {0, second}});
}

TEST_CASE("the bucket feed hands out buckets cut a bucket's worth apart from the end, each once finished, only when armed") {
  recording_feed r(30);
  r.feed.final_from(50);  // not armed: a micro-batch that does not end its round
  CHECK(r.sent.empty());
  r.feed.arm(7, nullptr);
  r.feed.final_from(80);  // 20 finished: less than a bucket
  r.feed.final_from(60);  // [70, 100) finished
  r.feed.final_from(55);
  r.feed.final_from(70);  // a later report of less changes nothing
  r.feed.final_from(10);  // two more
  r.feed.final_from(0);   // the end of backward: the rest, however short
  r.feed.final_from(0);
  const std::vector<sent_bucket> cuts{{7, {70, 100}}, {7, {40, 70}}, {7, {10, 40}}, {7, {0, 10}}};
  CHECK(r.sent == cuts);
  r.feed.disarm();
  r.feed.final_from(0);
  CHECK(r.sent.size() == 4);

  // Another worker whose reports came in other runs cuts the same buckets.
  recording_feed other(30);
  other.feed.arm(7, nullptr);
  for (const std::size_t begin : {95, 41, 39, 0}) other.feed.final_from(begin);
  CHECK(other.sent == cuts);

  r.feed.arm(8, nullptr);  // the next round starts from the end again
  r.feed.final_from(0);
  CHECK(r.sent.back() == sent_bucket{8, {0, 10}});
  CHECK(r.sent.size() == 8);
}

TEST_CASE("bucketed DDP equals unbucketed DDP bit for bit on the quadratic, with buckets in the trace") {
  for (const std::string wire : {"fp32", "bf16"}) {
    CAPTURE(wire);
    job_config job = test_job("ddp", 3, 4).micro_batches_per_round(2).adamw(0.05f);
    job.wire_precision = wire;
    job.bucket_cap_mb = 0;  // off
    job.trace_path = "gradient_buckets_quadratic.trace.json";
    const job_result whole = run_quadratic_ddp(job);
    CHECK(spans_named(job.trace_path, "reduce-scatter bucket") == 0);
    job.bucket_cap_mb = cap_of(26);  // the quadratic finishes its gradients in quarters of 26
    const job_result bucketed = run_quadratic_ddp(job);
    check_bitwise_equal(bucketed, whole);
    // Each worker's last micro-batch of each step hands out 4 buckets, reduced before the round.
    CHECK(spans_named(job.trace_path, "reduce-scatter bucket") == 3 * 4 * 4);
    std::remove(job.trace_path.c_str());
  }
}

TEST_CASE("bucketed DDP equals unbucketed DDP bit for bit on a small GPT, for any bucket size") {
  job_config job;
  job.algorithm = "ddp";
  job.steps = 3;
  job.seed = 5;
  job.workers = 2;
  job.micro_batch = 2;
  job.accumulation = job.max_accumulation = 2;
  job.wire_precision = "fp32";
  job.bucket_cap_mb = 0;
  const job_result whole = run_small_gpt(job);
  // Per worker and step: quarters of the parameters, each sent once backward has passed it,
  // or the whole buffer at the end of backward with torch's 25 MB.
  const std::size_t quarter = (whole.parameters.size() + 3) / 4;
  const std::vector<std::pair<double, std::size_t>> caps{{cap_of(quarter), 4}, {25.0, 1}};
  for (const auto& [cap, buckets] : caps) {
    CAPTURE(cap);
    job.bucket_cap_mb = cap;
    job.trace_path = "gradient_buckets_gpt.trace.json";
    check_bitwise_equal(run_small_gpt(job), whole);
    CHECK(spans_named(job.trace_path, "reduce-scatter bucket") == 2 * 3 * buckets);
    std::remove(job.trace_path.c_str());
  }
}

TEST_CASE("jobs where buckets do not apply run as before: error feedback, overlapped pipelines") {
  job_config job = test_job("ddp", 2, 3).micro_batches_per_round(1).adamw(0.05f);
  for (const std::string wire : {"int8", "fp32"}) {
    for (const std::string algorithm : {"ddp", "acco"}) {
      CAPTURE(wire);
      CAPTURE(algorithm);
      if (algorithm == "ddp" && wire == "fp32") continue;  // the case that buckets
      job.algorithm = algorithm;
      job.wire_precision = wire;
      job.bucket_cap_mb = 0;
      const job_result whole = run_quadratic_ddp(job);
      job.bucket_cap_mb = cap_of(26);
      job.trace_path = "gradient_buckets_off.trace.json";
      check_bitwise_equal(run_quadratic_ddp(job), whole);
      CHECK(spans_named(job.trace_path, "reduce-scatter bucket") == 0);
      std::remove(job.trace_path.c_str());
      job.trace_path.clear();
    }
  }
}

TEST_CASE("a bucket cap that is negative or not a number is refused with one line") {
  for (const double cap : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CAPTURE(cap);
    job_config job = test_job("ddp", 2, 1);
    job.bucket_cap_mb = cap;
    CHECK_THROWS_WITH_AS(run_quadratic_ddp(job), "bucket_cap_mb must be finite and >= 0 (0: no gradient buckets)",
                         std::invalid_argument);
  }
}
