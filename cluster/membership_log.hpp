#pragma once
// The membership log (--record-membership FILE, --replay-membership FILE): every membership
// event of a job, one JSON object a line, with the step it happened at:
//
//   {"event":"job","workers":4,"steps":800}                    the job as it started
//   {"event":"lost","epoch":1,"step":61,"rank":2,"host":"127.0.0.1","role":"worker","cause":"hung (silent for 1.62 s)"}
//   {"event":"left","epoch":2,"step":124,"rank":3,...}         asked to leave (SIGTERM)
//   {"event":"joined","epoch":3,"step":140,"rank":-1,...}      a joiner said hello (rank: -1)
//   {"event":"epoch","epoch":2,"step":54,"workers":3,"after_loss":true}
//                                                               the worker set from the state of `step`
//
// A replay in one process needs the "job" and "epoch" lines: each epoch after the first is a
// change of the worker set at the step it started from, which the emulation reproduces
// (job_config::membership). A replay between processes also reads the member lines: who departs
// (the coordinator's process among them) and how many join. The metrics file gets them too, and
// two events the log does not need, since no epoch changed with them:
//
//   {"event":"back","epoch":2,"step":130,"rank":3,...,"cause":"it answers again"}
//                                                               a lost member counts again (after its "lost")
//   {"event":"waiting","epoch":2,"step":130,"rank":0,"role":"coordinator","cause":"no majority: ..."}
//                                                               a side without a majority waits for it
// No CAF.
#include <accord/config.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace accord {

struct membership_record {
  std::string event;        // job | epoch | lost | left | joined (metrics only: back | waiting)
  std::uint64_t epoch = 0;  // the epoch it happened in (epoch: the one that starts)
  std::uint64_t step = 0;   // job: its steps; epoch: the step it starts from; else the steps done
  int workers = 0;          // job: the starting workers; epoch: its workers
  bool after_loss = false;  // epoch: a member was lost since the last one
  int rank = -1;            // the member's starting rank (-1: a joiner)
  std::string host;
  std::string role;         // coordinator | standby | worker
  std::string cause;
  int line = 0;  // the log's line it was read from (0: not read from a log)
};

membership_record job_record(int workers, std::uint64_t steps);
membership_record epoch_record(std::uint64_t epoch, std::uint64_t start_step, int workers, bool after_loss);
// lost, left or joined
membership_record member_record(std::string event, std::uint64_t epoch, std::uint64_t step, int rank, std::string host,
                                std::string role, std::string cause);

std::string to_json_line(const membership_record& record);

// The records of `text` (a log's content); a line that is not one throws std::invalid_argument
// "NAME:LINE: why", NAME being the log's name.
std::vector<membership_record> parse_membership_log(const std::string& text, const std::string& name);
std::vector<membership_record> read_membership_log(const std::string& path);  // also: cannot read

// The members of an epoch in rank order, by who they are: the starting ranks, then joiners by
// arrival. A change keeps the survivors' order and puts its joiners after them, as an epoch
// between processes does (its coordinator, first, is always the earliest survivor: the one next
// in line takes over).
class epoch_order {
public:
  explicit epoch_order(int workers);
  int size() const { return static_cast<int>(members_.size()); }
  // The member at `position`'s starting rank; -1 for a joiner.
  int starting_rank(int position) const;
  // The position of the member of starting rank `rank`, or for -1 the newest joiner, among those
  // not in `taken`; -1 when there is none.
  int position_of(int rank, const std::vector<int>& taken) const;
  void change(const std::vector<int>& departing, int joiners);  // departing: positions, any order

private:
  int workers_;
  std::vector<int> members_;  // starting ranks; joiners numbered from workers_ up
  int next_joiner_;
};

// What a replay of `records` in one process runs: the starting workers and the changes; where the
// log names its members (lost, left, joined lines), each change also names the positions that
// depart (membership_change::departing), as between processes, so that per-worker state (Distributed
// Lion's momenta) follows the same workers. Throws
// std::invalid_argument naming `name` and the line when the log does not fit a job of `workers`
// and `steps` (another world size, an epoch at or beyond the last step, no "job" line).
struct membership_replay {
  int workers = 0;
  std::vector<membership_change> changes;
};
membership_replay replay_of(const std::vector<membership_record>& records, const std::string& name, int workers,
                            std::uint64_t steps);

// What a replay between processes runs (process_replay_of): real worker processes leave and
// join where the recorded epochs started. Each change ends the epoch before it after `step`
// (the step the recorded next epoch restored); the next epoch starts from that step's kept state
// with `workers`, once the members lost or left since the last epoch have gone and the joiners
// that said hello since have come. A recorded crash thus becomes a departure at the kept step
// the survivors rolled back to: only that step's state outlived the crash.
struct replayed_departure {
  int rank = -1;             // the member's starting rank (-1: a joiner)
  bool coordinator = false;  // the coordinator's process went away
};
struct replayed_change {
  std::uint64_t step = 0;
  int workers = 0;
  std::vector<replayed_departure> departures;
  int joiners = 0;
};
struct process_replay {
  int workers = 0;                       // the starting ranks
  std::vector<replayed_change> changes;  // steps increasing; one at step 0 shapes the first epoch
  int joiners() const;                   // over the whole replay: the processes a launcher starts as joiners
  const replayed_change* first_from(std::uint64_t step) const;  // at or after `step`; null: none
};
// Throws as replay_of does (it checks the same), and naming the epoch's line when the events
// before an epoch do not make its worker count.
process_replay process_replay_of(const std::vector<membership_record>& records, const std::string& name, int workers,
                                 std::uint64_t steps);

// Appends records to a log, each flushed as it comes (a crash loses none written). `append`:
// after what is there (a coordinator taking over goes on with the lost one's log).
class membership_log_writer {
public:
  explicit membership_log_writer(const std::string& path, bool append = false);  // throws std::runtime_error naming it
  void write(const membership_record& record);

private:
  std::ofstream out_;
};

}  // namespace accord
