// Transport rendezvous between processes: UCX listeners, NCCL unique ids.
#include "cluster/rendezvous.hpp"

#include "transport/ucx/ucx_transport.hpp"
#include "gpu/cuda_backend.hpp"

#include <cstdlib>
#include <stdexcept>

namespace accord {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

namespace {

class ucx_rendezvous final : public transport_rendezvous {
public:
  ucx_rendezvous(const process_group& group, const std::string& host) : listener_(listen(group, host)) {}
  std::string address() const override { return listener_.address(); }
  std::unique_ptr<transport> connect(int rank, const std::vector<std::string>& addresses,
                                     std::uint64_t epoch) override {
    return std::move(listener_).connect(rank, addresses, epoch);
  }
  void interrupt(const std::string& why) override { listener_.interrupt(why); }

private:
  static ucx_listener listen(const process_group& group, const std::string& host) {
    ucx_options options;
    options.connect_timeout = group.connect_timeout;
    if (is_loopback(host) && !std::getenv("UCX_NET_DEVICES")) options.net_devices = "lo";
    return ucx_listener(host + ":0", options);
  }
  ucx_listener listener_;
};

// NCCL needs one unique id for the whole communicator: rank 0 of the epoch (always rank 0's
// process) makes it and publishes it as its "address" (hex); every rank then joins the
// communicator on its own GPU. NCCL lives in the CUDA plugin, loaded here.
class nccl_rendezvous final : public transport_rendezvous {
public:
  nccl_rendezvous(const process_group& group, bool makes_id)
      : cuda_(require_cuda_backend("transport nccl")), local_rank_(group.local_rank) {
    if (!makes_id) return;
    const nccl_unique_id id = cuda_.make_nccl_unique_id();
    static const char digits[] = "0123456789abcdef";
    for (std::byte b : id) {
      hex_ += digits[std::to_integer<int>(b) >> 4];
      hex_ += digits[std::to_integer<int>(b) & 15];
    }
  }
  std::string address() const override { return hex_; }
  std::unique_ptr<transport> connect(int rank, const std::vector<std::string>& addresses, std::uint64_t) override {
    const std::string& hex = addresses.at(0);
    nccl_unique_id id{};
    if (hex.size() != 2 * id.size()) throw transport_error("rank 0 published a malformed NCCL unique id");
    for (std::size_t i = 0; i < id.size(); ++i)
      id[i] = static_cast<std::byte>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    return cuda_.make_nccl_transport(id, rank, static_cast<int>(addresses.size()), local_rank_);
  }
  // ncclCommInitRank blocks on the host and cannot be interrupted (gpu/nccl_transport.hpp).
  void interrupt(const std::string&) override {}

private:
  const cuda_backend& cuda_;
  int local_rank_;
  std::string hex_;
};

}  // namespace

std::unique_ptr<transport_rendezvous> make_rendezvous(const process_group& group, const std::string& host,
                                                      bool master) {
  if (group.transport == "ucx") return std::make_unique<ucx_rendezvous>(group, host);
  if (group.transport == "nccl") return std::make_unique<nccl_rendezvous>(group, master);
  throw std::invalid_argument("unknown transport '" + group.transport + "' (expected ucx|nccl)");
}

}  // namespace accord
