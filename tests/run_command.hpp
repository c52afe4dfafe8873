#pragma once
// Runs a shell command line (pipes, `VAR=value` prefixes, `&&`) through run_program, with its
// stdout and stderr together in one text as a user would see them.
#include <doctest/doctest.h>

#include <string>

#include "program_run.hpp"

namespace accord::testing {

struct run_output {
  int status = -1;  // 128 + signal when a signal ended it
  std::string text;
};

inline run_output run(const std::string& command) {
  const program_run done = run_program("/bin/sh", {"-c", "exec 2>&1; " + command});
  REQUIRE_MESSAGE(!done.timed_out, "command ran past its deadline and was killed: " << command);
  return {done.exit_status, done.out + done.err};
}

}  // namespace accord::testing
