#pragma once
// The CUDA half of accord behind one interface, loaded only when a GPU path is asked for.
//
// Everything that needs cudart, cuBLAS or NCCL (the CUDA kernels, the CUDA GPT, the NCCL
// transport) is built into the plugin libaccord_cuda.so, which the factories (parse_device,
// make_kernels, make_gpt_on, the NCCL rendezvous) dlopen on first use. A program or a run that
// stays on the CPU therefore maps none of those libraries (about 225 MB resident otherwise).
// Without an NVIDIA driver on the machine the plugin is not even loaded.
//
// The plugin is looked for at $ACCORD_CUDA_PLUGIN when set, else by name through the dynamic
// linker: the RUNPATH of the program (build tree: gpu/; installed: <prefix>/lib), then
// LD_LIBRARY_PATH and the system's library directories.
#include <accord/model.hpp>

#include "gpu/compute_precision.hpp"
#include "gpu/device.hpp"
#include "gpu/device_collectives.hpp"
#include "gpu/kernels.hpp"
#include "models/gpt.hpp"
#include "transport/transport.hpp"

#include <array>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace accord {

// ncclUniqueId as plain bytes: made by one rank, shipped to the others (e.g. over CAF).
using nccl_unique_id = std::array<std::byte, 128>;

// What the plugin provides. All calls refer to the current CUDA device of the calling thread.
class cuda_backend {
public:
  virtual ~cuda_backend() = default;

  // Usable devices; 0 without a driver or a GPU.
  virtual int device_count() const = 0;
  // Why there is no usable device ("CUDA driver version is insufficient ..."); empty when one exists.
  virtual std::string unavailable_reason() const = 0;
  virtual cuda_device_properties properties() const = 0;
  // Makes `device` the calling thread's current device.
  virtual void set_device(int device) const = 0;

  virtual void* allocate(std::size_t bytes) const = 0;
  virtual void free(void* pointer) const noexcept = 0;
  virtual void copy_in(void* device, const void* host, std::size_t bytes) const = 0;
  virtual void copy_out(void* host, const void* device, std::size_t bytes) const = 0;
  // Between any two memories, `device` current for the call only (the caller's stays), finished
  // when it returns; counted as a tensor copy when one side is the host (`crosses_bus`).
  virtual void copy(void* to, const void* from, std::size_t bytes, int device, bool crosses_bus) const = 0;
  // Host<->device copies of tensors the plugin has made so far (gpu/copy_count.hpp).
  virtual std::uint64_t tensor_copies() const = 0;

  virtual std::unique_ptr<kernels> make_kernels() const = 0;
  virtual std::unique_ptr<model> make_gpt(const gpt_config& config, compute_precision precision) const = 0;

  virtual nccl_unique_id make_nccl_unique_id() const = 0;
  // Joins communicator `id` as `rank` of `size` on CUDA device `device` (see nccl_transport).
  virtual std::unique_ptr<transport> make_nccl_transport(const nccl_unique_id& id, int rank, int size,
                                                         int device) const = 0;
  // Device collectives on `link`'s NCCL communicator and stream; null unless `link` is an NCCL
  // transport on CUDA device `device`.
  virtual std::unique_ptr<device_collectives> make_device_collectives(transport& link, int device) const = 0;
};

// The backend, loaded on first use; null with the reason in `why` when CUDA cannot be used
// here: a build without CUDA, no NVIDIA driver on this machine, or a plugin that cannot be
// loaded (missing, from another accord version, a CUDA library missing).
const cuda_backend* find_cuda_backend(std::string& why);

// The backend, or std::runtime_error "<what>: <why>" (what: the flag that asked, "--transport nccl").
const cuda_backend& require_cuda_backend(std::string_view what);

// For binaries that link the CUDA code directly (the plugin itself, GPU tests, accord-bench-gpu):
// the backend compiled into them, used without loading anything.
void install_cuda_backend(const cuda_backend& backend) noexcept;

}  // namespace accord
