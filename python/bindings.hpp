#pragma once
// The parts of the accord Python module (module.cpp puts them together).
#include <pybind11/pybind11.h>

namespace accord::python {

// JobConfig, ProcessGroup, StepMetrics, WorkerSeconds, JobResult: accord's settings and reports.
void bind_settings(pybind11::module_& m);
// Job and Worker: <accord/worker.hpp>'s app_job and worker.
void bind_job(pybind11::module_& m);

}  // namespace accord::python
