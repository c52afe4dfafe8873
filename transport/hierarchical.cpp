#include "transport/hierarchical.hpp"

#include "transport/shard.hpp"
#include "transport/sign_vote.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

namespace accord {
namespace {

// Marks a level's tags (bits 44..46 of the 47 a UCX frame carries), so that no message of one
// level or of the flat transport can match another's.
std::uint64_t level_tag(std::uint64_t tag, std::uint64_t level) { return tag | (level << 44); }

template <class T>
std::span<const std::byte> bytes_of(std::span<T> values) {
  return std::as_bytes(values);
}
template <class T>
std::span<std::byte> writable_bytes_of(std::span<T> values) {
  return std::as_writable_bytes(values);
}

// Some ranks of a flat transport as a world of their own: member i is flat rank members[i].
class subgroup final : public transport {
public:
  subgroup(transport& flat, std::vector<int> members, std::uint64_t level)
      : flat_(flat), members_(std::move(members)), level_(level),
        rank_(static_cast<int>(std::find(members_.begin(), members_.end(), flat.rank()) - members_.begin())) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  void send(int peer, std::uint64_t tag, std::span<const std::byte> data) override {
    flat_.send(members_.at(peer), level_tag(tag, level_), data);
  }
  void recv(int peer, std::uint64_t tag, std::span<std::byte> data) override {
    flat_.recv(members_.at(peer), level_tag(tag, level_), data);
  }
  void send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                 std::uint64_t tag) override {
    flat_.send_recv(members_.at(to), out, members_.at(from), in, level_tag(tag, level_));
  }
  request post_send(int peer, std::uint64_t tag, std::span<const std::byte> data) override {
    return flat_.post_send(members_.at(peer), level_tag(tag, level_), data);
  }
  request post_recv(int peer, std::uint64_t tag, std::span<std::byte> data) override {
    return flat_.post_recv(members_.at(peer), level_tag(tag, level_), data);
  }
  void wait(request handle) override { flat_.wait(handle); }
  transfer_stats stats() const override { return flat_.stats(); }
  std::size_t ring_piece_bytes() const override { return flat_.ring_piece_bytes(); }

private:
  transport& flat_;
  std::vector<int> members_;
  std::uint64_t level_;
  int rank_;
};

// Vote counts of `count` elements as `bits` bit planes of packed_words(count) words each.
void pack_counts(std::span<const std::uint16_t> counts, int bits, std::span<std::uint64_t> planes) {
  const std::size_t words = packed_words(counts.size());
  std::fill(planes.begin(), planes.end(), 0);
  for (std::size_t i = 0; i < counts.size(); ++i)
    for (int b = 0; b < bits; ++b)
      planes[static_cast<std::size_t>(b) * words + i / 64] |= std::uint64_t{(counts[i] >> b) & 1u} << (i % 64);
}

void add_counts(std::span<const std::uint64_t> planes, int bits, std::span<std::uint16_t> counts) {
  const std::size_t words = packed_words(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i)
    for (int b = 0; b < bits; ++b)
      counts[i] += static_cast<std::uint16_t>(((planes[static_cast<std::size_t>(b) * words + i / 64] >> (i % 64)) & 1u) << b);
}

class hierarchical_transport final : public transport {
public:
  hierarchical_transport(std::shared_ptr<transport> flat, int group_size)
      : flat_(std::move(flat)), group_size_(group_size) {
    const int world = flat_->size(), me = flat_->rank();
    leader_ = me / group_size_ * group_size_;
    std::vector<int> members, leaders;
    for (int r = leader_; r < std::min(world, leader_ + group_size_); ++r) members.push_back(r);
    for (int r = 0; r < world; r += group_size_) leaders.push_back(r);
    group_sizes_.reserve(leaders.size());
    for (int r : leaders) group_sizes_.push_back(std::min(group_size_, world - r));
    inside_ = std::make_unique<subgroup>(*flat_, std::move(members), 1);
    if (me == leader_) across_ = std::make_unique<subgroup>(*flat_, std::move(leaders), 2);
  }

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  void send(int peer, std::uint64_t tag, std::span<const std::byte> data) override { flat_->send(peer, tag, data); }
  void recv(int peer, std::uint64_t tag, std::span<std::byte> data) override { flat_->recv(peer, tag, data); }
  void send_recv(int to, std::span<const std::byte> out, int from, std::span<std::byte> in,
                 std::uint64_t tag) override {
    flat_->send_recv(to, out, from, in, tag);
  }
  request post_send(int peer, std::uint64_t tag, std::span<const std::byte> data) override {
    return flat_->post_send(peer, tag, data);
  }
  request post_recv(int peer, std::uint64_t tag, std::span<std::byte> data) override {
    return flat_->post_recv(peer, tag, data);
  }
  void wait(request handle) override { flat_->wait(handle); }
  transfer_stats stats() const override { return flat_->stats(); }
  void interrupt(const std::string& why) override {
    transport::interrupt(why);
    flat_->interrupt(why);
  }
  std::size_t ring_piece_bytes() const override { return flat_->ring_piece_bytes(); }

