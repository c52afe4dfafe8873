#include "transport/inproc.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace accord {
namespace detail {

enum class rank_state { alive, closed, failed };

struct inproc_hub {
  using clock = inproc_transport::clock;
  struct message {
    std::vector<std::byte> payload;
    clock::time_point arrival;
  };
  // One per receiving rank: its pending messages keyed by (sender, tag).
  struct mailbox {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::pair<int, std::uint64_t>, std::deque<message>> queues;
  };

  inproc_hub(int world, link_layout links, std::chrono::milliseconds receive_timeout)
      : world(world), links(links), receive_timeout(receive_timeout), mailboxes(world), states(world),
        handed_out(world, false) {
    for (auto& box : mailboxes) box = std::make_unique<mailbox>();
  }

  // Publishes a state change and wakes every waiting recv so it re-checks its peer. States
  // are stored before each mailbox lock is taken, so a waiter cannot miss the change.
  void set_state(int rank, rank_state state) {
    states[rank].store(state);
    for (int receiver = 0; receiver < world; ++receiver) {
      mailbox& box = *mailboxes[receiver];
      {
        std::lock_guard lock(box.mutex);
        if (state == rank_state::failed) {
          // A crash loses what was still in flight from the rank and what waited for it.
          if (receiver == rank) box.queues.clear();
          std::erase_if(box.queues, [&](const auto& entry) { return entry.first.first == rank; });
        }
      }
      box.changed.notify_all();
    }
  }

  rank_state state(int rank) const { return states[rank].load(); }

  const int world;
  const link_layout links;
  const std::chrono::milliseconds receive_timeout;
  std::vector<std::unique_ptr<mailbox>> mailboxes;
  std::vector<std::atomic<rank_state>> states;
  std::mutex handed_out_mutex;
  std::vector<bool> handed_out;
};

// A rank's links (when each is free again) and its byte counts, shared by its endpoint and the
// endpoint's channel.
struct inproc_rank_links {
  std::mutex mutex;  // guards the links' times: both endpoints' threads send
  // The outgoing links (inside its group, across groups) are busy until then.
  inproc_transport::clock::time_point link_free{}, across_link_free{};
  // Atomic so that a metrics thread may read stats() while the communicator sends.
  std::atomic<std::uint64_t> bytes_sent{0}, bytes_received{0}, messages_sent{0};
};

}  // namespace detail

namespace {

using detail::rank_state;

std::string down_reason(rank_state state) {
  return state == rank_state::failed ? "failed" : "closed its endpoint";
}

}  // namespace

inproc_fabric::inproc_fabric(int world, link_model link, std::chrono::milliseconds receive_timeout)
    : inproc_fabric(world, link_layout{link, link, 0}, receive_timeout) {}

inproc_fabric::inproc_fabric(int world, link_layout links, std::chrono::milliseconds receive_timeout) {
  if (world < 1) throw std::invalid_argument("inproc_fabric: world size " + std::to_string(world) + " is not positive");
  if (links.group_size < 0)
    throw std::invalid_argument("inproc_fabric: group size " + std::to_string(links.group_size) + " is negative");
  hub_ = std::make_shared<detail::inproc_hub>(world, links, receive_timeout);
}

int inproc_fabric::size() const { return hub_->world; }

const link_model& inproc_fabric::link() const { return hub_->links.inside; }

std::unique_ptr<inproc_transport> inproc_fabric::endpoint(int rank) {
  if (rank < 0 || rank >= hub_->world)
    throw std::invalid_argument("inproc_fabric: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(hub_->world) + ")");
  std::lock_guard lock(hub_->handed_out_mutex);
  if (hub_->handed_out[rank])
    throw std::logic_error("inproc_fabric: the endpoint of rank " + std::to_string(rank) + " was already handed out");
  hub_->handed_out[rank] = true;
  return std::unique_ptr<inproc_transport>(
      new inproc_transport(hub_, rank, std::make_shared<detail::inproc_rank_links>(), 0));
}

std::vector<std::unique_ptr<transport>> inproc_fabric::endpoints() {
  std::vector<std::unique_ptr<transport>> all;
  for (int rank = 0; rank < hub_->world; ++rank) all.push_back(endpoint(rank));
  return all;
}

void inproc_fabric::fail(int rank) {
  if (rank < 0 || rank >= hub_->world)
    throw std::invalid_argument("inproc_fabric::fail: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(hub_->world) + ")");
  hub_->set_state(rank, rank_state::failed);
}

inproc_transport::inproc_transport(std::shared_ptr<detail::inproc_hub> hub, int rank,
                                   std::shared_ptr<detail::inproc_rank_links> rank_links, std::uint64_t tag_space)
    : hub_(std::move(hub)), rank_(rank), rank_links_(std::move(rank_links)), tag_space_(tag_space) {}

inproc_transport::~inproc_transport() {
  // A channel going changes nothing for the rank: its endpoint is the one that closes.
  if (tag_space_ == 0 && hub_->state(rank_) == rank_state::alive) hub_->set_state(rank_, rank_state::closed);
}

