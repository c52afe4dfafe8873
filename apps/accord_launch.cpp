// accord-launch: starts N worker processes on this machine with torchrun's rendezvous variables,
// forwards their output line by line with a rank prefix, and fails fast: the first worker that
// fails stops all the others, and its status becomes the launcher's. With --elastic none fails
// fast: the job goes on without a worker that fails (RANK 0's included: the survivors elect a new
// coordinator), or with --max-restarts starts one other than RANK 0 again as a joiner (without
// --elastic, --max-restarts restarts the whole group, as torchrun). With --join the workers join
// a running elastic job instead: they get no rank. With --replay-membership it starts a recorded
// churned job again, its joiners too. Takes torchrun's flags (--nnodes, --standalone,
// --rdzv-backend, -m, --no-python, --tee...); a .py script runs with Python.
#include "observe/trace_files.hpp"
#include "apps/flags.hpp"
#include "cluster/launch_env.hpp"
#include "cluster/membership_log.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

extern char** environ;

namespace {

using clock_type = std::chrono::steady_clock;

constexpr int usage_exit = 2;
constexpr int cannot_run_exit = 127;
constexpr int timeout_exit = 124;

constexpr const char* help_text = R"(usage: accord-launch -n N [options] [--] PROGRAM [ARGS...]

Starts N copies of PROGRAM on this machine, one per rank, and waits for them. PROGRAM is the
first argument that is not an option or an option's value, or whatever follows '--'. Options
take torchrun's spellings too: --nproc_per_node, --node_rank, --rdzv_endpoint, --max_restarts...
As with torchrun, a PROGRAM ending in .py runs as `PYTHON -u PROGRAM ARGS...` (unless
--no-python), and with -m PROGRAM names a module: `PYTHON -u -m PROGRAM ARGS...`. PYTHON is
ACCORD_LAUNCH_PYTHON (the accord-launch that `pip install` puts on PATH sets it to the Python it
was installed for), else python3 on PATH.

Each worker gets torchrun's variables and accord's own; a worker reads its place in the job from
them with accord::process_group_from_environment() (<accord/process_group.hpp>), as accord-train
does, or in Python with accord.process_group():
  RANK              rank offset + local rank (the offset: --node-rank x N, or --rank-offset)
  LOCAL_RANK        0..N-1 on this machine
  WORLD_SIZE        --nnodes x N, or --world-size, or N
  LOCAL_WORLD_SIZE  N
  MASTER_ADDR       --master-addr, or --rdzv-endpoint's HOST
  MASTER_PORT       --master-port, or --rdzv-endpoint's PORT, or a port that was free here at launch
  ACCORD_ELASTIC    1 with --elastic or --join; removed from the workers' environment without them
  ACCORD_JOIN       HOST:PORT with --join; removed from the workers' environment without it
  ACCORD_TRACE      FILE with --trace; removed from the workers' environment without it
  ACCORD_REPLAY_MEMBERSHIP  FILE with --replay-membership; removed from the workers' environment
                    without it
  ACCORD_JOB_ID     --rdzv-id's ID; else accord-launch:HOST:PID when this launcher starts the
                    whole job and neither ACCORD_JOB_ID, TORCHELASTIC_RUN_ID nor SLURM_JOB_ID
                    names it (another job's workers reaching the same master port are then
                    refused as such)
  TORCHELASTIC_RESTART_COUNT  the restarts so far (0 at first), as torchrun sets it
  TORCHELASTIC_MAX_RESTARTS   --max-restarts
With --join the workers get ACCORD_JOIN, ACCORD_ELASTIC, LOCAL_RANK and LOCAL_WORLD_SIZE only, and
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are removed: a joiner gets its rank from the job.
Their stdin is /dev/null; each line a worker writes to stdout (stderr) appears on the launcher's
stdout (stderr) as "[rank R] line", whole lines only; with --join as "[join L] line", L being the
worker's LOCAL_RANK.

When a worker exits non-zero or dies of a signal, one line names its rank and status, the others
get SIGTERM, then SIGKILL after the grace period, and the launcher exits with that worker's exit
status (128 + signal number for a signal). SIGINT, SIGTERM and SIGHUP sent to the launcher are
forwarded to every worker (each runs in its own process group, so its children get them too); a
second one sends SIGKILL at once.

With --elastic (or --join) no worker stops the job that way: one that exits non-zero or dies of a
signal is named in one line and the others go on (when RANK 0's process dies, the survivors elect
a new coordinator); the launcher waits until every worker has exited.

options:
  -n, --nproc-per-node N   workers to start here (at least 1)
  --nnodes M               machines in the job, N workers each: WORLD_SIZE is M x N (default 1)
  --node-rank K            this machine's place, 0..M-1: its workers are ranks K x N .. K x N + N - 1
  --rdzv-endpoint HOST:PORT  rank 0's address and port (sets MASTER_ADDR and MASTER_PORT); with
                           --rdzv-backend c10d, HOST alone means port 29400 (torchrun's c10d port)
  --rdzv-backend static|c10d  torchrun's rendezvous backends; both mean rank 0's master port at
                           --rdzv-endpoint (accord assigns no node ranks: give --node-rank)
  --rdzv-id ID             names the job on every machine (ACCORD_JOB_ID): a worker of another
                           job reaching the master port is refused as such
  --standalone             the whole job on this machine at a free port (the default; conflicts
                           with the options that place workers elsewhere)
  -m, --module             PROGRAM is a Python module, run as `PYTHON -u -m PROGRAM`
  --no-python              run PROGRAM as it is, even a .py script (it must be executable)
  --master-addr HOST       rendezvous address of rank 0 (default 127.0.0.1)
  --master-port PORT       rendezvous port, 1..65535 (default: a free port found by binding port 0;
                           required when the job spans machines, as every machine must agree)
  --rank-offset R          rank of this machine's first worker (default 0), for machines with
                           different numbers of workers (instead of --nnodes and --node-rank)
  --world-size W           workers over all machines (default N); needs W >= R + N
  --timeout SECONDS        stop the workers after this long and exit 124 (default: no limit)
  --grace SECONDS          time between SIGTERM and SIGKILL when stopping workers (default 5)
  --elastic                workers (RANK 0's too) may fail or leave while the rest go on; sets
                           ACCORD_ELASTIC=1 for the workers
  --join HOST:PORT[,HOST:PORT...]  start N more workers for the running elastic job at HOST:PORT
                           (RANK 0's MASTER_ADDR:MASTER_PORT, or any live member's control port),
                           trying the addresses in turn; implies --elastic; conflicts with the
                           options that place workers (--nnodes, --master-port...)
  --max-restarts R         restarts, at most, over all of this machine's workers (default 0).
                           Without --elastic, as torchrun: a worker that fails stops the others,
                           then all start again (at a fresh free port unless one was given).
                           With --elastic or --join: a worker other than RANK 0 that fails starts
                           again as a joiner of the job ("[join L]"). A --log-dir file goes on
  --trace FILE             every worker (accord-train) records the job's timeline and writes its
                           part beside FILE (FILE.rankR.json, a joiner FILE.join<pid>.json, each
                           on RANK 0's clock); once all have exited, the launcher merges the parts
                           of its workers into FILE (one Chrome / Perfetto trace) and removes them
  --replay-membership FILE  replay the membership changes of this --record-membership log
                           (accord-train --record-membership) between real processes: implies
                           --elastic, starts the log's joiners too ("[join L]", L from N on, each
                           held by the coordinator until its recorded step) and names the log to
                           every worker (ACCORD_REPLAY_MEMBERSHIP); the coordinator ends each epoch
                           at the recorded step, where the recorded members leave and the
                           coordinator's process goes away when it was lost. The whole job must
                           start here, with the log's world size. A log that does not fit is one
                           line naming its file and line, before any worker starts
  --log-dir DIR            also write each worker's output, without the prefix, to DIR/rank-R.log
                           (a joiner: DIR/join-L.log), stdout and stderr together, line by line,
                           a file per worker created afresh; DIR is created when missing
  --redirects N            with --log-dir, as torchrun: these streams of each worker (1 stdout,
                           2 stderr, 3 both, 0 none) go to its file only, the others to the
                           console only; "L:N,L:N" chooses by local rank
  --tee N                  with --log-dir: these streams go to the file and to the console
                           (with --redirects: the streams either names go to the file)
  -h, --help               show this help
  --version                print the version

exit status: 0 when every worker exits 0 (after restarts: every worker of the last start); the
first failed worker's status (with --max-restarts: once no restart is left); 124 on timeout;
128 + signal when the launcher was interrupted; 2 for bad flags; 127 when PROGRAM cannot be run.
With --elastic or --join: 0 when at least one worker exited 0, else the status of the last worker
that failed.

multi-machine example (2 machines x 4 workers, rank 0 on host-a), as with torchrun:
  host-a$ accord-launch --nnodes 2 --node-rank 0 --nproc-per-node 4 --rdzv-endpoint host-a:29500 accord-train ...
  host-b$ accord-launch --nnodes 2 --node-rank 1 --nproc-per-node 4 --rdzv-endpoint host-a:29500 accord-train ...
adding a machine to a running elastic job (started with --elastic, RANK 0 on host-a, port 29500):
  host-c$ accord-launch -n 4 --join host-a:29500 -- accord-train ...
Under Slurm, `srun accord-train ...` needs no launcher: workers read SLURM_PROCID and friends.
)";

// Bad command line: one line on stderr and exit status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The program cannot be started: one line on stderr and exit status 127.
struct cannot_run_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// torchrun's --redirects / --tee: per local rank, which streams (1 stdout, 2 stderr, 3 both)
// go to the worker's --log-dir file. "3" names every worker, "0:3,1:2" some.
struct stream_choice {
  bool given = false;
  int every = 0;
  std::vector<std::pair<int, int>> by_local_rank;

  int of(int local_rank) const {
    for (const auto& [local, streams] : by_local_rank)
      if (local == local_rank) return streams;
    return every;
  }
};

struct launch_options {
  int workers = 0;
  int rank_offset = 0;
  std::optional<int> world_size;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;
  std::optional<double> timeout_seconds;
  double grace_seconds = 5.0;
  bool elastic = false;
  std::optional<std::string> join_address;  // HOST:PORT of a running elastic job's RANK 0
  std::optional<std::string> trace_path;    // the merged trace of the workers started here
  std::optional<std::string> log_dir;       // where each worker's output is also written
  int max_restarts = 0;                      // restarts of the group, or with --elastic of failed workers as joiners
  std::optional<std::string> run_id;         // --rdzv-id: the workers' ACCORD_JOB_ID
  stream_choice redirects;                   // streams to --log-dir's files only
  stream_choice tee;                         // streams to --log-dir's files and the console
  std::optional<std::string> replay_log;     // --replay-membership: the membership log every worker replays
  int replay_joiners = 0;                    // the joiners it admits, started here with the ranks
  std::vector<std::string> command;

  // The coordinator is RANK 0; a machine whose workers join a running job has none.
};

int parse_int_flag(std::string_view flag, std::string_view text, int low, int high) {
  int value = 0;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || stop != text.data() + text.size() || text.empty())
    throw usage_error(std::string(flag) + " expects an integer, got '" + std::string(text) + "'");
  if (value < low || value > high)
    throw usage_error(std::string(flag) + " must be in " + std::to_string(low) + ".." +
                      std::to_string(high) + ", got " + std::string(text));
  return value;
}

double parse_seconds_flag(std::string_view flag, std::string_view text, bool allow_zero) {
  const std::string copy(text);
  char* stop = nullptr;
  const double value = std::strtod(copy.c_str(), &stop);
  const bool in_range = allow_zero ? value >= 0 : value > 0;
  if (copy.empty() || *stop != '\0' || !in_range || value > 1e9)
    throw usage_error(std::string(flag) + " expects " + (allow_zero ? "a non-negative" : "a positive") +
                      " number of seconds, got '" + copy + "'");
  return value;
}

// HOST:PORT with a port in 1..65535, as --join and --rdzv-endpoint take it; split at the last colon.
// With a `default_port` (torchrun's c10d endpoints) HOST alone means that port.
std::pair<std::string, int> parse_endpoint_flag(std::string_view flag, std::string_view text,
                                                std::optional<int> default_port = std::nullopt) {
  const auto colon = text.rfind(':');
  if (default_port && colon == std::string_view::npos && !text.empty()) return {std::string(text), *default_port};
  int port = 0;
  const bool valid = colon != std::string_view::npos && colon > 0 && [&] {
    const std::string_view digits = text.substr(colon + 1);
    const auto [stop, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    return error == std::errc{} && stop == digits.data() + digits.size() && port >= 1 && port <= 65535;
  }();
  if (!valid)
    throw usage_error(std::string(flag) + " expects HOST:PORT with a port in 1..65535, got '" + std::string(text) + "'");
  return {std::string(text.substr(0, colon)), port};
}

// --redirects / --tee: "N" or "L:N,L:N..." with N in 0..3 and L a local rank below `workers`.
stream_choice parse_stream_choice(const std::string& flag, std::string_view text, int workers) {
  stream_choice choice;
  choice.given = true;
  if (text.find(':') == std::string_view::npos) {
    choice.every = parse_int_flag(flag, text, 0, 3);
    return choice;
  }
  for (std::string_view rest = text; !rest.empty();) {
    const auto comma = std::min(rest.find(','), rest.size());
    const std::string_view part = rest.substr(0, comma);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
    const auto colon = part.find(':');
    if (colon == std::string_view::npos)
      throw usage_error(flag + " expects N or LOCAL_RANK:N,... with N in 0..3, got '" + std::string(text) + "'");
    choice.by_local_rank.emplace_back(parse_int_flag(flag + "'s local rank", part.substr(0, colon), 0, workers - 1),
                                      parse_int_flag(flag, part.substr(colon + 1), 0, 3));
  }
  return choice;
}

// torchrun's way with Python: a .py script (unless --no-python) or -m's module runs with the
// Python that started the accord-launch console script (ACCORD_LAUNCH_PYTHON, pip install's),
// else python3 on PATH; unbuffered (-u), so that its lines arrive as it writes them.
std::vector<std::string> with_python(std::vector<std::string> command, bool module, bool no_python) {
  if (no_python || !(module || command.front().ends_with(".py"))) return command;
  const char* chosen = std::getenv("ACCORD_LAUNCH_PYTHON");
  std::vector<std::string> prefix{chosen != nullptr && *chosen != '\0' ? chosen : "python3", "-u"};
  if (module) prefix.emplace_back("-m");
  command.insert(command.begin(), prefix.begin(), prefix.end());
  return command;
}

// Returns nullopt for --help and --version, once it has printed them.
std::optional<launch_options> parse_command_line(int argc, char** argv) {
  launch_options options;
  bool saw_workers = false;
  bool module = false, no_python = false, standalone = false;
  std::optional<int> nodes, node_rank;
  std::optional<std::string> endpoint_flag, endpoint_text;  // --rdzv-endpoint as spelled, and its value
  std::optional<std::string> backend;                        // --rdzv-backend
  std::optional<std::pair<std::string, std::string>> redirects_flag, tee_flag;  // (flag, value) as given
  std::vector<std::string> placement_flags;  // those that --join leaves to the running job
  std::vector<std::string> master_flags;     // --master-addr and --master-port, which --rdzv-endpoint sets too
  std::vector<std::string> world_flags;      // --rank-offset and --world-size, which --nnodes sets too
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      options.command.assign(argv + i + 1, argv + argc);
      break;
    }
    // torchrun's way: the program is the first argument that is not a flag or a flag's value.
    if (!arg.starts_with("-")) {
      options.command.assign(argv + i, argv + argc);
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(help_text, stdout);
      return std::nullopt;
    }
    if (arg == "--version") {
      std::puts(accord::version_line(argv[0]).c_str());
      return std::nullopt;
    }
    // Accept both "--flag value" and "--flag=value".
    std::string_view flag = arg;
    std::optional<std::string_view> inline_value;
    if (const auto equals = arg.find('='); arg.starts_with("--") && equals != std::string_view::npos) {
      flag = arg.substr(0, equals);
      inline_value = arg.substr(equals + 1);
    }
    // torchrun spells its flags with '-' and with '_' (--nproc_per_node): both name one flag here.
    std::string name(flag);
    if (name.starts_with("--")) std::replace(name.begin(), name.end(), '_', '-');
    const auto value = [&]() -> std::string_view {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) throw usage_error(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (name == "-n" || name == "--nproc-per-node") {
      options.workers = parse_int_flag(flag, value(), 1, 1 << 16);
      saw_workers = true;
    } else if (name == "--nnodes") {
      nodes = parse_int_flag(flag, value(), 1, 1 << 16);
      placement_flags.emplace_back(flag);
    } else if (name == "--node-rank") {
      node_rank = parse_int_flag(flag, value(), 0, (1 << 16) - 1);
      placement_flags.emplace_back(flag);
    } else if (name == "--master-addr") {
      options.master_addr = value();
      if (options.master_addr.empty()) throw usage_error(std::string(flag) + " must not be empty");
      placement_flags.emplace_back(flag);
      master_flags.emplace_back(flag);
    } else if (name == "--master-port") {
      options.master_port = parse_int_flag(flag, value(), 1, 65535);
      placement_flags.emplace_back(flag);
      master_flags.emplace_back(flag);
    } else if (name == "--rdzv-endpoint") {
      endpoint_text = value();
      placement_flags.emplace_back(flag);
      endpoint_flag = flag;
    } else if (name == "--rdzv-backend") {
      backend = value();
      if (*backend != "static" && *backend != "c10d")
        throw usage_error(std::string(flag) + ": '" + *backend + "' (expected static|c10d)");
    } else if (name == "--rdzv-id") {
      options.run_id = value();
      if (options.run_id->empty()) throw usage_error(std::string(flag) + " must not be empty");
    } else if (name == "--redirects" || name == "--tee") {
      (name == "--tee" ? tee_flag : redirects_flag) = std::pair{std::string(flag), std::string(value())};
    } else if (name == "--rank-offset") {
      options.rank_offset = parse_int_flag(flag, value(), 0, 1 << 30);
      placement_flags.emplace_back(flag);
      world_flags.emplace_back(flag);
    } else if (name == "--world-size") {
      options.world_size = parse_int_flag(flag, value(), 1, 1 << 30);
      placement_flags.emplace_back(flag);
      world_flags.emplace_back(flag);
    } else if (name == "--join") {
      // Several comma-separated addresses (any live member's leads to the job), tried in turn.
      const std::string addresses(value());
      for (const std::string_view address : accord::split_address_list(addresses)) parse_endpoint_flag(flag, address);
      options.join_address = addresses;
    } else if (name == "--max-restarts") {
      options.max_restarts = parse_int_flag(flag, value(), 0, 1 << 20);
    } else if (name == "--timeout") {
      options.timeout_seconds = parse_seconds_flag(flag, value(), false);
    } else if (name == "--grace") {
      options.grace_seconds = parse_seconds_flag(flag, value(), true);
    } else if (name == "--trace") {
      options.trace_path = value();
      const std::filesystem::path parent = std::filesystem::path(*options.trace_path).parent_path();
      const std::string directory = parent.empty() ? "." : parent.string();
      if (options.trace_path->empty() || !std::filesystem::is_directory(directory) ||
          access(directory.c_str(), W_OK) != 0)
        throw usage_error("--trace: '" + *options.trace_path + "': cannot write into " + directory);
    } else if (name == "--log-dir") {
      options.log_dir = value();
      std::error_code error;
      if (!options.log_dir->empty()) std::filesystem::create_directories(*options.log_dir, error);
      if (options.log_dir->empty() || error || !std::filesystem::is_directory(*options.log_dir) ||
          access(options.log_dir->c_str(), W_OK) != 0)
        throw usage_error("--log-dir: '" + *options.log_dir + "': cannot write into it" +
                          (error ? " (" + error.message() + ")" : std::string()));
    } else if (name == "--replay-membership") {
      options.replay_log = value();
    } else if (name == "--elastic" || name == "-m" || name == "--module" || name == "--no-python" ||
               name == "--standalone") {
      if (inline_value) throw usage_error(std::string(flag) + " takes no value, got '" + std::string(arg) + "'");
      (name == "--elastic" ? options.elastic : name == "--no-python" ? no_python
                                             : name == "--standalone" ? standalone
                                                                      : module) = true;
    } else {
      throw usage_error("unknown flag '" + std::string(arg) + "' (see --help)");
    }
  }
  if (!saw_workers) throw usage_error("-n N is required (see --help)");
  if (options.command.empty()) throw usage_error("no program to launch (give it after the flags, or after '--')");
  if (module && no_python) throw usage_error("-m conflicts with --no-python (a module runs with Python)");
  options.command = with_python(std::move(options.command), module, no_python);
  if (endpoint_text)
    std::tie(options.master_addr, options.master_port) =
        parse_endpoint_flag(*endpoint_flag, *endpoint_text,
                            backend == "c10d" ? std::optional<int>(29400) : std::nullopt);  // torchrun's c10d port
  for (auto [flag, choice] : {std::pair{&redirects_flag, &options.redirects}, std::pair{&tee_flag, &options.tee}}) {
    if (!*flag) continue;
    if (!options.log_dir) throw usage_error((*flag)->first + " needs --log-dir (its files hold the streams)");
    *choice = parse_stream_choice((*flag)->first, (*flag)->second, options.workers);
  }
  if (standalone) {
    // torchrun's --standalone: the whole job here, at a free port (also the default).
    for (const std::string& flag : placement_flags) {
      std::string name = flag;
      std::replace(name.begin(), name.end(), '_', '-');
      if (name != "--nnodes" && name != "--node-rank")
        throw usage_error("--standalone conflicts with " + flag + " (it runs the whole job on this machine)");
    }
    if (nodes.value_or(1) != 1)
      throw usage_error("--standalone conflicts with --nnodes " + std::to_string(*nodes) +
                        " (it runs the whole job on this machine)");
    if (options.join_address) throw usage_error("--standalone conflicts with --join (it starts the whole job)");
  }
  if (options.join_address) {
    if (!placement_flags.empty())
      throw usage_error("--join conflicts with " + placement_flags.front() +
                        " (joiners get their rank and master from the running job)");
    options.elastic = true;  // a joiner is a worker of an elastic job
  }
  if (endpoint_flag && !master_flags.empty())
    throw usage_error(*endpoint_flag + " conflicts with " + master_flags.front() + " (it sets the master address and port)");
  if (node_rank && !nodes) throw usage_error("--node-rank needs --nnodes");
  if (nodes) {
    if (!world_flags.empty())
      throw usage_error("--nnodes conflicts with " + world_flags.front() +
                        " (it sets the world size to --nnodes x --nproc-per-node and the rank offset to --node-rank x "
                        "--nproc-per-node)");
    if (*nodes > 1 && !node_rank)
      throw usage_error("--nnodes " + std::to_string(*nodes) + " needs --node-rank" +
                        (backend == "c10d" ? " (accord-launch does not hand out node ranks at the rendezvous as torchrun's "
                                                 "c10d backend does: give each machine its --node-rank)"
                                               : ""));
    if (node_rank.value_or(0) >= *nodes)
      throw usage_error("--node-rank " + std::to_string(*node_rank) + " must be below --nnodes " +
                        std::to_string(*nodes));
    const long long world = static_cast<long long>(*nodes) * options.workers;
    if (world > (1 << 30))
      throw usage_error("--nnodes " + std::to_string(*nodes) + " x --nproc-per-node " + std::to_string(options.workers) +
                        " is more than 2^30 workers");
    options.world_size = static_cast<int>(world);
    options.rank_offset = node_rank.value_or(0) * options.workers;
  }
  const int world = options.world_size.value_or(options.rank_offset + options.workers);
  if (options.rank_offset + options.workers > world)
    throw usage_error("--rank-offset " + std::to_string(options.rank_offset) + " + -n " +
                      std::to_string(options.workers) + " exceeds --world-size " + std::to_string(world));
  if (world > options.workers && !options.master_port)
    throw usage_error("--master-port or --rdzv-endpoint is required when the job spans machines (world size " +
                      std::to_string(world) + " > " + std::to_string(options.workers) + " workers here)");
  options.world_size = world;
  if (options.replay_log) {
    if (options.join_address) throw usage_error("--replay-membership conflicts with --join (it starts the whole job)");
    if (world != options.workers)
      throw usage_error("--replay-membership starts the whole job here (its joiners too): world size " +
                        std::to_string(world) + " > " + std::to_string(options.workers) + " workers here");
    try {
      // The workers check the steps against theirs (--steps is accord-train's).
      options.replay_joiners = accord::process_replay_of(accord::read_membership_log(*options.replay_log),
                                                         *options.replay_log, world, UINT64_MAX)
                                   .joiners();
    } catch (const std::invalid_argument& error) {
      throw usage_error(error.what());
    }
    options.elastic = true;
  }
  return options;
}

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Resolves the program like execvp would, but up front so a typo is one clear line (and exit
// status 127, as a shell gives for a command it cannot run).
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

// A port nobody listens on right now; rank 0 binds it moments later (torchrun does the same).
int find_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t size = sizeof address;
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  const int error = errno;
  if (fd >= 0) close(fd);
  if (!ok) throw std::runtime_error(std::string("cannot find a free port: ") + std::strerror(error));
  return ntohs(address.sin_port);
}

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

void make_pipe(int ends[2]) {
  if (pipe2(ends, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
}

// Writes all of `data`, waiting out a non-blocking destination; gives up quietly on a closed one
// (e.g. the launcher's stdout piped into `head`) so the workers are still supervised.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = write(fd, data.data(), data.size());
    if (written >= 0) {
      data.remove_prefix(static_cast<std::size_t>(written));
    } else if (errno == EAGAIN) {
      pollfd wait_for{fd, POLLOUT, 0};
      poll(&wait_for, 1, -1);
    } else if (errno != EINTR) {
      return;
    }
  }
}

void say(const std::string& line) { write_all(STDERR_FILENO, "accord-launch: " + line + "\n"); }

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
  void read_available() {
    char buffer[65536];
    while (open()) {
      const ssize_t got = read(fd, buffer, sizeof buffer);
      if (got > 0) {
        pending.append(buffer, static_cast<std::size_t>(got));
        forward_lines(false);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        forward_lines(true);
        close(fd);
        fd = -1;
      } else if (errno == EAGAIN) {
        return;
      }
    }
  }

