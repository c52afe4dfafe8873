#include "data/mapped_file.hpp"

#include "data/file_bytes.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace accord {

mapped_file::mapped_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw data_error(path, std::strerror(errno));
  struct stat info {};
  const bool stated = ::fstat(fd, &info) == 0;
  const int error = errno;
  if (!stated || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw data_error(path, stated ? "not a regular file" : std::strerror(error));
  }
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ > 0) {  // mmap refuses a length of 0
    void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      throw data_error(path, std::string("cannot map: ") + std::strerror(error));
    }
    data_ = static_cast<const std::uint8_t*>(address);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
}

mapped_file::~mapped_file() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace accord
