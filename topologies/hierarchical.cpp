// hierarchical: the ring's rounds over collectives in two levels (transport/hierarchical.hpp):
// groups of consecutive ranks reduce inside first, then their leaders across groups.
#include "topologies/builtins.hpp"

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
    if (job.options.group_size < 1)
      throw std::invalid_argument(
          "--topology hierarchical: needs a group size (--group-size in one process; between processes "
          "LOCAL_WORLD_SIZE, the workers of one machine)");
    return std::make_unique<hierarchical>(job.options.group_size);
  };
}

}  // namespace accord
