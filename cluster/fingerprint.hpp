#pragma once
// What the worker processes of one job must agree on to train together: every setting that
// changes the training, by the flag that sets it, with its value (the data by its description
// and a content hash). Rank 0 refuses a worker whose settings differ, naming the first setting
// that does ("--data differs: rank 0 has X, this worker has Y").
#include <accord/job.hpp>
#include <accord/model.hpp>

#include <cstdint>
#include <string>

namespace accord {

// A cheap content hash of a data set: its size and a fixed sample of its examples.
std::uint64_t data_hash(const dataset& data);

// The settings, one "name=value" line each. `resumed` describes the checkpoint a resumed job
// starts from (empty otherwise).
std::string job_fingerprint(const model& prototype, const dataset& train, const job_config& config,
                            const std::string& transport, const std::string& resumed);

// The first setting in which `worker` differs from `job`, as one line; empty when they agree.
std::string fingerprint_difference(const std::string& job, const std::string& worker);

}  // namespace accord
