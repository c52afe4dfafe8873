#pragma once
// A worker process of accord-launch: what it is (a rank or a joiner, its pid, its streams), how
// its program is found and how it is started (forked and exec'd in its own process group, its
// stdout and stderr on pipes).
#include "apps/launch/output.hpp"

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace accord::launch {

struct worker {
  int local_rank = 0;
  int rank = -1;             // -1 for a joiner: it gets its rank from the job
  std::string join_address;  // a joiner's: HOST:PORT of the elastic job's RANK 0
  pid_t pid = -1;            // also its process group
  bool running = false;
  int log = -1;              // --log-dir's file; a restarted worker goes on writing it
  output_stream out;
  output_stream err;
  std::vector<std::pair<std::string, std::string>> trace_parts;  // --trace: (label, part) of each start

  bool joiner() const { return rank < 0; }
  // What names it in its output prefix and the launcher's lines: "rank R", or "join L".
  std::string label() const {
    return std::string(joiner() ? "join " : "rank ") + std::to_string(joiner() ? local_rank : rank);
  }

  // Forwards what its pipes still hold and closes them (its own children may hold them open).
  void close_streams() {
    for (output_stream* stream : {&out, &err})
      if (stream->open()) {
        stream->forward_lines(true);
        close(stream->fd);
        stream->fd = -1;
      }
  }
};

// A pipe whose ends close on exec; throws std::runtime_error when there is none.
void make_pipe(int ends[2]);

// Resolves the program like execvp would, but up front so a typo is one clear line (and exit
// status 127, as a shell gives for a command it cannot run): cannot_run_error.
std::string find_program(const std::string& name);

// Forks and execs one worker in its own process group with stdout/stderr on fresh pipes. An exec
// failure comes back over a close-on-exec pipe as errno and is thrown as cannot_run_error.
// `console` and `logged` say which of its streams (1 stdout, 2 stderr) reach the launcher's own
// stdout/stderr, and which its --log-dir file `log`.
void start_worker(worker& w, const std::string& prefix, const std::string& program,
                  std::vector<std::string> arguments, std::vector<std::string> environment, int log, int console,
                  int logged);

}  // namespace accord::launch
