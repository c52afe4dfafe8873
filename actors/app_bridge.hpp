#pragma once
// The meeting point of an app-driven worker (include/accord/worker.hpp): its compute actor,
// instead of running a model on a data set, hands each micro-batch request to the app's thread
// and waits for the app's gradient, which it adds into the accumulator's sum. Everything else
// of the worker (accumulator, communicator, the algorithm's rounds) is unchanged.
//
// The parameters and the sum are where the worker keeps them: host tensors, or buffers on the
// app model's device (a resident worker). The gradient is added on the compute actor's thread,
// whose CUDA device is the worker's, while submit() waits: the app's thread never needs a
// CUDA device of accord's, and may reuse its gradient once submit() returns.
#include <accord/worker.hpp>

#include "gpu/kernels.hpp"

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

namespace accord {

class worker::state {
public:
  state(int rank, const memory_location& memory) : rank_(rank), memory_(memory) {}

  // Compute actor's thread: waits for the app's gradient of the micro-batch at stream
  // positions [first_position, +examples) and adds it into `sum`. `parameters` stay valid while
  // `owner` lives (the app may still read them after the compute actor has gone). A request
  // released before the app answered (the epoch or job ended) contributes nothing, and so does
  // one the app ended instead of answering (outcome::ended). Throws the app's failure.
  struct outcome {
    double loss = 0;
    double items = 0;
    bool ended = false;  // the app will answer no more (worker::end): nothing was added
  };
  outcome accumulate(std::shared_ptr<const void> owner, device_span<const float> parameters, std::uint64_t index,
                     std::uint64_t first_position, std::size_t examples, device_span<float> sum);
  // Compute actor's thread: a round's new parameters were swapped in.
  void new_parameters();
  // This epoch's listener to the app's gradient progress (model::listen_to_gradients for the
  // app's model: DDP's buckets), told from the compute thread, in runs of `elements`; until
  // release().
  void listen_to_gradients(std::size_t elements, std::function<void(std::size_t begin)> listener);
  // The epoch's actors are about to go: drops the request waiting for the app, if any, and
  // answers later ones at once with nothing, until open() (the next epoch's worker starts).
  void release();
  void open();
  // The job is over: next() returns nullopt from now on.
  void finish();

  // The app's side (worker's members).
  std::optional<micro_batch_request> next();
  bool wait_ready(std::chrono::milliseconds timeout);
  void submit(device_span<const float> gradient, double items, double loss);
  void gradients_final_from(device_span<const float> gradient, std::size_t begin);
  void on_parameters(std::function<void(std::span<const float>, std::uint64_t)> callback);
  void fail(const std::string& why);
  void end();
  int rank() const { return rank_; }

private:
  // Compute actor's thread, the lock released: sum_ += gradient over [begin, end) on sum_'s
  // memory.
  void add_gradient(device_span<const float> gradient, std::size_t begin, std::size_t end);
  // add_gradient, then the progress listener told that [begin, end) is in, with `lock` released
  // meanwhile; what failed, if anything.
  std::exception_ptr add_unlocked(std::unique_lock<std::mutex>& lock, device_span<const float> gradient,
                                  std::size_t begin, std::size_t end);
  // The app's gradient (submit's or a progress report's) for the request handed out, checked
  // (mutex_ held): std::invalid_argument naming `call` for no request, or a gradient of the
  // wrong memory or size. False when accord no longer waits for that request (released: the
  // epoch or job ended while the app computed).
  bool take_gradient(device_span<const float> gradient, const char* call);
  // The request handed out is still the one accord waits for (mutex_ held).
  bool current() const { return pending_ && !answered_ && handed_serial_ == serial_; }
  // next() answers at once (mutex_ held).
  bool answerable() const { return (pending_ && !answered_) || finished_ || ended_ || !failure_.empty(); }

  const int rank_;
  const memory_location memory_;  // app_model::memory
  std::mutex mutex_;
  std::condition_variable changed_;
  // The request being served: what its parameters live in stays alive while the app reads them.
  std::shared_ptr<const void> parameters_owner_;
  device_span<float> sum_;
  micro_batch_request request_;
  bool pending_ = false;    // accord waits for the app's answer to request_
  std::uint64_t serial_ = 0;         // of request_
  bool handed_out_ = false;          // next() returned a request the app has not answered
  std::uint64_t handed_serial_ = 0;  // which one
  bool answered_ = false;
  outcome answer_;
  device_span<const float> gradient_;  // of the answer or a progress report, until added
  // The request's gradient [reported_from_, end) is final (gradients_final_from); the compute
  // thread has added [added_from_, end) of it into the sum.
  std::size_t reported_from_ = 0;
  std::size_t added_from_ = 0;
  std::size_t progress_elements_ = 0;
  std::function<void(std::size_t)> progress_listener_;
  std::uint64_t added_serial_ = 0;     // the last request whose answer was added
  std::unique_ptr<kernels> adder_;  // the compute actor's, for sum_'s memory
  bool closed_ = false;
  bool finished_ = false;
  bool ended_ = false;  // the app called end()
  std::string failure_;
  std::uint64_t version_ = 0;       // of the compute actor's parameters
  std::uint64_t seen_version_ = 0;  // the app's callback has heard of
  std::function<void(std::span<const float>, std::uint64_t)> on_parameters_;
};

}  // namespace accord
