#pragma once
// Where compute runs, chosen at run time (--device cpu|cuda|cuda:N|auto). The CUDA calls live in the
// CUDA plugin (gpu/cuda_backend.hpp), loaded on the first question about a CUDA device, so
// every binary starts, and picks the CPU, on machines without a GPU or driver.
#include <accord/device_span.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace accord {

enum class device_kind { cpu, cuda };

std::string_view to_string(device_kind kind);

// Number of usable CUDA devices; 0 without a driver, without a GPU, or in a build without CUDA.
int cuda_device_count();
bool cuda_available();
// cuda when a device exists, else cpu.
device_kind default_device();
// Refuses, in one line naming it, a device name that is not "cpu", "cuda", "cuda:N" (GPU N) or
// "auto" (std::invalid_argument: "--device: 'tpu' is not cpu, cuda, cuda:N or auto"). Asks no
// driver: a flag's check, before anything is opened.
void check_device_name(std::string_view name);
// N of "cuda:N"; nullopt for the other names.
std::optional<int> cuda_index(std::string_view name);
// "cpu", "cuda", "cuda:N" or "auto". Unknown names throw std::invalid_argument (as
// check_device_name); "cuda" without a device, or "cuda:N" without GPU N, throws
// std::runtime_error saying why (no driver, no GPU, build without CUDA, too few GPUs).
device_kind parse_device(std::string_view name);
// One line for the first progress line: "cuda:0 NVIDIA H200 (139.8 GiB, sm_90)" or "cpu (8 threads)".
std::string describe_device(device_kind kind);

struct cuda_device_properties {
  int index = 0;
  std::string name;
  std::size_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  double memory_bandwidth = 0;  // peak, bytes/s, from memory clock and bus width
};
// Properties of the current CUDA device; throws std::runtime_error without one.
cuda_device_properties cuda_properties();

// Makes CUDA device `index` the calling thread's current device, on which device_array
// allocates; throws std::runtime_error without a usable CUDA device.
void use_cuda_device(int index);
// Why CUDA device `index` cannot be used here ("no usable CUDA device: <reason>", "cuda:2 does
// not exist: this machine has 1 CUDA device"); empty when it can. Loads the CUDA plugin only
// to ask.
std::string cuda_device_unusable(int index);

// to := from, between any two memories (host, CUDA devices), finished when it returns. Leaves
// the calling thread's current CUDA device as it was: apps call it from their own threads.
// Throws std::invalid_argument for spans of different sizes.
void copy_values(device_span<const float> from, device_span<float> to);

// Host<->device copies of tensors made so far in this process by the CUDA code (device_array
// copies, the CUDA GPT's staging of host spans, the NCCL transport's staging); 0 while the
// CUDA plugin is not loaded.
std::uint64_t tensor_copies_to_and_from_devices();

namespace detail {
void* device_allocate(device_kind kind, std::size_t bytes);
void device_free(device_kind kind, void* pointer) noexcept;
void device_copy_in(device_kind kind, void* device, const void* host, std::size_t bytes);
void device_copy_out(device_kind kind, void* host, const void* device, std::size_t bytes);
}  // namespace detail

// An array in a device's memory (host heap for cpu, cudaMalloc for cuda). Its span() may only
// be dereferenced on that device; copies to and from the host are synchronous.
template <class T>
class device_array {
public:
  device_array() = default;
  device_array(device_kind kind, std::size_t size)
      : kind_(kind), size_(size),
        data_(static_cast<T*>(detail::device_allocate(kind, size * sizeof(T)))) {}
  device_array(device_kind kind, std::span<const T> host) : device_array(kind, host.size()) {
    copy_from(host);
  }
  device_array(device_array&& other) noexcept { swap(other); }
  device_array& operator=(device_array&& other) noexcept {
    device_array(std::move(other)).swap(*this);
    return *this;
  }
  ~device_array() { detail::device_free(kind_, data_); }

  device_kind kind() const { return kind_; }
  std::size_t size() const { return size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }

  void copy_from(std::span<const T> host) {
    check_size(host.size());
    detail::device_copy_in(kind_, data_, host.data(), host.size_bytes());
  }
  void copy_to(std::span<T> host) const {
    check_size(host.size());
    detail::device_copy_out(kind_, host.data(), data_, host.size_bytes());
  }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    copy_to(host);
    return host;
  }

private:
  void swap(device_array& other) noexcept {
    std::swap(kind_, other.kind_);
    std::swap(size_, other.size_);
    std::swap(data_, other.data_);
  }
  void check_size(std::size_t host_size) const;

  device_kind kind_ = device_kind::cpu;
  std::size_t size_ = 0;
  T* data_ = nullptr;
};

namespace detail {
[[noreturn]] void throw_size_mismatch(std::size_t device_size, std::size_t host_size);
}
template <class T>
void device_array<T>::check_size(std::size_t host_size) const {
  if (host_size != size_) detail::throw_size_mismatch(size_, host_size);
}

}  // namespace accord
