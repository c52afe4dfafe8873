#pragma once
// Messages between actors: the atoms, and the wire formats of the control messages that cross
// processes. The data they carry is plain (algorithms/round_state.hpp, recovery/).
#include "algorithms/round_state.hpp"
#include "recovery/elastic_state.hpp"

#include <caf/all.hpp>

#include <string>

namespace accord {

struct worker_failure {
  int rank = 0;
  std::string what;
};

using compute_atom = caf::atom_constant<caf::atom("compute")>;
using params_atom = caf::atom_constant<caf::atom("params")>;
using fetch_atom = caf::atom_constant<caf::atom("fetch")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using evaluate_atom = caf::atom_constant<caf::atom("evaluate")>;
using wait_atom = caf::atom_constant<caf::atom("wait")>;

// Wire formats of the control messages that cross processes (CAF's middleman). Tensors never
// do: a report's parameters are attached only by rank 0, which shares the coordinator's process.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_totals& x) {
  return f(caf::meta::type_name("round_totals"), x.micro_batches, x.loss_sum, x.items, x.changes, x.ended);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_stats& x) {
  return f(caf::meta::type_name("transfer_stats"), x.bytes_sent, x.bytes_received, x.messages_sent);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kept_topology& x) {
  return f(caf::meta::type_name("kept_topology"), x.present, x.parameters, x.shared, x.own, x.local_step,
           x.local_slots, x.local_values);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rule_state& x) {
  return f(caf::meta::type_name("rule_state"), x.present, x.momentum, x.optimizer_step, x.slots,
           x.begin, x.values, x.master, x.feedback, x.residual, x.topology);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_observations& x) {
  return f(caf::meta::type_name("round_observations"), x.gradient_square_sum, x.vote_agreement,
           x.learning_rate, x.unwaited_seconds);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, edge_traffic& x) {
  return f(caf::meta::type_name("edge_traffic"), x.from, x.to, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, thread_cpu& x) {
  return f(caf::meta::type_name("thread_cpu"), x.compute, x.communicator, x.evaluator, x.actors, x.transport,
           x.other);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, round_report& x) {
  return f(caf::meta::type_name("round_report"), x.rank, x.round, x.estimate, x.global,
           x.compute_seconds, x.communication_seconds, x.wait_seconds, x.cpu, x.parameter_hash, x.traffic,
           x.consumed, x.state, x.kept, x.observations, x.consensus_distance, x.staleness,
           x.worker_gradients, x.edge_bytes, x.learning_rate);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kept_summary& x) {
  return f(caf::meta::type_name("kept_summary"), x.layout, x.steps, x.rank, x.world, x.optimizer_step, x.slots,
           x.parameter_hash, x.own_checksum, x.copies, x.copy_checksums);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_source& x) {
  return f(caf::meta::type_name("state_source"), x.layout, x.steps, x.world, x.shard_senders,
           x.parameter_holders, x.optimizer_step, x.slots, x.parameter_hash, x.state_checksum);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_failure& x) {
  return f(caf::meta::type_name("worker_failure"), x.rank, x.what);
}

// Registers the control messages with an actor system configuration (needed to cross processes).
void add_control_message_types(caf::actor_system_config& config);


}  // namespace accord

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::tensor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::gradient_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::round_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::round_result)

namespace accord {
// The message of an error raised with caf::make_error(sec, std::string), else CAF's rendering.
inline std::string describe(caf::actor_system& system, const caf::error& e) {
  if (e.context().match_elements<std::string>()) return e.context().get_as<std::string>(0);
  return system.render(e);
}
}  // namespace accord
