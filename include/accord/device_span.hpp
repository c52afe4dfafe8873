#pragma once
// Public embedder API: a span of values plus the memory it lives in, so that a model on a GPU
// can take its parameters and gradients where they already are (no copy through the host).
// Plain C++: neither CUDA nor the actor library appears here; a CUDA pointer is just a pointer.
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace accord {

// Host memory, or the global memory of one CUDA device (cudaMalloc'ed or managed).
enum class memory_space { host, cuda };

struct memory_location {
  memory_space space = memory_space::host;
  int device = 0;  // the CUDA device's index; 0 and unused for host memory

  bool on_host() const { return space == memory_space::host; }
  friend bool operator==(const memory_location&, const memory_location&) = default;
};

// "host" or "cuda:1", for error messages.
inline std::string describe_location(const memory_location& where) {
  return where.on_host() ? "host" : "cuda:" + std::to_string(where.device);
}

// `values` may be dereferenced only where `where` says. Host spans and vectors convert
// implicitly, so host code passes them unchanged; device memory is named explicitly:
//   device_span<float>{{pointer, count}, {memory_space::cuda, 0}}
template <class T>
struct device_span {
  std::span<T> values;
  memory_location where;

  device_span() = default;
  // Anything a host std::span<T> takes: a span, a vector, an array.
  template <class Host>
    requires std::is_convertible_v<Host&&, std::span<T>>
  device_span(Host&& host_values) : values(std::forward<Host>(host_values)) {}
  device_span(std::span<T> values_, memory_location where_) : values(values_), where(where_) {}
  // float -> const float, as std::span does.
  template <class U>
    requires std::is_convertible_v<U (*)[], T (*)[]>
  device_span(const device_span<U>& other) : values(other.values), where(other.where) {}

  std::size_t size() const { return values.size(); }
  T* data() const { return values.data(); }
  bool on_host() const { return where.on_host(); }
};

}  // namespace accord
