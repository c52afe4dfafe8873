#pragma once
// The in-process transport: N ranks as threads of one process. A message is copied once into
// the receiver's mailbox (matched on sender and tag, FIFO per sender and tag) and once out of
// it, so sends never wait for the receiver. An optional link model delays delivery as a real
// network would, and a rank can be failed to emulate a crash. An endpoint's channel
// (transport::open_channel) is a second endpoint of the same rank whose tags carry
// channel_tag_bit: it shares the rank's mailbox, outgoing links and byte counts.
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "transport/link_model.hpp"
#include "transport/transport.hpp"

namespace accord {

// Links of a world in groups of `group_size` consecutive ranks: `inside` within a group,
// `across` between groups, each rank with one outgoing link of each kind (group_size 0: one
// group, every link `inside`).
struct link_layout {
  // No default: `inproc_fabric(world, {}, timeout)` keeps meaning an unlimited link_model.
  link_layout(link_model inside, link_model across, int group_size)
      : inside(inside), across(across), group_size(group_size) {}
  link_model inside;
  link_model across;
  int group_size = 0;
  bool crosses_groups(int from, int to) const { return group_size > 0 && from / group_size != to / group_size; }
};

namespace detail {
struct inproc_hub;
struct inproc_rank_links;
}
class inproc_transport;

// Creates the connected endpoints of one in-process world and controls its failures.
// Endpoints share the fabric's state, so they may outlive the fabric object.
class inproc_fabric {
public:
  // receive_timeout: a recv that waits longer throws a transport_error naming the peer and the
  // tag; zero waits for ever.
  explicit inproc_fabric(int world, link_model link = {},
                         std::chrono::milliseconds receive_timeout = std::chrono::milliseconds::zero());
  // A link model per edge: one inside groups, another between them.
  inproc_fabric(int world, link_layout links,
                std::chrono::milliseconds receive_timeout = std::chrono::milliseconds::zero());

  int size() const;
  const link_model& link() const;

  // The endpoint of `rank`, handed out once (it owns that rank's link and byte counters).
  std::unique_ptr<inproc_transport> endpoint(int rank);
  // All endpoints not handed out yet, in rank order; the shape the actors and tests want.
  std::vector<std::unique_ptr<transport>> endpoints();

  // Emulates a crash of `rank`: the messages it sent that are not yet received are lost,
  // every recv from it (waiting or later) and every send to it throws transport_error, and its
  // own endpoint throws on every call.
  void fail(int rank);

private:
  std::shared_ptr<detail::inproc_hub> hub_;
};

class inproc_transport final : public transport {
public:
  using clock = std::chrono::steady_clock;

  // Closing an endpoint is a graceful leave: messages it already sent stay receivable, then
  // recvs from it throw transport_error instead of waiting for ever.
  ~inproc_transport() override;
  inproc_transport(const inproc_transport&) = delete;
  inproc_transport& operator=(const inproc_transport&) = delete;

  int rank() const override { return rank_; }
  int size() const override;
  void send(int peer, std::uint64_t tag, std::span<const std::byte> data) override;
  void recv(int peer, std::uint64_t tag, std::span<std::byte> data) override;
  transfer_stats stats() const override;
  // Also wakes a recv waiting on this rank's mailbox. Unlike inproc_fabric::fail, peers are
  // not told: their recvs from this rank keep waiting until it closes or fails.
  void interrupt(const std::string& why) override;

  // When the link model delivered the last message this endpoint received (the send time
  // itself on an unlimited link); recv never returns before it.
  clock::time_point last_arrival() const { return last_arrival_; }

  // Set in every tag a channel sends and receives with; the endpoint's own tags never have it.
  static constexpr std::uint64_t channel_tag_bit = 1ull << 62;

protected:
  std::shared_ptr<transport> make_channel() override;

private:
  friend class inproc_fabric;
  inproc_transport(std::shared_ptr<detail::inproc_hub> hub, int rank, std::shared_ptr<detail::inproc_rank_links> rank_links,
                   std::uint64_t tag_space);
  void check_peer(int peer, const char* operation) const;

  std::shared_ptr<detail::inproc_hub> hub_;
  int rank_;
  // The rank's outgoing links and byte counts, shared with its channel.
  std::shared_ptr<detail::inproc_rank_links> rank_links_;
  std::uint64_t tag_space_;  // 0, or channel_tag_bit on a channel
  clock::time_point last_arrival_{};
};

}  // namespace accord
