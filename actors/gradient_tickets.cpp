#include "actors/gradient_tickets.hpp"

namespace accord {
namespace {
struct no_header {
  std::uint64_t unused = 0;
};
}  // namespace

std::vector<peer_exchange::kind> gradient_tickets::kinds() {
  return {
      {claim_tag, [](int) { return sizeof(no_header); },
       [this](int from, std::span<const std::byte>) {
         std::optional<std::uint64_t> t;
         {
           std::lock_guard lock(mutex_);
           t = hand_out();
         }
         exchange_->send(from, ticket_tag, message_of(ticket{t.value_or(0), t ? 1u : 0u}));
       }},
      {ticket_tag, [](int) { return sizeof(ticket); },
       [this](int, std::span<const std::byte> message) {
         std::lock_guard lock(mutex_);
         answer_ = header_of<ticket>(message);
         changed_.notify_all();
       }},
  };
}

std::optional<std::uint64_t> gradient_tickets::hand_out() {
  if (next_ >= total_) return std::nullopt;
  return next_++;
}

std::optional<std::uint64_t> gradient_tickets::claim() {
  {
    std::lock_guard lock(mutex_);
    if (failed_) return std::nullopt;
    if (rank_ == 0) return hand_out();
    answer_.reset();
  }
  exchange_->send(0, claim_tag, message_of(no_header{}));
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return answer_ || failed_; });
  if (!answer_ || !answer_->valid) return std::nullopt;
  return answer_->number;
}

void gradient_tickets::fail() {
  {
    std::lock_guard lock(mutex_);
    failed_ = true;
  }
  changed_.notify_all();
}

}  // namespace accord
