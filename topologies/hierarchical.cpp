// hierarchical: the ring's rounds over collectives in two levels (transport/hierarchical.hpp):
// groups of consecutive ranks reduce inside first, then their leaders across groups.
#include "topologies/builtins.hpp"

#include "transport/link_model.hpp"

#include <stdexcept>

namespace accord {
namespace {

class hierarchical final : public topology {
public:
  explicit hierarchical(int group_size) : group_size_(group_size) {}
  int group_size() const override { return group_size_; }
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float>) const override {
    return make_ring_worker();
  }

private:
  int group_size_;
};

}  // namespace

topology_factory hierarchical_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    const std::int64_t group_size = job.options.whole("group_size");
    if (group_size < 1)
      throw std::invalid_argument(
          "--topology hierarchical: needs a group size (--group-size in one process; between processes "
          "LOCAL_WORLD_SIZE, the workers of one machine)");
    if (group_size > 65535) throw std::invalid_argument("--group-size must be at most 65535");
    return std::make_unique<hierarchical>(static_cast<int>(group_size));
  };
}

std::vector<setting_declaration> hierarchical_settings() {
  using enum setting_kind;
  return {
      // 0: unset, refused by the factory (the apps fill it from --group-size or LOCAL_WORLD_SIZE).
      {.name = "group_size", .flag = "group-size", .kind = whole, .fallback = std::int64_t{0}, .low = 1,
       .high = 65535, .unit = "workers",
       .help = "workers per group, consecutive ranks (default between processes: LOCAL_WORLD_SIZE)"},
      // Each process emulates its own links: processes need not agree on it.
      {.name = "inter_link", .flag = "inter-link", .kind = text, .fallback = std::string(),
       .help = "emulated link between groups, in one process (default: as --link, which is the link inside a group)",
       .fingerprint = false,
       .check = [](const setting_value& spec) { link_model::parse(std::get<std::string>(spec)); }},
  };
}

}  // namespace accord
