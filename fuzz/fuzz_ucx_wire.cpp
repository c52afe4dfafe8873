// UCX connection hellos and data frame tags (transport/ucx/ucx_wire.hpp): any 40 bytes decode
// or are refused with a reason; a hello that passes the check round-trips; so do frame tags.
#include "transport/ucx/ucx_wire.hpp"

#include <cstdlib>
#include <cstring>

using namespace accord::ucx_wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < hello_bytes + 16) return 0;
  hello_frame frame;
  std::memcpy(frame.data(), data, hello_bytes);
  hello mine;
  std::memcpy(&mine.job_id, data + hello_bytes, 8);
  mine.world = static_cast<int>(data[hello_bytes + 8]) + 1;
  const std::string problem = hello_problem(frame, mine);
  if (problem.empty() && decode(encode(*decode(frame))) != decode(frame)) std::abort();  // fields round-trip
  std::uint64_t tag;
  std::memcpy(&tag, data + hello_bytes + 8, 8);
  const int sender = static_cast<int>(data[hello_bytes] | (data[hello_bytes + 1] << 8)) % max_world;
  if (tag_fits(tag)) {
    const std::uint64_t wire = frame_tag(sender, tag);
    if (frame_sender(wire) != sender || frame_transport_tag(wire) != tag) std::abort();
  }
  return 0;
}
