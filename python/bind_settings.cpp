// accord's settings and reports as Python classes: JobConfig, TopologyOptions, MembershipChange,
// ParameterGroup and ProcessGroup (read-write, with the C++ defaults; made from the field lists of
// <accord/config_fields.hpp>, so every field is there), StepMetrics and JobResult (read-only).
#include "bindings.hpp"

#include <accord/config_fields.hpp>
#include <accord/metrics.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <type_traits>

namespace py = pybind11;

namespace accord::python {
namespace {

// A std::chrono::milliseconds field as seconds.
template <class C>
void seconds_property(py::class_<C>& cls, const char* name, std::chrono::milliseconds C::*field) {
  cls.def_property(
      name, [field](const C& c) { return static_cast<double>((c.*field).count()) / 1000.0; },
      [field, name](C& c, double seconds) {
        if (!(seconds > 0 && seconds < 1e9)) throw py::value_error(std::string(name) + ": seconds must be > 0");
        c.*field = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
      });
}

template <class T>
struct is_std_function : std::false_type {};
template <class T>
struct is_std_function<std::function<T>> : std::true_type {};

// A class whose properties are the fields of S's list (include/accord/config_fields.hpp), with
// C++'s defaults; `_fields` names them in order. A pointer or callback field (a stop flag, an
// event callback) has no Python form: `_cpp_only` names those.
template <class S>
py::class_<S> settings_class(py::module_& m, const char* name, const char* doc) {
  py::class_<S> cls(m, name, doc);
  cls.def(py::init<>());
  py::list bound, cpp_only;
  for_each_field<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::value_type;
    const char* field_name = f.name.data();  // a string literal's: NUL-terminated
    if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
      seconds_property(cls, field_name, f.member);
    } else if constexpr (std::is_pointer_v<T> || is_std_function<T>::value) {
      cpp_only.append(field_name);
      return;
    } else {
      cls.def_readwrite(field_name, f.member);
    }
    bound.append(field_name);
  });
  cls.attr("_fields") = py::tuple(bound);
  cls.attr("_cpp_only") = py::tuple(cpp_only);
  return cls;
}

}  // namespace

