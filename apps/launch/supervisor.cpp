#include "apps/launch/supervisor.hpp"

#include "apps/launch/output.hpp"
#include "apps/launch/process.hpp"
#include "apps/launch/rendezvous.hpp"
#include "observe/trace_files.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <vector>

namespace accord::launch {
namespace {

using clock_type = std::chrono::steady_clock;

std::string describe_signal(int signal_number) {
  const char* name = strsignal(signal_number);
  return "signal " + std::to_string(signal_number) + " (" + (name != nullptr ? name : "unknown") + ")";
}

// Signals arrive as bytes on a pipe that the poll loop watches (the self-pipe trick), so the
// handler stays async-signal-safe and no wakeup is lost between checks.
int signal_pipe_write_end = -1;

void record_signal(int signal_number) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] const ssize_t written = write(signal_pipe_write_end, &byte, 1);
  errno = saved;
}

constexpr int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};

class supervisor {
 public:
  explicit supervisor(const launch_options& options) : options_(options) {}

  int run(const std::string& program) {
    install_signal_handlers();
    program_ = program;
    if (!options_.join_address) master_port_ = options_.master_port ? *options_.master_port : find_free_port();
    const auto started = clock_type::now();
    if (options_.timeout_seconds) job_deadline_ = started + to_duration(*options_.timeout_seconds);
    // A replay's joiners start with the ranks; the coordinator holds each until its step.
    if (options_.replay_log)
      say("replaying " + *options_.replay_log + ": " + std::to_string(options_.workers) + " ranks and " +
          std::to_string(options_.replay_joiners) + " joiner(s), each held by the coordinator until its step");
    workers_.resize(static_cast<std::size_t>(options_.workers + options_.replay_joiners));
    for (int local = 0; local < static_cast<int>(workers_.size()); ++local) {
      worker& w = workers_[static_cast<std::size_t>(local)];
      w.local_rank = local;
      if (options_.join_address)
        w.join_address = *options_.join_address;
      else if (local >= options_.workers)
        w.join_address = options_.master_addr + ":" + std::to_string(master_port_);
      else
        w.rank = options_.rank_offset + local;
      try {
        w.log = open_log(w);
        start(w);
      } catch (const std::exception& error) {
        fail_start(error);
        break;
      }
    }
    supervise();
    if (options_.trace_path) merge_trace();
    // An elastic machine did its part if any of its workers did (the coordinator moves on failure).
    if (options_.elastic && exit_status_ == 0 && !any_worker_succeeded_ &&
        last_failure_status_)
      exit_status_ = *last_failure_status_;
    return exit_status_;
  }

 private:
  bool is_coordinator(const worker& w) const { return w.rank == 0; }

  void start(worker& w) {
    // Without --redirects or --tee both streams go to the console and to --log-dir's file; with
    // them, as torchrun: the streams named by either go to the file, those only --redirects
    // names not to the console.
    const int redirected = options_.redirects.of(w.local_rank), teed = options_.tee.of(w.local_rank);
    const bool chosen = options_.redirects.given || options_.tee.given;
    // append rather than "[" + w.label(): GCC 12 gives a false -Wrestrict warning on that.
    start_worker(w, std::string("[").append(w.label()).append("] "), program_, options_.command,
                 worker_environment(options_, w, master_port_, restarts_done_), w.log,
                 chosen ? 3 & ~(redirected & ~teed) : 3, chosen ? redirected | teed : 3);
    if (options_.trace_path)
      w.trace_parts.emplace_back(w.label(), accord::trace_part_path(*options_.trace_path,
                                                                    w.joiner() ? "join" + std::to_string(w.pid)
                                                                               : "rank" + std::to_string(w.rank)));
  }

  // --max-restarts: a failed worker other than RANK 0 starts again as a joiner of the elastic job
  // (its rank left with it; the job gives the joiner one). False when it cannot be started.
  bool restart_as_joiner(worker& w, const std::string& verdict) {
    ++restarts_done_;
    say(verdict + "; restarting it to join the job again (restart " + std::to_string(restarts_done_) + " of " +
        std::to_string(options_.max_restarts) + ")");
    w.close_streams();
    w.rank = -1;
    w.join_address = options_.join_address.value_or(options_.master_addr + ":" + std::to_string(master_port_));
    try {
      start(w);
      return true;
    } catch (const std::exception& error) {
      say(error.what());
      return false;
    }
  }

