#include "actors/algorithm.hpp"

#include <stdexcept>

namespace accord {

const std::vector<algorithm>& algorithms() {
  static const std::vector<algorithm> table = {
      {"ddp", pipeline::synchronous, aggregation::sharded_optimizer, "adamw",
       "synchronous data parallel, ZeRO-1 sharded AdamW (the baseline)"},
      {"dpu", pipeline::delayed, aggregation::sharded_optimizer, "adamw",
       "delayed parameter update: overlapped, gradients one round stale"},
      {"acco", pipeline::acco, aggregation::sharded_optimizer, "adamw",
       "accumulate while communicating, with the delay correction (arXiv 2406.02613)"},
      {"lion", pipeline::synchronous, aggregation::sharded_optimizer, "lion",
       "global Lion on the all-reduced gradient, sharded state"},
      {"dlion-mavo", pipeline::synchronous, aggregation::sign_majority, "lion",
       "Distributed Lion, 1-bit majority vote (arXiv 2404.00438)"},
      {"dlion-avg", pipeline::synchronous, aggregation::sign_average, "lion",
       "Distributed Lion, averaged votes"},
      {"acco-dlion", pipeline::acco, aggregation::sign_majority, "lion",
       "Distributed Lion's majority vote hidden behind accumulation by ACCO's pipeline"},
  };
  return table;
}

const algorithm& find_algorithm(std::string_view name) {
  std::string known;
  for (const auto& a : algorithms()) {
    if (a.name == name) return a;
    known += (known.empty() ? "" : "|") + a.name;
  }
  throw std::invalid_argument("unknown algorithm '" + std::string(name) + "' (expected " + known + ")");
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
