#pragma once
// Whole-file reads for the data readers. Errors are one line: "<path>: <problem>".
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord {

// A malformed or unreadable data file; the message names the file and the problem.
class data_error : public std::runtime_error {
public:
  data_error(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem) {}
};

// The file's bytes; gzip-compressed files are decompressed (zlib reads plain files as-is).
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

}  // namespace accord