  // --max-restarts without --elastic, once the group has stopped: every worker starts again, as
  // at launch (at a fresh free port unless one was given); a log file goes on.
  void restart_group() {
    group_restart_pending_ = false;
    stopping_ = false;
    kill_deadline_.reset();
    if (!options_.master_port) master_port_ = find_free_port();
    for (worker& w : workers_) {
      w.close_streams();
      w.trace_parts.clear();  // the new start writes the same parts afresh
      try {
        start(w);
      } catch (const std::exception& error) {
        fail_start(error);
        return;
      }
    }
  }

  // A worker could not be started: the launch fails with `error`'s line (127 when the program
  // cannot run), and the workers already running must not outlive it.
  void fail_start(const std::exception& error) {
    say(error.what());
    exit_status_ = dynamic_cast<const cannot_run_error*>(&error) != nullptr ? cannot_run_exit : 1;
    stop(SIGTERM);
  }

  // --log-dir's file for worker w ("rank-3.log", "join-0.log"), or -1 without --log-dir.
  int open_log(const worker& w) const {
    if (!options_.log_dir) return -1;
    std::string name = w.label();
    std::replace(name.begin(), name.end(), ' ', '-');
    const std::string path = *options_.log_dir + "/" + name + ".log";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("--log-dir: cannot write " + path + ": " + std::strerror(errno));
    return fd;
  }

  // The workers' trace parts into --trace's file; a worker that wrote none is named (it failed
  // early, or its program takes no trace). A merge that fails makes a successful launch fail.
  void merge_trace() {
    std::vector<std::string> parts;
    for (const worker& w : workers_)
      for (const auto& [label, part] : w.trace_parts) {
        if (std::filesystem::exists(part))
          parts.push_back(part);
        else
          say("--trace: " + label + " wrote no trace (" + part + ")");
      }
    if (parts.empty()) return;
    try {
      accord::merge_trace_files(parts, *options_.trace_path);
    } catch (const std::exception& error) {
      say("--trace: " + std::string(error.what()));
      if (exit_status_ == 0) exit_status_ = 1;
      return;
    }
    for (const std::string& part : parts) std::filesystem::remove(part);
    say("trace of " + std::to_string(parts.size()) + " worker(s): " + *options_.trace_path);
  }

  static clock_type::duration to_duration(double seconds) {
    return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  }

  void install_signal_handlers() {
    int ends[2];
    make_pipe(ends);
    fcntl(ends[0], F_SETFL, O_NONBLOCK);
    fcntl(ends[1], F_SETFL, O_NONBLOCK);
    signal_pipe_read_end_ = ends[0];
    signal_pipe_write_end = ends[1];
    struct sigaction action {};
    action.sa_handler = record_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &action, nullptr);
    for (const int signal_number : forwarded_signals) sigaction(signal_number, &action, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
  }

  void supervise() {
    std::optional<clock_type::time_point> drain_deadline;
    while (true) {
      reap();
      const bool any_running = std::any_of(workers_.begin(), workers_.end(), [](const worker& w) { return w.running; });
      const bool any_open = std::any_of(workers_.begin(), workers_.end(),
                                        [](const worker& w) { return w.out.open() || w.err.open(); });
      if (!any_running && group_restart_pending_ && exit_status_ == 0) {
        restart_group();
        continue;
      }
      if (!any_running) {
        // A worker's own children may keep its pipes open; give them the grace period, no more.
        if (!any_open) break;
        if (!drain_deadline) drain_deadline = clock_type::now() + to_duration(options_.grace_seconds);
        if (clock_type::now() >= *drain_deadline) break;
      }
      wait_for_events(drain_deadline);
      check_deadlines();
    }
    for (worker& w : workers_) w.close_streams();
  }

  void wait_for_events(std::optional<clock_type::time_point> drain_deadline) {
    std::vector<pollfd> watched{{signal_pipe_read_end_, POLLIN, 0}};
    std::vector<output_stream*> streams;
    for (worker& w : workers_)
      for (output_stream* stream : {&w.out, &w.err})
        if (stream->open()) {
          watched.push_back({stream->fd, POLLIN, 0});
          streams.push_back(stream);
        }
    std::optional<clock_type::time_point> next;
    for (const auto& deadline : {job_deadline_, kill_deadline_, drain_deadline})
      if (deadline && (!next || *deadline < *next)) next = deadline;
    int timeout_ms = -1;
    if (next) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - clock_type::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    if (poll(watched.data(), watched.size(), timeout_ms) < 0) return;  // EINTR: the loop looks again
    if (watched[0].revents != 0) handle_signals();
    for (std::size_t i = 1; i < watched.size(); ++i)
      if (watched[i].revents != 0) streams[i - 1]->read_available();
  }

