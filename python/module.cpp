// The extension module accord._accord; the package accord (python/accord/__init__.py)
// re-exports it and adds accord.torch.
#include "bindings.hpp"

#include <accord/topology.hpp>
#include <accord/update_rule.hpp>

#include "gpu/device.hpp"

#include <pybind11/stl.h>

PYBIND11_MODULE(_accord, m) {
  m.doc() = "accord: communication-hiding data-parallel training, driven by the app's own loop";
  m.attr("__version__") = ACCORD_PROJECT_VERSION;
  accord::python::bind_settings(m);
  accord::python::bind_job(m);
  m.def("algorithm_names", &accord::algorithm_names, "Every algorithm JobConfig.algorithm accepts.");
  m.def("topology_names", &accord::topology_names, "Every topology JobConfig.topology accepts.");
  m.def("cuda_unusable", &accord::cuda_device_unusable, pybind11::arg("device"),
        "Why accord cannot keep a job's parameters on CUDA device `device` here (a build without CUDA, "
        "no driver, no such device); '' when it can.");
}
