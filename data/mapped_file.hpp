#pragma once
// A whole file mapped read-only into memory: data sets far larger than RAM are paged in as
// windows are drawn, and the train and held-out splits share one mapping. Errors are one
// data_error line naming the file.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace accord {

class mapped_file {
public:
  explicit mapped_file(const std::string& path);
  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }

private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace accord
