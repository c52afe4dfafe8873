#include "actors/messages.hpp"

#include <xxhash.h>

namespace accord {

namespace {
tensor metered(std::vector<float>* storage, const std::shared_ptr<memory_meter>& meter) {
  const std::size_t bytes = storage->size() * sizeof(float);
  meter->add(bytes);
  return tensor(storage, [meter, bytes](std::vector<float>* v) {
    meter->live -= bytes;
    delete v;
  });
}
}  // namespace

tensor make_tensor(std::size_t size, const std::shared_ptr<memory_meter>& meter) {
  return metered(new std::vector<float>(size), meter);
}

tensor make_tensor(const std::vector<float>& from, const std::shared_ptr<memory_meter>& meter) {
  return metered(new std::vector<float>(from), meter);
}

void add_control_message_types(caf::actor_system_config& config) {
  config.add_message_type<round_totals>("accord::round_totals");
  config.add_message_type<transfer_stats>("accord::transfer_stats");
  config.add_message_type<rule_state>("accord::rule_state");
  config.add_message_type<edge_traffic>("accord::edge_traffic");
  config.add_message_type<round_report>("accord::round_report");
  config.add_message_type<worker_failure>("accord::worker_failure");
}

std::uint64_t hash_parameters(const std::vector<float>& parameters) {
  // XXH3 runs at memory speed, so checking replicas every round costs next to nothing; any
  // bit difference between replicas shows.
  return XXH3_64bits(parameters.data(), parameters.size() * sizeof(float));
}

}  // namespace accord
