#include "cluster/fingerprint.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace accord {
namespace {

constexpr std::uint64_t sampled_examples = 64;

// FNV-1a over bytes.
struct hasher {
  std::uint64_t value = 14695981039346656037ull;
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) value = (value ^ p[i]) * 1099511628211ull;
  }
  template <class T>
  void all(const std::vector<T>& v) { bytes(v.data(), v.size() * sizeof(T)); }
};

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

std::string hex(std::uint64_t value) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// "name=value" lines, in order.
std::vector<std::pair<std::string, std::string>> parse(const std::string& fingerprint) {
  std::vector<std::pair<std::string, std::string>> settings;
  std::istringstream lines(fingerprint);
  for (std::string line; std::getline(lines, line);) {
    const auto equals = line.find('=');
    if (equals == std::string::npos) settings.emplace_back(line, "");
    else settings.emplace_back(line.substr(0, equals), line.substr(equals + 1));
  }
  return settings;
}

// Every registered topology's declared settings that enter the fingerprint, "--flag=value" rows
// in the declarations' order: the value where the job's topology declares the setting, else
// "(unused)" (a joiner need not repeat the others).
std::string topology_rows(const job_config& c) {
  const auto declared = declared_topology_settings();
  const auto mine = declared.find(c.topology);
  const auto used = [&](const std::string& name) {
    return mine != declared.end() && std::any_of(mine->second.begin(), mine->second.end(),
                                                 [&](const setting_declaration& s) { return s.name == name; });
  };
  std::string rows;
  std::set<std::string> listed;  // a setting two topologies declare, once
  for (const auto& [topology, settings] : declared)
    for (const setting_declaration& s : settings)
      if (s.fingerprint && listed.insert(s.flag).second) {
        const setting_value value = c.topology_settings.value(s.name);
        const std::string text = std::holds_alternative<double>(value) ? number(std::get<double>(value)) : setting_text(value);
        rows += "--" + s.flag + "=" + (used(s.name) ? text : "(unused)") + "\n";
      }
  return rows;
}

// "none", or each group as "[begin,end) lr×s wd×s role".
std::string describe_groups(const std::vector<parameter_group>& groups) {
  if (groups.empty()) return "none";
  std::string out;
  for (const parameter_group& g : groups)
    out += (out.empty() ? "[" : " [") + std::to_string(g.begin) + "," + std::to_string(g.end) + ") lr*" +
           number(g.learning_rate_scale) + " wd*" + number(g.weight_decay_scale) + " " + g.role;
  return out;
}

}  // namespace

std::uint64_t data_hash(const dataset& data) {
  hasher h;
  const std::uint64_t size = data.size();
  h.bytes(&size, sizeof size);
  for (std::uint64_t i = 0; size > 0 && i < sampled_examples; ++i) {
    const batch b = data.examples(i * size / sampled_examples, 1);
    h.all(b.features);
    h.all(b.tokens);
    h.all(b.targets);
  }
  return h.value;
}

std::string job_fingerprint(const model& prototype, const dataset& train, const job_config& c,
                            const std::string& transport, const std::string& resumed) {
  const std::vector<std::pair<const char*, std::string>> settings = {
      {"--model", prototype.signature()},
      {"--data", train.describe() + ", content hash " + hex(data_hash(train))},
      {"--algo", c.algorithm},
      {"--topology", c.topology},
      {"--steps", std::to_string(c.steps)},
      {"--micro-batch", std::to_string(c.micro_batch)},
      {"--accumulation", std::to_string(c.accumulation)},
      {"--max-accumulation", std::to_string(c.max_accumulation)},
      {"--estimate-accumulation", std::to_string(c.estimate_accumulation ? c.estimate_accumulation : c.accumulation)},
      {"--accumulation-mode", c.accumulation_mode.empty() ? "growing-steps" : c.accumulation_mode},
      {"--global-batch", c.global_batch ? std::to_string(c.global_batch) : "none (follows the workers)"},
      {"--dpu-warmup", std::to_string(c.dpu_warmup)},
      {"--seed", std::to_string(c.seed)},
      {"--optimizer", c.optimizer.empty() ? "(the algorithm's)" : c.optimizer},
      {"--lr", number(c.learning_rate)},
      {"--beta1", c.beta1 ? number(*c.beta1) : std::string("(the optimizer's)")},
      {"--beta2", c.beta2 ? number(*c.beta2) : std::string("(the optimizer's)")},
      {"--epsilon", number(c.epsilon)},
      {"--weight-decay", number(c.weight_decay)},
      {"--parameter-groups", describe_groups(c.parameter_groups)},
      {"--max-gradient-norm", number(c.max_gradient_norm)},
      {"--warmup", std::to_string(c.warmup_steps)},
      {"--schedule", c.cosine ? "cosine" : "constant"},
      {"--min-lr-ratio", number(c.min_lr_ratio)},
      {"--eval-interval", std::to_string(c.eval_interval)},
      {"--eval-examples", std::to_string(c.eval_examples)},
      {"--wire-precision", c.wire_precision},
      {"--estimate-precision", c.estimate_precision.empty() ? c.wire_precision : c.estimate_precision},
      {"--compute-precision", c.compute_precision},
      {"--bucket-cap-mb", number(c.bucket_cap_mb)},  // every worker reduces the same buckets
      // Checkpoints and kept states are snapshots every worker takes in the same round.
      {"--checkpoint", c.checkpoint_path.empty() ? "none" : "set"},
      {"--checkpoint-interval", std::to_string(c.checkpoint_interval)},
      {"--keep-interval", std::to_string(c.keep_interval)},
      {"--resume", resumed.empty() ? "none" : resumed},
      {"--transport", transport},
  };
  std::string fingerprint;
  for (const auto& [name, value] : settings) {
    fingerprint += std::string(name) + "=" + value + "\n";
    if (name == std::string("--topology")) fingerprint += topology_rows(c);
  }
  return fingerprint;
}

std::string fingerprint_difference(const std::string& job, const std::string& worker) {
  if (job == worker) return {};
  const auto mine = parse(job);
  std::map<std::string, std::string> theirs;
  for (auto& [name, value] : parse(worker)) theirs.emplace(name, value);
  for (const auto& [name, value] : mine) {
    const auto found = theirs.find(name);
    if (found == theirs.end()) return "it does not state " + name + " (another accord version?)";
    if (found->second != value) return name + " differs: rank 0 has " + value + ", this worker has " + found->second;
  }
  return "its settings name more than rank 0's (another accord version?)";
}

}  // namespace accord
