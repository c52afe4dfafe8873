#pragma once
// The coordination replica (membership/replica.hpp) as a CAF message.
#include "membership/replica.hpp"

#include <caf/meta/type_name.hpp>

namespace accord {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_member& x) {
  return f(caf::meta::type_name("replica_member"), x.id, x.initial_rank, x.host, x.control, x.rank, x.leaving);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kept_position& x) {
  return f(caf::meta::type_name("kept_position"), x.epoch, x.steps, x.data_position);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, coordination_replica& x) {
  return f(caf::meta::type_name("coordination_replica"), x.epoch, x.sequence, x.coordinator, x.coordinator_control,
           x.epoch_workers, x.epoch_start, x.steps_done, x.next_id, x.members, x.kept);
}

}  // namespace accord
