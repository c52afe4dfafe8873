#pragma once
// The meeting point of an app-driven worker (include/accord/worker.hpp): its compute actor,
// instead of running a model on a data set, hands each micro-batch request to the app's thread
// and waits for the app's gradient, which it adds into the accumulator's sum. Everything else
// of the worker (accumulator, communicator, the algorithm's rounds) is unchanged.
#include <accord/worker.hpp>

#include "algorithms/round_state.hpp"

#include <condition_variable>
#include <mutex>

namespace accord {

class worker::state {
public:
  explicit state(int rank) : rank_(rank) {}

  // Compute actor's thread: waits for the app's gradient of the micro-batch at stream
  // positions [first_position, +examples) and adds it into `sum`. A request released before
  // the app answered (the epoch or job ended) contributes nothing. Throws the app's failure.
  struct outcome {
    double loss = 0;
    double items = 0;
  };
  outcome accumulate(const tensor& parameters, std::uint64_t index, std::uint64_t first_position,
                     std::size_t examples, std::vector<float>& sum);
  // Compute actor's thread: a round's new parameters were swapped in.
  void new_parameters();
  // The epoch's actors are about to go: drops the request waiting for the app, if any, and
  // answers later ones at once with nothing, until open() (the next epoch's worker starts).
  void release();
  void open();
  // The job is over: next() returns nullopt from now on.
  void finish();

  // The app's side (worker's members).
  std::optional<micro_batch_request> next();
  void submit(std::span<const float> gradient, double items, double loss);
  void on_parameters(std::function<void(std::span<const float>, std::uint64_t)> callback);
  void fail(const std::string& why);
  int rank() const { return rank_; }

private:
  const int rank_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // The request being served: its parameters stay alive while the app reads them.
  tensor parameters_;
  std::vector<float>* sum_ = nullptr;
  micro_batch_request request_;
  bool pending_ = false;    // accord waits for the app's answer to request_
  std::uint64_t serial_ = 0;         // of request_
  bool handed_out_ = false;          // next() returned a request the app has not answered
  std::uint64_t handed_serial_ = 0;  // which one
  bool answered_ = false;
  outcome answer_;
  bool closed_ = false;
  bool finished_ = false;
  std::string failure_;
  std::uint64_t version_ = 0;       // of the compute actor's parameters
  std::uint64_t seen_version_ = 0;  // the app's callback has heard of
  std::function<void(std::span<const float>, std::uint64_t)> on_parameters_;
};

}  // namespace accord
