// The reference device collectives on host memory: the transport's collectives as they are,
// with the CPU kernels as the stream. An update rule's device form runs on them exactly as on
// a GPU, so it is tested without one (job_config::resident_on_host).
#include "gpu/device_collectives.hpp"

#include "gpu/cuda_backend.hpp"

namespace accord {
namespace {

class host_collectives final : public device_collectives {
public:
  explicit host_collectives(transport& link) : link_(link), kernels_(make_kernels(device_kind::cpu)) {}
  int rank() const override { return link_.rank(); }
  int world() const override { return link_.size(); }
  memory_location memory() const override { return {}; }
  kernels& stream() override { return *kernels_; }
  void reduce_scatter(std::span<float> data, wire_precision wire) override { link_.reduce_scatter(data, wire); }
  void all_gather(std::span<float> data, wire_precision wire) override { link_.all_gather(data, wire); }
  void sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                     std::span<std::uint64_t> result) override {
    link_.sign_majority(signs, count, round, result);
  }
  void sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                   std::span<std::uint16_t> plus_votes) override {
    link_.sign_counts(signs, count, plus_votes);
  }
  void finish() override {}

private:
  transport& link_;
  std::unique_ptr<kernels> kernels_;
};

}  // namespace

std::unique_ptr<device_collectives> make_device_collectives(transport& link, const memory_location& where) {
  if (where.on_host()) return std::make_unique<host_collectives>(link);
  std::string why;
  const cuda_backend* backend = find_cuda_backend(why);
  return backend ? backend->make_device_collectives(link, where.device) : nullptr;
}

}  // namespace accord
