#pragma once
// The arithmetic of asynchronous gossip, shared by its workers in one process
// (topologies/gossip/gossip.cpp) and between processes (topologies/gossip/processes.cpp): the events
// a gradient draws, the neighbour of an event, the step on a worker's own copy, and the mean and
// spread of the copies.
#include "topologies/asynchronous/workers.hpp"

#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace accord {

// Gradient `ticket`'s draws (events, neighbours), from the job's seed.
std::mt19937_64 gossip_draw(std::uint64_t seed, std::uint64_t ticket);
// How many exchanges follow a gradient: N ~ Poisson(rate).
int gossip_events(double rate, std::mt19937_64& draw);
// Worker `w`'s neighbour for one event among `present` (ranks in order) on `graph`
// (ring: ±1; exponential: ±2^k; complete: any); `w` itself when alone or absent.
std::size_t gossip_neighbour(const std::string& graph, const std::vector<std::size_t>& present, std::size_t w,
                             std::mt19937_64& draw);
// The algorithm's optimizer step on a worker's own copy from gradient `g` (a sum, scaled here);
// with A2CiD2 its θ̃ (`tilde`) takes the same update.
void step_own_copy(optimizer& opt, std::vector<float>& copy, computed_gradient& g, const asynchronous_setup& setup,
                   std::span<float> tilde = {});
// The mean of `copies` (empty unless `with_mean`; summed in double) and their spread,
// sqrt(mean_i ‖θ_i − θ̄‖²).
std::pair<std::vector<float>, double> mean_and_spread(const std::vector<std::vector<float>>& copies, bool with_mean);

}  // namespace accord
