#include "cluster/fingerprint.hpp"

#include <accord/config_settings.hpp>

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

// A value as the fingerprint states it: numbers to 9 significant digits (a float's), the rest as
// a flag takes them.
std::string value_text(const setting_value& value) {
  return std::holds_alternative<double>(value) ? number(std::get<double>(value)) : setting_text(value);
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
        rows += "--" + s.flag + "=" + (used(s.name) ? value_text(c.topology_settings.value(s.name)) : "(unused)") + "\n";
      }
  return rows;
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
  std::string fingerprint = "--model=" + prototype.signature() + "\n" + "--data=" + train.describe() +
                            ", content hash " + hex(data_hash(train)) + "\n";
  // Every declared setting that enters it (<accord/config_settings.hpp>), as the job resolves it;
  // the topologies' own right after --topology.
  for (const job_setting& s : declared_job_settings()) {
    if (!s.declared.fingerprint) continue;
    fingerprint += "--" + s.declared.flag + "=" + (s.fingerprint_text ? s.fingerprint_text(c) : value_text(s.get(c))) + "\n";
    if (s.declared.name == "topology") fingerprint += topology_rows(c);
  }
  return fingerprint + "--resume=" + (resumed.empty() ? "none" : resumed) + "\n" + "--transport=" + transport + "\n";
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