  // The round's counts: a few doubles, one flat ring.
  void all_reduce(std::span<double> data) override { flat_->all_reduce(data); }

  void all_reduce(std::span<float> data, wire_precision precision) override {
    throw_if_interrupted();
    const std::uint64_t tag = level_tag(next_collective_tag(), 3);
    // Inside: each member owns a shard of the group's sum and hands it to the leader.
    inside_->reduce_scatter(data, precision);
    const shard mine = shard_of(data.size(), inside_->size(), inside_->rank());
    if (is_leader()) {
      for (int m = 1; m < inside_->size(); ++m) {
        const shard theirs = shard_of(data.size(), inside_->size(), m);
        flat_->recv(leader_ + m, tag, writable_bytes_of(data.subspan(theirs.begin, theirs.size())));
      }
      across_->all_reduce(data, precision);
    } else {
      flat_->send(leader_, tag, bytes_of(data.subspan(mine.begin, mine.size())));
    }
    from_leader(writable_bytes_of(data), tag);
  }

  // Every rank ends with the whole sum, so its own flat shard holds it as reduce_scatter promises.
  void reduce_scatter(std::span<float> data, wire_precision precision) override { all_reduce(data, precision); }
  void reduce_scatter_range(std::span<float> data, shard range, wire_precision precision) override {
    if (range.begin > range.end || range.end > data.size()) return transport::reduce_scatter_range(data, range, precision);
    all_reduce(data.subspan(range.begin, range.size()), precision);
  }
  // The groups' collectives run at once: nothing is left to travel.
  std::unique_ptr<range_reduction> start_reduce_scatter_range(std::span<float> data, shard range,
                                                              wire_precision precision) override {
    reduce_scatter_range(data, range, precision);
    return std::make_unique<range_reduction>();
  }

  void all_gather(std::span<float> data, wire_precision precision) override {
    throw_if_interrupted();
    const std::uint64_t tag = level_tag(next_collective_tag(), 3);
    const int world = size();
    const shard own = shard_of(data.size(), world, rank());
    round_to_wire(precision, data.subspan(own.begin, own.size()));  // the owner computes with what others get
    const auto block_of = [&](int leader, int members) {  // a group's flat shards are contiguous
      const shard first = shard_of(data.size(), world, leader), last = shard_of(data.size(), world, leader + members - 1);
      return data.subspan(first.begin, last.end - first.begin);
    };
    if (is_leader()) {
      for (int m = 1; m < inside_->size(); ++m) {
        const shard theirs = shard_of(data.size(), world, leader_ + m);
        flat_->recv(leader_ + m, tag, writable_bytes_of(data.subspan(theirs.begin, theirs.size())));
      }
      // Leaders swap their groups' blocks directly (a gather moves bytes, adds nothing).
      const auto mine = block_of(leader_, inside_->size());
      const auto sends = to_other_leaders(bytes_of(mine), tag);
      for (int g = 0; g < across_->size(); ++g)
        if (g != across_->rank()) across_->recv(g, tag, writable_bytes_of(block_of(g * group_size_, group_sizes_[g])));
      for (request r : sends) across_->wait(r);
    } else {
      flat_->send(leader_, tag, bytes_of(data.subspan(own.begin, own.size())));
    }
    from_leader(writable_bytes_of(data), tag);
  }

  void sign_majority(std::span<const std::uint64_t> signs, std::size_t count, std::uint64_t round,
                     std::span<std::uint64_t> result) override {
    check_sign_majority("hierarchical", signs, count, result);
    throw_if_interrupted();
    const std::uint64_t tag = level_tag(next_collective_tag(), 3);
    if (is_leader()) {
      const std::span<const std::uint16_t> plus = total_counts(signs, count, tag);
      const int world = size();
      pack_signs(count, [&](std::size_t i) {
        const int twice = 2 * plus[i];
        return twice == world ? tie_vote(i, round) : twice > world;
      }, result);
    } else {
      inside_->sign_counts(signs, count, scratch_counts(count));
    }
    from_leader(writable_bytes_of(result), tag);
  }

