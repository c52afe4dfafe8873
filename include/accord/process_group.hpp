#pragma once
// Public embedder API: where this process sits in a job that spans processes or machines
// (run_job_process, app_job::start_process), and how to read it from the environment a launcher
// left (accord-launch, torchrun, Slurm's srun). No CAF.
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

// Where this process sits in a job that spans processes or machines: one worker per process,
// rank 0 also hosts the coordinator (control messages over CAF's middleman at master_port)
// and bulk tensors travel over UCX between the ranks.
struct process_group {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Rank 0: the address its master port listens on (numeric or a name; "0.0.0.0": every
  // interface). Empty: master_addr's own address (loopback when every rank is local).
  std::string master_bind;
  // The address other ranks reach this one at (its UCX listener); empty: the local address
  // of the route to master_addr.
  std::string host;
  std::chrono::milliseconds connect_timeout{60'000};
  // Names the job in every hello: a process of another job that reaches this master port is
  // refused saying so. Empty: "MASTER_ADDR:MASTER_PORT". A joiner with an empty id is not
  // checked (it named the job by its address).
  std::string job_id;
  // Rank 0 gives up when the starting ranks have not all said hello within this time (and
  // prints whom it waits for every 10 s meanwhile).
  std::chrono::milliseconds rendezvous_timeout{300'000};
  // ucx: tensors over UCX (tcp, shared memory, RDMA where present); nccl: over NCCL between
  // GPUs, this process using CUDA device `local_rank` (builds with CUDA only).
  std::string transport = "ucx";
  int local_rank = 0;

  // Elastic (actors/membership_actor.hpp): the job goes on when a worker process dies or
  // leaves, and admits joiners; otherwise any lost process fails the job. Rank 0's process
  // must stay either way: it hosts the coordinator.
  bool elastic = false;
  // This process joins a running elastic job at master_addr:master_port (rank and world_size
  // are ignored): it gets the current parameters and its share of the optimizer state, and
  // contributes from the next epoch.
  bool join = false;
  // A joiner's further addresses (HOST:PORT), tried in turn after master_addr:master_port: any
  // live member's control port leads to the coordinator, wherever it moved after a failover.
  std::vector<std::string> more_join_addresses;
  // Set it (from a signal handler, say) and this worker leaves at the next step boundary,
  // handing its optimizer shard to the others; run_job_process then returns. May be null.
  const std::atomic<bool>* leave_requested = nullptr;
  // A process silent this long (hung, or its machine gone) counts as dead: the upper bound.
  std::chrono::milliseconds heartbeat_timeout{30'000};
  // Elastic jobs: rank 0 also judges each member by its own heartbeats (every 100 ms): one
  // silent well past what its arrivals so far allowed, and at least 1.5 s, counts as hung, long
  // before the timeout (cluster/heartbeat_detector.hpp), and the job goes on without it. false:
  // the timeout alone. A job that is not elastic always waits for the timeout: it could not go
  // on without the member, and a heartbeat late on a loaded machine would fail it for nothing
  // (a process that dies is found at once either way, by its closed connections).
  bool adaptive_failure_detection = true;
  // Elastic jobs: after a loss, a side holding no majority of the last epoch's members keeps its
  // state, trains nothing and waits this long for them to be reachable again (a partition that
  // heals, a stopped process that wakes) before it stops; 0: it stops at once.
  std::chrono::milliseconds majority_wait{30'000};
  // Elastic jobs: replay the membership changes of this log (a --record-membership file,
  // cluster/membership_log.hpp) at the steps it names: each epoch ends where the recorded next one
  // started, the members recorded as lost or left leave then (the coordinator's process goes
  // away), joiners are held from their hello until their recorded step. Every process names the
  // same log (any may take over as coordinator); whoever starts the job starts the joiners
  // (accord-launch --replay-membership does). Empty: no replay.
  std::string membership_replay;
  // Rank 0: one line per membership event (epochs formed, state restored and verified); every
  // rank: one line per member lost or leaving (who, its role, the step, the cause). Unset, rank
  // 0's line naming the starting ranks it waits for (every 10 s) still goes to stderr.
  std::function<void(const std::string&)> on_event;
};

// This process's place as its launcher left it in the environment, or nullopt when the
// environment names no job (a job in this process). Read by accord-train and by Python's
// accord.process_group(); accord-launch sets these variables for each worker.
//   RANK, WORLD_SIZE, LOCAL_RANK (default 0), MASTER_ADDR, MASTER_PORT (default 29500):
//     accord-launch or torchrun (or set by hand); else Slurm's SLURM_PROCID, SLURM_NTASKS,
//     SLURM_LOCALID, and MASTER_ADDR or the first host of SLURM_NODELIST / SLURM_JOB_NODELIST
//   ACCORD_ELASTIC=1: elastic
//   ACCORD_JOIN=HOST:PORT, or `join` when not empty (a command line's --join): join the running
//     elastic job whose rank 0 listens there (join and elastic set; rank, world_size, RANK and
//     WORLD_SIZE ignored; LOCAL_RANK still picks the GPU)
//   ACCORD_JOB_ID, else TORCHELASTIC_RUN_ID (unless "none"), else SLURM_JOB_ID: job_id (a
//     joiner: ACCORD_JOB_ID only, as it named its job by address)
// host is this machine's address on the route to the master (loopback for a local master), so
// that ranks on other machines reach it. The other fields keep their defaults. Throws
// std::invalid_argument naming the variable that is malformed, out of range or missing beside
// one that needs it, and std::runtime_error when the master address does not resolve.
std::optional<process_group> process_group_from_environment(std::string_view join = {});

}  // namespace accord
