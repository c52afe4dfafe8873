#pragma once
// The job's gradients handed out one at a time by rank 0's process, for the asynchronous
// topologies between processes (actors/peer_exchange.hpp): a worker claims the next one when it
// is ready, so fast workers compute more of them, as the workers of one process do
// (asynchronous_workers' own count). Gradient t reads the data of rank t mod N at step t / N.
#include "actors/peer_exchange.hpp"

#include <condition_variable>
#include <mutex>
#include <optional>

namespace accord {

class gradient_tickets {
public:
  // `total`: the job's gradients (steps × workers).
  gradient_tickets(int rank, std::uint64_t total) : rank_(rank), total_(total) {}
  // The message kinds it serves; register them with the exchange, then attach it.
  std::vector<peer_exchange::kind> kinds();
  void attach(peer_exchange& exchange) { exchange_ = &exchange; }
  // The next gradient for this process's worker; nothing once all are handed out or after fail().
  std::optional<std::uint64_t> claim();
  // Wakes a waiting claim for good (the exchange failed or the job stops).
  void fail();

private:
  static constexpr std::uint64_t claim_tag = 101, ticket_tag = 102;
  struct ticket {
    std::uint64_t number = 0;
    std::uint64_t valid = 0;  // 0: every gradient is handed out
  };
  std::optional<std::uint64_t> hand_out();  // rank 0, with mutex_ held

  int rank_;
  std::uint64_t total_;
  peer_exchange* exchange_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t next_ = 0;          // rank 0: handed out so far
  std::optional<ticket> answer_;    // to this worker's claim
  bool failed_ = false;
};

}  // namespace accord
