#include "algorithms/collective_channel.hpp"

#include "observe/thread_cpu.hpp"
#include "observe/trace.hpp"

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace accord {

using steady = std::chrono::steady_clock;

struct collective_channel::accounting {
  std::mutex mutex;
  double unwaited_seconds = 0;
  void add(double seconds) {
    std::lock_guard lock(mutex);
    unwaited_seconds += seconds;
  }
};

// One started collective: what it runs and how it ended.
struct collective_channel::collective {
  std::function<void(transport&)> run;
  std::mutex mutex;
  std::condition_variable changed;
  bool finished = false;
  std::exception_ptr error;

  void finish(std::exception_ptr failure) {
    {
      std::lock_guard lock(mutex);
      finished = true;
      error = std::move(failure);
    }
    changed.notify_all();
  }
};

namespace {

class channel_collective final : public collective_in_flight {
public:
  channel_collective(std::shared_ptr<collective_channel::collective> started,
                     std::shared_ptr<collective_channel::accounting> accounting)
      : started_(std::move(started)), accounting_(std::move(accounting)) {}
  ~channel_collective() override {
    // Its buffer may go with the caller: the channel must be done writing into it.
    std::unique_lock lock(started_->mutex);
    started_->changed.wait(lock, [&] { return started_->finished; });
  }

  bool done() const override {
    std::lock_guard lock(started_->mutex);
    return started_->finished;
  }

  void wait() override {
    const auto begin = steady::now();
    std::unique_lock lock(started_->mutex);
    started_->changed.wait(lock, [&] { return started_->finished; });
    lock.unlock();
    // The time waited was not hidden: it leaves the channel's unwaited seconds.
    accounting_->add(-std::chrono::duration<double>(steady::now() - begin).count());
    if (started_->error) std::rethrow_exception(started_->error);
  }

private:
  std::shared_ptr<collective_channel::collective> started_;
  std::shared_ptr<collective_channel::accounting> accounting_;
};

}  // namespace

std::unique_ptr<collective_channel> collective_channel::open(transport& link) {
  std::shared_ptr<transport> channel = link.open_channel();
  if (!channel) return nullptr;
  return std::unique_ptr<collective_channel>(new collective_channel(link, std::move(channel)));
}

collective_channel::collective_channel(transport& endpoint, std::shared_ptr<transport> channel)
    : endpoint_(endpoint), channel_(std::move(channel)), accounting_(std::make_shared<accounting>()),
      thread_([this] { run(); }) {}

collective_channel::~collective_channel() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  queued_.notify_all();
  channel_->interrupt("the worker's collectives in flight were closed");
  thread_.join();
  const auto closed = std::make_exception_ptr(transport_error(
      "rank " + std::to_string(channel_->rank()) + ": the worker's collectives in flight were closed"));
  for (const auto& waiting : queue_) waiting->finish(closed);
}

std::unique_ptr<collective_in_flight> collective_channel::start(std::function<void(transport&)> run) {
  auto started = std::make_shared<collective>();
  started->run = std::move(run);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(started);
  }
  queued_.notify_one();
  return std::make_unique<channel_collective>(std::move(started), accounting_);
}

double collective_channel::take_unwaited_seconds() {
  std::lock_guard lock(accounting_->mutex);
  return std::exchange(accounting_->unwaited_seconds, 0.0);
}

void collective_channel::run() {
  name_thread(thread_role::communicator, channel_->rank());  // its CPU is the worker's communication
  set_thread_track(worker_track(channel_->rank(), trace_role::channel));
  for (;;) {
    std::shared_ptr<collective> next;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (closing_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto begin = steady::now();
    std::exception_ptr failure;
    {
      const trace_span span("collective in flight");
      try {
        next->run(*channel_);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    // Counted before it is seen finished, so a wait() that returns subtracts from it.
    accounting_->add(std::chrono::duration<double>(steady::now() - begin).count());
    next->finish(failure);
  }
}

}  // namespace accord
