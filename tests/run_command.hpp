#pragma once
// Runs a shell command, collecting its stdout and stderr and its exit status (128 + signal
// when a signal ended it).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace accord::testing {

struct run_output {
  int status = -1;
  std::string text;
};

inline run_output run(const std::string& command) {
  run_output out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe);
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) out.text.append(buffer.data(), n);
  const int raw = pclose(pipe);
  out.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return out;
}

}  // namespace accord::testing
