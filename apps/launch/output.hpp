#pragma once
// The workers' output as accord-launch forwards it: whole lines, each with its worker's prefix
// ("[rank 3] "), to the launcher's stdout or stderr and, with --log-dir, unprefixed to the
// worker's file; and the launcher's own lines ("accord-launch: ...").
#include <unistd.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace accord::launch {

// Writes all of `data`, waiting out a non-blocking destination; gives up quietly on a closed one
// (e.g. the launcher's stdout piped into `head`) so the workers are still supervised.
void write_all(int fd, std::string_view data);

// One line of the launcher's own on stderr: "accord-launch: `line`".
void say(const std::string& line);

// One worker output stream (its stdout or stderr), cut into whole lines.
struct output_stream {
  int fd = -1;
  int destination = STDOUT_FILENO;  // -1: the stream goes to the log only (--redirects)
  std::string prefix;
  std::string pending;  // bytes after the last newline
  int log = -1;         // --log-dir: the worker's file (its stdout and stderr share it), lines unprefixed

  // A line that never ends is still forwarded once it is this long, so memory stays bounded.
  static constexpr std::size_t longest_line = 1 << 20;

  bool open() const { return fd >= 0; }

  // Reads what is there now; on end of file flushes an unterminated last line and closes.
  void read_available();
  // Forwards the whole lines pending; `at_end`: the last one too, whole or not.
  void forward_lines(bool at_end);
};

}  // namespace accord::launch
