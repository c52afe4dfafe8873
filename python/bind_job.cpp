// accord.Job and accord.Worker: <accord/worker.hpp>'s app_job and worker for Python apps.
// Every call that may block (next, submit, wait, the job's end) releases the GIL, so a job's
// workers can be driven from Python threads; accord's threads take the GIL only to call the
// app's on_step, evaluate and optimizer (its step, on each worker's communicator thread), and to
// print the progress line. The status page (status_port) is accord-train's, served from C++.
#include "bindings.hpp"
#include "float_buffer.hpp"

#include <accord/worker.hpp>

#include "gpu/device.hpp"
#include "job/app_plan.hpp"
#include "observe/progress_line.hpp"
#include "observe/status_server.hpp"
#include "recovery/checkpoint.hpp"

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <mutex>

namespace py = pybind11;

namespace accord::python {
namespace {

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// ValueError naming why accord cannot use the CUDA device of `where` here.
void require_usable(const memory_location& where) {
  if (const std::string why = cuda_device_unusable(where.device); !why.empty())
    throw py::value_error("parameters: a tensor on " + describe_location(where) + ", which accord cannot use: " + why);
}

// A Python error's message without the traceback pybind11 appends.
std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

// The app's model of flat float32 `initial_parameters` (copied; a CUDA tensor puts the job on
// its device), as Job and Job.check make it.
app_model app_model_of(py::handle initial_parameters, std::string signature, std::string data) {
  const float_buffer initial(initial_parameters, "parameters", false);
  app_model model;
  model.signature = std::move(signature);
  model.data = std::move(data);
  model.memory = initial.where();  // parameters on a CUDA device: the model lives there
  if (!model.memory.on_host()) require_usable(model.memory);
  model.initial_parameters.resize(initial.size());
  copy_values(initial.span(), model.initial_parameters);
  return model;
}

// The app's optimizer's name and slots, as accord plans with them (its step set apart).
elementwise_optimizer app_optimizer_of(const py::object& optimizer) {
  elementwise_optimizer app;
  app.name = optimizer.attr("name").cast<std::string>();
  app.slots = optimizer.attr("slots").cast<std::size_t>();
  return app;
}

// What Job(...) would refuse, without starting it: ValueError naming the problem.
void check_job(py::handle parameters, job_config config, std::string signature, std::optional<process_group> group,
               bool evaluates, std::string data, py::object optimizer) {
  app_model model = app_model_of(parameters, std::move(signature), data);
  if (evaluates) model.evaluate = [](std::span<const float>) { return -1.0; };  // the plan only asks whether
  elementwise_optimizer app;
  if (!optimizer.is_none()) {
    app = app_optimizer_of(optimizer);
    app.step = [](std::uint64_t, std::span<float>, std::span<const float>, std::span<float>, std::uint64_t, float) {
      return -1.0;  // never called: planning only asks that there is one
    };
    config.app_optimizer = &app;
  }
  py::gil_scoped_release unlocked;
  const app_parameters prototype(std::make_shared<const app_model>(std::move(model)));
  const std::size_t local_workers = group ? 1 : static_cast<std::size_t>(std::max(config.workers, 0));
  plan_app_job(prototype, std::make_shared<app_data>(std::move(data)), config, local_workers,
               group ? &*group : nullptr);
}

// A running job and the app's callbacks. The C++ callbacks reach the Python ones through this
// object (never by holding Python objects themselves), so nothing Python is released without
// the GIL. Every step the coordinator reports goes to the status page (status_port, where this
// process leads the job) and the progress line (every log_interval steps) before on_step; with
// the app's optimizer, its learning rate is the one that optimizer's step used.
class job_handle {
public:
  job_handle(py::handle initial_parameters, job_config config, std::string signature,
             std::optional<process_group> group, py::object on_step, py::object evaluate, std::string data,
             py::object optimizer, std::optional<int> status_port, std::uint64_t log_interval, std::string log_unit,
             py::object on_checkpoint)
      : on_step_(std::move(on_step)), evaluate_(std::move(evaluate)), optimizer_(std::move(optimizer)),
        on_checkpoint_(std::move(on_checkpoint)) {
    const std::string description = config.algorithm + ", " + std::to_string(config.workers) + " workers, " +
                                    signature + ", " + data;
    app_model model = app_model_of(initial_parameters, std::move(signature), std::move(data));
    if (!evaluate_.is_none())
      model.evaluate = [this](std::span<const float> parameters) { return call_evaluate(parameters); };
    parameter_count_ = model.initial_parameters.size();
    memory_ = model.memory;
    if (!optimizer_.is_none()) {
      app_optimizer_ = app_optimizer_of(optimizer_);
      app_optimizer_.step = [this](std::uint64_t begin, std::span<float> parameters, std::span<const float> gradients,
                                   std::span<float> state, std::uint64_t step, float learning_rate_factor) {
        return call_optimizer(begin, parameters, gradients, state, step, learning_rate_factor);
      };
      config.app_optimizer = &app_optimizer_;
    }
    const bool leads = !group || (!group->join && group->rank == 0);
    if (status_port && leads) {
      try {
        status_ = std::make_unique<status_server>(*status_port, description, config.steps);
      } catch (const std::runtime_error& e) {
        const std::string why = e.what();
        throw py::value_error("status_port=" + std::to_string(*status_port) + why.substr(why.find(':')));
      }
      const std::string host = group && !group->host.empty() ? group->host : "127.0.0.1";
      py::print("status page: http://" + host + ":" + std::to_string(status_->port()) + "/ (Prometheus: /metrics)",
                py::arg("flush") = true);
    }
    if (log_interval > 0 && leads) progress_.emplace(config.steps, log_interval, std::move(log_unit));
    if (group && (status_ || progress_))
      group->on_event = [this](const std::string& line) { on_event(line); };

    if (!on_checkpoint_.is_none())
      config.on_checkpoint_written = [this](const std::string& path, std::uint64_t step) {
        on_checkpoint_written(path, step);
      };
    auto step_callback = [this](const step_metrics& step) { on_coordinator_step(step); };
    py::gil_scoped_release unlocked;
    auto job = group ? app_job::start_process(std::move(model), config, *group, std::move(step_callback))
                     : app_job::start(std::move(model), config, std::move(step_callback));
    std::lock_guard lock(mutex_);
    job_ = std::move(job);
    copied_.assign(job_->local_workers(), copy_state{});
  }