  void forward_lines(bool at_end) {
    std::string out, logged;
    const auto forward = [&](std::string_view line) {
      if (destination >= 0) out.append(prefix).append(line).push_back('\n');
      if (log >= 0) logged.append(line).push_back('\n');
    };
    std::size_t begin = 0;
    for (std::size_t newline; (newline = pending.find('\n', begin)) != std::string::npos; begin = newline + 1)
      forward(std::string_view(pending).substr(begin, newline - begin));
    pending.erase(0, begin);
    if (!pending.empty() && (at_end || pending.size() >= longest_line)) {
      forward(pending);
      pending.clear();
    }
    if (!out.empty()) write_all(destination, out);
    if (!logged.empty()) write_all(log, logged);
  }
};

struct worker {
  int local_rank = 0;
  int rank = -1;             // -1 for a joiner: it gets its rank from the job
  std::string join_address;  // a joiner's: HOST:PORT of the elastic job's RANK 0
  pid_t pid = -1;            // also its process group
  bool running = false;
  int log = -1;              // --log-dir's file; a restarted worker goes on writing it
  output_stream out;
  output_stream err;
  std::vector<std::pair<std::string, std::string>> trace_parts;  // --trace: (label, part) of each start

  bool joiner() const { return rank < 0; }
  // What names it in its output prefix and the launcher's lines: "rank R", or "join L".
  std::string label() const {
    return std::string(joiner() ? "join " : "rank ") + std::to_string(joiner() ? local_rank : rank);
  }

