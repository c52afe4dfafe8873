#pragma once
// A worker's collectives in flight (round_peers::start_all_reduce): one thread of their own
// runs them in the order started, over the transport's channel (transport::open_channel), so
// they progress while the worker computes and its communicator runs the rounds on the endpoint.
#include <accord/round.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "transport/transport.hpp"

namespace accord {

class collective_channel {
public:
  // The channel of `link`'s rank, or nullptr where its transport has none.
  static std::unique_ptr<collective_channel> open(transport& link);
  // Interrupts the collective running (it throws to whoever waits) and fails those not started.
  ~collective_channel();
  collective_channel(const collective_channel&) = delete;
  collective_channel& operator=(const collective_channel&) = delete;

  // Queues `collective` (run on the channel's transport) and returns at once.
  std::unique_ptr<collective_in_flight> start(std::function<void(transport&)> collective);
  // Whether this channel was opened on `link`.
  bool serves(const transport& link) const { return &link == &endpoint_; }
  // The seconds the collectives ran without anyone waiting for them since the last call (the
  // part of their time hidden behind compute): their durations less the time wait() blocked.
  double take_unwaited_seconds();

  struct accounting;  // shared with the handles, which may outlive the channel
  struct collective;

private:
  collective_channel(transport& endpoint, std::shared_ptr<transport> channel);
  void run();

  transport& endpoint_;
  std::shared_ptr<transport> channel_;
  std::shared_ptr<accounting> accounting_;
  std::mutex mutex_;  // guards queue_ and closing_
  std::condition_variable queued_;
  std::deque<std::shared_ptr<collective>> queue_;
  bool closing_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace accord
