#include "gpu/cuda_backend.hpp"

#include <accord/version.hpp>

#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

namespace accord {
namespace {

// The plugin's one exported function: its backend when built from `version`, else null.
using plugin_entry = const cuda_backend* (*)(const char* version);
constexpr const char* plugin_name = "libaccord_cuda.so";
constexpr const char* entry_name = "accord_cuda_backend_v1";

std::atomic<const cuda_backend*> installed{nullptr};

bool exists(const char* path) {
  struct stat info;
  return ::stat(path, &info) == 0;
}

// The driver's device nodes (/dev/dxg: WSL). Without them no GPU can be used, and loading
// cudart, cuBLAS and NCCL only to hear so would cost a CPU run 225 MB.
bool nvidia_driver_present() { return exists("/dev/nvidiactl") || exists("/dev/dxg"); }

// dlopen's last error, or `fallback` when it has none.
std::string dl_error(const char* fallback) {
  const char* error = dlerror();
  return error ? error : fallback;
}

// Loads the plugin and returns its backend, or null with the reason in `why`. The handle is
// never closed: the backend's code must outlive every object it made.
const cuda_backend* load_plugin(std::string& why) {
  const char* override_path = std::getenv("ACCORD_CUDA_PLUGIN");
  const std::string path = override_path && *override_path ? override_path : plugin_name;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    why = "cannot load the CUDA plugin: " + dl_error(path.c_str()) +
          " (set ACCORD_CUDA_PLUGIN to its path if it was moved)";
    return nullptr;
  }
  const auto entry = reinterpret_cast<plugin_entry>(dlsym(handle, entry_name));
  if (!entry) {
    why = path + " is not an accord CUDA plugin: " + dl_error("no entry point");
    return nullptr;
  }
  const std::string wanted(version());
  const cuda_backend* backend = entry(wanted.c_str());
  if (!backend) why = path + " was built from another accord version than this program's " + wanted;
  return backend;
}

}  // namespace

void install_cuda_backend(const cuda_backend& backend) noexcept { installed.store(&backend); }

const cuda_backend* find_cuda_backend(std::string& why) {
  if (const cuda_backend* backend = installed.load()) return backend;
  if (!ACCORD_CUDA_PLUGIN_BUILT) {
    why = "this build has no CUDA support (nvcc was not found at configure time)";
    return nullptr;
  }
  if (!nvidia_driver_present()) {
    why = "no NVIDIA driver on this machine (neither /dev/nvidiactl nor /dev/dxg exists)";
    return nullptr;
  }
  // One attempt per process: its outcome, success or reason, holds for the rest of it.
  static std::once_flag once;
  static std::string load_failure;
  std::call_once(once, [] {
    if (const cuda_backend* backend = load_plugin(load_failure)) installed.store(backend);
  });
  if (const cuda_backend* backend = installed.load()) return backend;
  why = load_failure;
  return nullptr;
}

const cuda_backend& require_cuda_backend(std::string_view what) {
  std::string why;
  if (const cuda_backend* backend = find_cuda_backend(why)) return *backend;
  throw std::runtime_error(std::string(what) + ": " + why);
}

}  // namespace accord
