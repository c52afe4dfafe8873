#include "float_buffer.hpp"

#include <string>

namespace py = pybind11;

namespace accord::python {
namespace {

std::string type_name(py::handle object) { return py::str(py::type::handle_of(object).attr("__name__")); }

// C order without gaps: each stride is the product of the later extents (extent-1 axes may
// carry any stride).
bool c_contiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t axis = info.ndim - 1; axis >= 0; --axis) {
    if (info.shape[axis] != 1 && info.strides[axis] != expected) return false;
    expected *= info.shape[axis];
  }
  return true;
}

}  // namespace

float_buffer::float_buffer(py::handle object, const char* what, bool writable)
    : object_(py::reinterpret_borrow<py::object>(object)), what_(what) {
  const std::string name = what;
  if (PyObject_CheckBuffer(object.ptr())) {
    try {
      buffer_ = py::reinterpret_borrow<py::buffer>(object).request(writable);
    } catch (py::error_already_set&) {
      throw py::value_error(name + ": its buffer cannot be " + (writable ? "written" : "read") +
                            " (a read-only array? pass a writable float32 array)");
    }
    const std::string format = buffer_->format;
    if (buffer_->itemsize != 4 || (format != "f" && format != "<f" && format != "=f"))
      throw py::type_error(name + ": float32 values expected, got buffer format '" + format + "' (" +
                           std::to_string(buffer_->itemsize) + "-byte items); convert with .astype(numpy.float32)");
    if (!c_contiguous(*buffer_))
      throw py::value_error(name + ": the array is not contiguous; pass numpy.ascontiguousarray(...)");
    data_ = static_cast<float*>(buffer_->ptr);
    size_ = static_cast<std::size_t>(buffer_->size);
    return;
  }
  // A torch.Tensor, recognised by its methods: torch itself is not linked.
  if (py::hasattr(object, "data_ptr") && py::hasattr(object, "is_contiguous") && py::hasattr(object, "dtype")) {
    const std::string dtype = py::str(object.attr("dtype"));
    if (dtype != "torch.float32")
      throw py::type_error(name + ": a " + dtype + " tensor, accord takes torch.float32 (use .float())");
    const py::object device = object.attr("device");
    const std::string device_type = py::str(device.attr("type"));
    if (device_type == "cuda")
      where_ = {memory_space::cuda, device.attr("index").cast<int>()};
    else if (device_type != "cpu")
      throw py::value_error(name + ": a tensor on " + std::string(py::str(device)) +
                            ", accord takes CPU and CUDA tensors (use .cpu())");
    if (!object.attr("is_contiguous")().cast<bool>())
      throw py::value_error(name + ": the tensor is not contiguous (use .contiguous())");
    data_ = reinterpret_cast<float*>(object.attr("data_ptr")().cast<std::uintptr_t>());
    size_ = object.attr("numel")().cast<std::size_t>();
    return;
  }
  throw py::type_error(name + ": a float32 numpy array or torch tensor expected, got " + type_name(object));
}

void float_buffer::require_size(std::size_t expected, const char* of_what) const {
  if (size_ != expected)
    throw py::value_error(std::string(what_) + ": " + std::to_string(size_) + " values, " + of_what + " " +
                          std::to_string(expected));
}

}  // namespace accord::python
