#include "apps/launch/options.hpp"

#include "apps/flags.hpp"
#include "cluster/launch_env.hpp"
#include "cluster/membership_log.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <tuple>

namespace accord::launch {
namespace {

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

}  // namespace

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

}  // namespace accord::launch
