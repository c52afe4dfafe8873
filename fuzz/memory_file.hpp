#pragma once
// For readers that take a path: the fuzz input as a file (a memfd, named /proc/self/fd/N), so
// the real reader runs on it without touching the disk.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace accord::fuzz {

class memory_file {
public:
  memory_file() : fd_(memfd_create("accord-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
  }
  ~memory_file() { close(fd_); }
  // Replaces the contents and returns a path that opens them.
  std::string hold(const std::uint8_t* data, std::size_t size) {
    if (ftruncate(fd_, 0) != 0 || (size && pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)))
      throw std::runtime_error("memfd write failed");
    return "/proc/self/fd/" + std::to_string(fd_);
  }

private:
  int fd_;
};

}  // namespace accord::fuzz
