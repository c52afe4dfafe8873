#pragma once
// Public embedder API: run a data-parallel training job made of actors (compute, accumulator,
// communicator per worker; one coordinator). No CAF type appears here: an embedding app
// supplies a model and data sets (<accord/model.hpp>), sets a job_config (<accord/config.hpp>),
// picks an algorithm (<accord/update_rule.hpp>) and a topology (<accord/topology.hpp>), and gets
// metrics back (<accord/metrics.hpp>); between processes each one passes its process_group
// (<accord/process_group.hpp>). This header includes all of them.
#include <accord/config.hpp>
#include <accord/metrics.hpp>
#include <accord/model.hpp>
#include <accord/process_group.hpp>
#include <accord/topology.hpp>
#include <accord/update_rule.hpp>

#include <functional>
#include <memory>
#include <stdexcept>

namespace accord {

// Thrown by run_job / run_job_process when resume_path holds a checkpoint taken at the job's
// last step: there is nothing left to train (not an error).
class job_already_finished : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Runs the job to completion on this process's threads. Throws std::invalid_argument naming the
// field for a bad configuration (before any actor starts; also when the workers' buffers cannot
// fit in this machine's memory) and std::runtime_error when a worker fails, also when a training
// loss or the parameters stop being finite (the message names the step and the worker; the last
// checkpoint written stays the last good one). `on_step` is called from the
// coordinator for every step (do not block in it).
job_result run_job(const model& prototype, std::shared_ptr<const dataset> train,
                   std::shared_ptr<const dataset> eval, const job_config& config,
                   std::function<void(const step_metrics&)> on_step = {});

// Runs this process's worker of a multi-process job; every process must pass the same model
// and configuration (checked when it says hello), and config.workers must equal world_size
// (except for a joiner). Rank 0's result holds the step metrics; every rank's holds the final
// parameters. After a failure it throws, and the calling process should exit.
job_result run_job_process(const model& prototype, std::shared_ptr<const dataset> train,
                           std::shared_ptr<const dataset> eval, const job_config& config,
                           const process_group& group,
                           std::function<void(const step_metrics&)> on_step = {});

}  // namespace accord
