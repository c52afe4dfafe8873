#include "actors/compute_actor.hpp"

#include "actors/trace.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace accord {
namespace {

struct compute_state {
  std::shared_ptr<compute_setup> setup;
};

compute_actor::behavior_type compute_behavior(compute_actor::stateful_pointer<compute_state> self,
                                              std::shared_ptr<compute_setup> setup) {
  self->state.setup = std::move(setup);
  return {
      [self](compute_atom, tensor& sum) -> caf::result<gradient_result> {
        auto& s = *self->state.setup;
        const trace_span span("micro-batch", worker_track(s.stream.rank, trace_role::compute),
                              static_cast<std::int64_t>(s.position));
        const auto start = std::chrono::steady_clock::now();
        double loss = 0, items = 0;
        try {  // a failing model or data set fails this worker with its message, not the process
          if (s.app) {
            const auto answer =
                s.app->accumulate(s.parameters, s.position, s.stream.first_position(s.position), s.stream.size, *sum);
            loss = answer.loss, items = answer.items;
          } else {
            const batch input = s.data->examples(s.stream.first_position(s.position), s.stream.size);
            loss = s.net->accumulate_gradients(*s.parameters, input, *sum);
            items = static_cast<double>(input.items());
          }
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        ++s.position;
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (s.speed_factor > 1.0)  // a slower device: take speed_factor times as long
          std::this_thread::sleep_for(took * (s.speed_factor - 1.0));
        const std::chrono::duration<double> total = std::chrono::steady_clock::now() - start;
        return gradient_result{std::move(sum), loss, items, total.count(),
                               s.position};
      },
      [self](params_atom, tensor& parameters) -> tensor {
        std::swap(self->state.setup->parameters, parameters);
        if (self->state.setup->app) self->state.setup->app->new_parameters();
        return std::move(parameters);
      },
  };
}

struct evaluator_state {
  std::shared_ptr<model> net;
  std::shared_ptr<const dataset> data;
  std::uint64_t examples = 0;
};

// Held-out examples per model call: bounds the activations, and changes nothing in the result.
constexpr std::uint64_t evaluation_chunk = 32;

evaluator_actor::behavior_type evaluator_behavior(
    evaluator_actor::stateful_pointer<evaluator_state> self, evaluator_state setup) {
  self->state = setup;
  return {
      [self](evaluate_atom, const tensor& parameters) -> caf::result<double> {
        auto& s = self->state;
        const trace_span span("evaluate", evaluator_track);
        double sum = 0;
        try {
          for (std::uint64_t first = 0; first < s.examples; first += evaluation_chunk) {
            const std::uint64_t count = std::min(evaluation_chunk, s.examples - first);
            sum += s.net->evaluate(*parameters, s.data->examples(first, count)) * static_cast<double>(count);
          }
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        return s.examples ? sum / static_cast<double>(s.examples) : 0.0;
      },
  };
}

}  // namespace

compute_actor spawn_compute_actor(caf::actor_system& system,
                                  std::shared_ptr<compute_setup> setup) {
  return system.spawn<caf::detached>(compute_behavior, std::move(setup));
}

evaluator_actor spawn_evaluator_actor(caf::actor_system& system, std::unique_ptr<model> net,
                                      std::shared_ptr<const dataset> data, std::uint64_t examples) {
  examples = std::min(examples, data->size());
  return system.spawn<caf::detached>(evaluator_behavior,
                                     evaluator_state{std::shared_ptr<model>(std::move(net)), std::move(data), examples});
}

}  // namespace accord
