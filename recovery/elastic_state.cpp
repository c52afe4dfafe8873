#include "recovery/elastic_state.hpp"
#include "recovery/parameter_hash.hpp"

#include "observe/trace.hpp"
#include "transport/shard.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

namespace accord {
namespace {

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::span<std::byte> bytes_of(std::vector<float>& v) { return std::as_writable_bytes(std::span<float>(v)); }
std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); }

// User tags of the transfer (collective tags have the top bit set).
constexpr std::uint64_t replica_tag = 0x5e7a7e00;
constexpr std::uint64_t transfer_tag = 0x5e7a7e01;

// The shard-sized arrays of a sharded state after its optimizer slots: with error feedback its
// residuals, then its master weights (they travel and are checked as slots slots and slots + 1).
std::array<const std::vector<float>*, 2> feedback_arrays(const rule_state& state) {
  if (state.feedback.empty()) return {nullptr, nullptr};
  return {&state.residual, &state.master};
}

}  // namespace

const rule_state* kept_state::shard(int index) const {
  if (index == rank) return &own;
  const std::vector<int> kept = copies_kept_by(rank, world);
  for (std::size_t k = 0; k < kept.size() && k < copies.size(); ++k)
    if (kept[k] == index && copies[k].present) return &copies[k];
  return nullptr;
}

std::vector<int> copy_holders(int shard, int world) {
  if (world < 2) return {};
  if (world == 2) return {1 - shard};
  if (shard == 0) return {1, 2};
  return {shard + 1 < world ? shard + 1 : 1};
}

std::vector<int> copies_kept_by(int rank, int world) {
  std::vector<int> kept;
  for (int shard = 0; shard < world; ++shard) {
    const std::vector<int> holders = copy_holders(shard, world);
    if (std::find(holders.begin(), holders.end(), rank) != holders.end()) kept.push_back(shard);
  }
  return kept;
}

std::uint64_t state_checksum(const rule_state& state, std::size_t parameter_count) {
  if (!state.present || state.slots == 0) return 0;
  const std::size_t shard = state.values.size() / state.slots;
  std::uint64_t sum = 0;
  const auto add = [&](std::size_t slot, const float* values, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      const std::uint64_t index = slot * parameter_count + state.begin + i;
      sum += mix((index << 32) ^ bits);
    }
  };
  for (std::size_t slot = 0; slot < state.slots; ++slot) add(slot, state.values.data() + slot * shard, shard);
  std::size_t slot = state.slots;
  for (const std::vector<float>* extra : feedback_arrays(state))
    if (extra) add(slot++, extra->data(), extra->size());
  return sum;
}

void state_keeper::keep(kept_state state) {
  std::lock_guard lock(mutex_);
  generations_[1] = std::move(generations_[0]);
  generations_[0] = std::move(state);
}

std::vector<kept_summary> state_keeper::summaries() const {
  std::lock_guard lock(mutex_);
  std::vector<kept_summary> out;
  for (const auto& g : generations_) {
    if (!g) continue;
    const std::size_t n = g->parameters.size();
    kept_summary k{g->layout, g->steps, g->rank, g->world, g->own.optimizer_step, g->own.slots,
                   hash_parameters(g->parameters), state_checksum(g->own, n), {}, {}};
    for (const int index : copies_kept_by(g->rank, g->world))
      if (const rule_state* copy = g->shard(index)) {
        k.copies.push_back(index);
        k.copy_checksums.push_back(state_checksum(*copy, n));
      }
    out.push_back(std::move(k));
  }
  return out;
}

std::optional<kept_state> state_keeper::find(std::uint64_t layout, std::uint64_t steps) const {
  std::lock_guard lock(mutex_);
  for (const auto& g : generations_)
    if (g && g->layout == layout && g->steps == steps) return g;
  return std::nullopt;
}

std::size_t state_keeper::bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t floats = 0;
  const auto of = [](const rule_state& s) { return s.values.size() + s.residual.size() + s.master.size(); };
  for (const auto& g : generations_) {
    if (!g) continue;
    floats += g->parameters.size() + of(g->own);
    for (const rule_state& copy : g->copies) floats += of(copy);
  }
  return floats * sizeof(float);
}

rule_state shard_state(const optimizer& opt, std::size_t begin) {
  const optimizer_state& state = opt.state();
  return {true, false, state.step, static_cast<std::uint32_t>(state.slots), begin, state.values, {}, {}, {}, {}};
}

