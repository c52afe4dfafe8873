#include "actors/app_bridge.hpp"

#include <cmath>
#include <exception>
#include <stdexcept>

namespace accord {

worker::state::outcome worker::state::accumulate(std::shared_ptr<const void> owner,
                                                 device_span<const float> parameters, std::uint64_t index,
                                                 std::uint64_t first_position, std::size_t examples,
                                                 device_span<float> sum) {
  std::unique_lock lock(mutex_);
  if (!failure_.empty()) throw std::runtime_error(failure_);
  if (closed_) return {};
  if (ended_) return {.ended = true};
  parameters_owner_ = std::move(owner);
  sum_ = sum;
  request_ = micro_batch_request{parameters.on_host() ? parameters.values : std::span<const float>(), parameters,
                                 index, first_position, examples, version_};
  ++serial_;
  pending_ = true;
  answered_ = false;
  changed_.notify_all();
  changed_.wait(lock, [this] { return answered_ || !pending_ || !failure_.empty() || ended_; });
  if (answered_) {  // submit() waits for the add, however the request ends
    std::exception_ptr add_failed;
    lock.unlock();
    try {
      add_gradient();
    } catch (...) {
      add_failed = std::current_exception();
    }
    lock.lock();
    added_serial_ = serial_;
    gradient_ = {};
    changed_.notify_all();
    if (add_failed) std::rethrow_exception(add_failed);
  }
  const bool answered = pending_ && answered_;
  const bool ended = pending_ && !answered_ && ended_;
  pending_ = false;
  sum_ = {};
  if (!answered && !failure_.empty()) throw std::runtime_error(failure_);
  return answered ? answer_ : outcome{.ended = ended};
}

void worker::state::add_gradient() {
  const device_kind kind = sum_.on_host() ? device_kind::cpu : device_kind::cuda;
  if (!adder_ || adder_->kind() != kind) adder_ = make_kernels(kind);
  adder_->accumulate(sum_.values, gradient_.values);
  adder_->synchronize();
}

void worker::state::new_parameters() {
  std::lock_guard lock(mutex_);
  ++version_;
}

void worker::state::release() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  pending_ = false;
  changed_.notify_all();
}

void worker::state::open() {
  std::lock_guard lock(mutex_);
  closed_ = finished_;
}

void worker::state::finish() {
  std::lock_guard lock(mutex_);
  finished_ = closed_ = true;
  pending_ = false;
  changed_.notify_all();
}

bool worker::state::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return answerable(); });
}

std::optional<micro_batch_request> worker::state::next() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return answerable(); });
  if (finished_ || ended_ || !failure_.empty()) return std::nullopt;
  handed_out_ = true;
  handed_serial_ = serial_;
  const micro_batch_request request = request_;
  auto callback = on_parameters_;
  const bool news = request.parameters_version > seen_version_;
  seen_version_ = request.parameters_version;
  lock.unlock();
  // Outside the lock: the callback may do anything but wait for this worker. The compute actor
  // waits for the submit, so the parameters cannot change meanwhile.
  if (news && callback) callback(request.parameters, request.parameters_version);
  return request;
}

void worker::state::submit(device_span<const float> gradient, double items, double loss) {
  std::unique_lock lock(mutex_);
  const std::string who = "worker " + std::to_string(rank_) + ": ";
  if (!handed_out_) throw std::invalid_argument(who + "submit() without a request (call next() first)");
  if (!(std::isfinite(items) && items >= 0))
    throw std::invalid_argument(who + "submit(): items must be a finite number >= 0");
  if (gradient.where != memory_)
    throw std::invalid_argument(who + "submit(): a gradient in " + describe_location(gradient.where) +
                                " memory, the model's parameters are in " + describe_location(memory_) +
                                " memory (app_model::memory)");
  if (!pending_ || answered_ || handed_serial_ != serial_) {  // released: the epoch or job ended while the app computed
    handed_out_ = false;
    return;
  }
  if (gradient.size() != sum_.size())
    throw std::invalid_argument(who + "submit(): a gradient of " + std::to_string(gradient.size()) +
                                " values, the parameters have " + std::to_string(sum_.size()));
  handed_out_ = false;
  gradient_ = gradient;
  answer_ = {loss, items};
  answered_ = true;
  changed_.notify_all();
  // The compute actor adds it, whatever else happens; it may be serving the next request by the
  // time this thread wakes.
  const std::uint64_t mine = serial_;
  changed_.wait(lock, [this, mine] { return added_serial_ >= mine; });
}

void worker::state::on_parameters(std::function<void(std::span<const float>, std::uint64_t)> callback) {
  if (!memory_.on_host())
    throw std::invalid_argument("worker " + std::to_string(rank_) + ": on_parameters() hands out host parameters, "
                                "this model's are in " + describe_location(memory_) +
                                ": watch micro_batch_request::parameters_version instead");
  std::lock_guard lock(mutex_);
  on_parameters_ = std::move(callback);
}

void worker::state::fail(const std::string& why) {
  std::lock_guard lock(mutex_);
  failure_ = "worker " + std::to_string(rank_) + ": " + why;
  changed_.notify_all();
}

void worker::state::end() {
  std::lock_guard lock(mutex_);
  ended_ = true;
  handed_out_ = false;  // a request handed out stays unanswered
  changed_.notify_all();
}

worker::worker(std::shared_ptr<state> s) : state_(std::move(s)) {}
worker::~worker() = default;
std::optional<micro_batch_request> worker::next() { return state_->next(); }
bool worker::wait_ready(std::chrono::milliseconds timeout) { return state_->wait_ready(timeout); }
void worker::submit(device_span<const float> gradient, double items, double loss) {
  state_->submit(gradient, items, loss);
}
void worker::on_parameters(std::function<void(std::span<const float>, std::uint64_t)> callback) {
  state_->on_parameters(std::move(callback));
}
void worker::fail(const std::string& why) { state_->fail(why); }
void worker::end() { state_->end(); }
int worker::rank() const { return state_->rank(); }

}  // namespace accord
