#pragma once
// State that survives a member's death in an elastic multi-process job.
//
// At kept step boundaries every worker process keeps, in its own memory, the parameters and its
// optimizer shard, and (ZeRO-1 algorithms) sends its shard to its buddies (copy_holders), which
// keep those copies beside their own. A dead or departed member's shard is then still held by a
// survivor, also when the coordinator's process goes with it. When the next epoch forms, the
// coordinator picks the newest kept step whose every shard some member of the new epoch holds,
// and each new rank collects its new shard straight from the holders of the old shards it
// overlaps (striped over the holders, not all from one); a joiner gets the parameters in pieces
// from every holder.
#include "recovery/checkpoint.hpp"
#include "recovery/rule_state.hpp"
#include "optim/optimizer.hpp"
#include "transport/transport.hpp"

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

// One step boundary's state as one worker kept it.
struct kept_state {
  std::uint64_t layout = 0;  // the epoch whose shard layout `own` and `buddy` follow
  int world = 0;
  int rank = 0;              // in that epoch
  std::uint64_t steps = 0;   // optimizer steps completed
  std::vector<float> parameters;
  rule_state own;            // this worker's shard, or its Distributed Lion momentum
  std::vector<rule_state> copies;  // when replicated: the shards of copies_kept_by(rank, world), in order

  // Old shard `index` as this worker keeps it (its own or a copy); null when it keeps neither.
  const rule_state* shard(int index) const;
};

// Where the copies of each rank's shard are kept (its buddies). Rank 0 of an epoch between
// processes is the coordinator's process; so that it and any one other member can be lost
// together with every shard still held, no member's only copy is on rank 0 and rank 0's shard
// has two: ranks 1 .. world-1 copy theirs around a ring that skips rank 0 (1 -> 2 -> ... ->
// world-1 -> 1), and rank 0 copies its shard to ranks 1 and 2. With two ranks each copies to
// the other. The price beside one copy per shard: rank 0 sends one shard more per keep.
std::vector<int> copy_holders(int shard, int world);
// The shards whose copies `rank` keeps, ascending.
std::vector<int> copies_kept_by(int rank, int world);

// Layout-independent checksum of optimizer shards: a wrapping sum over (slot, index, value)
// terms, so the checksums of any sharding of the same state add up to the same number.
std::uint64_t state_checksum(const rule_state& state, std::size_t parameter_count);

// What a worker tells the coordinator of a kept generation (no tensors travel).
struct kept_summary {
  std::uint64_t layout = 0;
  std::uint64_t steps = 0;
  int rank = 0;
  int world = 0;
  std::uint64_t optimizer_step = 0;
  std::uint32_t slots = 0;
  std::uint64_t parameter_hash = 0;
  std::uint64_t own_checksum = 0;
  std::vector<int> copies;                    // the old shards it keeps copies of
  std::vector<std::uint64_t> copy_checksums;  // of each
};

// The two newest complete generations of one worker process. Two, because a death during the
// replication of step s leaves some survivors holding step s and others only s - 1; a
// generation is stored only once its replication completed, so an incomplete one never
// pushes out a complete one.
class state_keeper {
public:
  void keep(kept_state state);
  std::vector<kept_summary> summaries() const;
  // The generation kept at (layout, steps), or empty.
  std::optional<kept_state> find(std::uint64_t layout, std::uint64_t steps) const;
  std::size_t bytes() const;  // of everything kept

private:
  mutable std::mutex mutex_;
  std::array<std::optional<kept_state>, 2> generations_;  // [0] newest
};

// A ZeRO-1 shard's optimizer state starting at `begin`, as kept and checkpointed.
rule_state shard_state(const optimizer& opt, std::size_t begin);
// Restores `opt` (the shard at `begin` of `owner`, named in the error) from `state`; throws
// std::invalid_argument when the state does not fit the shard.
void restore_shard_state(optimizer& opt, const rule_state& state, std::size_t begin, const std::string& owner);

// Replicates `own` to its copy holders and returns the copies this rank keeps (copies_kept_by).
std::vector<rule_state> replicate_to_buddies(transport& link, const rule_state& own, std::size_t parameter_count);

// Where a new epoch's state comes from, decided by the coordinator from the kept summaries.
struct state_source {
  std::uint64_t layout = 0;
  std::uint64_t steps = 0;
  int world = 0;                       // worker count of that layout
  std::vector<int> shard_senders;      // by old shard: the new rank holding it (sharded rules)
  std::vector<int> parameter_holders;  // new ranks holding the generation, ascending
  std::uint64_t optimizer_step = 0;
  std::uint32_t slots = 0;
  std::uint64_t parameter_hash = 0;    // of the kept parameters
  std::uint64_t state_checksum = 0;    // sum over the old shards (sharded rules)
};

struct restored_state {
  std::vector<float> parameters;
  rule_state own;  // this rank's new shard; for sign votes its kept momentum, or the holders' mean
};

// Every rank of the new epoch calls this with the generation `source` names (empty when it
// holds none, e.g. a joiner). Transfers run one at a time in one global order, which cannot
// deadlock even where a send waits for its receiver.
// `feedback`: the job's error-feedback wire precision ("" none): the shards' residuals and master
// weights then travel with their optimizer slots. A topology's own state (local-sgd's): a holder
// keeps its own share; a rank without (a joiner) gets the shared values from the first holder
// and starts its own share afresh; the parameters are what every worker restarts from.
restored_state transfer_state(transport& link, const state_source& source, const std::optional<kept_state>& held,
                              std::size_t parameter_count, bool sharded, const std::string& feedback = {});

// Rank `rank` of `world`'s share of a checkpoint's optimizer state: its ZeRO-1 shard of every
// slot, or its Distributed Lion momentum (the mean of the checkpoint's when it has fewer momenta).
// With error feedback also the rank's range of the residuals (other ranges start at zero) and of
// the master weights. With a topology's own state, the shared values and worker `rank`'s own
// share (none for a rank beyond the checkpoint's workers, which starts its own afresh).
rule_state slice_checkpoint(const checkpoint& c, bool sharded, int world, int rank);
// Refuses (std::invalid_argument "<from>: ...", one line) a checkpoint whose error-feedback
// residuals were written for another wire precision than `wire` (the job's real one). A
// checkpoint without residuals resumes under any precision: nothing is owed.
void require_feedback_precision(const checkpoint& c, std::string_view wire, const std::string& from);
// Rank `rank` of `world`'s ZeRO-1 shard of a whole optimizer state (`slots` slots of the `n`
// parameters, slot after slot).
rule_state slice_optimizer_state(std::span<const float> whole, std::uint32_t slots, std::uint64_t optimizer_step,
                                 std::size_t n, int world, int rank);

}  // namespace accord
