#include "actors/messages.hpp"

namespace accord {

void add_control_message_types(caf::actor_system_config& config) {
  config.add_message_type<round_totals>("accord::round_totals");
  config.add_message_type<transfer_stats>("accord::transfer_stats");
  config.add_message_type<rule_state>("accord::rule_state");
  config.add_message_type<edge_traffic>("accord::edge_traffic");
  config.add_message_type<round_report>("accord::round_report");
  config.add_message_type<worker_failure>("accord::worker_failure");
}

}  // namespace accord
