#pragma once
// How the ranks of a job between processes find each other's transport (UCX or NCCL).
#include <accord/job.hpp>

#include "transport/transport.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accord {

// Whether `host` names this machine's loopback.
bool is_loopback(const std::string& host);

// How the ranks of an epoch find each other's transport: each member publishes an address
// with its epoch request, then connects knowing everyone's.
class transport_rendezvous {
public:
  virtual ~transport_rendezvous() = default;
  virtual std::string address() const = 0;
  virtual std::unique_ptr<transport> connect(int rank, const std::vector<std::string>& addresses,
                                             std::uint64_t epoch) = 0;
  // From another thread: a connect() waiting for a peer that died gives up.
  virtual void interrupt(const std::string& why) = 0;
};


// UCX (a listener on `host`) or NCCL (`master` makes the unique id), as group.transport says.
std::unique_ptr<transport_rendezvous> make_rendezvous(const process_group& group, const std::string& host,
                                                      bool master);

}  // namespace accord