  void sign_counts(std::span<const std::uint64_t> signs, std::size_t count,
                   std::span<std::uint16_t> plus_votes) override {
    check_sign_counts("hierarchical", signs, count, plus_votes);
    throw_if_interrupted();
    const std::uint64_t tag = level_tag(next_collective_tag(), 3);
    const int bits = count_bits(size());
    planes_.resize(static_cast<std::size_t>(bits) * packed_words(count));
    if (is_leader()) {
      const std::span<const std::uint16_t> plus = total_counts(signs, count, tag);
      pack_counts(plus, bits, planes_);
    } else {
      inside_->sign_counts(signs, count, scratch_counts(count));
    }
    from_leader(writable_bytes_of(std::span<std::uint64_t>(planes_)), tag);
    std::fill(plus_votes.begin(), plus_votes.end(), 0);
    add_counts(planes_, bits, plus_votes);
  }

private:
  bool is_leader() const { return across_ != nullptr; }

  // Posted at once and waited for by the caller after its receives: two leaders whose sends
  // wait for their receiver (UCX rendezvous) would otherwise each wait for the other.
  std::vector<request> to_other_leaders(std::span<const std::byte> data, std::uint64_t tag) {
    std::vector<request> sends;
    for (int g = 0; g < across_->size(); ++g)
      if (g != across_->rank()) sends.push_back(across_->post_send(g, tag, data));
    return sends;
  }

  // The leader's bytes to every member of its group, all in flight at once.
  void from_leader(std::span<std::byte> data, std::uint64_t tag) {
    if (is_leader()) {
      std::vector<request> sends;
      for (int m = 1; m < inside_->size(); ++m) sends.push_back(flat_->post_send(leader_ + m, tag, data));
      for (request r : sends) flat_->wait(r);
    } else {
      flat_->recv(leader_, tag, data);
    }
  }

  std::span<std::uint16_t> scratch_counts(std::size_t count) {
    counts_.assign(count, 0);
    return counts_;
  }

  // Leaders: the group's counts (counted inside), then every other group's as packed bits, summed
  // in group order: every leader holds the same totals.
  std::span<const std::uint16_t> total_counts(std::span<const std::uint64_t> signs, std::size_t count,
                                              std::uint64_t tag) {
    std::span<std::uint16_t> plus = scratch_counts(count);
    inside_->sign_counts(signs, count, plus);
    const int bits = count_bits(group_size_);
    const std::size_t words = static_cast<std::size_t>(bits) * packed_words(count);
    std::vector<std::uint64_t> mine(words), theirs(words);
    pack_counts(plus, bits, mine);
    const auto sends = to_other_leaders(bytes_of(std::span<const std::uint64_t>(mine)), tag);
    std::fill(plus.begin(), plus.end(), 0);
    for (int g = 0; g < across_->size(); ++g) {
      if (g == across_->rank()) {
        add_counts(mine, bits, plus);
      } else {
        across_->recv(g, tag, writable_bytes_of(std::span<std::uint64_t>(theirs)));
        add_counts(theirs, bits, plus);
      }
    }
    for (request r : sends) across_->wait(r);
    return plus;
  }

  std::shared_ptr<transport> flat_;
  int group_size_;
  int leader_ = 0;
  std::vector<int> group_sizes_;        // members of each group, in leader order
  std::unique_ptr<subgroup> inside_;    // this rank's group
  std::unique_ptr<subgroup> across_;    // the leaders (leaders only)
  std::vector<std::uint16_t> counts_;   // vote counts, reused between votes
  std::vector<std::uint64_t> planes_;
};

}  // namespace

bool subgroup_members_fit(std::span<const int> members, int world, int rank) {
  return !members.empty() && members.front() >= 0 && members.back() < world &&
         std::ranges::adjacent_find(members, std::greater_equal<>()) == members.end() &&
         std::ranges::binary_search(members, rank);
}

std::unique_ptr<transport> make_subgroup_transport(transport& flat, std::vector<int> members, std::uint64_t level) {
  if (level < 1 || level > 7) throw std::invalid_argument("subgroup transport: level " + std::to_string(level) + " is not in 1..7");
  if (!subgroup_members_fit(members, flat.size(), flat.rank()))
    throw std::invalid_argument("subgroup transport: the members are not ascending ranks of the " +
                                std::to_string(flat.size()) + " holding rank " + std::to_string(flat.rank()));
  return std::make_unique<subgroup>(flat, std::move(members), level);
}

std::unique_ptr<transport> make_hierarchical_transport(std::shared_ptr<transport> flat, int group_size) {
  if (group_size < 1)
    throw std::invalid_argument("hierarchical transport: group size " + std::to_string(group_size) + " is not positive");
  return std::make_unique<hierarchical_transport>(std::move(flat), group_size);
}

}  // namespace accord
