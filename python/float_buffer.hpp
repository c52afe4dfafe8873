#pragma once
// A Python object seen as a flat, contiguous float32 array in this process's memory: a numpy
// array (any object with the buffer protocol) or a torch tensor on the CPU or a CUDA device
// (through data_ptr() and its device's index, so neither costs a copy and torch is not linked).
// Anything else is refused with one Python exception naming the argument: TypeError for the
// wrong type or dtype, ValueError for memory that is not contiguous, on another device or
// read-only where it is written.
#include <pybind11/pybind11.h>

#include <accord/device_span.hpp>

#include <cstddef>
#include <optional>

namespace accord::python {

class float_buffer {
public:
  // `what` names the argument in error messages. Holds the object (and its buffer) alive.
  float_buffer(pybind11::handle object, const char* what, bool writable);

  float* data() const { return data_; }
  std::size_t size() const { return size_; }
  const memory_location& where() const { return where_; }
  device_span<float> span() const { return {{data_, size_}, where_}; }
  // ValueError unless it holds exactly `expected` values.
  void require_size(std::size_t expected, const char* of_what) const;

private:
  pybind11::object object_;
  std::optional<pybind11::buffer_info> buffer_;
  const char* what_;
  float* data_ = nullptr;
  std::size_t size_ = 0;
  memory_location where_;
};

}  // namespace accord::python
