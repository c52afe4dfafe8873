#pragma once
// accord-launch's command line: torchrun's flags and its own, parsed into launch_options, with
// every refusal one line (usage_error, exit status 2).
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace accord::launch {

constexpr int usage_exit = 2;
constexpr int cannot_run_exit = 127;
constexpr int timeout_exit = 124;

// Bad command line: one line on stderr and exit status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The program cannot be started: one line on stderr and exit status 127.
struct cannot_run_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// torchrun's --redirects / --tee: per local rank, which streams (1 stdout, 2 stderr, 3 both)
// go to the worker's --log-dir file. "3" names every worker, "0:3,1:2" some.
struct stream_choice {
  bool given = false;
  int every = 0;
  std::vector<std::pair<int, int>> by_local_rank;

  int of(int local_rank) const {
    for (const auto& [local, streams] : by_local_rank)
      if (local == local_rank) return streams;
    return every;
  }
};

struct launch_options {
  int workers = 0;
  int rank_offset = 0;
  std::optional<int> world_size;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;
  std::optional<double> timeout_seconds;
  double grace_seconds = 5.0;
  bool elastic = false;
  std::optional<std::string> join_address;  // HOST:PORT of a running elastic job's RANK 0
  std::optional<std::string> trace_path;    // the merged trace of the workers started here
  std::optional<std::string> log_dir;       // where each worker's output is also written
  int max_restarts = 0;                      // restarts of the group, or with --elastic of failed workers as joiners
  std::optional<std::string> run_id;         // --rdzv-id: the workers' ACCORD_JOB_ID
  stream_choice redirects;                   // streams to --log-dir's files only
  stream_choice tee;                         // streams to --log-dir's files and the console
  std::optional<std::string> replay_log;     // --replay-membership: the membership log every worker replays
  int replay_joiners = 0;                    // the joiners it admits, started here with the ranks
  std::vector<std::string> command;

  // The coordinator is RANK 0; a machine whose workers join a running job has none.
};

// The launch that argv asks for; nullopt for --help and --version, once it has printed them.
// Throws usage_error naming the flag on a bad command line.
std::optional<launch_options> parse_command_line(int argc, char** argv);

}  // namespace accord::launch
