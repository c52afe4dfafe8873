#include "algorithms/algorithm.hpp"

#include <deque>
#include <mutex>
#include <stdexcept>

namespace accord {

namespace {

std::function<std::unique_ptr<update_rule>(const rule_inputs&)> sharded_optimizer() {
  return [](const rule_inputs& in) {
    return make_sharded_optimizer_rule(in.optimizer, in.initial, in.world, in.rank, in.precision, in.resume);
  };
}

std::function<std::unique_ptr<update_rule>(const rule_inputs&)> sign_vote(bool average) {
  return [average](const rule_inputs& in) { return make_sign_vote_rule(average, in.optimizer, in.initial, in.resume); };
}

// Every algorithm of this process: the built-in ones, then the app's (register_algorithm).
// A deque keeps references to its entries valid while entries are added.
struct registry {
  std::mutex mutex;
  std::deque<algorithm> table{
      {"ddp", pipeline::synchronous, aggregation::sharded_optimizer, "adamw",
       "synchronous data parallel, ZeRO-1 sharded AdamW (the baseline)", sharded_optimizer()},
      {"dpu", pipeline::delayed, aggregation::sharded_optimizer, "adamw",
       "delayed parameter update: overlapped, gradients one round stale", sharded_optimizer()},
      {"acco", pipeline::acco, aggregation::sharded_optimizer, "adamw",
       "accumulate while communicating, with the delay correction (arXiv 2406.02613)", sharded_optimizer()},
      {"lion", pipeline::synchronous, aggregation::sharded_optimizer, "lion",
       "global Lion on the all-reduced gradient, sharded state", sharded_optimizer()},
      {"dlion-mavo", pipeline::synchronous, aggregation::sign_majority, "lion",
       "Distributed Lion, 1-bit majority vote (arXiv 2404.00438)", sign_vote(false)},
      {"dlion-avg", pipeline::synchronous, aggregation::sign_average, "lion",
       "Distributed Lion, averaged votes", sign_vote(true)},
      {"acco-dlion", pipeline::acco, aggregation::sign_majority, "lion",
       "Distributed Lion's majority vote hidden behind accumulation by ACCO's pipeline", sign_vote(false)},
  };
};

registry& algorithm_registry() {
  static registry r;
  return r;
}

}  // namespace

void add_algorithm(algorithm a) {
  if (a.name.empty()) throw std::invalid_argument("register_algorithm: the name is empty");
  if (!a.make_rule) throw std::invalid_argument("register_algorithm: " + a.name + " has no rule factory");
  if (a.default_optimizer != "adamw" && a.default_optimizer != "lion" && a.default_optimizer != "sgd")
    throw std::invalid_argument("register_algorithm: " + a.name + "'s default optimizer '" + a.default_optimizer +
                                "' is not adamw|lion|sgd");
  registry& r = algorithm_registry();
  std::lock_guard lock(r.mutex);
  for (const auto& known : r.table)
    if (known.name == a.name) throw std::invalid_argument("register_algorithm: " + a.name + " is taken");
  r.table.push_back(std::move(a));
}

std::vector<algorithm> algorithms() {
  registry& r = algorithm_registry();
  std::lock_guard lock(r.mutex);
  return {r.table.begin(), r.table.end()};
}

const algorithm& find_algorithm(std::string_view name) {
  registry& r = algorithm_registry();
  std::lock_guard lock(r.mutex);
  std::string known;
  for (const auto& a : r.table) {
    if (a.name == name) return a;
    known += (known.empty() ? "" : "|") + a.name;
  }
  throw std::invalid_argument("unknown algorithm '" + std::string(name) + "' (expected " + known + ")");
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& a : algorithms()) names.push_back(a.name);
  return names;
}

void require_wire_precision(const algorithm& algo, const round_precision& precision, const std::string& topology) {
  if (!block_quantized(precision.real.gradients)) return;
  const std::string flag = "wire precision: '" + round_wires_name(precision.real) + "' ";
  if (algo.aggregate == aggregation::sign_majority || algo.aggregate == aggregation::sign_average)
    throw std::invalid_argument(flag + "means nothing for " + algo.name +
                                ", whose votes travel as 1 bit whatever the wire (leave it fp32)");
  if (algo.aggregate != aggregation::sharded_optimizer)
    throw std::invalid_argument(flag + "needs the error feedback of a sharded optimizer (ddp, dpu, acco, lion); " +
                                algo.name + "'s collectives take fp32");
  if (topology != "ring")
    throw std::invalid_argument(flag + "is for the ring topology (--topology " + topology +
                                " moves its parameters otherwise); its collectives take fp32|bf16|fp16");
}

round_wires recommended_wires(const algorithm& algo, const std::string& topology, bool app_kept_values) {
  const bool block_codes = algo.aggregate == aggregation::sharded_optimizer && topology == "ring" && !app_kept_values;
  return block_codes && algo.pipe == pipeline::acco ? wire_precision::fp8 : wire_precision::fp32;
}

round_precision resolve_wire_precision(const algorithm& algo, const std::string& topology, std::string_view wire,
                                       std::string_view estimate, bool app_kept_values) {
  const auto wires = [&](std::string_view text, std::string_view what) {
    return parse_wires_or_auto(text, what).value_or(recommended_wires(algo, topology, app_kept_values));
  };
  round_precision precision;
  precision.real = wires(wire, "wire precision");
  precision.estimate = estimate.empty() ? precision.real : wires(estimate, "estimate precision");
  require_wire_precision(algo, precision, topology);
  return precision;
}

std::string feedback_precision(const round_precision& precision) {
  return block_quantized(precision.real.gradients) ? std::string(precision_name(precision.real.gradients)) : std::string();
}

std::uint64_t rounds_for_steps(pipeline pipe, std::uint64_t steps) {
  return pipe == pipeline::acco ? 2 * steps : steps;
}

std::uint64_t step_of_round(pipeline pipe, std::uint64_t round) {
  return pipe == pipeline::acco ? round / 2 : round;
}

bool is_estimate_round(pipeline pipe, std::uint64_t round) {
  return pipe == pipeline::acco && round % 2 == 0;
}

bool overlaps_round(pipeline pipe, std::uint64_t round, std::uint64_t dpu_warmup) {
  switch (pipe) {
    case pipeline::synchronous: return false;
    case pipeline::delayed: return round >= dpu_warmup;
    case pipeline::acco: return true;
  }
  return false;
}

bool keeps_accumulation(pipeline pipe, std::uint64_t round) {
  return is_estimate_round(pipe, round);
}

}  // namespace accord
