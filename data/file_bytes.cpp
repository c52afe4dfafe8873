#include "data/file_bytes.hpp"

#include <zlib.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <memory>
#include <sys/stat.h>

namespace accord {

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw data_error(path, std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw data_error(path, "not a regular file");

  const std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) throw data_error(path, std::string("cannot open: ") + std::strerror(errno));
  gzbuffer(file.get(), 1 << 20);

  // Plain files know their size; compressed ones grow the buffer as they inflate.
  std::vector<std::uint8_t> bytes;
  std::size_t filled = 0;
  std::size_t capacity = static_cast<std::size_t>(info.st_size) + 1;
  for (;;) {
    bytes.resize(capacity);
    const unsigned want = static_cast<unsigned>(std::min<std::size_t>(capacity - filled, 1u << 30));
    const int got = gzread(file.get(), bytes.data() + filled, want);
    int code = Z_OK;
    const char* message = gzerror(file.get(), &code);
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END)) {
      // zlib reports a cut-off gzip stream as Z_BUF_ERROR after returning what it inflated.
      throw data_error(path, code == Z_BUF_ERROR ? std::string("truncated gzip stream")
                                                 : std::string("read failed: ") + message);
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
    if (filled == capacity) capacity *= 2;
  }
  bytes.resize(filled);
  return bytes;
}

}  // namespace accord
