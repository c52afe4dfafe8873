#pragma once
// The job's gradients handed out one at a time by rank 0's process, for the asynchronous
// topologies between processes (topologies/asynchronous/peer_exchange.hpp): a worker claims the next one when it
// is ready, so fast workers compute more of them, as the workers of one process do
// (asynchronous_workers' own count). Gradient t reads the data of rank t mod N at step t / N.
//
// In an elastic job the hand-out stops at kept steps: every --keep-interval steps, and at the
// step after which a waiting membership change ends the epoch. Every process's claim there is
// answered "keep" instead of a gradient; each keeps its state (the topology's keep), says so,
// and only once all have kept does the hand-out go on (or end, for a change). So a kept step is
// a consistent cut: every gradient before it applied everywhere, none after it begun.
#include "topologies/asynchronous/workers.hpp"
#include "topologies/asynchronous/peer_exchange.hpp"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>

namespace accord {

// Where an elastic epoch's hand-out stops (rank 0's; the other processes ignore it).
struct ticket_holds {
  std::uint64_t first_step = 0;     // job steps before this epoch
  std::uint64_t keep_interval = 0;  // keep after every job step that is a multiple (0: none)
  // Whether a membership change waits for this epoch to end.
  std::function<bool()> change_waiting;
  // The epoch now ends after this job step (rank 0: a change, before any gradient of the next is
  // handed out; every process: when told there are no more gradients).
  std::function<void(std::uint64_t steps)> on_end;
};

class gradient_tickets {
public:
  // The gradients of `workers`' run: one per process and step from setup.first_step on; the
  // holds of setup.keep (an elastic job), which end the epoch early through workers.end_after.
  gradient_tickets(int rank, asynchronous_workers& workers);
  // The message kinds it serves; register them with the exchange, then attach it.
  std::vector<peer_exchange::kind> kinds();
  void attach(peer_exchange& exchange) { exchange_ = &exchange; }
  // The next gradient for this process's worker; nothing once all are handed out or after
  // fail(). At a kept step, once every process stopped there (none has an exchange in flight),
  // first calls `keep(boundary)` (the epoch's gradients before it are all delivered) and tells
  // rank 0, then waits for the others' keeps.
  std::optional<std::uint64_t> claim(const std::function<void(std::uint64_t boundary)>& keep = {});
  // Rank 0: whether the epoch's gradients before `boundary` were kept (waits while that keep
  // runs); false when it is not a kept step or after fail().
  bool kept_at(std::uint64_t boundary);
  // Wakes a waiting claim for good (the exchange failed or the job stops).
  void fail();

private:
  static constexpr std::uint64_t claim_tag = 101, ticket_tag = 102, kept_tag = 103;
  enum class answer_kind : std::uint64_t { none = 0, gradient = 1, keep = 2 };
  struct ticket {
    std::uint64_t number = 0;  // a gradient, the boundary to keep at, or (none) where the hand-out ended
    answer_kind kind = answer_kind::none;
  };
  using answers = std::vector<std::pair<int, ticket>>;
  // Rank 0, with mutex_ held: the answers `from`'s claim brings about (none while it is parked at a hold).
  void hand_out(int from, answers& out);
  void send_answers(const answers& out);  // rank 0, without mutex_
  void on_kept();                         // rank 0
  std::optional<std::uint64_t> next_hold(std::uint64_t after) const;

  int rank_, workers_;
  std::uint64_t total_;
  std::optional<ticket_holds> holds_;
  peer_exchange* exchange_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Rank 0's hand-out.
  std::uint64_t next_ = 0;
  std::optional<std::uint64_t> hold_;  // the boundary the hand-out stops at next
  bool ended_ = false;                 // a change moved total_ to the end of a step
  std::set<int> at_hold_;              // processes stopped at hold_
  int kept_ = 0;                       // of them, those that kept
  std::vector<int> parked_;            // claims waiting at hold_
  std::set<std::uint64_t> kept_boundaries_;
  // This process's claim.
  std::optional<ticket> answer_;
  bool failed_ = false;
};

}  // namespace accord
