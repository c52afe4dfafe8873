// accord's settings and reports as Python classes: JobConfig and ProcessGroup (read-write, with
// the C++ defaults), StepMetrics and JobResult (read-only).
#include "bindings.hpp"

#include <accord/job.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

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

}  // namespace

void bind_settings(py::module_& m) {
  py::class_<job_config>(m, "JobConfig", "The settings of a job (include/accord/job.hpp's job_config).")
      .def(py::init<>())
      .def_readwrite("algorithm", &job_config::algorithm)
      .def_readwrite("topology", &job_config::topology)
      .def_readwrite("workers", &job_config::workers)
      .def_readwrite("speed_factors", &job_config::speed_factors)
      .def_readwrite("steps", &job_config::steps)
      .def_readwrite("micro_batch", &job_config::micro_batch)
      .def_readwrite("accumulation", &job_config::accumulation)
      .def_readwrite("max_accumulation", &job_config::max_accumulation)
      .def_readwrite("estimate_accumulation", &job_config::estimate_accumulation)
      .def_readwrite("dpu_warmup", &job_config::dpu_warmup)
      .def_readwrite("seed", &job_config::seed)
      .def_readwrite("optimizer", &job_config::optimizer)
      .def_readwrite("learning_rate", &job_config::learning_rate)
      .def_readwrite("beta1", &job_config::beta1)
      .def_readwrite("beta2", &job_config::beta2)
      .def_readwrite("epsilon", &job_config::epsilon)
      .def_readwrite("weight_decay", &job_config::weight_decay)
      .def_readwrite("warmup_steps", &job_config::warmup_steps)
      .def_readwrite("min_lr_ratio", &job_config::min_lr_ratio)
      .def_readwrite("cosine", &job_config::cosine)
      .def_readwrite("link", &job_config::link)
      .def_readwrite("wire_precision", &job_config::wire_precision)
      .def_readwrite("estimate_precision", &job_config::estimate_precision)
      .def_readwrite("compute_precision", &job_config::compute_precision)
      .def_readwrite("eval_interval", &job_config::eval_interval)
      .def_readwrite("defer_evaluation", &job_config::defer_evaluation)
      .def_readwrite("replica_check_interval", &job_config::replica_check_interval)
      .def_readwrite("metrics_path", &job_config::metrics_path)
      .def_readwrite("trace_path", &job_config::trace_path)
      .def_readwrite("checkpoint_path", &job_config::checkpoint_path)
      .def_readwrite("checkpoint_interval", &job_config::checkpoint_interval)
      .def_readwrite("resume_path", &job_config::resume_path)
      .def_readwrite("blas_threads", &job_config::blas_threads);

  py::class_<process_group> group(m, "ProcessGroup",
                                  "Where this process sits in a job between processes (one worker per process).");
  group.def(py::init<>())
      .def_readwrite("rank", &process_group::rank)
      .def_readwrite("world_size", &process_group::world_size)
      .def_readwrite("master_addr", &process_group::master_addr)
      .def_readwrite("master_port", &process_group::master_port)
      .def_readwrite("master_bind", &process_group::master_bind)
      .def_readwrite("host", &process_group::host)
      .def_readwrite("job_id", &process_group::job_id)
      .def_readwrite("transport", &process_group::transport)
      .def_readwrite("local_rank", &process_group::local_rank)
      .def_static("from_environment", &process_group_from_environment, py::arg("join") = "",
                  "This process's place as accord-launch, torchrun or srun left it in the environment (RANK, "
                  "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT or Slurm's variables; ACCORD_ELASTIC, "
                  "ACCORD_JOIN or `join`, HOST:PORT; the job id), with this machine's address towards the "
                  "master as host; None when the environment names no job "
                  "(include/accord/process_group.hpp's process_group_from_environment).");
  seconds_property(group, "connect_timeout", &process_group::connect_timeout);
  seconds_property(group, "rendezvous_timeout", &process_group::rendezvous_timeout);

  py::class_<worker_seconds>(m, "WorkerSeconds")
      .def_readonly("compute", &worker_seconds::compute)
      .def_readonly("communication", &worker_seconds::communication)
      .def_readonly("wait", &worker_seconds::wait);

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
      .def_readonly("bits_per_parameter_per_step", &job_result::bits_per_parameter_per_step)
      .def_readonly("hidden_fraction", &job_result::hidden_fraction)
      .def_readonly("bytes_sent", &job_result::bytes_sent)
      .def_readonly("rounds", &job_result::rounds)
      .def_readonly("replicas_identical", &job_result::replicas_identical);
}

}  // namespace accord::python
