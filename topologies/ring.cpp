// ring: every round is the algorithm's own round over every worker.
#include "topologies/builtins.hpp"

namespace accord {
namespace {

class ring_worker final : public worker_topology {
public:
  void round(std::span<float> buffer, const round_view&, round_peers&, algorithm_rules& rules,
             topology_report&) override {
    rules.aggregate(buffer);
  }
  bool replicas_agree(std::uint64_t) const override { return true; }
};

class ring final : public topology {
public:
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float>) const override {
    return make_ring_worker();
  }
};

}  // namespace

std::unique_ptr<worker_topology> make_ring_worker() { return std::make_unique<ring_worker>(); }

topology_factory ring_topology() {
  return [](const topology_job&) { return std::make_unique<ring>(); };
}

}  // namespace accord