  ~job_handle() {
    py::gil_scoped_release unlocked;  // the job's end may wait for a callback that needs the GIL
    std::unique_ptr<app_job> job;
    {
      std::lock_guard lock(mutex_);
      job = std::move(job_);
    }
    job.reset();
  }

  std::size_t parameter_count() const { return parameter_count_; }
  // ValueError unless `buffer` is in the job's memory.
  void require_job_memory(const float_buffer& buffer, const char* what) const {
    if (buffer.where() != memory_)
      throw py::value_error(std::string(what) + ": a tensor in " + describe_location(buffer.where()) +
                            " memory, the job's parameters are in " + describe_location(memory_) + " memory");
  }
  std::size_t local_workers() const { return job_->local_workers(); }
  std::string step_counting() const { return job_->step_counting(); }
  worker& local_worker(std::size_t index) { return job_->local_worker(index); }
  void cancel() { job_->cancel(); }

  job_result wait() {
    std::optional<job_result> result;
    {
      py::gil_scoped_release unlocked;
      result = job_->wait();
    }
    if (!callback_error_.empty()) throw std::runtime_error(callback_error_);
    return std::move(*result);
  }

  // The status page's port; None without one.
  std::optional<int> status_port() const { return status_ ? std::optional(status_->port()) : std::nullopt; }

  // The parameters a worker's next() last copied into the app's buffer, and where.
  struct copy_state {
    std::uint64_t version = std::numeric_limits<std::uint64_t>::max();
    const float* into = nullptr;
  };
  copy_state& copied(std::size_t index) { return copied_.at(index); }

private:
  // On the coordinator's thread, for every step.
  void on_coordinator_step(const step_metrics& step) {
    if (status_) status_->on_step(step);
    const std::string line = progress_ ? progress_->on_step(step) : "";
    if ((line.empty() && on_step_.is_none()) || interpreter_finalizing()) return;
    py::gil_scoped_acquire locked;
    if (!line.empty()) py::print(line, py::arg("flush") = true);
    if (!on_step_.is_none()) call_stopping_on_error("on_step", on_step_, step);
  }

  // On the coordinator's thread, after each checkpoint file is written (rank 0's between processes).
  void on_checkpoint_written(const std::string& path, std::uint64_t step) {
    if (interpreter_finalizing()) return;
    py::gil_scoped_acquire locked;
    call_stopping_on_error("on_checkpoint", on_checkpoint_, path, step);
  }