void restore_shard_state(optimizer& opt, const rule_state& resume, std::size_t begin, const std::string& owner) {
  optimizer_state state = opt.state();
  if (!resume.present || resume.momentum || resume.slots != state.slots || resume.begin != begin ||
      resume.values.size() != state.values.size())
    throw std::invalid_argument("restored optimizer state does not fit " + owner + "'s shard (" +
                                std::to_string(resume.slots) + " slots from " + std::to_string(resume.begin) + ", " +
                                opt.config().kind + " needs " + std::to_string(state.slots) + " from " +
                                std::to_string(begin) + ")");
  state.step = resume.optimizer_step;
  state.values = resume.values;
  opt.restore(std::move(state));
}

std::vector<rule_state> replicate_to_buddies(transport& link, const rule_state& own, std::size_t parameter_count) {
  const int world = link.size(), rank = link.rank();
  const trace_span span("buddy copy", worker_track(rank, trace_role::communicator));
  const bool feedback = !own.feedback.empty();  // every worker of a job has them, or none
  std::vector<rule_state> copies;
  std::vector<transport::request> pending;
  const std::vector<int> sources = copies_kept_by(rank, world);
  copies.reserve(sources.size());  // the posted receives point into them
  for (const int from : sources) {
    const shard theirs = shard_of(parameter_count, world, from);
    rule_state& copy = copies.emplace_back();
    copy.present = own.present;
    copy.optimizer_step = own.optimizer_step;
    copy.slots = own.slots;
    copy.begin = theirs.begin;
    copy.feedback = own.feedback;
    copy.values.assign(std::size_t{own.slots} * theirs.size(), 0.f);
    pending.push_back(link.post_recv(from, replica_tag, bytes_of(copy.values)));
    if (!feedback) continue;
    copy.residual.assign(theirs.size(), 0.f);
    copy.master.assign(theirs.size(), 0.f);
    pending.push_back(link.post_recv(from, replica_tag, bytes_of(copy.residual)));
    pending.push_back(link.post_recv(from, replica_tag, bytes_of(copy.master)));
  }
  // Receives posted first, then every send: no order of ranks can wait on each other.
  for (const int to : copy_holders(rank, world)) {
    pending.push_back(link.post_send(to, replica_tag, bytes_of(own.values)));
    if (!feedback) continue;
    pending.push_back(link.post_send(to, replica_tag, bytes_of(own.residual)));
    pending.push_back(link.post_send(to, replica_tag, bytes_of(own.master)));
  }
  for (const transport::request r : pending) link.wait(r);
  return copies;
}

namespace {

// A topology's own state for the new epoch (none where the job's topology keeps none): what every
// worker restarts from (the parameters just transferred) and what every worker holds the same,
// which the first holder sends each rank without it (a joiner: it learns first whether there is
// any, and how much); a holder keeps its own share, a joiner starts its own afresh. Every rank
// takes part, in one order.
kept_topology transfer_topology(transport& link, const std::vector<int>& holders, const std::optional<kept_state>& held,
                                const std::vector<float>& parameters) {
  const int me = link.rank();
  const bool holding = std::find(holders.begin(), holders.end(), me) != holders.end();
  kept_topology out = holding ? held->own.topology : kept_topology{};
  for (int to = 0; to < link.size(); ++to) {
    if (std::find(holders.begin(), holders.end(), to) != holders.end()) continue;
    std::array<std::uint64_t, 2> header{};  // present, shared values
    if (holders.front() == me) {
      header = {out.present ? 1u : 0u, out.shared.size()};
      link.send(to, transfer_tag, std::as_bytes(std::span<const std::uint64_t>(header)));
      if (header[1] > 0) link.send(to, transfer_tag, bytes_of(out.shared));
    }
    if (to != me) continue;
    link.recv(holders.front(), transfer_tag, std::as_writable_bytes(std::span<std::uint64_t>(header)));
    out.present = header[0] != 0;
    out.shared.assign(header[1], 0.f);
    if (header[1] > 0) link.recv(holders.front(), transfer_tag, bytes_of(out.shared));
  }
  if (out.present) out.parameters = parameters;
  return out;
}

}  // namespace