std::shared_ptr<transport> inproc_transport::make_channel() {
  return std::shared_ptr<transport>(new inproc_transport(hub_, rank_, rank_links_, channel_tag_bit));
}

int inproc_transport::size() const { return hub_->world; }

void inproc_transport::interrupt(const std::string& why) {
  transport::interrupt(why);
  // Taking the lock orders the flag before a waiting recv's next check of its condition.
  auto& box = *hub_->mailboxes[rank_];
  { std::lock_guard lock(box.mutex); }
  box.changed.notify_all();
}

void inproc_transport::check_peer(int peer, const char* operation) const {
  throw_if_interrupted();
  if (hub_->state(rank_) != rank_state::alive)
    throw transport_error("rank " + std::to_string(rank_) + ": cannot " + operation + ", this rank " +
                          down_reason(hub_->state(rank_)));
  if (peer < 0 || peer >= hub_->world)
    throw transport_error("rank " + std::to_string(rank_) + ": cannot " + operation + " peer " +
                          std::to_string(peer) + ", outside [0, " + std::to_string(hub_->world) + ")");
}

void inproc_transport::send(int peer, std::uint64_t tag, std::span<const std::byte> data) {
  check_peer(peer, "send to");
  // The sender's link serialises its messages; the receiver sees the wire time, the sender
  // does not wait (a buffered NIC).
  const bool across = hub_->links.crosses_groups(rank_, peer);
  const link_model& link = across ? hub_->links.across : hub_->links.inside;
  detail::inproc_hub::message message{{data.begin(), data.end()}, {}};
  {
    std::lock_guard lock(rank_links_->mutex);
    clock::time_point& free = across ? rank_links_->across_link_free : rank_links_->link_free;
    free = std::max(clock::now(), free) + link.wire_time(data.size());
    message.arrival = free + link.latency();
  }

  auto& box = *hub_->mailboxes[peer];
  {
    std::lock_guard lock(box.mutex);
    // Checked under the lock: a failure marked before it drops this message, one marked
    // after it finds and drops it.
    if (const rank_state state = hub_->state(peer); state != rank_state::alive)
      throw transport_error("rank " + std::to_string(rank_) + ": cannot send " + describe_tag(tag) + " to peer " +
                            std::to_string(peer) + ", which " + down_reason(state));
    box.queues[{rank_, tag | tag_space_}].push_back(std::move(message));
  }
  box.changed.notify_all();
  rank_links_->bytes_sent += data.size();
  ++rank_links_->messages_sent;
}

void inproc_transport::recv(int peer, std::uint64_t tag, std::span<std::byte> data) {
  check_peer(peer, "receive from");
  auto& box = *hub_->mailboxes[rank_];
  const std::pair key{peer, tag | tag_space_};
  detail::inproc_hub::message message;
  {
    std::unique_lock lock(box.mutex);
    const auto settled = [&] {
      return box.queues.contains(key) || hub_->state(peer) != rank_state::alive ||
             hub_->state(rank_) != rank_state::alive || interruption().raised();
    };
    if (hub_->receive_timeout == std::chrono::milliseconds::zero())
      box.changed.wait(lock, settled);
    else if (!box.changed.wait_for(lock, hub_->receive_timeout, settled))
      throw transport_error("rank " + std::to_string(rank_) + ": no message with " + describe_tag(tag) +
                            " from peer " + std::to_string(peer) + " within " +
                            std::to_string(hub_->receive_timeout.count()) + " ms");
    throw_if_interrupted();
    if (const rank_state state = hub_->state(rank_); state != rank_state::alive)
      throw transport_error("rank " + std::to_string(rank_) + ": cannot receive, this rank " + down_reason(state));
    const auto queue = box.queues.find(key);
    if (queue == box.queues.end())
      throw transport_error("rank " + std::to_string(rank_) + ": peer " + std::to_string(peer) + " " +
                            down_reason(hub_->state(peer)) + " while this rank waited for " + describe_tag(tag));
    message = std::move(queue->second.front());
    queue->second.pop_front();
    if (queue->second.empty()) box.queues.erase(queue);
  }
  if (message.payload.size() != data.size())
    throw transport_error("rank " + std::to_string(rank_) + ": peer " + std::to_string(peer) + " sent " +
                          std::to_string(message.payload.size()) + " bytes with " + describe_tag(tag) +
                          ", expected " + std::to_string(data.size()));
  std::this_thread::sleep_until(message.arrival);
  if (!data.empty()) std::memcpy(data.data(), message.payload.data(), data.size());
  last_arrival_ = message.arrival;
  rank_links_->bytes_received += data.size();
}

transfer_stats inproc_transport::stats() const {
  return {rank_links_->bytes_sent.load(std::memory_order_relaxed), rank_links_->bytes_received.load(std::memory_order_relaxed),
          rank_links_->messages_sent.load(std::memory_order_relaxed)};
}

}  // namespace accord
