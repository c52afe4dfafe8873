#include "membership/source_choice.hpp"

namespace accord {

std::string list_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

std::optional<state_source> choose_source(const kept_positions& positions, bool sharded,
                                          const std::vector<const member_entry*>& order, std::string* why_not) {
  struct candidate {
    int world = 0;
    std::map<int, int> own_holder, copy_holder;  // old shard → new rank
    std::vector<int> holders;
    const kept_summary* any = nullptr;
  };
  std::map<std::pair<std::uint64_t, std::uint64_t>, candidate> found;  // (steps, layout)
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    if (!order[rank]->request) continue;
    for (const kept_summary& k : order[rank]->request->kept) {
      candidate& c = found[{k.steps, k.layout}];
      c.world = k.world;
      c.any = &k;
      c.holders.push_back(static_cast<int>(rank));
      c.own_holder.emplace(k.rank, static_cast<int>(rank));
      for (const int shard : k.copies) c.copy_holder.emplace(shard, static_cast<int>(rank));
    }
  }
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const auto [steps, layout] = it->first;
    candidate& c = it->second;
    const bool newest = it == found.rbegin();
    const auto position = positions.find({layout, steps});
    if (position == positions.end()) {  // the coordinator never completed that step
      if (newest && why_not)
        *why_not = "the newest state kept by a survivor, after step " + std::to_string(steps) +
                   ", was never completed by every worker, and no older one is kept whole";
      continue;
    }
    state_source source;
    source.layout = layout;
    source.steps = steps;
    source.world = c.world;
    source.parameter_holders = c.holders;
    source.optimizer_step = c.any->optimizer_step;
    source.slots = c.any->slots;
    source.parameter_hash = c.any->parameter_hash;
    bool complete = true;
    if (sharded) {
      source.state_checksum = 0;
      for (int shard = 0; shard < c.world && complete; ++shard) {
        if (auto own = c.own_holder.find(shard); own != c.own_holder.end()) {
          source.shard_senders.push_back(own->second);
          continue;
        }
        auto copy = c.copy_holder.find(shard);
        if (copy == c.copy_holder.end()) {
          complete = false;
          break;
        }
        source.shard_senders.push_back(copy->second);
      }
      if (!complete) {
        if (newest && why_not) {
          std::vector<int> missing;
          for (int shard = 0; shard < c.world; ++shard)
            if (!c.own_holder.count(shard) && !c.copy_holder.count(shard)) missing.push_back(shard);
          *why_not = "the newest kept state, after step " + std::to_string(steps) + " (epoch " +
                     std::to_string(layout) + ", " + std::to_string(c.world) + " workers), lacks the optimizer shard of " +
                     list_ranks(missing) + ": the member holding it and every member keeping a copy of it are gone";
        }
        continue;
      }
      // Sum of the old shards' checksums, each from whoever sends it.
      for (int shard = 0; shard < c.world; ++shard) {
        const int sender = source.shard_senders[static_cast<std::size_t>(shard)];
        for (const kept_summary& k : order[static_cast<std::size_t>(sender)]->request->kept) {
          if (k.layout != layout || k.steps != steps) continue;
          if (k.rank == shard) source.state_checksum += k.own_checksum;
          for (std::size_t i = 0; i < k.copies.size() && k.rank != shard; ++i)
            if (k.copies[i] == shard) source.state_checksum += k.copy_checksums[i];
        }
      }
    }
    return source;
  }
  return std::nullopt;
}

}  // namespace accord