restored_state transfer_state(transport& link, const state_source& source, const std::optional<kept_state>& held,
                              std::size_t parameter_count, bool sharded, const std::string& feedback) {
  const int world = link.size(), me = link.rank();
  const trace_span span("state transfer", worker_track(me, trace_role::communicator));
  const std::size_t n = parameter_count;
  const auto& holders = source.parameter_holders;
  if (holders.empty()) throw std::invalid_argument("state transfer: nobody holds the parameters");
  const bool holding = std::find(holders.begin(), holders.end(), me) != holders.end();
  if (holding && !held) throw std::logic_error("state transfer: rank named as a holder has no kept state");

  restored_state out;
  out.parameters = holding ? held->parameters : std::vector<float>(n);
  // Parameters: every rank without them takes piece p from holder p.
  const int pieces = static_cast<int>(holders.size());
  for (int to = 0; to < world; ++to) {
    if (std::find(holders.begin(), holders.end(), to) != holders.end()) continue;
    for (int p = 0; p < pieces; ++p) {
      const shard piece = shard_of(n, pieces, p);
      auto span = std::span<float>(out.parameters).subspan(piece.begin, piece.size());
      if (holders[static_cast<std::size_t>(p)] == me) link.send(to, transfer_tag, std::as_bytes(span));
      if (to == me) link.recv(holders[static_cast<std::size_t>(p)], transfer_tag, std::as_writable_bytes(span));
    }
  }
  const kept_topology topology = transfer_topology(link, holders, held, out.parameters);
  if (!sharded) {
    if (holding) out.own = held->own;
    // Distributed Lion: a rank without a momentum of its own (a joiner) starts from the mean of
    // the holders' — in expectation what its own would be, with less noise — summed in holder
    // order, as slice_checkpoint does. The cost: every holder's whole momentum to each of them.
    if (source.slots > 0) {
      std::vector<float> theirs(holding ? 0 : n);
      if (!holding) out.own = {true, true, 0, 1, 0, std::vector<float>(n, 0.f), {}, {}, {}, {}};
      for (int to = 0; to < world; ++to) {
        if (std::find(holders.begin(), holders.end(), to) != holders.end()) continue;
        for (const int from : holders) {
          if (from == me) link.send(to, transfer_tag, std::as_bytes(std::span<const float>(held->own.values)));
          if (to != me) continue;
          link.recv(from, transfer_tag, std::as_writable_bytes(std::span<float>(theirs)));
          for (std::size_t i = 0; i < n; ++i) out.own.values[i] += theirs[i];
        }
      }
      if (!holding)
        for (float& v : out.own.values) v /= static_cast<float>(holders.size());
    }
    out.own.topology = topology;
    return out;
  }

  // Optimizer shards: new rank j collects, from the holder of each old shard i it overlaps,
  // that overlap of every slot in one message.
  if (static_cast<int>(source.shard_senders.size()) != source.world)
    throw std::invalid_argument("state transfer: expected a sender for each of " + std::to_string(source.world) +
                                " shards");
  const std::size_t slots = source.slots;
  const shard mine = shard_of(n, world, me);
  out.own.present = true;
  out.own.optimizer_step = source.optimizer_step;
  out.own.slots = source.slots;
  out.own.begin = mine.begin;
  out.own.values.assign(slots * mine.size(), 0.f);
  // Error feedback: residuals and master weights travel as two more slots (a range nobody held
  // residuals for stays zero: nothing owed there).
  const std::size_t arrays = slots + (feedback.empty() ? 0 : 2);
  if (!feedback.empty()) {
    out.own.feedback = feedback;
    out.own.residual.assign(mine.size(), 0.f);
    out.own.master.assign(mine.size(), 0.f);
  }
  // Array k (slot k, then the residuals, then the masters) of a state whose shard is `size` long.
  const auto array_of = [slots](auto& state, std::size_t k, std::size_t size) {
    return k < slots ? state.values.data() + k * size : k == slots ? state.residual.data() : state.master.data();
  };
  auto old_shard_values = [&](int i) -> const rule_state& {
    if (const rule_state* kept = held ? held->shard(i) : nullptr) return *kept;
    throw std::logic_error("state transfer: rank " + std::to_string(me) + " was named as the holder of shard " +
                           std::to_string(i) + " but does not keep it");
  };
  std::vector<float> piece;
  for (int to = 0; to < world; ++to) {
    const shard target = shard_of(n, world, to);
    for (int i = 0; i < source.world; ++i) {
      const shard old = shard_of(n, source.world, i);
      const std::size_t begin = std::max(old.begin, target.begin), end = std::min(old.end, target.end);
      if (begin >= end) continue;
      const int from = source.shard_senders[static_cast<std::size_t>(i)];
      if (from != me && to != me) continue;
      const std::size_t length = end - begin;
      piece.resize(arrays * length);
      if (from == me) {
        const rule_state& state = old_shard_values(i);
        if (!feedback.empty() && (state.residual.size() != old.size() || state.master.size() != old.size()))
          throw std::logic_error("state transfer: shard " + std::to_string(i) + " was kept without its residuals");
        for (std::size_t k = 0; k < arrays; ++k)
          std::copy_n(array_of(state, k, old.size()) + (begin - old.begin), length,
                      piece.begin() + static_cast<std::ptrdiff_t>(k * length));
        if (to != me) {
          link.send(to, transfer_tag, bytes_of(piece));
          continue;
        }
      } else {
        link.recv(from, transfer_tag, bytes_of(piece));
      }
      for (std::size_t k = 0; k < arrays; ++k)
        std::copy_n(piece.begin() + static_cast<std::ptrdiff_t>(k * length), length,
                    array_of(out.own, k, mine.size()) + (begin - mine.begin));
    }
  }
  out.own.topology = topology;
  return out;
}

