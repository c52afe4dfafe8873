#pragma once
// DDP's gradient buckets (job_config::bucket_cap_mb, torch DDP's bucket_cap_mb): while backward
// runs on a synchronous round's last micro-batch, the model reports how far its gradients are
// final (model::listen_to_gradients, from the last parameters towards the first); each run of at
// least a bucket's worth goes to the communicator at once, which reduce-scatters it while
// backward goes on. Plain C++: the accumulator arms the feed, the model's listener drives it on
// the compute thread, and `send` (a message to the communicator) takes the buckets.
#include "algorithms/round_state.hpp"
#include "transport/shard.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace accord {

// Elements in a bucket of `cap_mb` MB of fp32 gradients (at least 1); 0 for 0 (no buckets).
std::size_t bucket_elements(double cap_mb);
// The first bucket (the last gradients backward finishes first) holds at most 1 MB, as torch
// DDP's: the first round starts early in backward, even when the cap exceeds the model.
std::size_t first_bucket_elements(std::size_t elements_per_bucket);

class bucket_feed {
public:
  using send_function = std::function<void(std::uint64_t round, shard range, const tensor& buffer)>;
  bucket_feed(std::size_t elements_per_bucket, std::size_t total, send_function send);

  // The next micro-batch is `round`'s last and adds into `buffer`: its finished gradients go out.
  void arm(std::uint64_t round, tensor buffer);
  // Its gradient is back: later micro-batches' reports are ignored. What was not handed out
  // is reduced by the round itself.
  void disarm();
  // The model's listener: [begin, total) is final. Hands out each bucket that is, in order from
  // the end. Buckets are cut at fixed places (the first bucket from the end, then a bucket's
  // worth apart, the rest at the start) whatever the reports: every worker's buckets pair up in the collectives however
  // its backward's progress was reported (an app's reports coalesce on a busy compute thread).
  // Ignored unless armed.
  void final_from(std::size_t begin);

private:
  std::size_t elements_per_bucket_;
  std::size_t first_bucket_;
  std::size_t total_;
  send_function send_;
  std::optional<std::uint64_t> round_;
  tensor buffer_;
  std::size_t unsent_end_ = 0;
};

}  // namespace accord
