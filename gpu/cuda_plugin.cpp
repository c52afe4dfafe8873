// The CUDA plugin's backend (gpu/cuda_backend.hpp): the CUDA runtime calls behind device.hpp,
// the CUDA kernels, the CUDA GPT and the NCCL transport. Built into libaccord_cuda.so, and
// linked directly into the GPU tests and accord-bench-gpu, where it installs itself.
#include "gpu/cuda_backend.hpp"

#include <accord/version.hpp>

#include "gpu/copy_count.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_gpt.hpp"
#include "gpu/cuda_kernels.hpp"
#include "gpu/nccl_transport.hpp"

#include <string>
#include <string_view>

namespace accord {
namespace {

class cuda_runtime_backend final : public cuda_backend {
public:
  int device_count() const override {
    int count = 0;  // left unwritten when the call fails (e.g. error 35, no driver)
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
  }

  std::string unavailable_reason() const override {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) return cudaGetErrorString(status);
    return count > 0 ? std::string() : std::string("no CUDA device found");
  }

  cuda_device_properties properties() const override {
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
  }

  void set_device(int device) const override { cuda_check(cudaSetDevice(device), "cudaSetDevice"); }

  void* allocate(std::size_t bytes) const override {
    void* pointer = nullptr;
    cuda_check(cudaMalloc(&pointer, bytes), "cudaMalloc");
    return pointer;
  }
  void free(void* pointer) const noexcept override { cudaFree(pointer); }
  void copy_in(void* device, const void* host, std::size_t bytes) const override {
    count_tensor_copy();
    cuda_check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    // From pageable memory cudaMemcpy may return before the data has landed; kernels on
    // non-blocking streams (the models', NCCL's) do not wait for the default stream.
    cuda_check(cudaStreamSynchronize(nullptr), "cudaMemcpy to device");
  }
  void copy_out(void* host, const void* device, std::size_t bytes) const override {
    count_tensor_copy();
    cuda_check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void copy(void* to, const void* from, std::size_t bytes, int device, bool crosses_bus) const override {
    if (bytes == 0) return;
    int callers = 0;
    cuda_check(cudaGetDevice(&callers), "cudaGetDevice");
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    if (crosses_bus) count_tensor_copy();
    // Unified addressing tells the pointers' memories apart. A device-to-device cudaMemcpy may
    // return before it has run, and other streams do not wait for the default one: wait here.
    const cudaError_t copied = cudaMemcpy(to, from, bytes, cudaMemcpyDefault);
    const cudaError_t finished = cudaStreamSynchronize(nullptr);
    cudaSetDevice(callers);
    cuda_check(copied, "cudaMemcpy");
    cuda_check(finished, "cudaMemcpy");
  }
  std::uint64_t tensor_copies() const override { return tensor_copies_made.load(); }

  std::unique_ptr<kernels> make_kernels() const override { return make_cuda_kernels(nullptr); }
  std::unique_ptr<model> make_gpt(const gpt_config& config, compute_precision precision) const override {
    return std::make_unique<cuda_gpt>(config, precision);
  }

  nccl_unique_id make_nccl_unique_id() const override { return accord::make_nccl_unique_id(); }
  std::unique_ptr<transport> make_nccl_transport(const nccl_unique_id& id, int rank, int size,
                                                 int device) const override {
    return std::make_unique<nccl_transport>(id, rank, size, device);
  }
  std::unique_ptr<device_collectives> make_device_collectives(transport& link, int device) const override {
    auto* nccl = dynamic_cast<nccl_transport*>(&link);
    return nccl && nccl->device() == device ? make_nccl_collectives(*nccl) : nullptr;
  }
};

const cuda_runtime_backend backend;

// Linked directly, the backend is there before main; in the plugin this serves the plugin's
// own calls into device.hpp (its copy of accord_gpu when the libraries are static).
[[maybe_unused]] const bool installed = (install_cuda_backend(backend), true);

}  // namespace
}  // namespace accord

// The plugin's entry point, looked up by gpu/cuda_backend.cpp: the backend only for a program
// built from the same accord version, since the two share C++ classes.
extern "C" __attribute__((visibility("default"))) const accord::cuda_backend* accord_cuda_backend_v1(
    const char* version) {
  return std::string_view(version) == accord::version() ? &accord::backend : nullptr;
}
