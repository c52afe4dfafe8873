#pragma once
// Runs a program of apps/ as a child process and collects what it printed: the one subprocess
// runner every test that starts a real binary shares.
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

namespace accord::testing {

struct program_run {
  int exit_status = -1;  // 128 + signal when it died of one
  bool timed_out = false;
  std::string out, err;
};

struct program_options {
  std::vector<std::string> environment = {};  // "NAME=value" entries added to the child's
  // Variables whose names start with one of these are not passed on (e.g. "RANK=").
  std::vector<std::string> environment_removed = {};
  // Killed (SIGKILL) past this; the run then says timed_out.
  std::chrono::milliseconds deadline = std::chrono::minutes(10);
  // terminate_signal (SIGTERM; SIGINT as Ctrl-C) once the child's stdout holds this many lines (0: never).
  int terminate_after_lines = 0;
  int terminate_signal = SIGTERM;
};

program_run run_program(const std::string& program, const std::vector<std::string>& arguments,
                        const program_options& options = {});

std::vector<std::string> lines_of(const std::string& text);

}  // namespace accord::testing
