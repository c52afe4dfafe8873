#include "gpu/device.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>

#include "gpu/cuda_backend.hpp"

namespace accord {
namespace {

// Why there is no CUDA device, for error messages; empty when there is one.
std::string cuda_unavailable_reason() {
  std::string why;
  const cuda_backend* backend = find_cuda_backend(why);
  return backend ? backend->unavailable_reason() : why;
}

// The backend for memory of device_kind::cuda, which exists only once it has been loaded.
const cuda_backend& memory_backend() { return require_cuda_backend("CUDA"); }

}  // namespace

std::string_view to_string(device_kind kind) { return kind == device_kind::cuda ? "cuda" : "cpu"; }

int cuda_device_count() {
  std::string why;
  const cuda_backend* backend = find_cuda_backend(why);
  return backend ? backend->device_count() : 0;
}

bool cuda_available() { return cuda_device_count() > 0; }

device_kind default_device() { return cuda_available() ? device_kind::cuda : device_kind::cpu; }

std::optional<int> cuda_index(std::string_view name) {
  constexpr std::string_view prefix = "cuda:";
  if (!name.starts_with(prefix)) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  int index = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || digits.front() == '-' || error != std::errc{} || end != digits.data() + digits.size())
    return std::nullopt;
  return index;
}

void check_device_name(std::string_view name) {
  if (name == "cpu" || name == "cuda" || name == "auto" || cuda_index(name)) return;
  throw std::invalid_argument("--device: '" + std::string(name) + "' is not cpu, cuda, cuda:N or auto");
}

device_kind parse_device(std::string_view name) {
  check_device_name(name);
  if (name == "cpu") return device_kind::cpu;
  if (name == "auto") return default_device();
  if (const std::optional<int> index = cuda_index(name)) {
    if (const std::string why = cuda_device_unusable(*index); !why.empty())
      throw std::runtime_error("--device " + std::string(name) + ": " + why);
    return device_kind::cuda;
  }
  if (const std::string reason = cuda_unavailable_reason(); !reason.empty())
    throw std::runtime_error("--device cuda: no usable CUDA device: " + reason);
  return device_kind::cuda;
}

cuda_device_properties cuda_properties() { return require_cuda_backend("CUDA").properties(); }

void use_cuda_device(int index) { require_cuda_backend("CUDA").set_device(index); }

std::string cuda_device_unusable(int index) {
  if (const std::string reason = cuda_unavailable_reason(); !reason.empty()) return "no usable CUDA device: " + reason;
  const int count = cuda_device_count();
  if (index >= 0 && index < count) return {};
  return "cuda:" + std::to_string(index) + " does not exist: this machine has " + std::to_string(count) +
         (count == 1 ? " CUDA device" : " CUDA devices");
}

void copy_values(device_span<const float> from, device_span<float> to) {
  if (from.size() != to.size())
    throw std::invalid_argument("copy_values: " + std::to_string(from.size()) + " values into " +
                                std::to_string(to.size()));
  if (from.on_host() && to.on_host()) {
    std::copy(from.values.begin(), from.values.end(), to.values.begin());
    return;
  }
  memory_backend().copy(to.data(), from.data(), from.values.size_bytes(), (to.on_host() ? from : to).where.device,
                        from.on_host() || to.on_host());
}

std::uint64_t tensor_copies_to_and_from_devices() {
  std::string why;
  const cuda_backend* backend = find_cuda_backend(why);
  return backend ? backend->tensor_copies() : 0;
}

std::string describe_device(device_kind kind) {
  if (kind == device_kind::cpu)
    return "cpu (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
  const cuda_device_properties p = cuda_properties();
  char line[256];
  std::snprintf(line, sizeof line, "cuda:%d %s (%.1f GiB, sm_%d%d)", p.index, p.name.c_str(),
                p.memory_bytes / double(1ull << 30), p.compute_major, p.compute_minor);
  return line;
}

namespace detail {

void* device_allocate(device_kind kind, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (kind == device_kind::cpu) return ::operator new(bytes);
  return memory_backend().allocate(bytes);
}

void device_free(device_kind kind, void* pointer) noexcept {
  if (!pointer) return;
  if (kind == device_kind::cpu) return ::operator delete(pointer);
  // Memory of a cuda device_array was allocated through the backend, so it is loaded.
  std::string why;
  if (const cuda_backend* backend = find_cuda_backend(why)) backend->free(pointer);
}

void device_copy_in(device_kind kind, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (kind == device_kind::cpu) {
    std::memcpy(device, host, bytes);
    return;
  }
  memory_backend().copy_in(device, host, bytes);
}

void device_copy_out(device_kind kind, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  if (kind == device_kind::cpu) {
    std::memcpy(host, device, bytes);
    return;
  }
  memory_backend().copy_out(host, device, bytes);
}

void throw_size_mismatch(std::size_t device_size, std::size_t host_size) {
  throw std::invalid_argument("device_array: host span of " + std::to_string(host_size) +
                              " elements for a device array of " + std::to_string(device_size));
}

}  // namespace detail
}  // namespace accord
