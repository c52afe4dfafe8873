// How many BLAS threads each worker of this process uses. A multi-process job runs
// LOCAL_WORLD_SIZE processes per machine: sizing each for every core would oversubscribe them.
#pragma once

#include <functional>
#include <string>

namespace accord {

struct blas_threads_choice {
  int threads = 1;
  std::string reason;  // e.g. "--blas-threads", "OMP_NUM_THREADS", "8 cores / 2 processes here (LOCAL_WORLD_SIZE) / 1 worker"
};

// `requested` (--blas-threads) when above 0; else OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS (as
// torchrun users set them; "4,2" counts as 4); else the cores shared among `workers_here` workers
// of this process times the processes on this machine, at least 1. Those processes are
// LOCAL_WORLD_SIZE when a launcher set it (it knows, where host addresses do not: ranks in network
// namespaces of one machine each have their own), else `job_processes_here` when the job knows
// them (an epoch of a job between processes: its members' hosts, so that a joiner started by
// hand shares the cores with the members already here), else 1. `environment` reads a variable (null when unset). Throws
// std::invalid_argument naming the variable whose value is not a positive integer.
blas_threads_choice choose_blas_threads(int requested, int workers_here, int cores,
                                        const std::function<const char*(const char*)>& environment,
                                        int job_processes_here = 0);

// The same with this process's environment and core count.
blas_threads_choice choose_blas_threads(int requested, int workers_here, int job_processes_here = 0);

}  // namespace accord
