#include "topologies/asynchronous/peer_exchange.hpp"

#include "observe/thread_cpu.hpp"

#include <algorithm>
#include <chrono>

namespace accord {

peer_exchange::peer_exchange(std::shared_ptr<transport> link, std::vector<kind> kinds,
                             std::function<void(const std::string&)> on_failure)
    : link_(std::move(link)), kinds_(std::move(kinds)), on_failure_(std::move(on_failure)), rank_(link_->rank()),
      size_(link_->size()) {}

void peer_exchange::start() {
  thread_ = std::thread([this] {
    name_thread(thread_role::communicator, rank_);
    run();
  });
}

peer_exchange::~peer_exchange() {
  stop("the exchange ended");
  if (thread_.joinable()) thread_.join();
}

void peer_exchange::send(int to, std::uint64_t tag, std::vector<std::byte> message) {
  {
    std::lock_guard lock(mutex_);
    outbox_.push_back({to, tag, std::move(message)});
  }
  changed_.notify_all();
}

std::optional<std::string> peer_exchange::finish() {
  {
    std::lock_guard lock(mutex_);
    finishing_ = true;
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  return failure_;
}

void peer_exchange::stop(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (!stopped_) stopped_ = why;
  }
  link_->interrupt(why);  // a wait in progress returns
}

void peer_exchange::run() {
  try {
    serve();
    cancel_receives("the exchange finished");
  } catch (const std::exception& e) {
    cancel_receives(e.what());
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;  // stopped from outside: not this exchange's failure
      failure_ = e.what();
      stopped_ = e.what();
    }
    on_failure_(e.what());
  }
}

// An interrupted wait abandons every request in flight (receives stop writing into their
// buffers); a handle already waited for (a failure between a wait and the repost) is skipped.
void peer_exchange::cancel_receives(const std::string& why) {
  link_->interrupt(why);
  for (const receive& r : receives_) {
    try {
      link_->wait(r.handle);
    } catch (const transport_error&) {
      break;
    } catch (const std::logic_error&) {
    }
  }
}

void peer_exchange::serve() {
  const std::size_t bye = kinds_.size();  // the kind index of the peers' closing notices
  const auto post = [&](receive& r) {
    r.handle = link_->post_recv(r.from, r.kind == bye ? bye_tag : kinds_[r.kind].tag, r.buffer);
  };
  for (int from = 0; from < size_; ++from)
    for (std::size_t k = 0; k <= bye && from != rank_; ++k) {
      receives_.push_back({from, k, std::vector<std::byte>(k == bye ? sizeof(std::uint64_t) : kinds_[k].size(from)), 0});
      post(receives_.back());
    }
  const auto kind_of = [&](std::uint64_t tag) -> const kind& {
    return *std::find_if(kinds_.begin(), kinds_.end(), [&](const kind& k) { return k.tag == tag; });
  };
  int byes = 0;             // peers that said they are done
  bool said_bye = false;
  auto idle = std::chrono::microseconds(0);
  for (;;) {
    std::vector<outgoing> queued;
    bool finishing = false;
    {
      std::lock_guard lock(mutex_);
      if (stopped_) throw transport_error(*stopped_);
      queued.swap(outbox_);
      finishing = finishing_;
    }
    bool busy = !queued.empty();
    for (outgoing& o : queued) {
      if (o.to == rank_) {
        kind_of(o.tag).on_message(o.to, o.message);
        continue;
      }
      sends_.push_back({std::move(o.message), 0});
      sends_.back().handle = link_->post_send(o.to, o.tag, sends_.back().message);
    }
    for (receive& r : receives_) {
      if (r.kind == bye && r.handle == done_handle) continue;
      if (!link_->settled(r.handle)) continue;
      link_->wait(r.handle);
      busy = true;
      if (r.kind == bye) {
        ++byes;
        r.handle = done_handle;
        continue;
      }
      kinds_[r.kind].on_message(r.from, r.buffer);
      post(r);
    }
    std::erase_if(sends_, [&](sending& s) {
      if (!link_->settled(s.handle)) return false;
      link_->wait(s.handle);
      busy = true;
      return true;
    });
    if (finishing && sends_.empty() && !said_bye) {
      std::lock_guard lock(mutex_);
      if (outbox_.empty()) {
        // Done: nothing more goes out but the notices, and nothing more is expected but theirs.
        said_bye = true;
        for (int to = 0; to < size_; ++to)
          if (to != rank_) {
            sends_.push_back({std::vector<std::byte>(sizeof(std::uint64_t)), 0});
            sends_.back().handle = link_->post_send(to, bye_tag, sends_.back().message);
          }
      }
      continue;
    }
    if (said_bye && sends_.empty()) return close(byes);
    // Polling: back off while nothing happens (up to 1 ms), at once again when something did.
    idle = busy ? std::chrono::microseconds(0)
                : std::min(std::chrono::microseconds(1000), idle * 2 + std::chrono::microseconds(10));
    if (idle.count() > 0) {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, idle, [&] { return !outbox_.empty() || stopped_ || finishing_ != finishing; });
    }
  }
}

// After this side said bye: waits for every peer's (a peer stays until it has everyone's, so
// none leaves while another still expects something of it). Only the notices are polled now:
// a peer that has them all may be gone, and its other receives fail, harmlessly.
void peer_exchange::close(int byes) {
  const std::size_t bye = kinds_.size();
  try {
    while (byes < size_ - 1) {
      bool busy = false;
      for (receive& r : receives_) {
        if (r.kind != bye || r.handle == done_handle || !link_->settled(r.handle)) continue;
        link_->wait(r.handle);
        r.handle = done_handle;
        ++byes;
        busy = true;
      }
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      if (!busy) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } catch (const transport_error&) {
    // A peer gone after its notice was sent: nothing more was expected of it.
  }
}

}  // namespace accord
