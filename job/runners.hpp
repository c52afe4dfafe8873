#pragma once
// The runners behind run_job (job/in_process.cpp) and run_job_process
// (job/between_processes.cpp). With `apps` (one per worker of this process, in rank order) the
// workers are app-driven: their compute actors wait for the app's gradients
// (include/accord/worker.hpp, job/app_job.cpp) instead of running the model.
#include <accord/job.hpp>

#include "actors/app_bridge.hpp"

#include <memory>
#include <vector>

namespace accord {

using app_workers = std::vector<std::shared_ptr<worker::state>>;

job_result run_job_in_process(const model& prototype, std::shared_ptr<const dataset> train,
                              std::shared_ptr<const dataset> eval, const job_config& config,
                              std::function<void(const step_metrics&)> on_step, const app_workers& apps);

job_result run_job_between_processes(const model& prototype, std::shared_ptr<const dataset> train,
                                     std::shared_ptr<const dataset> eval, const job_config& config,
                                     const process_group& group, std::function<void(const step_metrics&)> on_step,
                                     const app_workers& apps);

}  // namespace accord
