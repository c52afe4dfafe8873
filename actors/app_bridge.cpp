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
  request_ = micro_batch_request{parameters.on_host() ? parameters.values : std::span<const float>(),
                                 parameters,
                                 index,
                                 first_position,
                                 examples,
                                 version_,
                                 progress_listener_ ? progress_elements_ : 0};
  reported_from_ = added_from_ = sum.size();
  ++serial_;
  pending_ = true;
  answered_ = false;
  changed_.notify_all();
  const auto settled = [this] { return answered_ || !pending_ || !failure_.empty() || ended_; };
  // The app's progress reports, added (and told to the listener) while its backward goes on.
  while (!settled()) {
    changed_.wait(lock, [&] { return settled() || reported_from_ < added_from_; });
    if (settled()) break;
    const std::size_t from = reported_from_;
    const std::exception_ptr add_failed = add_unlocked(lock, gradient_, from, added_from_);
    added_from_ = from;
    if (add_failed) {  // the app's submit() then returns, and its next() says the job is over
      pending_ = false;
      sum_ = {};
      changed_.notify_all();
      std::rethrow_exception(add_failed);
    }
  }
  if (answered_) {  // submit() waits for the add, however the request ends
    const std::exception_ptr add_failed = add_unlocked(lock, gradient_, 0, added_from_);
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

std::exception_ptr worker::state::add_unlocked(std::unique_lock<std::mutex>& lock, device_span<const float> gradient,
                                               std::size_t begin, std::size_t end) {
  const auto listener = progress_listener_;
  lock.unlock();
  std::exception_ptr failed;
  try {
    add_gradient(gradient, begin, end);
    if (listener) listener(begin);
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  return failed;
}

void worker::state::add_gradient(device_span<const float> gradient, std::size_t begin, std::size_t end) {
  if (begin >= end) return;
  const device_kind kind = sum_.on_host() ? device_kind::cpu : device_kind::cuda;
  if (!adder_ || adder_->kind() != kind) adder_ = make_kernels(kind);
  adder_->accumulate(sum_.values.subspan(begin, end - begin), gradient.values.subspan(begin, end - begin));
  adder_->synchronize();
}

void worker::state::listen_to_gradients(std::size_t elements, std::function<void(std::size_t)> listener) {
  std::lock_guard lock(mutex_);
  progress_elements_ = elements;
  progress_listener_ = std::move(listener);
}

void worker::state::new_parameters() {
  std::lock_guard lock(mutex_);
  ++version_;
}

void worker::state::release() {
  std::lock_guard lock(mutex_);
  progress_listener_ = nullptr;  // the epoch's buckets go with its actors
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

bool worker::state::take_gradient(device_span<const float> gradient, const char* call) {
  const std::string who = "worker " + std::to_string(rank_) + ": ";
  if (!handed_out_)
    throw std::invalid_argument(who + call + "() without a request (call next() first)");
  if (gradient.where != memory_)
    throw std::invalid_argument(who + call + "(): a gradient in " + describe_location(gradient.where) +
                                " memory, the model's parameters are in " + describe_location(memory_) +
                                " memory (app_model::memory)");
  if (!pending_ || answered_ || handed_serial_ != serial_) return false;
  if (gradient.size() != sum_.size())
    throw std::invalid_argument(who + call + "(): a gradient of " + std::to_string(gradient.size()) +
                                " values, the parameters have " + std::to_string(sum_.size()));
  return true;
}

void worker::state::submit(device_span<const float> gradient, double items, double loss) {
  std::unique_lock lock(mutex_);
  if (!(std::isfinite(items) && items >= 0))
    throw std::invalid_argument("worker " + std::to_string(rank_) + ": submit(): items must be a finite number >= 0");
  const bool taken = take_gradient(gradient, "submit");
  handed_out_ = false;
  if (!taken) return;  // released: the epoch or job ended while the app computed
  gradient_ = gradient;
  answer_ = {loss, items};
  answered_ = true;
  changed_.notify_all();
  // The compute actor adds it, whatever else happens; it may be serving the next request by the
  // time this thread wakes.
  const std::uint64_t mine = serial_;
  changed_.wait(lock, [this, mine] { return added_serial_ >= mine; });
}

void worker::state::gradients_final_from(device_span<const float> gradient, std::size_t begin) {
  std::lock_guard lock(mutex_);
  if (!take_gradient(gradient, "gradients_final_from") || begin >= reported_from_) return;
  gradient_ = gradient;
  reported_from_ = begin;
  changed_.notify_all();
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
void worker::gradients_final_from(device_span<const float> gradient, std::size_t begin) {
  state_->gradients_final_from(gradient, begin);
}
void worker::on_parameters(std::function<void(std::span<const float>, std::uint64_t)> callback) {
  state_->on_parameters(std::move(callback));
}
void worker::fail(const std::string& why) { state_->fail(why); }
void worker::end() { state_->end(); }
int worker::rank() const { return state_->rank(); }

}  // namespace accord
