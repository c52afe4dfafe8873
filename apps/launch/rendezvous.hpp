#pragma once
// Where accord-launch's workers meet: the variables each worker reads its place in the job from
// (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT..., accord's ACCORD_ELASTIC,
// ACCORD_JOIN...), and a free master port when none is given.
#include "apps/launch/options.hpp"
#include "apps/launch/process.hpp"

#include <string>
#include <vector>

namespace accord::launch {

// Worker w's environment: the launcher's own, less every variable the launcher sets for some
// mode, plus those it sets for w. A joiner learns its master from the job; master_port is for
// the ranked workers. `restarts`: the launcher's restarts so far (torchrun's
// TORCHELASTIC_RESTART_COUNT).
std::vector<std::string> worker_environment(const launch_options& options, const worker& w, int master_port,
                                            int restarts);

// A port nobody listens on right now; rank 0 binds it moments later (torchrun does the same).
int find_free_port();

}  // namespace accord::launch
