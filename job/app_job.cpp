// app_job: a job whose workers' micro-batches the app computes (include/accord/worker.hpp),
// planned as job/app_plan.hpp presents the app's parameters and data to the runners.
#include <accord/worker.hpp>

#include "actors/app_bridge.hpp"
#include "job/app_plan.hpp"
#include "job/runners.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <thread>

namespace accord {

class app_job::runner {
public:
  // Plans the job (in one process without `group`, else this process's worker of a job between
  // processes) for `local_workers` app-driven workers: a bad configuration fails here, before
  // any thread.
  runner(app_model m, const job_config& c, std::size_t local_workers, const process_group* group)
      : app(std::make_shared<const app_model>(std::move(m))), prototype(app),
        data(std::make_shared<app_data>(app->data)) {
    plan = plan_app_job(prototype, data, c, local_workers, group);
    hooks = hooks_of(c, {});
    const int first_rank = group ? (group->join ? -1 : group->rank) : 0;
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
  auto r = std::make_unique<runner>(std::move(model), config, static_cast<std::size_t>(std::max(config.workers, 0)),
                                    nullptr);
  r->hooks.on_step = std::move(on_step);
  r->hooks.stop_requested = &r->stop;
  runner* self = r.get();
  r->start([self] { return run_in_process(self->prototype, self->data, self->data, self->plan, self->hooks); });
  return std::unique_ptr<app_job>(new app_job(std::move(r)));
}

std::unique_ptr<app_job> app_job::start_process(app_model model, const job_config& config, const process_group& group,
                                                std::function<void(const step_metrics&)> on_step) {
  auto r = std::make_unique<runner>(std::move(model), config, 1, &group);
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
