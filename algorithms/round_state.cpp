#include "algorithms/round_state.hpp"

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

}  // namespace accord