  void handle_signals() {
    unsigned char received[64];
    ssize_t got;
    while ((got = read(signal_pipe_read_end_, received, sizeof received)) > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        const int signal_number = received[i];
        if (signal_number == SIGCHLD) continue;  // reap() runs on every pass
        if (interrupted_) {
          say("received " + describe_signal(signal_number) + " again; killing the workers");
          kill_running(SIGKILL);
          continue;
        }
        interrupted_ = true;
        say("received " + describe_signal(signal_number) + "; forwarding it to the workers");
        if (exit_status_ == 0) exit_status_ = 128 + signal_number;
        stop(signal_number);
      }
    }
  }

  void check_deadlines() {
    const auto now = clock_type::now();
    if (job_deadline_ && now >= *job_deadline_) {
      job_deadline_.reset();
      if (!stopping_ || group_restart_pending_) {  // a group stopping to restart stays stopped
        group_restart_pending_ = false;
        say("timed out after " + format_seconds(*options_.timeout_seconds) + "; stopping the workers");
        exit_status_ = timeout_exit;
        stop(SIGTERM);
      }
    }
    if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      std::string labels;
      for (const worker& w : workers_)
        if (w.running) labels += (labels.empty() ? "" : ", ") + w.label();
      if (!labels.empty()) {
        say(labels + " still running " +
            format_seconds(options_.grace_seconds) + " after being told to stop; sending SIGKILL");
        kill_running(SIGKILL);
      }
    }
  }

  static std::string format_seconds(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%g s", seconds);
    return text;
  }

  void reap() {
    for (worker& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      const pid_t done = waitpid(w.pid, &status, WNOHANG);
      if (done != w.pid) continue;
      w.running = false;
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!failed) any_worker_succeeded_ = true;
      if (!failed || stopping_) continue;
      // Its last words are already in the pipes: forward them before the verdict.
      w.out.read_available();
      w.err.read_available();
      const int worker_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      const std::string verdict =
          w.label() + (WIFEXITED(status) ? " exited with status " + std::to_string(WEXITSTATUS(status))
                                        : " was killed by " + describe_signal(WTERMSIG(status)));
      // An elastic job elects a new coordinator when rank 0's process dies.
      if (options_.elastic) {
        // A restarted RANK 0 would look for the job at its own master port, gone with it.
        if (!is_coordinator(w) && restarts_done_ < options_.max_restarts && restart_as_joiner(w, verdict)) continue;
        say(verdict + "; the job goes on without it (" + (options_.join_address ? "--join" : "--elastic") + ")");
        last_failure_status_ = worker_status;
        continue;
      }
      const auto others = std::count_if(workers_.begin(), workers_.end(), [](const worker& o) { return o.running; });
      if (restarts_done_ < options_.max_restarts) {
        // torchrun's way: the whole group stops and starts again once none runs (supervise()).
        ++restarts_done_;
        group_restart_pending_ = true;
        say(verdict + "; restarting all " + std::to_string(workers_.size()) + " worker(s) (restart " +
            std::to_string(restarts_done_) + " of " + std::to_string(options_.max_restarts) + ")");
      } else {
        say(verdict);
        exit_status_ = worker_status;
        if (others > 0) say("stopping the other " + std::to_string(others) + " worker(s)");
      }
      stop(SIGTERM);
    }
  }

  void stop(int signal_number) {
    stopping_ = true;
    kill_running(signal_number);
    if (!kill_deadline_) kill_deadline_ = clock_type::now() + to_duration(options_.grace_seconds);
  }

  void kill_running(int signal_number) {
    for (const worker& w : workers_)
      if (w.running) kill(-w.pid, signal_number);
  }

  const launch_options& options_;
  std::string program_;
  int master_port_ = 0;  // of the ranked workers' job (none for joiners)
  int restarts_done_ = 0;
  std::vector<worker> workers_;
  int signal_pipe_read_end_ = -1;
  int exit_status_ = 0;
  bool stopping_ = false;
  bool interrupted_ = false;
  bool group_restart_pending_ = false;  // --max-restarts without --elastic: the group stops to start again
  bool any_worker_succeeded_ = false;
  std::optional<int> last_failure_status_;  // of an elastic worker other than RANK 0, or a joiner
  std::optional<clock_type::time_point> job_deadline_;
  std::optional<clock_type::time_point> kill_deadline_;
};

}  // namespace

int run_workers(const launch_options& options, const std::string& program) { return supervisor(options).run(program); }

}  // namespace accord::launch
