// app_job: a job whose workers' micro-batches the app computes (include/accord/worker.hpp). The
// app's parameters are presented to the runners as a model and its data as a data set, so
// planning, checkpoints, fingerprints and evaluation work as for run_job.
#include <accord/worker.hpp>

#include "actors/app_bridge.hpp"
#include "gpu/device.hpp"
#include "job/plan.hpp"
#include "job/runners.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <thread>

namespace accord {
namespace {

// The app's parameters as an accord model: a signature and initial values; evaluation calls
// the app's function; micro-batches are never computed here.
class app_parameters final : public model {
public:
  explicit app_parameters(std::shared_ptr<const app_model> m) : m_(std::move(m)) {}
  std::string signature() const override { return m_->signature; }
  std::size_t parameter_count() const override { return m_->initial_parameters.size(); }
  void initialize(std::span<float> parameters, std::uint64_t) const override {
    std::copy(m_->initial_parameters.begin(), m_->initial_parameters.end(), parameters.begin());
  }
  double forward_backward(std::span<const float>, const batch&, std::span<float>) override {
    throw std::logic_error("an app-driven worker's micro-batches are computed by the app");
  }
  double evaluate(std::span<const float> parameters, const batch&) override {
    return m_->evaluate ? m_->evaluate(parameters) : -1.0;
  }
  memory_location memory() const override { return m_->memory; }
  double evaluate_at(device_span<const float> parameters, const batch& input) override {
    if (parameters.on_host() || !m_->evaluate) return evaluate(parameters.values, input);
    // The evaluator put them on the model's device; the app's evaluate takes host values.
    std::vector<float> host(parameters.size());
    copy_values(parameters, host);
    return evaluate(host, input);
  }
  std::unique_ptr<model> clone() const override { return std::make_unique<app_parameters>(m_); }

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
  batch examples(std::uint64_t, std::size_t count) const override {
    batch b;
    b.examples = count;
    return b;
  }

private:
  std::string description_;
};

}  // namespace

class app_job::runner {
public:
  // `plan_for` plans the job (in one process or between processes) for `local_workers`
  // app-driven workers: a bad configuration fails here, before any thread.
  template <class Plan>
  runner(app_model m, const job_config& c, std::size_t local_workers, int first_rank, Plan plan_for)
      : app(std::make_shared<const app_model>(std::move(m))), prototype(app),
        data(std::make_shared<app_data>(app->data)) {
    require(!app->signature.empty(), "app_model: the signature is empty");
    require(!app->initial_parameters.empty(), "app_model: no initial parameters");
    require(std::all_of(app->initial_parameters.begin(), app->initial_parameters.end(),
                        [](float p) { return std::isfinite(p); }),
            "app_model: the initial parameters are not all finite");
    require(!c.stop_requested, "app_job: use cancel() instead of job_config::stop_requested");
    if (!app->memory.on_host()) {
      const std::string unusable = cuda_device_unusable(app->memory.device);
      require(unusable.empty(), "app_model: memory " + describe_location(app->memory) + ": " + unusable);
    }
    job_config config = c;
    if (!app->evaluate) config.eval_interval = 0;  // nothing to evaluate with: only the end's (-1)
    // The app's loop counts steps as torch does: a fixed number of its micro-batches each.
    if (config.accumulation_mode.empty()) config.accumulation_mode = "fixed";
    plan = plan_for(prototype, data, config, local_workers);
    hooks = hooks_of(config, {});
    for (std::size_t i = 0; i < local_workers; ++i) {
      hooks.apps.push_back(std::make_shared<worker::state>(first_rank + static_cast<int>(i), app->memory));
      workers.push_back(std::make_unique<worker>(hooks.apps.back()));
    }
  }

  template <class Run>
  void start(Run run) {
    thread = std::thread([this, run = std::move(run)] {
      try {
        result = run();
      } catch (...) {
        error = std::current_exception();
      }
      for (const auto& s : hooks.apps) s->finish();
    });
  }

  std::shared_ptr<const app_model> app;
  app_parameters prototype;
  std::shared_ptr<const dataset> data;
  job_plan plan;
  job_hooks hooks;  // hooks.apps: the local workers' states, in rank order
  std::vector<std::unique_ptr<worker>> workers;
  std::atomic<bool> stop{false};
  std::thread thread;
  job_result result;
  std::exception_ptr error;
};

app_job::app_job(std::unique_ptr<runner> r) : runner_(std::move(r)) {}

std::unique_ptr<app_job> app_job::start(app_model model, const job_config& config,
                                        std::function<void(const step_metrics&)> on_step) {
  auto r = std::make_unique<runner>(std::move(model), config, static_cast<std::size_t>(std::max(config.workers, 0)), 0,
                                    plan_in_process);
  r->hooks.on_step = std::move(on_step);
  r->hooks.stop_requested = &r->stop;
  runner* self = r.get();
  r->start([self] { return run_in_process(self->prototype, self->data, self->data, self->plan, self->hooks); });
  return std::unique_ptr<app_job>(new app_job(std::move(r)));
}

std::unique_ptr<app_job> app_job::start_process(app_model model, const job_config& config, const process_group& group,
                                                std::function<void(const step_metrics&)> on_step) {
  auto r = std::make_unique<runner>(
      std::move(model), config, 1, group.join ? -1 : group.rank,
      [&group](const accord::model& prototype, const std::shared_ptr<const dataset>& data, const job_config& c,
               std::size_t local_workers) { return plan_between_processes(prototype, data, c, group, local_workers); });
  r->hooks.on_step = std::move(on_step);
  process_group own = group;
  // An elastic job's worker leaves rather than stops the job.
  if (group.elastic || group.join) {
    require(!group.leave_requested, "app_job: use cancel() instead of process_group::leave_requested");
    own.leave_requested = &r->stop;
  } else {
    r->hooks.stop_requested = &r->stop;
  }
  runner* self = r.get();
  r->start([self, own] {
    return run_between_processes(self->prototype, self->data, self->data, self->plan, own, self->hooks);
  });
  return std::unique_ptr<app_job>(new app_job(std::move(r)));
}

app_job::~app_job() {
  if (!runner_->thread.joinable()) return;
  // Nobody may be driving the workers any more: fail them, so the job ends instead of waiting.
  runner_->stop = true;
  for (const auto& s : runner_->hooks.apps) s->fail("the app_job was destroyed while running");
  runner_->thread.join();
}

std::size_t app_job::local_workers() const { return runner_->workers.size(); }

worker& app_job::local_worker(std::size_t index) {
  if (index >= runner_->workers.size())
    throw std::out_of_range("app_job: no local worker " + std::to_string(index) + " (this process has " +
                            std::to_string(runner_->workers.size()) + ")");
  return *runner_->workers[index];
}

std::string app_job::step_counting() const { return runner_->plan.step_counting(); }

void app_job::cancel() { runner_->stop = true; }

job_result app_job::wait() {
  if (!runner_->thread.joinable()) throw std::logic_error("app_job: wait() was called already");
  runner_->thread.join();
  if (runner_->error) std::rethrow_exception(runner_->error);
  return std::move(runner_->result);
}

}  // namespace accord
