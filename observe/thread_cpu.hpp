#pragma once
// CPU time by role. Each thread that plays a role names itself (name_thread: "compute.3",
// "comm.3", "eval.0"; Linux shows the names in top -H, perf and gdb); thread_cpu_seconds sums
// the CPU time of this process's threads by role, from /proc/self/task/*/schedstat
// (nanoseconds). A thread that ends keeps its time in its role, so the sums only grow and a
// step's cost is the difference of two samples. No CAF.
#include <accord/metrics.hpp>

namespace accord {

enum class thread_role { compute, communicator, evaluator };

// Names the calling thread for `role` of worker `rank` and counts its time there.
void name_thread(thread_role role, int rank);

// Cumulative CPU seconds of this process's threads: the compute and communicator threads of
// worker `rank` (all workers' when rank < 0) and, with `shared`, the threads no worker owns (the
// evaluator, CAF's scheduler, UCX's threads, the rest). Samples closer than a few milliseconds apart reuse one scan of /proc.
thread_cpu thread_cpu_seconds(int rank, bool shared);

// a − b, role by role (a step's cost from two cumulative samples).
thread_cpu operator-(const thread_cpu& a, const thread_cpu& b);
thread_cpu& operator+=(thread_cpu& a, const thread_cpu& b);
double total(const thread_cpu& cpu);

}  // namespace accord
