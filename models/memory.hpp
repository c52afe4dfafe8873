#pragma once
// Memory a configuration needs, estimated before anything is allocated, against what this
// machine has free. Estimates are doubles: absurd sizes (a width of 10^9, 10^6 layers) give
// absurd figures instead of wrapping around, and the figures are approximate anyway.
#include <string>

namespace accord {

// Bytes this machine can still hand out: MemAvailable from /proc/meminfo, else the free
// physical pages.
double available_memory_bytes();

// "1.5 GB", "820.0 MB", "3.2 TB", ...
std::string format_bytes(double bytes);

// The parameter-sized buffers of `workers` workers in one process: four each (the replica, the
// gradient being filled, the one on the wire, a spare) plus the initial parameters. Optimizer
// state, activations and data come on top.
double worker_buffer_bytes(double parameters, double workers);

// Throws std::invalid_argument "`what`: needs about X of memory, Y available" when
// `needed_bytes` exceeds available_memory_bytes().
void require_memory(double needed_bytes, const std::string& what);

}  // namespace accord
