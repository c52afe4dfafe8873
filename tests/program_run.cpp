#include "program_run.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace accord::testing {

namespace {

std::vector<std::string> child_environment(const program_options& options) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry; ++entry) {
    const std::string text = *entry;
    if (std::none_of(options.environment_removed.begin(), options.environment_removed.end(),
                     [&](const std::string& prefix) { return text.starts_with(prefix); }))
      env.push_back(text);
  }
  env.insert(env.end(), options.environment.begin(), options.environment.end());
  return env;
}

}  // namespace

program_run run_program(const std::string& program, const std::vector<std::string>& arguments,
                        const program_options& options) {
  std::vector<std::string> env = child_environment(options);
  std::vector<char*> argv{const_cast<char*>(program.c_str())}, envp;
  for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) throw std::runtime_error("run_program: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("run_program: fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // its own process group, so a deadline kills what it started too
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(err[0]);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(99);
  }
  close(out[1]);
  close(err[1]);
  program_run result;
  const auto end = std::chrono::steady_clock::now() + options.deadline;
  pollfd streams[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  bool terminated = false;
  for (int open = 2; open > 0;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    poll(streams, 2, static_cast<int>(left.count()));
    for (int i = 0; i < 2; ++i) {
      if (streams[i].fd < 0 || streams[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t got = read(streams[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(got));
      } else {
        close(streams[i].fd);
        streams[i].fd = -1;
        --open;
      }
    }
    if (options.terminate_after_lines > 0 && !terminated &&
        std::count(result.out.begin(), result.out.end(), '\n') >= options.terminate_after_lines) {
      kill(pid, options.terminate_signal);
      terminated = true;
    }
  }
  for (auto& s : streams)
    if (s.fd >= 0) close(s.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace accord::testing