  // Forwards what its pipes still hold and closes them (its own children may hold them open).
  void close_streams() {
    for (output_stream* stream : {&out, &err})
      if (stream->open()) {
        stream->forward_lines(true);
        close(stream->fd);
        stream->fd = -1;
      }
  }
};

// Every variable the launcher sets for some mode. Inherited values of these never reach a worker:
// an inherited ACCORD_ELASTIC must not make workers elastic under a fail-fast launcher, nor an
// inherited RANK give a joiner a rank, nor an inherited ACCORD_JOIN turn ranked workers into joiners.
constexpr std::string_view launcher_variables[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                   "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                   "ACCORD_ELASTIC", "ACCORD_JOIN", "ACCORD_TRACE",
                                                   "ACCORD_REPLAY_MEMBERSHIP"};

// A joiner learns its master from the job; master_port is for the ranked workers. `restarts`:
// the launcher's restarts so far (torchrun's TORCHELASTIC_RESTART_COUNT).
std::vector<std::string> worker_environment(const launch_options& options, const worker& w, int master_port,
                                            int restarts) {
  std::vector<std::pair<std::string_view, std::string>> assigned = {
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.workers)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restarts)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts)},
  };
  if (w.joiner()) {
    assigned.emplace_back("ACCORD_JOIN", w.join_address);
  } else {
    assigned.emplace_back("RANK", std::to_string(w.rank));
    assigned.emplace_back("WORLD_SIZE", std::to_string(*options.world_size));
    assigned.emplace_back("MASTER_ADDR", options.master_addr);
    assigned.emplace_back("MASTER_PORT", std::to_string(master_port));
  }
  if (options.elastic) assigned.emplace_back("ACCORD_ELASTIC", "1");
  if (options.trace_path) assigned.emplace_back("ACCORD_TRACE", *options.trace_path);
  if (options.replay_log) assigned.emplace_back("ACCORD_REPLAY_MEMBERSHIP", *options.replay_log);
  // A launcher that starts the whole job names it, so that another job's workers reaching the
  // same master port are refused as such (unless the environment names the job already);
  // --rdzv-id names it on every machine.
  if (options.run_id) {
    assigned.emplace_back("ACCORD_JOB_ID", *options.run_id);
  } else if (!options.join_address && *options.world_size == options.workers &&
             accord::job_id_from_environment().empty()) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    assigned.emplace_back("ACCORD_JOB_ID", "accord-launch:" + std::string(host) + ":" + std::to_string(getpid()));
  }
  const auto is_launcher_variable = [&](std::string_view entry) {
    const auto names = [&](std::string_view name) {
      return entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=';
    };
    return std::any_of(std::begin(launcher_variables), std::end(launcher_variables), names) ||
           std::any_of(assigned.begin(), assigned.end(), [&](const auto& set) { return names(set.first); });
  };
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry)
    if (!is_launcher_variable(*entry)) environment.emplace_back(*entry);
  for (const auto& [name, value] : assigned) environment.push_back(std::string(name) + "=" + value);
  return environment;
}