void bind_settings(py::module_& m) {
  settings_class<topology_options>(m, "TopologyOptions",
                                   "The built-in topologies' settings (JobConfig.topology_settings; "
                                   "include/accord/config.hpp's topology_options).");
  settings_class<membership_change>(m, "MembershipChange",
                                    "After `step` optimizer steps the job has `workers` workers; `crash`: one "
                                    "dies mid-round; `departing`: the ranks that go (default: the last ones) "
                                    "(JobConfig.membership, in one process).")
      .def(py::init([](std::uint64_t step, int workers, bool crash, std::vector<int> departing) {
             return membership_change{step, workers, crash, std::move(departing)};
           }),
           py::arg("step"), py::arg("workers"), py::arg("crash") = false, py::arg("departing") = std::vector<int>{});
  settings_class<parameter_group>(m, "ParameterGroup",
                                  "A range of the flat parameters with its own learning-rate and weight-decay "
                                  "scales, or values the app keeps (role averaged | broadcast) "
                                  "(JobConfig.parameter_groups).")
      .def(py::init([](std::uint64_t begin, std::uint64_t end, float learning_rate_scale, float weight_decay_scale,
                       std::string role) {
             return parameter_group{begin, end, learning_rate_scale, weight_decay_scale, std::move(role)};
           }),
           py::arg("begin"), py::arg("end"), py::arg("learning_rate_scale") = 1.0f,
           py::arg("weight_decay_scale") = 1.0f, py::arg("role") = "trained");
  settings_class<job_config>(m, "JobConfig", "The settings of a job (include/accord/config.hpp's job_config).")
      .def("__str__", [](const job_config& config) { return describe(config); });
  settings_class<process_group>(m, "ProcessGroup",
                                "Where this process sits in a job between processes (one worker per process; "
                                "include/accord/process_group.hpp).")
      .def("__str__", [](const process_group& group) { return describe(group); })
      .def_static("from_environment", &process_group_from_environment, py::arg("join") = "",
                  "This process's place as accord-launch, torchrun or srun left it in the environment (RANK, "
                  "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT or Slurm's variables; ACCORD_ELASTIC, "
                  "ACCORD_JOIN or `join`, HOST:PORT; the job id), with this machine's address towards the "
                  "master as host; None when the environment names no job "
                  "(include/accord/process_group.hpp's process_group_from_environment).");

  py::class_<worker_seconds>(m, "WorkerSeconds")
      .def_readonly("compute", &worker_seconds::compute)
      .def_readonly("communication", &worker_seconds::communication)
      .def_readonly("wait", &worker_seconds::wait);

  py::class_<thread_cpu>(m, "ThreadCpu", "CPU seconds by the role of the thread that spent them, all processes.")
      .def_readonly("compute", &thread_cpu::compute)
      .def_readonly("communicator", &thread_cpu::communicator)
      .def_readonly("evaluator", &thread_cpu::evaluator)
      .def_readonly("actors", &thread_cpu::actors)
      .def_readonly("transport", &thread_cpu::transport)
      .def_readonly("other", &thread_cpu::other);

  py::class_<step_metrics>(m, "StepMetrics", "One optimizer step as the coordinator saw it.")
      .def_readonly("step", &step_metrics::step)
      .def_readonly("train_loss", &step_metrics::train_loss)
      .def_readonly("eval_loss", &step_metrics::eval_loss)
      .def_readonly("seconds", &step_metrics::seconds)
      .def_readonly("items", &step_metrics::items)
      .def_readonly("items_per_second", &step_metrics::items_per_second)
      .def_readonly("bits_per_parameter", &step_metrics::bits_per_parameter)
      .def_readonly("hidden_fraction", &step_metrics::hidden_fraction)
      .def_readonly("micro_batches", &step_metrics::micro_batches)
      .def_readonly("workers", &step_metrics::workers)
      .def_readonly("learning_rate", &step_metrics::learning_rate)
      .def_readonly("bytes_sent", &step_metrics::bytes_sent)
      .def_readonly("gradient_norm", &step_metrics::gradient_norm)
      .def_readonly("vote_agreement", &step_metrics::vote_agreement)
      .def_readonly("per_worker", &step_metrics::per_worker)
      .def_readonly("cpu", &step_metrics::cpu)
      .def("__repr__", [](const step_metrics& s) {
        return "<StepMetrics step " + std::to_string(s.step) + ", train loss " + std::to_string(s.train_loss) + ">";
      });

  py::class_<job_result>(m, "JobResult", "A finished job: final parameters and metrics.")
      .def_property_readonly("parameters",
                             [](const job_result& r) {
                               return py::array_t<float>(static_cast<py::ssize_t>(r.parameters.size()),
                                                         r.parameters.data());
                             })
      .def_readonly("steps", &job_result::steps)
      .def_readonly("final_eval_loss", &job_result::final_eval_loss)
      .def_readonly("seconds", &job_result::seconds)
      .def_readonly("compute_seconds", &job_result::compute_seconds)
      .def_readonly("communication_seconds", &job_result::communication_seconds)
      .def_readonly("wait_seconds", &job_result::wait_seconds)
      .def_readonly("cpu", &job_result::cpu)
      .def_readonly("bits_per_parameter_per_step", &job_result::bits_per_parameter_per_step)
      .def_readonly("hidden_fraction", &job_result::hidden_fraction)
      .def_readonly("bytes_sent", &job_result::bytes_sent)
      .def_readonly("rounds", &job_result::rounds)
      .def_readonly("replicas_identical", &job_result::replicas_identical)
      .def_readonly("data_ended", &job_result::data_ended,
                    "an app-driven worker's data ran out (Job.finish, Worker.end): the job ended at its last full step");
}

}  // namespace accord::python
