#pragma once
// accord-launch's supervision of its workers: starts them, forwards their output and the
// launcher's signals, and decides what a worker's end means: fail fast (the others stopped, its
// status the launcher's), go on without it (--elastic, --join), restart it as a joiner or
// restart the whole group (--max-restarts), stop all on --timeout; merges --trace's parts.
#include "apps/launch/options.hpp"

#include <string>

namespace accord::launch {

// Runs the launch of `options` with `program` (find_program's) until every worker has exited;
// returns the launcher's exit status.
int run_workers(const launch_options& options, const std::string& program);

}  // namespace accord::launch
