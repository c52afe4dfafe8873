#include "actors/resident_memory.hpp"

#include <algorithm>

namespace accord {

resident_memory::resident_memory(const memory_location& where)
    : where_(where), kind_(where.on_host() ? device_kind::cpu : device_kind::cuda) {
  activate();
  stream_ = make_kernels(kind_);
}

// CUDA calls act on the calling thread's device; the three actors run on different threads.
void resident_memory::activate() const {
  if (kind_ == device_kind::cuda) use_cuda_device(where_.device);
}

resident_memory::slot& resident_memory::slot_of(const tensor& t, bool upload) {
  activate();
  const std::lock_guard lock(mutex_);
  // A tensor that died gives its buffer to the next new one (its address may even be reused).
  auto same = [&](const std::unique_ptr<slot>& s) { return !s->owner.owner_before(t) && !t.owner_before(s->owner); };
  if (auto found = std::find_if(slots_.begin(), slots_.end(), same); found != slots_.end()) return **found;
  auto free = std::find_if(slots_.begin(), slots_.end(),
                           [&](const std::unique_ptr<slot>& s) { return s->owner.expired() && s->values.size() == t->size(); });
  if (free == slots_.end()) {
    slots_.push_back(std::make_unique<slot>());
    slots_.back()->values = device_array<float>(kind_, t->size());
    free = std::prev(slots_.end());
  }
  slot& s = **free;
  s.owner = t;
  if (upload) {
    s.values.copy_from(*t);  // synchronous: nothing pending afterwards
    s.last_use.reset();
  }
  return s;
}

device_span<float> resident_memory::buffer_of(const tensor& t, bool upload) {
  return {slot_of(t, upload).values.span(), where_};
}

void resident_memory::zero(const tensor& t) {
  slot& s = slot_of(t, false);
  stream_->fill(s.values.span(), 0.0f);
  s.last_use = stream_->record();
}

void resident_memory::copy(const tensor& from, const tensor& to) {
  slot& source = slot_of(from, false);
  slot& target = slot_of(to, false);
  stream_->copy(source.values.span(), target.values.span());
  source.last_use = target.last_use = stream_->record();  // the source must not change before it is read
}

device_span<float> resident_memory::ready_for_model(const tensor& t) {
  slot& s = slot_of(t, false);
  if (s.last_use) {
    stream_->wait_for(*s.last_use);
    stream_->synchronize();
    s.last_use.reset();
  }
  return {s.values.span(), where_};
}

void resident_memory::order_on(const tensor& t, kernels& stream) {
  slot& s = slot_of(t, false);
  if (s.last_use) stream.wait_for(*s.last_use);
}

void resident_memory::download(const tensor& t) {
  slot_of(t, false).values.copy_to(*t);
}

}  // namespace accord
