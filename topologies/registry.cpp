// The registry of topologies by name, the built-ins first.
#include <accord/topology.hpp>

#include "topologies/parameter_server/parameter_server.hpp"
#include "topologies/builtins.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

namespace accord {
namespace {

struct registry {
  std::mutex mutex;
  std::map<std::string, topology_factory> factories;
};

registry& topologies() {
  static registry* const instance = [] {
    auto* r = new registry;  // never destroyed: registration may happen from static initializers
    r->factories["ring"] = ring_topology();
    declare_topology_settings("ring", {});  // none: the declared are the registered (--topology's choices)
    r->factories["local-sgd"] = local_sgd_topology();
    declare_topology_settings("local-sgd", local_sgd_settings());
    r->factories["hierarchical"] = hierarchical_topology();
    declare_topology_settings("hierarchical", hierarchical_settings());
    r->factories["parameter-server"] = parameter_server_topology();
    declare_topology_settings("parameter-server", parameter_server_settings());
    r->factories["gossip"] = gossip_topology();
    declare_topology_settings("gossip", gossip_settings());
    return r;
  }();
  return *instance;
}

// The built-ins' settings are declared before main, so that what lists every setting (describe,
// the fingerprint) sees them in a program that names no topology first.
[[maybe_unused]] const bool builtins_registered = (topologies(), true);

}  // namespace

void register_topology(const std::string& name, topology_factory factory, std::vector<setting_declaration> settings) {
  if (name.empty()) throw std::invalid_argument("register_topology: empty name");
  if (!factory) throw std::invalid_argument("register_topology: topology '" + name + "' has no factory");
  registry& r = topologies();
  declare_topology_settings(name, std::move(settings));
  std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> topology_names() {
  registry& r = topologies();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

std::unique_ptr<topology> make_topology(const std::string& name, const topology_job& job) {
  topology_factory factory;
  {
    registry& r = topologies();
    std::lock_guard lock(r.mutex);
    if (const auto found = r.factories.find(name); found != r.factories.end()) factory = found->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : topology_names()) known += (known.empty() ? "" : "|") + n;
    throw std::invalid_argument("unknown topology '" + name + "' (expected " + known + ")");
  }
  auto made = factory(job);
  if (!made) throw std::invalid_argument("topology '" + name + "': its factory made nothing");
  if (made->group_size() < 1)
    throw std::invalid_argument("topology '" + name + "': group size " + std::to_string(made->group_size()) +
                                " is not positive");
  return made;
}

}  // namespace accord
