// The control messages rank 0 receives from other processes (actors/messages.hpp,
// actors/membership_actor.hpp), decoded as CAF's middleman decodes a BASP payload: each type on
// its own, and a whole type-erased message naming its types. Malformed bytes give an error.
#include "actors/membership_actor.hpp"
#include "actors/messages.hpp"

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>

namespace {

caf::actor_system& system_with_accord_types() {
  static caf::actor_system* system = [] {
    static caf::actor_system_config config;
    config.set("scheduler.max-threads", 1);
    accord::add_control_message_types(config);
    accord::add_membership_message_types(config);
    return new caf::actor_system(config);  // lives as long as the process
  }();
  return *system;
}

template <class T>
void decode_as(const std::uint8_t* data, std::size_t size) {
  caf::binary_deserializer source(system_with_accord_types(), reinterpret_cast<const char*>(data), size);
  T value;
  (void)source(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t kind = data[0];
  ++data, --size;
  switch (kind % 8) {
    case 0: decode_as<accord::round_report>(data, size); break;
    case 1: decode_as<accord::worker_failure>(data, size); break;
    case 2: decode_as<accord::rule_state>(data, size); break;
    case 3: decode_as<accord::member_hello>(data, size); break;
    case 4: decode_as<accord::epoch_request>(data, size); break;
    case 5: decode_as<accord::restored_report>(data, size); break;
    case 6: decode_as<accord::kept_summary>(data, size); break;
    default: decode_as<caf::message>(data, size); break;
  }
  return 0;
}