  // A membership event between processes, as accord-train shows it.
  void on_event(const std::string& line) {
    if (status_) status_->on_event(line);
    if (!progress_ || interpreter_finalizing()) return;
    py::gil_scoped_acquire locked;
    py::print(line, py::arg("flush") = true);
  }

  // callback(args...) with the GIL held; an error stops the job after this step, and wait()
  // raises it.
  template <class... Args>
  void call_stopping_on_error(const char* name, const py::object& callback, const Args&... args) {
    try {
      callback(args...);
    } catch (py::error_already_set& error) {
      std::lock_guard lock(mutex_);
      if (callback_error_.empty()) callback_error_ = std::string(name) + " raised " + first_line(error.what());
      if (job_) job_->cancel();
    }
  }

  double call_evaluate(std::span<const float> parameters) {
    if (interpreter_finalizing()) return -1;
    py::gil_scoped_acquire locked;
    try {
      const py::array_t<float> copy(static_cast<py::ssize_t>(parameters.size()), parameters.data());
      return evaluate_(copy).cast<double>();
    } catch (py::error_already_set& error) {
      throw std::runtime_error("evaluate raised " + first_line(error.what()));
    } catch (py::cast_error&) {
      throw std::runtime_error("evaluate returned something that is not a number");
    }
  }

  // optimizer.step(begin, parameters, gradients, state, step, learning_rate_factor) with numpy
  // arrays that borrow accord's memory for the call (parameters and state written in place);
  // the rate it returns (its scheduler's), -1 for None.
  double call_optimizer(std::uint64_t begin, std::span<float> parameters, std::span<const float> gradients,
                        std::span<float> state, std::uint64_t step, float learning_rate_factor) {
    if (interpreter_finalizing()) throw std::runtime_error(app_optimizer_.name + ": Python is shutting down");
    py::gil_scoped_acquire locked;
    try {
      const py::capsule borrowed(parameters.data(), [](void*) {});
      const auto count = static_cast<py::ssize_t>(parameters.size());
      const auto width = static_cast<py::ssize_t>(sizeof(float));
      const py::array_t<float> parameter_array({count}, {width}, parameters.data(), borrowed);
      // Writable for torch.from_numpy's sake: nothing writes it.
      const py::array_t<float> gradient_array({count}, {width}, const_cast<float*>(gradients.data()), borrowed);
      const py::array_t<float> state_array({static_cast<py::ssize_t>(app_optimizer_.slots), count},
                                           {count * width, width}, state.data(), borrowed);
      const py::object rate =
          optimizer_.attr("step")(begin, parameter_array, gradient_array, state_array, step, learning_rate_factor);
      return rate.is_none() ? -1.0 : rate.cast<double>();
    } catch (py::error_already_set& error) {
      throw std::runtime_error(app_optimizer_.name + " raised " + first_line(error.what()));
    } catch (py::cast_error&) {
      throw std::runtime_error(app_optimizer_.name + ": step returned something that is neither None nor a number");
    }
  }

  py::object on_step_, evaluate_, optimizer_, on_checkpoint_;
  elementwise_optimizer app_optimizer_;  // job_config::app_optimizer, calling optimizer_
  std::mutex mutex_;
  std::unique_ptr<app_job> job_;
  std::size_t parameter_count_ = 0;
  memory_location memory_;
  std::vector<copy_state> copied_;
  std::string callback_error_;
  std::unique_ptr<status_server> status_;
  std::optional<progress_log> progress_;  // only the coordinator's thread uses it
};

// One local worker of a job, as Python sees it: the job stays alive while a handle exists.
struct worker_handle {
  std::shared_ptr<job_handle> job;
  std::size_t index;

  worker& get() const { return job->local_worker(index); }

  // Waits (without the GIL) for accord's next request; copies the parameters into `into`, the
  // app's flat buffer, when they changed since the last copy there.
  std::optional<micro_batch_request> next(py::object into) {
    std::optional<float_buffer> target;
    if (!into.is_none()) {
      target.emplace(into, "into", true);
      target->require_size(job->parameter_count(), "the job's parameters are");
      job->require_job_memory(*target, "into");
    }
    wait_ready();
    py::gil_scoped_release unlocked;
    auto request = get().next();
    if (request && target) {
      auto& copied = job->copied(index);
      if (copied.version != request->parameters_version || copied.into != target->data()) {
        copy_values(request->parameters_at, target->span());
        copied = {request->parameters_version, target->data()};
      }
    }
    if (request) {  // not valid beyond the next submit: Python never sees them
      request->parameters = {};
      request->parameters_at = {};
    }
    return request;
  }

