#pragma once
// The runners behind run_job (job/in_process.cpp) and run_job_process
// (job/between_processes.cpp), each in two parts: planning, which checks what the job needs in
// its place beyond plan_job's checks and then plans it, and running, which reads only the plan
// and the hooks. With hooks.apps (one per worker of this process, in rank order) the workers are
// app-driven: their compute actors wait for the app's gradients (include/accord/worker.hpp,
// job/app_job.cpp) instead of running the model.
#include <accord/job.hpp>

#include "job/plan.hpp"

#include <memory>

namespace accord {

// A job in one process, `app_workers` of them app-driven (0: none): at most
// max_workers_in_process workers at once, a valid membership schedule, memory for them all.
job_plan plan_in_process(const model& prototype, const std::shared_ptr<const dataset>& train,
                         const job_config& config, std::size_t app_workers);

job_result run_in_process(const model& prototype, std::shared_ptr<const dataset> train,
                          std::shared_ptr<const dataset> eval, const job_plan& plan, const job_hooks& hooks);

// This process's worker of a job between processes (`app_workers`: 1 when app-driven, else 0):
// `group` fits the configuration, and the plan carries the settings' fingerprint.
job_plan plan_between_processes(const model& prototype, const std::shared_ptr<const dataset>& train,
                                const job_config& config, const process_group& group, std::size_t app_workers);

job_result run_between_processes(const model& prototype, std::shared_ptr<const dataset> train,
                                 std::shared_ptr<const dataset> eval, const job_plan& plan,
                                 const process_group& group, const job_hooks& hooks);

}  // namespace accord