std::vector<char*> as_pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Forks and execs one worker in its own process group with stdout/stderr on fresh pipes. An exec
// failure comes back over a close-on-exec pipe as errno and is thrown as cannot_run_error.
// `console` and `logged` say which of its streams (1 stdout, 2 stderr) reach the launcher's own
// stdout/stderr, and which its --log-dir file `log`.
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
        // Workers already running must not outlive a launch that failed halfway.
        say(error.what());
        exit_status_ = dynamic_cast<const cannot_run_error*>(&error) != nullptr ? cannot_run_exit : 1;
        stop(SIGTERM);
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
        say(error.what());
        exit_status_ = dynamic_cast<const cannot_run_error*>(&error) != nullptr ? cannot_run_exit : 1;
        stop(SIGTERM);
        return;
      }
    }
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

int main(int argc, char** argv) {
  try {
    const std::optional<launch_options> options = parse_command_line(argc, argv);
    if (!options) return 0;
    const std::string program = find_program(options->command.front());
    return supervisor(*options).run(program);
  } catch (const usage_error& error) {
    say(error.what());
    return usage_exit;
  } catch (const cannot_run_error& error) {
    say(error.what());
    return cannot_run_exit;
  } catch (const std::exception& error) {
    say(error.what());
    return 1;
  }
}
