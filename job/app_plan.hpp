#pragma once
// An app-driven job's plan (include/accord/worker.hpp): the app's parameters presented to the
// runners as a model and its data as a data set, so planning, checkpoints, fingerprints and
// evaluation work as for run_job. app_job plans with it before any thread starts, and the
// Python binding checks a job with it before the app's first step.
#include "job/plan.hpp"

#include <accord/worker.hpp>

#include <memory>
#include <optional>

namespace accord {

// The app's parameters as an accord model: a signature and initial values; evaluation calls
// the app's function; micro-batches are never computed here.
class app_parameters final : public model {
public:
  explicit app_parameters(std::shared_ptr<const app_model> m) : m_(std::move(m)) {}
  std::string signature() const override { return m_->signature; }
  std::size_t parameter_count() const override { return m_->initial_parameters.size(); }
  void initialize(std::span<float> parameters, std::uint64_t) const override;
  double forward_backward(std::span<const float>, const batch&, std::span<float>) override;
  double evaluate(std::span<const float> parameters, const batch&) override {
    return m_->evaluate ? m_->evaluate(parameters) : -1.0;
  }
  memory_location memory() const override { return m_->memory; }
  double evaluate_at(device_span<const float> parameters, const batch& input) override;
  std::unique_ptr<model> clone() const override { return std::make_unique<app_parameters>(m_); }
  const app_model& app() const { return *m_; }

private:
  std::shared_ptr<const app_model> m_;
};

// The app's data as accord sees it: a description, and one empty example (so that an
// evaluation calls the app's evaluate once).
class app_data final : public dataset {
public:
  explicit app_data(std::string description) : description_(std::move(description)) {}
  std::string describe() const override { return description_; }
  std::uint64_t size() const override { return 1; }
  batch examples(std::uint64_t, std::size_t count) const override;

private:
  std::string description_;
};

// The app's model and the configuration checked and planned for `local_workers` app-driven
// workers: in one process without `group`, else this process's of a job between processes.
// Throws std::invalid_argument naming what is wrong, before any thread exists.
job_plan plan_app_job(const app_parameters& prototype, const std::shared_ptr<const dataset>& data,
                      const job_config& config, std::size_t local_workers, const process_group* group);

}  // namespace accord
