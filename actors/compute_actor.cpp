#include "actors/compute_actor.hpp"

#include "observe/stall_watchdog.hpp"
#include "observe/thread_cpu.hpp"
#include "observe/trace.hpp"
#include "gpu/device.hpp"
#include "gpu/kernels.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <optional>
#include <thread>

namespace accord {
namespace {

// The high halves of `values` when every one is a bf16 value (its low 16 bits are zero), as a
// 16-bit wire leaves the parameters; false (and `halves` partly written) otherwise.
bool narrow_to_bf16(const std::vector<float>& values, std::vector<std::uint16_t>& halves) {
  halves.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(values[i]);
    if (bits & 0xffffu) return false;
    halves[i] = static_cast<std::uint16_t>(bits >> 16);
  }
  return true;
}

// A resident worker's tensors in its model's memory (compute_setup::resident).
struct resident_tensors {
  memory_location where;
  device_kind kind;
  device_array<float> parameters;
  device_array<float> sum;
  std::weak_ptr<std::vector<float>> sum_of;  // the lent tensor `sum` holds the running sum of
  // Parameters that are bf16 values go up in 16 bits and are widened on the device.
  std::vector<std::uint16_t> narrowed;
  device_array<std::uint16_t> narrowed_on_device;
  std::unique_ptr<kernels> widen;

  resident_tensors(memory_location location, const std::vector<float>& initial)
      : where(location), kind(where.on_host() ? device_kind::cpu : device_kind::cuda) {
    if (kind == device_kind::cuda) use_cuda_device(where.device);  // where device_array allocates
    parameters = device_array<float>(kind, initial.size());
    sum = device_array<float>(kind, initial.size());
    upload_parameters(initial);
  }

  // Bitwise the host's values either way; in half the bytes when they are bf16 values.
  void upload_parameters(const std::vector<float>& host) {
    if (!narrow_to_bf16(host, narrowed)) return parameters.copy_from(host);
    if (!widen) {
      widen = make_kernels(kind);
      narrowed_on_device = device_array<std::uint16_t>(kind, host.size());
    }
    narrowed_on_device.copy_from(narrowed);
    widen->widen_bf16(narrowed_on_device.span(), parameters.span());
    widen->synchronize();  // the model computes on its own stream
  }
};

struct compute_state {
  std::shared_ptr<compute_setup> setup;
  std::shared_ptr<resident_tensors> resident;  // made on the actor's own thread, at first use
};

resident_tensors& resident_of(compute_state& state) {
  if (!state.resident)
    state.resident = std::make_shared<resident_tensors>(state.setup->net->memory(), *state.setup->parameters);
  return *state.resident;
}

// A micro-batch's parameters and the gradient sum it adds into, where the worker keeps them,
// and what keeps the parameters alive.
struct working_memory {
  device_span<const float> parameters;
  device_span<float> sum;
  std::shared_ptr<const void> owner;
};

working_memory working_memory_of(compute_state& state, const tensor& sum) {
  compute_setup& s = *state.setup;
  if (s.memory) {
    s.memory->buffer_of(s.parameters, true);  // the initial parameters go up once
    // Its buffers stay while it lives; a slot is reused only by new tensors of a running worker.
    return {s.memory->ready_for_model(s.parameters), s.memory->ready_for_model(sum), s.memory};
  }
  if (s.resident) {
    resident_tensors& r = resident_of(state);
    if (r.sum_of.lock() != sum) {  // the lent sum goes up at its first micro-batch
      r.sum.copy_from(*sum);
      r.sum_of = sum;
    }
    return {{r.parameters.span(), r.where}, {r.sum.span(), r.where}, state.resident};
  }
  return {*s.parameters, *sum, s.parameters};
}

compute_actor::behavior_type compute_behavior(compute_actor::stateful_pointer<compute_state> self,
                                              std::shared_ptr<compute_setup> setup) {
  name_thread(thread_role::compute, setup->stream.rank);  // a detached actor: this is its own thread
  self->state.setup = std::move(setup);
  return {
      [self](compute_atom, tensor& sum) -> caf::result<gradient_result> {
        auto& s = *self->state.setup;
        const trace_span span("micro-batch", worker_track(s.stream.rank, trace_role::compute),
                              static_cast<std::int64_t>(s.position));
        const auto start = std::chrono::steady_clock::now();
        double loss = 0, items = 0;
        bool ended = false;
        try {  // a failing model or data set fails this worker with its message, not the process
          const working_memory at = working_memory_of(self->state, sum);
          if (s.app) {
            const auto answer = s.app->accumulate(at.owner, at.parameters, s.position,
                                                  s.stream.first_position(s.position), s.stream.size, at.sum);
            loss = answer.loss, items = answer.items, ended = answer.ended;
          } else {
            const batch input = s.data->examples(s.stream.first_position(s.position), s.stream.size);
            loss = s.net->accumulate_gradients_at(at.parameters, input, at.sum);
            items = static_cast<double>(input.items());
          }
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        if (!ended) ++s.position;
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (s.speed_factor > 1.0)  // a slower device: take speed_factor times as long
          std::this_thread::sleep_for(took * (s.speed_factor - 1.0));
        const std::chrono::duration<double> total = std::chrono::steady_clock::now() - start;
        note_progress();  // the stall watchdog's sign of life
        return gradient_result{std::move(sum), loss, items, total.count(), s.position, ended};
      },
      [self](params_atom, tensor& parameters) -> caf::result<tensor> {
        auto& s = *self->state.setup;
        std::swap(s.parameters, parameters);
        if (s.app) s.app->new_parameters();
        try {
          // Not made yet: it takes the current parameters when it is.
          // With s.memory the new tensor's device buffer already holds them: swapped by handle.
          if (self->state.resident) self->state.resident->upload_parameters(*s.parameters);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        return std::move(parameters);
      },
      [self](fetch_atom, tensor& sum) -> caf::result<tensor> {
        auto& resident = self->state.resident;
        if (!resident || resident->sum_of.lock() != sum) return std::move(sum);  // its host values are current
        try {
          resident->sum.copy_to(*sum);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, e.what());
        }
        // The accumulator may now change or reuse the tensor: a later micro-batch uploads it again.
        resident->sum_of.reset();
        return std::move(sum);
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
  name_thread(thread_role::evaluator, 0);
  self->state = setup;
  return {
      [self](evaluate_atom, const tensor& parameters) -> caf::result<double> {
        auto& s = self->state;
        const trace_span span("evaluate", evaluator_track);
        double sum = 0;
        try {
          // A model on a GPU gets the parameters there once per evaluation, not once per chunk.
          const memory_location where = s.net->memory();
          std::optional<device_array<float>> on_device;
          if (!where.on_host()) {
            use_cuda_device(where.device);
            on_device.emplace(device_kind::cuda, std::span<const float>(*parameters));
          }
          for (std::uint64_t first = 0; first < s.examples; first += evaluation_chunk) {
            const std::uint64_t count = std::min(evaluation_chunk, s.examples - first);
            const batch input = s.data->examples(first, count);
            const double loss = on_device ? s.net->evaluate_at({on_device->span(), where}, input)
                                          : s.net->evaluate(*parameters, input);
            sum += loss * static_cast<double>(count);
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
