// accord's settings and reports as Python classes: JobConfig, MembershipChange, ParameterGroup and
// ProcessGroup (read-write, with the C++ defaults; made from the field lists of
// <accord/config_fields.hpp>, so every field is there; JobConfig._help and _flags from the
// declarations of <accord/config_settings.hpp>), TopologyOptions (a property per setting
// the registered topologies declare, <accord/settings.hpp>), StepMetrics, JobResult and what they
// hold (read-only; made from <accord/metrics_fields.hpp>'s lists).
#include "bindings.hpp"

#include <accord/config_fields.hpp>
#include <accord/config_settings.hpp>
#include <accord/metrics_fields.hpp>
#include <accord/topology.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <deque>
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

// A read-only class whose properties are the fields of S's list (<accord/metrics_fields.hpp>);
// `_fields` names them in order. Float arrays (JobResult.parameters) are numpy arrays.
template <class S>
py::class_<S> report_class(py::module_& m, const char* name, const char* doc) {
  py::class_<S> cls(m, name, doc);
  py::list bound;
  static std::deque<std::string> names;  // the renamed ones: pybind11 keeps the pointers
  for_each_field<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::value_type;
    // A Python keyword (EdgeTraffic's `from`) takes a trailing underscore, as PEP 8 has it.
    const auto keyword = py::module_::import("keyword").attr("iskeyword")(std::string(f.name)).cast<bool>();
    const char* field_name = keyword ? names.emplace_back(std::string(f.name) + "_").c_str() : f.name.data();
    if constexpr (std::is_same_v<T, std::vector<float>>) {
      cls.def_property_readonly(field_name, [member = f.member](const S& s) {
        return py::array_t<float>(static_cast<py::ssize_t>((s.*member).size()), (s.*member).data());
      });
    } else {
      cls.def_readonly(field_name, f.member);
    }
    bound.append(field_name);
  });
  cls.attr("_fields") = py::tuple(bound);
  return cls;
}

py::object python_value(const setting_value& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

// `value` as `setting` holds it; TypeError naming the setting when it is of another kind (an int
// is a number too; a bool is no whole number).
setting_value declared_value(const setting_declaration& setting, const py::object& value) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  const bool is_int = py::isinstance<py::int_>(value) && !is_bool;
  switch (setting.kind) {
    case setting_kind::boolean:
      if (is_bool) return value.cast<bool>();
      break;
    case setting_kind::whole:
      if (is_int) return value.cast<std::int64_t>();
      break;
    case setting_kind::number:
      if (is_int || py::isinstance<py::float_>(value)) return value.cast<double>();
      break;
    case setting_kind::text:
      if (py::isinstance<py::str>(value)) return value.cast<std::string>();
      break;
  }
  throw py::type_error("topology_settings." + setting.name + ": expected " + accepted(setting));
}

// TopologyOptions: a property per setting the registered topologies declare (a name two declare,
// once), reading the given value or the declared default; `_fields` names them in order.
void bind_topology_options(py::module_& m) {
  py::class_<topology_options> cls(m, "TopologyOptions",
                                   "The topologies' own settings, as each declared them (JobConfig.topology_settings; "
                                   "include/accord/settings.hpp).");
  cls.def(py::init<>());
  py::list bound;
  static std::deque<std::string> names, docs;  // pybind11 keeps the pointers
  for (const auto& [topology, settings] : declared_topology_settings())
    for (const setting_declaration& s : settings) {
      if (std::find(names.begin(), names.end(), s.name) != names.end()) continue;
      const char* name = names.emplace_back(s.name).c_str();
      const char* doc = docs.emplace_back(topology + ": " + s.help).c_str();
      cls.def_property(
          name, [name = s.name](const topology_options& o) { return python_value(o.value(name)); },
          [s](topology_options& o, const py::object& value) { o.set(s.name, declared_value(s, value)); },
          doc);
      bound.append(name);
    }
  cls.attr("_fields") = py::tuple(bound);
  cls.attr("_cpp_only") = py::tuple();
}

}  // namespace

void bind_settings(py::module_& m) {
  topology_names();  // the built-in topologies declare their settings
  bind_topology_options(m);
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
  auto job = settings_class<job_config>(m, "JobConfig", "The settings of a job (include/accord/config.hpp's job_config).")
      .def("__str__", [](const job_config& config) { return describe(config); });
  // The declared settings' help and accord-train flags by field (<accord/config_settings.hpp>).
  py::dict help, flags;
  for (const job_setting& s : declared_job_settings()) {
    help[py::str(s.declared.name)] = s.declared.help;
    flags[py::str(s.declared.name)] = "--" + s.declared.flag;
  }
  job.attr("_help") = help;
  job.attr("_flags") = flags;
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

  report_class<worker_seconds>(m, "WorkerSeconds", "Where one worker's time went during a step (seconds).");
  report_class<thread_cpu>(m, "ThreadCpu", "CPU seconds by the role of the thread that spent them, all processes.");
  report_class<edge_traffic>(m, "EdgeTraffic", "Bytes worker `from` sent worker `to` (ranks) during a step.");
  report_class<step_metrics>(m, "StepMetrics",
                             "One optimizer step as the coordinator saw it (include/accord/metrics.hpp's step_metrics).")
      .def("__repr__", [](const step_metrics& s) {
        return "<StepMetrics step " + std::to_string(s.step) + ", train loss " + std::to_string(s.train_loss) + ">";
      });
  report_class<job_result>(m, "JobResult",
                           "A finished job: final parameters and metrics (include/accord/metrics.hpp's job_result).");
}

}  // namespace accord::python
