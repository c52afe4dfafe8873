// Where a worker process sits in a multi-process job, read from the environment its launcher
// left behind: torchrun's variables (set by accord-launch, torchrun or by hand) or Slurm's (srun).
// The same worker binary thus runs under any of them, or alone as a single process.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accord {

// The environment variable `name`, or null when it is unset or empty (both mean "not given").
const char* environment_variable(const char* name);

// torchrun's default rendezvous port, used under Slurm when MASTER_PORT is unset.
inline constexpr int default_master_port = 29500;

struct rendezvous_info {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // index among the workers on this machine (e.g. which GPU to take)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 only for a single-process run, which needs no rendezvous
  bool from_environment = false;  // false for the single-process default
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK (default 0), MASTER_ADDR and MASTER_PORT (default 29500)
// when RANK or WORLD_SIZE is set; otherwise, when SLURM_PROCID is set, SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID (default 0), MASTER_ADDR or else the first host of SLURM_NODELIST
// or SLURM_JOB_NODELIST, and MASTER_PORT (default 29500). Returns nullopt when neither set is
// present. Throws std::invalid_argument naming the variable for a missing companion variable,
// a non-integer, a rank outside [0, world size), a world size below 1 or a port outside 1..65535.
std::optional<rendezvous_info> rendezvous_from_environment();

// The job's name from ACCORD_JOB_ID, else TORCHELASTIC_RUN_ID (unless torchrun's default
// "none"), else SLURM_JOB_ID; empty when none is set.
std::string job_id_from_environment();

// "a:1,b:2" → {"a:1", "b:2"}: a joiner's addresses, tried in turn (--join, ACCORD_JOIN).
std::vector<std::string_view> split_address_list(std::string_view list);

// rendezvous_from_environment(), or rank 0 of a world of 1 when the environment names no job.
rendezvous_info rendezvous_or_single_process();

// First host of a Slurm node list: "host" -> "host", "a,b" -> "a", "node[07-09,12]" -> "node07",
// "rack[1-2]-gpu[3,4],x" -> "rack1-gpu3". `source` only names the source in error messages.
// Throws std::invalid_argument for an empty list or an unbalanced bracket.
std::string first_host_of_nodelist(std::string_view nodelist, std::string_view source = "nodelist");

// The address of this machine's interface that routes to master_addr (a connected UDP socket's
// own address; no packet is sent), e.g. "127.0.0.1" for a loopback master. Peers of a
// multi-machine job advertise it to each other. Throws std::runtime_error naming master_addr
// when it does not resolve or no route leads there.
std::string local_address_towards(const std::string& master_addr, int master_port);

}  // namespace accord
