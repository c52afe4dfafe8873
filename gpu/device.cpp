#include "gpu/device.hpp"

#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>

#if ACCORD_HAVE_CUDA
#include "gpu/cuda_check.hpp"
#endif

namespace accord {
namespace {

// Why there is no CUDA device, for error messages; empty when there is one.
std::string cuda_unavailable_reason() {
#if ACCORD_HAVE_CUDA
  int count = 0;  // left unwritten when the call fails (e.g. error 35, no driver)
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  return count > 0 ? std::string() : std::string("no CUDA device found");
#else
  return "this build has no CUDA support (nvcc was not found at configure time)";
#endif
}

}  // namespace

std::string_view to_string(device_kind kind) { return kind == device_kind::cuda ? "cuda" : "cpu"; }

int cuda_device_count() {
#if ACCORD_HAVE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

device_kind default_device() { return cuda_available() ? device_kind::cuda : device_kind::cpu; }

device_kind parse_device(std::string_view name) {
  if (name == "cpu") return device_kind::cpu;
  if (name == "auto") return default_device();
  if (name == "cuda") {
    if (const std::string reason = cuda_unavailable_reason(); !reason.empty())
      throw std::runtime_error("--device cuda: no usable CUDA device: " + reason);
    return device_kind::cuda;
  }
  throw std::invalid_argument("--device: unknown device '" + std::string(name) +
                              "' (expected cpu, cuda or auto)");
}

cuda_device_properties cuda_properties() {
#if ACCORD_HAVE_CUDA
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp properties{};
  cuda_check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  // CUDA 13 dropped the clock fields from cudaDeviceProp; the attributes remain.
  int memory_clock_khz = 0, bus_width_bits = 0;
  cuda_check(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, device),
             "cudaDeviceGetAttribute(memory clock)");
  cuda_check(cudaDeviceGetAttribute(&bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, device),
             "cudaDeviceGetAttribute(bus width)");
  // Double data rate: two transfers per clock.
  const double bandwidth = 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8.0;
  return {device, properties.name, properties.totalGlobalMem, properties.major, properties.minor, bandwidth};
#else
  throw std::runtime_error("CUDA: " + cuda_unavailable_reason());
#endif
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
#if ACCORD_HAVE_CUDA
  void* pointer = nullptr;
  cuda_check(cudaMalloc(&pointer, bytes), "cudaMalloc");
  return pointer;
#else
  throw std::runtime_error("CUDA: " + cuda_unavailable_reason());
#endif
}

void device_free(device_kind kind, void* pointer) noexcept {
  if (!pointer) return;
  if (kind == device_kind::cpu) return ::operator delete(pointer);
#if ACCORD_HAVE_CUDA
  cudaFree(pointer);
#endif
}

void device_copy_in(device_kind kind, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (kind == device_kind::cpu) {
    std::memcpy(device, host, bytes);
    return;
  }
#if ACCORD_HAVE_CUDA
  cuda_check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
#endif
}

void device_copy_out(device_kind kind, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  if (kind == device_kind::cpu) {
    std::memcpy(host, device, bytes);
    return;
  }
#if ACCORD_HAVE_CUDA
  cuda_check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
#endif
}

void throw_size_mismatch(std::size_t device_size, std::size_t host_size) {
  throw std::invalid_argument("device_array: host span of " + std::to_string(host_size) +
                              " elements for a device array of " + std::to_string(device_size));
}

}  // namespace detail
}  // namespace accord
