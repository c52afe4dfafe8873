#include "job/app_plan.hpp"

#include "gpu/device.hpp"
#include "job/runners.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace accord {

void app_parameters::initialize(std::span<float> parameters, std::uint64_t) const {
  std::copy(m_->initial_parameters.begin(), m_->initial_parameters.end(), parameters.begin());
}

double app_parameters::forward_backward(std::span<const float>, const batch&, std::span<float>) {
  throw std::logic_error("an app-driven worker's micro-batches are computed by the app");
}

double app_parameters::evaluate_at(device_span<const float> parameters, const batch& input) {
  if (parameters.on_host() || !m_->evaluate) return evaluate(parameters.values, input);
  // The evaluator put them on the model's device; the app's evaluate takes host values.
  std::vector<float> host(parameters.size());
  copy_values(parameters, host);
  return evaluate(host, input);
}

batch app_data::examples(std::uint64_t, std::size_t count) const {
  batch b;
  b.examples = count;
  return b;
}

job_plan plan_app_job(const app_parameters& prototype, const std::shared_ptr<const dataset>& data,
                      const job_config& c, std::size_t local_workers, const process_group* group) {
  const app_model& app = prototype.app();
  require(!app.signature.empty(), "app_model: the signature is empty");
  require(!app.initial_parameters.empty(), "app_model: no initial parameters");
  require(std::all_of(app.initial_parameters.begin(), app.initial_parameters.end(),
                      [](float p) { return std::isfinite(p); }),
          "app_model: the initial parameters are not all finite");
  require(!c.stop_requested, "app_job: use cancel() instead of job_config::stop_requested");
  if (!app.memory.on_host()) {
    const std::string unusable = cuda_device_unusable(app.memory.device);
    require(unusable.empty(), "app_model: memory " + describe_location(app.memory) + ": " + unusable);
  }
  job_config config = c;
  if (!app.evaluate) config.eval_interval = 0;  // nothing to evaluate with: only the end's (-1)
  // The app's loop counts steps as torch does: a fixed number of its micro-batches each.
  if (config.accumulation_mode.empty()) config.accumulation_mode = "fixed";
  return group ? plan_between_processes(prototype, data, config, *group, local_workers)
               : plan_in_process(prototype, data, config, local_workers);
}

}  // namespace accord