  // Waits (without the GIL) until next() answers at once, in slices between which Python's
  // signal handlers run (the main thread's: Ctrl-C while rank 0 waits for the others, say). A
  // handler that raises (KeyboardInterrupt) cancels the job, and its exception propagates.
  void wait_ready() {
    constexpr auto slice = std::chrono::milliseconds(100);
    for (;;) {
      {
        py::gil_scoped_release unlocked;
        if (get().wait_ready(slice)) return;
      }
      if (PyErr_CheckSignals() != 0) {
        job->cancel();
        throw py::error_already_set();
      }
    }
  }

  void submit(py::handle gradient, double items, double loss) {
    const float_buffer values(gradient, "gradient", false);
    values.require_size(job->parameter_count(), "the job's parameters are");
    py::gil_scoped_release unlocked;
    get().submit(values.span(), items, loss);
  }

  // Returns at once (the add runs on accord's thread): the GIL is kept.
  void gradients_final_from(py::handle gradient, std::size_t begin) {
    const float_buffer values(gradient, "gradient", false);
    values.require_size(job->parameter_count(), "the job's parameters are");
    get().gradients_final_from(values.span(), begin);
  }
};

}  // namespace

void bind_job(py::module_& m) {
  py::class_<micro_batch_request>(m, "Request", "A micro-batch accord asks a worker for.")
      .def_readonly("index", &micro_batch_request::index, "this worker's micro-batch counter")
      .def_readonly("first_position", &micro_batch_request::first_position,
                    "where its examples start in the job's stream (workers' streams are disjoint)")
      .def_readonly("examples", &micro_batch_request::examples, "JobConfig.micro_batch")
      .def_readonly("parameters_version", &micro_batch_request::parameters_version,
                    "grows whenever a round's new parameters arrive")
      .def_readonly("gradient_progress", &micro_batch_request::gradient_progress,
                    "elements: when positive, accord reduces gradients the app reports final "
                    "(Worker.gradients_final_from) while its backward goes on, in buckets of this many")
      .def("__repr__", [](const micro_batch_request& r) {
        return "<Request " + std::to_string(r.index) + ": examples [" + std::to_string(r.first_position) + ", +" +
               std::to_string(r.examples) + "), parameters version " + std::to_string(r.parameters_version) + ">";
      });

  py::class_<worker_handle>(m, "Worker", "One worker of a job, driven by one app thread.")
      .def("next", &worker_handle::next, py::arg("into") = py::none(),
           "Waits until accord wants this worker's next micro-batch and returns its Request (None once "
           "the job is over). `into`, a flat float32 array or tensor of the parameters' size in the job's "
           "memory (the CPU, or the CUDA device of its initial parameters), receives the parameters to "
           "compute it at (copied only when they changed; finished on return).")
      .def("submit", &worker_handle::submit, py::arg("gradient"), py::arg("items"), py::arg("loss"),
           "The flat float32 gradient of the mean loss over the micro-batch's `items`, at the "
           "parameters of the last next(), and that loss, in the job's memory (a CUDA tensor's values "
           "computed: synchronize its stream first). Read at once; it may be reused.")
      .def("gradients_final_from", &worker_handle::gradients_final_from, py::arg("gradient"), py::arg("begin"),
           "While backward runs: gradient[begin:] of the flat float32 gradient that submit() will hand "
           "over is final (host memory, or a CUDA tensor whose stream is synchronized). accord adds it "
           "at once on its own thread and, when the Request's gradient_progress is positive, starts "
           "reducing it; submit() then adds only [0, begin). Those values must not change until "
           "submit() returns; a report that does not lower `begin` is ignored.")
      .def("fail", [](const worker_handle& w, const std::string& why) { w.get().fail(why); }, py::arg("why"),
           "The app's computation failed: the job fails with this message.")
      .def("end", [](const worker_handle& w) { w.get().end(); },
           "The app's data ran out (or its loop stops early): this worker submits no more micro-batches. "
           "The job ends after the last step whose micro-batches every worker submitted, with no "
           "optimizer step on a partial gradient; next() returns None from now on.")
      .def_property_readonly("rank", [](const worker_handle& w) { return w.get().rank(); });

  py::class_<job_handle, std::shared_ptr<job_handle>>(m, "Job",
                                                      "A running job whose micro-batches the app computes.")
      .def(py::init<py::handle, job_config, std::string, std::optional<process_group>, py::object, py::object,
                    std::string, py::object, std::optional<int>, std::uint64_t, std::string, py::object>(),
           py::arg("parameters"), py::arg("config"), py::arg("signature"), py::arg("group") = py::none(),
           py::arg("on_step") = py::none(), py::arg("evaluate") = py::none(),
           py::arg("data") = "the app's own data", py::arg("optimizer") = py::none(),
           py::arg("status_port") = py::none(), py::arg("log_interval") = 0, py::arg("log_unit") = "ex",
           py::arg("on_checkpoint") = py::none(),
           "Starts a job over the flat float32 initial `parameters` (copied; a CUDA tensor puts the "
           "job's parameters and gradient sums on its device). Without `group`, all "
           "config.workers workers run in this process; with one, this process's worker of a job "
           "between processes. `signature` names the architecture (workers of one job must agree). "
           "on_step(StepMetrics) and evaluate(parameters) -> float are called from accord's threads. "
           "`optimizer` (JobConfig.app_optimizer, <accord/app_optimizer.hpp>): an object with `name`, "
           "`slots` and step(begin, parameters, gradients, state, step, learning_rate_factor), called "
           "from each worker's communicator thread with numpy arrays valid during the call "
           "(accord.torch's ShardOptimizer); config.optimizer must be its name; step may return the "
           "learning rate it used, which the step's StepMetrics then reports. `status_port` (0: a free "
           "one): accord-train's status page and Prometheus /metrics, served where this process leads the "
           "job. `log_interval`: accord-train's progress line every this many steps (0: none), its "
           "throughput in `log_unit`/s. on_checkpoint(path, step) is called from the coordinator after "
           "each checkpoint file is written (config.on_checkpoint_written).")
      .def_static("check", &check_job, py::arg("parameters"), py::arg("config"), py::arg("signature"),
                  py::arg("group") = py::none(), py::arg("evaluates") = false,
                  py::arg("data") = "the app's own data", py::arg("optimizer") = py::none(),
                  "Plans the job as Job(...) would, without starting it: ValueError naming what is wrong.")
      .def_property_readonly("status_port", &job_handle::status_port,
                             "The status page's port (None: none here).")
      .def_property_readonly("parameter_count", &job_handle::parameter_count)
      .def_property_readonly("local_workers", &job_handle::local_workers)
      .def_property_readonly("step_counting", &job_handle::step_counting,
                             "One line saying how the job counts steps (JobConfig.accumulation_mode).")
      .def("worker",
           [](const std::shared_ptr<job_handle>& job, std::size_t index) {
             job->local_worker(index);  // IndexError for a worker this process does not have
             return worker_handle{job, index};
           },
           py::arg("index"))
      .def("cancel", &job_handle::cancel, "Every worker stops after the same step (writing the checkpoint when "
                                          "config.checkpoint_path is set).")
      .def("wait", &job_handle::wait, "Waits for the end; the JobResult, or raises what failed the job.");

  // The checkpoint a job wrote (recovery/checkpoint.hpp), for the app to place itself: accord
  // resumes from the file itself (JobConfig.resume_path).
  m.def(
      "read_checkpoint",
      [](py::bytes bytes, const std::string& name) {
        checkpoint c;
        try {
          c = parse_checkpoint(std::string_view(bytes), name);
        } catch (const std::runtime_error& malformed) {
          throw py::value_error(malformed.what());
        }
        py::dict out;
        out["steps"] = c.steps;
        out["data_position"] = c.data_position;
        out["signature"] = c.signature;
        out["algorithm"] = c.algorithm;
        out["parameters"] = py::array_t<float>(static_cast<py::ssize_t>(c.parameters.size()), c.parameters.data());
        // The sharded optimizer's state gathered, one row per slot (AdamW m then v; Lion m; SGD momentum).
        out["optimizer_step"] = c.optimizer_step;
        out["optimizer"] = py::array_t<float>({static_cast<py::ssize_t>(c.slots),
                                               static_cast<py::ssize_t>(c.parameters.size())},
                                              c.optimizer.data());
        return out;
      },
      py::arg("bytes"), py::arg("name") = "checkpoint",
      "The steps, data position, signature, algorithm, parameters (float32 master weights) and optimizer "
      "state (float32, slots × parameters: AdamW m then v) of a checkpoint file's bytes; ValueError naming "
      "what is wrong with them.");
}

}  // namespace accord::python
