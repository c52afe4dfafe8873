#pragma once
// An asynchronous topology's setup (topologies/asynchronous/workers.hpp) from the job's plan.
#include "job/plan.hpp"
#include "topologies/asynchronous/workers.hpp"

namespace accord {

// The setup of an asynchronous topology's workers for `plan` (reports to `coordinator`; stops
// when the hooks' stop_requested is set).
asynchronous_setup asynchronous_for(const job_plan& plan, const model& prototype, std::shared_ptr<const dataset> train,
                                    const job_hooks& hooks, coordinator_actor coordinator);

}  // namespace accord
