#include "topologies/asynchronous/gradient_tickets.hpp"

namespace accord {
namespace {
struct no_header {
  std::uint64_t unused = 0;
};
}  // namespace

gradient_tickets::gradient_tickets(int rank, asynchronous_workers& workers) : rank_(rank) {
  const asynchronous_setup& s = workers.setup();
  workers_ = s.workers;
  total_ = (s.steps - s.first_step) * static_cast<std::uint64_t>(s.workers);
  if (s.keep)
    holds_ = ticket_holds{s.first_step, s.keep->interval, s.keep->change_waiting,
                          [&workers](std::uint64_t steps) { workers.end_after(steps); }};
  hold_ = next_hold(0);
}

std::vector<peer_exchange::kind> gradient_tickets::kinds() {
  return {
      {claim_tag, [](int) { return sizeof(no_header); },
       [this](int from, std::span<const std::byte>) {
         answers out;
         {
           std::lock_guard lock(mutex_);
           hand_out(from, out);
         }
         send_answers(out);
       }},
      {ticket_tag, [](int) { return sizeof(ticket); },
       [this](int, std::span<const std::byte> message) {
         std::lock_guard lock(mutex_);
         answer_ = header_of<ticket>(message);
         changed_.notify_all();
       }},
      {kept_tag, [](int) { return sizeof(no_header); }, [this](int, std::span<const std::byte>) { on_kept(); }},
  };
}

std::optional<std::uint64_t> gradient_tickets::next_hold(std::uint64_t after) const {
  if (!holds_ || holds_->keep_interval == 0) return std::nullopt;
  const auto w = static_cast<std::uint64_t>(workers_);
  const std::uint64_t step = holds_->first_step + after / w;
  const std::uint64_t kept_step = (step / holds_->keep_interval + 1) * holds_->keep_interval;
  const std::uint64_t boundary = (kept_step - holds_->first_step) * w;
  if (boundary >= total_) return std::nullopt;  // the job's last step needs no keep
  return boundary;
}

void gradient_tickets::hand_out(int from, answers& out) {
  const auto w = static_cast<std::uint64_t>(workers_);
  if (holds_ && !ended_ && holds_->change_waiting && holds_->change_waiting()) {
    ended_ = true;
    // The end of a step none of whose gradients is complete yet (so its report is still to
    // come and can say the epoch ends there), or the keep already under way.
    const std::uint64_t end = hold_ && *hold_ == next_ ? next_ : (next_ / w + 1) * w;
    if (end < total_) {
      total_ = end;
      hold_ = end;
      if (holds_->on_end) holds_->on_end(holds_->first_step + end / w);
    }
  }
  if (hold_ && next_ == *hold_) {
    // Each process waits here until all have stopped (none has an exchange in flight), then all
    // keep; one that kept waits for the others' keeps.
    parked_.push_back(from);
    if (!at_hold_.insert(from).second || static_cast<int>(at_hold_.size()) < workers_) return;
    for (int p : std::exchange(parked_, {})) out.emplace_back(p, ticket{*hold_, answer_kind::keep});
    return;
  }
  if (next_ >= total_) {
    out.emplace_back(from, ticket{total_, answer_kind::none});
    return;
  }
  out.emplace_back(from, ticket{next_++, answer_kind::gradient});
}

void gradient_tickets::send_answers(const answers& out) {
  for (const auto& [to, t] : out) exchange_->send(to, ticket_tag, message_of(t));
}

void gradient_tickets::on_kept() {
  answers out;
  {
    std::lock_guard lock(mutex_);
    if (!hold_ || ++kept_ < workers_) return;
    kept_boundaries_.insert(*hold_);
    hold_ = next_hold(*hold_);
    at_hold_.clear();
    kept_ = 0;
    for (int from : std::exchange(parked_, {})) hand_out(from, out);
  }
  changed_.notify_all();
  send_answers(out);
}

std::optional<std::uint64_t> gradient_tickets::claim(const std::function<void(std::uint64_t)>& keep) {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (failed_) return std::nullopt;
      answer_.reset();
    }
    exchange_->send(0, claim_tag, message_of(no_header{}));
    ticket t;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return answer_ || failed_; });
      if (!answer_) return std::nullopt;
      t = *answer_;
    }
    if (t.kind == answer_kind::gradient) return t.number;
    if (t.kind == answer_kind::none) {
      // Where the hand-out ended, which a change may have brought forward: every process's run ends there.
      if (holds_ && holds_->on_end) holds_->on_end(holds_->first_step + t.number / static_cast<std::uint64_t>(workers_));
      return std::nullopt;
    }
    if (!keep) throw std::logic_error("gradient tickets: a kept step without a keep");
    keep(t.number);
    exchange_->send(0, kept_tag, message_of(no_header{}));
  }
}

bool gradient_tickets::kept_at(std::uint64_t boundary) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return failed_ || !hold_ || *hold_ != boundary; });
  return !failed_ && kept_boundaries_.count(boundary) > 0;
}

void gradient_tickets::fail() {
  {
    std::lock_guard lock(mutex_);
    failed_ = true;
  }
  changed_.notify_all();
}

}  // namespace accord
