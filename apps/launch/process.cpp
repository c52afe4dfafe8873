#include "apps/launch/process.hpp"

#include "apps/launch/options.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace accord::launch {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::vector<char*> as_pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

void make_pipe(int ends[2]) {
  if (pipe2(ends, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!is_executable_file(name)) throw cannot_run_error("program '" + name + "' is not an executable file");
    return name;
  }
  const char* path_variable = std::getenv("PATH");
  const std::string search = path_variable != nullptr ? path_variable : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= search.size()) {
    std::size_t end = search.find(':', begin);
    if (end == std::string::npos) end = search.size();
    const std::string folder = end == begin ? "." : search.substr(begin, end - begin);
    if (const std::string candidate = folder + "/" + name; is_executable_file(candidate)) return candidate;
    begin = end + 1;
  }
  throw cannot_run_error("program '" + name + "' not found in PATH");
}

void start_worker(worker& w, const std::string& prefix, const std::string& program,
                  std::vector<std::string> arguments, std::vector<std::string> environment, int log, int console,
                  int logged) {
  std::vector<char*> argv = as_pointers(arguments);
  std::vector<char*> envp = as_pointers(environment);
  int out[2], err[2], exec_status[2];
  make_pipe(out);
  make_pipe(err);
  make_pipe(exec_status);
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed launcher leaves no orphans behind
    if (getppid() != launcher) _exit(cannot_run_exit);
#endif
    signal(SIGPIPE, SIG_DFL);  // ignored dispositions would survive exec
    const int null_input = open("/dev/null", O_RDONLY);
    if (null_input < 0 || dup2(null_input, STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 ||
        dup2(err[1], STDERR_FILENO) < 0)
      _exit(cannot_run_exit);
    execve(program.c_str(), argv.data(), envp.data());
    const int error = errno;
    [[maybe_unused]] const ssize_t written = write(exec_status[1], &error, sizeof error);
    _exit(cannot_run_exit);
  }
  setpgid(pid, pid);  // also here, so signals can target the group before the child runs
  close(out[1]);
  close(err[1]);
  close(exec_status[1]);
  int exec_error = 0;
  ssize_t got;
  do got = read(exec_status[0], &exec_error, sizeof exec_error);
  while (got < 0 && errno == EINTR);
  close(exec_status[0]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  w.pid = pid;
  w.running = true;
  w.out = output_stream{out[0], (console & 1) != 0 ? STDOUT_FILENO : -1, prefix, {}, (logged & 1) != 0 ? log : -1};
  w.err = output_stream{err[0], (console & 2) != 0 ? STDERR_FILENO : -1, prefix, {}, (logged & 2) != 0 ? log : -1};
  if (got == static_cast<ssize_t>(sizeof exec_error))
    throw cannot_run_error("cannot run '" + program + "': " + std::strerror(exec_error));
}

}  // namespace accord::launch