namespace {

// Rank `rank`'s share of a checkpoint's topology state: the shared values, and the checkpoint's
// worker `rank`'s own (a rank beyond them starts its own afresh, as a joiner does).
kept_topology topology_of(const checkpoint& c, int rank) {
  kept_topology out;
  if (c.topology_workers.empty()) return out;
  out.present = true;
  out.parameters = c.parameters;
  out.shared = c.topology_shared;
  if (static_cast<std::size_t>(rank) < c.topology_workers.size()) {
    const checkpoint_topology_worker& worker = c.topology_workers[static_cast<std::size_t>(rank)];
    out.own = worker.own;
    out.local_step = worker.local_step;
    out.local_slots = worker.local_slots;
    out.local_values = worker.local_values;
  }
  return out;
}

rule_state algorithm_slice(const checkpoint& c, bool sharded, int world, int rank) {
  if (!sharded) {
    if (c.momenta.empty()) return {};
    if (static_cast<std::size_t>(rank) < c.momenta.size())
      return {true, true, 0, 1, 0, c.momenta[static_cast<std::size_t>(rank)], {}, {}, {}, {}};
    // A rank beyond the checkpoint's workers starts from the mean of their momenta (transfer_state).
    std::vector<float> mean(c.momenta.front().size(), 0.f);
    for (const auto& momentum : c.momenta)
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += momentum[i];
    for (float& v : mean) v /= static_cast<float>(c.momenta.size());
    return {true, true, 0, 1, 0, std::move(mean), {}, {}, {}, {}};
  }
  rule_state state = slice_optimizer_state(c.optimizer, c.slots, c.optimizer_step, c.parameters.size(), world, rank);
  if (!c.feedback.empty()) {
    // The new owner of each range takes its residuals (the others start it at zero) and its
    // masters: the parameters every worker computes with are the checkpoint's replica.
    const shard own = shard_of(c.parameters.size(), world, rank);
    state.feedback = c.feedback;
    state.residual.assign(c.residuals.begin() + static_cast<std::ptrdiff_t>(own.begin),
                          c.residuals.begin() + static_cast<std::ptrdiff_t>(own.end));
    state.master.assign(c.parameters.begin() + static_cast<std::ptrdiff_t>(own.begin),
                        c.parameters.begin() + static_cast<std::ptrdiff_t>(own.end));
  }
  return state;
}

}  // namespace

rule_state slice_checkpoint(const checkpoint& c, bool sharded, int world, int rank) {
  rule_state state = algorithm_slice(c, sharded, world, rank);
  state.topology = topology_of(c, rank);
  if (state.topology.present) state.present = true;
  return state;
}

void require_feedback_precision(const checkpoint& c, std::string_view wire, const std::string& from) {
  if (c.feedback.empty() || c.feedback == wire) return;
  throw std::invalid_argument(from + ": the checkpoint's error-feedback residuals were written for wire precision " +
                              c.feedback + ", this job's is " + std::string(wire) + " (resume it with --wire-precision " +
                              c.feedback + ")");
}

rule_state slice_optimizer_state(std::span<const float> whole, std::uint32_t slots, std::uint64_t optimizer_step,
                                 std::size_t n, int world, int rank) {
  const shard own = shard_of(n, world, rank);
  rule_state state{true, false, optimizer_step, slots, own.begin, std::vector<float>(slots * own.size()), {}, {}, {}, {}};
  for (std::size_t slot = 0; slot < slots; ++slot)
    std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(slot * n + own.begin), own.size(),
                state.values.begin() + static_cast<std::ptrdiff_t>(slot * own.size()));
  return state;
}

}  // namespace accord
