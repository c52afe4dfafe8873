// Rendezvous variables (torchrun and Slurm forms, each bad value) and the real accord-launch binary:
// rank-prefixed whole lines, the variables each worker sees, fail-fast shutdown, elastic mode,
// joiners of a running elastic job (--join), bad flags.
#include "cluster/launch_env.hpp"
#include <accord/blas_threads.hpp>
#include <accord/process_group.hpp>

#include <doctest/doctest.h>

#include "program_run.hpp"
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace accord;

namespace {

// Also accord-launch's own ACCORD_ELASTIC and ACCORD_JOIN, which a test may set for the launcher.
constexpr const char* rendezvous_variables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODELIST", "SLURM_JOB_NODELIST", "ACCORD_ELASTIC", "ACCORD_JOIN",
    "ACCORD_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"};

// Clears every rendezvous variable for one test case and puts the originals back afterwards.
class scoped_environment {
 public:
  scoped_environment() {
    for (const char* name : rendezvous_variables) {
      if (const char* value = std::getenv(name)) saved_[name] = value;
      unsetenv(name);
    }
  }
  ~scoped_environment() {
    for (const char* name : rendezvous_variables) {
      const auto found = saved_.find(name);
      if (found != saved_.end())
        setenv(name, found->second.c_str(), 1);
      else
        unsetenv(name);
    }
  }
  scoped_environment& set(const char* name, const char* value) {
    setenv(name, value, 1);
    return *this;
  }

 private:
  std::map<std::string, std::string> saved_;
};

std::string rendezvous_error() {
  try {
    rendezvous_from_environment();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "no error";
}

using testing::lines_of;

// Runs accord-launch with `arguments`. With `signal_after_line` the launcher gets SIGTERM once
// its stdout shows that many lines.
testing::program_run run_launcher(const std::vector<std::string>& arguments, int signal_after_line = 0) {
  return testing::run_program(ACCORD_LAUNCH_BINARY, arguments, {.terminate_after_lines = signal_after_line});
}

// Lines of the launcher's stderr that it wrote itself (not forwarded from a worker).
std::vector<std::string> launcher_lines(const std::string& err) {
  std::vector<std::string> own;
  for (const auto& line : lines_of(err))
    if (line.starts_with("accord-launch: ")) own.push_back(line);
  return own;
}

}  // namespace

TEST_CASE("torchrun variables give the rank, world, local rank and master") {
  scoped_environment env;
  env.set("RANK", "2").set("WORLD_SIZE", "4").set("LOCAL_RANK", "1");
  env.set("MASTER_ADDR", "10.1.2.3").set("MASTER_PORT", "31000");
  const auto info = rendezvous_from_environment();
  REQUIRE(info);
  CHECK(info->rank == 2);
  CHECK(info->world_size == 4);
  CHECK(info->local_rank == 1);
  CHECK(info->master_addr == "10.1.2.3");
  CHECK(info->master_port == 31000);
  CHECK(info->from_environment);

  SUBCASE("defaults: LOCAL_RANK 0 and port 29500") {
    unsetenv("LOCAL_RANK");
    unsetenv("MASTER_PORT");
    const auto defaulted = rendezvous_from_environment();
    REQUIRE(defaulted);
    CHECK(defaulted->local_rank == 0);
    CHECK(defaulted->master_port == default_master_port);
  }
  SUBCASE("torchrun variables win over Slurm's") {
    env.set("SLURM_PROCID", "0").set("SLURM_NTASKS", "8").set("SLURM_NODELIST", "other");
    const auto preferred = rendezvous_from_environment();
    REQUIRE(preferred);
    CHECK(preferred->rank == 2);
    CHECK(preferred->world_size == 4);
    CHECK(preferred->master_addr == "10.1.2.3");
  }
}

TEST_CASE("no launcher variables means a single-process run") {
  scoped_environment env;
  CHECK_FALSE(rendezvous_from_environment());
  const rendezvous_info alone = rendezvous_or_single_process();
  CHECK(alone.rank == 0);
  CHECK(alone.world_size == 1);
  CHECK(alone.local_rank == 0);
  CHECK_FALSE(alone.from_environment);
  env.set("SLURM_NTASKS", "4");  // inside an allocation but not an srun task
  CHECK_FALSE(rendezvous_from_environment());
}

TEST_CASE("Slurm variables, master from MASTER_ADDR or the node list") {
  scoped_environment env;
  env.set("SLURM_PROCID", "5").set("SLURM_NTASKS", "8").set("SLURM_LOCALID", "1");
  env.set("SLURM_JOB_NODELIST", "gpu[07-09,12]");
  auto info = rendezvous_from_environment();
  REQUIRE(info);
  CHECK(info->rank == 5);
  CHECK(info->world_size == 8);
  CHECK(info->local_rank == 1);
  CHECK(info->master_addr == "gpu07");
  CHECK(info->master_port == default_master_port);

  env.set("SLURM_NODELIST", "alpha,beta").set("MASTER_PORT", "4000");
  info = rendezvous_from_environment();
  REQUIRE(info);
  CHECK(info->master_addr == "alpha");  // SLURM_NODELIST is preferred over SLURM_JOB_NODELIST
  CHECK(info->master_port == 4000);

  env.set("MASTER_ADDR", "head.example");
  info = rendezvous_from_environment();
  REQUIRE(info);
  CHECK(info->master_addr == "head.example");
}

TEST_CASE("process_group_from_environment: the rendezvous, elastic, join and job id as run_job_process takes them") {
  scoped_environment env;
  CHECK_FALSE(process_group_from_environment());
  env.set("RANK", "1").set("WORLD_SIZE", "2").set("LOCAL_RANK", "1");
  env.set("MASTER_ADDR", "127.0.0.1").set("MASTER_PORT", "31000").set("TORCHELASTIC_RUN_ID", "run-7");
  auto group = process_group_from_environment();
  REQUIRE(group);
  CHECK(group->rank == 1);
  CHECK(group->world_size == 2);
  CHECK(group->local_rank == 1);
  CHECK(group->master_addr == "127.0.0.1");
  CHECK(group->master_port == 31000);
  CHECK(group->host == "127.0.0.1");  // this machine's address towards the master
  CHECK(group->job_id == "run-7");
  CHECK_FALSE(group->elastic);
  CHECK_FALSE(group->join);
  env.set("ACCORD_ELASTIC", "1");
  CHECK(process_group_from_environment()->elastic);
  env.set("ACCORD_ELASTIC", "0");
  CHECK_FALSE(process_group_from_environment()->elastic);

  // A joiner: its master from ACCORD_JOIN (or the argument), no rank, and only an explicit job id.
  env.set("ACCORD_JOIN", "127.0.0.1:31001");
  group = process_group_from_environment();
  REQUIRE(group);
  CHECK(group->join);
  CHECK(group->elastic);
  CHECK(group->rank == -1);
  CHECK(group->local_rank == 1);
  CHECK(group->master_port == 31001);
  CHECK(group->job_id.empty());
  env.set("ACCORD_JOB_ID", "named");
  group = process_group_from_environment("localhost:31002");
  REQUIRE(group);
  CHECK(group->master_addr == "localhost");
  CHECK(group->master_port == 31002);
  CHECK(group->job_id == "named");

  const auto error = [](std::string_view join) {
    try {
      process_group_from_environment(join);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("nohost") == "join address (--join) 'nohost' (expected HOST:PORT, port 1..65535)");
  env.set("ACCORD_JOIN", "nohost:0");
  CHECK(error("") == "ACCORD_JOIN='nohost:0' (expected HOST:PORT, port 1..65535)");
  env.set("ACCORD_JOIN", "127.0.0.1:31001").set("LOCAL_RANK", "x");
  CHECK(error("") == "LOCAL_RANK='x' is not a non-negative integer");
  unsetenv("ACCORD_JOIN");
  CHECK(error("") == "LOCAL_RANK=x is not an integer");
}

TEST_CASE("first host of a Slurm node list") {
  CHECK(first_host_of_nodelist("node1") == "node1");
  CHECK(first_host_of_nodelist("node1,node2") == "node1");
  CHECK(first_host_of_nodelist("node[1-3,5]") == "node1");
  CHECK(first_host_of_nodelist("node[05,1-3]") == "node05");
  CHECK(first_host_of_nodelist("cn[3]") == "cn3");
  CHECK(first_host_of_nodelist("rack[2-4]-gpu[10-11],other") == "rack2-gpu10");
  CHECK(first_host_of_nodelist("a[1-2],b[3-4]") == "a1");
  CHECK_THROWS_WITH_AS(first_host_of_nodelist("node[1-3", "SLURM_NODELIST"),
                       "SLURM_NODELIST=node[1-3 has an unmatched '['", std::invalid_argument);
  CHECK_THROWS_WITH_AS(first_host_of_nodelist("node1-3]", "SLURM_NODELIST"),
                       "SLURM_NODELIST=node1-3] has an unmatched ']'", std::invalid_argument);
  CHECK_THROWS_WITH_AS(first_host_of_nodelist("node[x-y]", "SLURM_NODELIST"),
                       "SLURM_NODELIST=node[x-y] has a malformed range [x-y]", std::invalid_argument);
  CHECK_THROWS_WITH_AS(first_host_of_nodelist(",node1", "SLURM_JOB_NODELIST"),
                       "SLURM_JOB_NODELIST=,node1 does not start with a host", std::invalid_argument);
}

TEST_CASE("each bad rendezvous value is named in the error") {
  scoped_environment env;
  env.set("RANK", "0").set("WORLD_SIZE", "2").set("MASTER_ADDR", "127.0.0.1");
  REQUIRE(rendezvous_error() == "no error");

  SUBCASE("non-numeric rank") {
    env.set("RANK", "abc");
    CHECK(rendezvous_error() == "RANK=abc is not an integer");
  }
  SUBCASE("trailing garbage") {
    env.set("WORLD_SIZE", "2x");
    CHECK(rendezvous_error() == "WORLD_SIZE=2x is not an integer");
  }
  SUBCASE("rank equal to the world size") {
    env.set("RANK", "2");
    CHECK(rendezvous_error() == "RANK=2 is out of range for WORLD_SIZE=2 (must be 0..1)");
  }
  SUBCASE("negative rank") {
    env.set("RANK", "-1");
    CHECK(rendezvous_error() == "RANK=-1 is out of range for WORLD_SIZE=2 (must be 0..1)");
  }
  SUBCASE("empty world") {
    env.set("WORLD_SIZE", "0");
    CHECK(rendezvous_error() == "WORLD_SIZE=0 must be at least 1");
  }
  SUBCASE("world beyond int") {
    env.set("WORLD_SIZE", "99999999999");
    CHECK(rendezvous_error() == "WORLD_SIZE=99999999999 is out of range for an integer");
  }
  SUBCASE("local rank") {
    env.set("LOCAL_RANK", "-3");
    CHECK(rendezvous_error() == "LOCAL_RANK=-3 is out of range for WORLD_SIZE=2");
  }
  SUBCASE("port zero and too high") {
    env.set("MASTER_PORT", "0");
    CHECK(rendezvous_error() == "MASTER_PORT=0 is not a port (1..65535)");
    env.set("MASTER_PORT", "65536");
    CHECK(rendezvous_error() == "MASTER_PORT=65536 is not a port (1..65535)");
  }
  SUBCASE("missing companions") {
    unsetenv("WORLD_SIZE");
    CHECK(rendezvous_error() == "WORLD_SIZE is not set but RANK is");
    env.set("WORLD_SIZE", "2");
    unsetenv("RANK");
    CHECK(rendezvous_error() == "RANK is not set but WORLD_SIZE is");
    env.set("RANK", "0");
    unsetenv("MASTER_ADDR");
    CHECK(rendezvous_error() == "MASTER_ADDR is not set but RANK is");
  }
  SUBCASE("Slurm values") {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    env.set("SLURM_PROCID", "4").set("SLURM_NTASKS", "4").set("SLURM_NODELIST", "n1");
    CHECK(rendezvous_error() == "SLURM_PROCID=4 is out of range for SLURM_NTASKS=4 (must be 0..3)");
    env.set("SLURM_PROCID", "1").set("SLURM_LOCALID", "one");
    CHECK(rendezvous_error() == "SLURM_LOCALID=one is not an integer");
    unsetenv("SLURM_LOCALID");
    unsetenv("SLURM_NODELIST");
    CHECK(rendezvous_error() ==
          "SLURM_PROCID is set but none of MASTER_ADDR, SLURM_NODELIST, SLURM_JOB_NODELIST is");
    env.set("SLURM_JOB_NODELIST", "n[2-");
    CHECK(rendezvous_error() == "SLURM_JOB_NODELIST=n[2- has an unmatched '['");
    unsetenv("SLURM_NTASKS");
    CHECK(rendezvous_error() == "SLURM_NTASKS is not set but SLURM_PROCID is");
  }
}

TEST_CASE("local address towards a loopback master is loopback") {
  CHECK(local_address_towards("127.0.0.1", 29500) == "127.0.0.1");
  const std::string towards_localhost = local_address_towards("localhost", 29500);
  CHECK((towards_localhost == "127.0.0.1" || towards_localhost == "::1"));
  CHECK_THROWS_WITH_AS(local_address_towards("no-such-host.invalid", 29500),
                       doctest::Contains("'no-such-host.invalid'"), std::runtime_error);
}

TEST_CASE("accord-launch -n 3 prefixes every line with its rank and exits 0") {
  const auto result = run_launcher({"-n", "3", "--", "/bin/sh", "-c", "echo hello $RANK $WORLD_SIZE"});
  CHECK(result.exit_status == 0);
  std::multiset<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(line);
  CHECK(lines == std::multiset<std::string>{"[rank 0] hello 0 3", "[rank 1] hello 1 3", "[rank 2] hello 2 3"});
  CHECK(result.err.empty());
}

TEST_CASE("accord-launch gives each worker torchrun's variables") {
  const std::string show = "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT";
  SUBCASE("one machine, chosen port") {
    const auto result = run_launcher({"-n", "2", "--master-port", "31234", "--", "sh", "-c", show});
    CHECK(result.exit_status == 0);
    std::set<std::string> lines;
    for (const auto& line : lines_of(result.out)) lines.insert(line);
    CHECK(lines == std::set<std::string>{"[rank 0] 0 0 2 2 127.0.0.1 31234", "[rank 1] 1 1 2 2 127.0.0.1 31234"});
  }
  SUBCASE("second machine of a multi-machine job") {
    const auto result = run_launcher({"-n", "2", "--rank-offset", "2", "--world-size", "5", "--master-addr=10.0.0.1",
                                      "--master-port=29555", "--", "sh", "-c", show});
    CHECK(result.exit_status == 0);
    std::set<std::string> lines;
    for (const auto& line : lines_of(result.out)) lines.insert(line);
    CHECK(lines == std::set<std::string>{"[rank 2] 2 0 5 2 10.0.0.1 29555", "[rank 3] 3 1 5 2 10.0.0.1 29555"});
  }
  SUBCASE("default port is one free port shared by all ranks") {
    const auto result = run_launcher({"-n", "3", "--", "sh", "-c", "echo $MASTER_PORT"});
    CHECK(result.exit_status == 0);
    std::set<int> ports;
    for (const auto& line : lines_of(result.out)) ports.insert(std::stoi(line.substr(line.find("] ") + 2)));
    REQUIRE(ports.size() == 1);
    CHECK(*ports.begin() >= 1);
    CHECK(*ports.begin() <= 65535);
  }
}

TEST_CASE("two accord-launch --nnodes 2 on one machine start ranks 0..3 of one job, as torchrun's two nodes would") {
  // Node 1 is started first: its workers wait for nobody, so the order does not matter.
  const std::string show = "'echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT'";
  const std::string node = std::string(ACCORD_LAUNCH_BINARY) + " --nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:29561";
  const auto both = testing::run_program(
      "/bin/sh", {"-c", node + " --node_rank=1 sh -c " + show + " & second=$!; " + node + " --node-rank 0 sh -c " +
                            show + "; first=$?; wait $second; echo status $first $?"});
  std::set<std::string> lines;
  for (const auto& line : lines_of(both.out)) lines.insert(line);
  CHECK(lines == std::set<std::string>{"[rank 0] 0 0 4 2 127.0.0.1:29561", "[rank 1] 1 1 4 2 127.0.0.1:29561",
                                       "[rank 2] 2 0 4 2 127.0.0.1:29561", "[rank 3] 3 1 4 2 127.0.0.1:29561",
                                       "status 0 0"});
  CHECK(both.err.empty());
}

TEST_CASE("the program may follow the flags without '--', as with torchrun, and its own flags stay its own") {
  const auto result = run_launcher({"--nproc_per_node=2", "--master-port", "31235", "sh", "-c", "echo $RANK $0 $1",
                                    "-n", "--elastic"});
  CHECK(result.exit_status == 0);
  std::set<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(line);
  CHECK(lines == std::set<std::string>{"[rank 0] 0 -n --elastic", "[rank 1] 1 -n --elastic"});
}

TEST_CASE("--max-restarts R: a failed worker starts again as a joiner of the elastic job, R times over all workers") {
  // Ranks 1 and 2 fail, and each starts again as a joiner; the joiners fail once both exist (so
  // both restarts went to the ranks): with no restart left the job goes on without them.
  char folder[] = "/tmp/accord-launch-test-XXXXXX";
  REQUIRE(mkdtemp(folder) != nullptr);
  const std::string joined = std::string(folder) + "/joined";
  const auto result = run_launcher(
      {"-n", "3", "--elastic", "--max-restarts", "2", "--master-port", "31236", "--timeout", "20", "--", "sh", "-c",
       "echo rank=${RANK-none} join=${ACCORD_JOIN-none} local=$LOCAL_RANK elastic=$ACCORD_ELASTIC; "
       "if [ -n \"$ACCORD_JOIN\" ]; then touch " + joined + "$LOCAL_RANK; "
       "while [ ! -e " + joined + "1 ] || [ ! -e " + joined + "2 ]; do sleep 0.01; done; exit 4; fi; "
       "if [ $RANK != 0 ]; then exit $((RANK + 2)); fi"});
  for (const char* local : {"1", "2"}) std::remove((joined + local).c_str());
  rmdir(folder);
  CHECK(result.exit_status == 0);
  std::set<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(line);
  CHECK(lines == std::set<std::string>{"[rank 0] rank=0 join=none local=0 elastic=1",
                                       "[rank 1] rank=1 join=none local=1 elastic=1",
                                       "[rank 2] rank=2 join=none local=2 elastic=1",
                                       "[join 1] rank=none join=127.0.0.1:31236 local=1 elastic=1",
                                       "[join 2] rank=none join=127.0.0.1:31236 local=2 elastic=1"});
  const auto own = launcher_lines(result.err);
  const std::set<std::string> expected_first = {
      "accord-launch: rank 1 exited with status 3; restarting it to join the job again (restart 1 of 2)",
      "accord-launch: rank 2 exited with status 4; restarting it to join the job again (restart 2 of 2)",
      "accord-launch: rank 2 exited with status 4; restarting it to join the job again (restart 1 of 2)",
      "accord-launch: rank 1 exited with status 3; restarting it to join the job again (restart 2 of 2)"};
  REQUIRE(own.size() == 4);
  CHECK(expected_first.count(own[0]) == 1);
  CHECK(expected_first.count(own[1]) == 1);
  CHECK(std::set<std::string>(own.begin() + 2, own.end()) ==
        std::set<std::string>{"accord-launch: join 1 exited with status 4; the job goes on without it (--elastic)",
                              "accord-launch: join 2 exited with status 4; the job goes on without it (--elastic)"});
}

TEST_CASE("accord-launch forwards whole lines, stdout and stderr apart, and an unterminated last line") {
  // Four ranks race 300 lines each (with writes split mid-line) into the launcher.
  const std::string script =
      "i=0; while [ $i -lt 300 ]; do printf 'line %s ' $RANK; printf '%s abcdefghijklmnopqrstuvwxyz\\n' $i; "
      "i=$((i+1)); done; echo oops >&2; printf 'tail %s' $RANK";
  const auto result = run_launcher({"-n", "4", "--", "sh", "-c", script});
  CHECK(result.exit_status == 0);
  std::map<int, int> next_index;  // per rank, lines arrive in order
  int tails = 0;
  for (const auto& line : lines_of(result.out)) {
    int rank = -1, rank_again = -2, index = -1;
    char letters[64] = {};
    if (std::sscanf(line.c_str(), "[rank %d] line %d %d %63s", &rank, &rank_again, &index, letters) == 4) {
      CHECK(rank == rank_again);
      CHECK(std::string(letters) == "abcdefghijklmnopqrstuvwxyz");
      CHECK(index == next_index[rank]);
      next_index[rank] = index + 1;
    } else {
      CHECK(line == "[rank " + std::to_string(rank) + "] tail " + std::to_string(rank));
      ++tails;
    }
  }
  CHECK(tails == 4);
  CHECK(next_index == std::map<int, int>{{0, 300}, {1, 300}, {2, 300}, {3, 300}});
  std::multiset<std::string> errors;
  for (const auto& line : lines_of(result.err)) errors.insert(line);
  CHECK(errors == std::multiset<std::string>{"[rank 0] oops", "[rank 1] oops", "[rank 2] oops", "[rank 3] oops"});
}

TEST_CASE("--log-dir writes each worker's output, unprefixed, to DIR/rank-R.log as well") {
  const std::string dir = "/tmp/accord_test_launch_logs_" + std::to_string(::getpid());
  const std::string logs = dir + "/logs";  // created by the launcher
  const auto result = run_launcher({"-n", "2", "--log-dir", logs, "--", "sh", "-c",
                                    "echo out $RANK; echo err $RANK >&2; printf 'tail %s' $RANK"});
  CHECK(result.exit_status == 0);
  CHECK(result.out.find("[rank 1] out 1\n") != std::string::npos);  // the console still gets it
  for (const std::string rank : {"0", "1"}) {
    std::ifstream in(logs + "/rank-" + rank + ".log");
    std::multiset<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.insert(line);
    CHECK(lines == std::multiset<std::string>{"out " + rank, "err " + rank, "tail " + rank});
  }
  // A second launch starts the files afresh.
  CHECK(run_launcher({"-n", "1", "--log-dir", logs, "--", "echo", "again"}).exit_status == 0);
  std::ifstream again(logs + "/rank-0.log");
  CHECK(std::string(std::istreambuf_iterator<char>(again), {}) == "again\n");
  std::filesystem::remove_all(dir);

  const auto refused = run_launcher({"-n", "1", "--log-dir", "/proc/accord-logs", "--", "true"});
  CHECK(refused.exit_status == 2);
  CHECK(refused.err.rfind("accord-launch: --log-dir: '/proc/accord-logs': cannot write into it", 0) == 0);
  CHECK(std::count(refused.err.begin(), refused.err.end(), '\n') == 1);
}

TEST_CASE("as torchrun: a .py script and -m's module run with Python, --no-python runs the program as it is") {
  // ACCORD_LAUNCH_PYTHON=/bin/echo shows the command line each worker gets.
  const auto with_python = [](const std::string& python, std::vector<std::string> arguments,
                              std::vector<std::string> environment = {}) {
    environment.push_back("ACCORD_LAUNCH_PYTHON=" + python);
    return testing::run_program(ACCORD_LAUNCH_BINARY, arguments,
                                {.environment = environment, .environment_removed = {"ACCORD_LAUNCH_PYTHON="}});
  };
  const auto sorted_lines = [](const std::string& text) {
    std::vector<std::string> lines = lines_of(text);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  const auto script = with_python("/bin/echo", {"-n", "2", "train.py", "--lr", "1"});
  CHECK(script.exit_status == 0);
  CHECK(sorted_lines(script.out) == std::vector<std::string>{"[rank 0] -u train.py --lr 1", "[rank 1] -u train.py --lr 1"});
  const auto module = with_python("/bin/echo", {"-n", "1", "-m", "pkg.train", "--lr", "1"});
  CHECK(module.exit_status == 0);
  CHECK(module.out == "[rank 0] -u -m pkg.train --lr 1\n");
  CHECK(with_python("/bin/echo", {"-n", "1", "--module", "--", "pkg.train"}).out == "[rank 0] -u -m pkg.train\n");

  const std::string dir = "/tmp/accord_test_launch_python_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const auto write_program = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    std::filesystem::permissions(dir + "/" + name, std::filesystem::perms::owner_all);
  };
  // --no-python: the script runs as a program (its #! line).
  write_program("direct.py", "#!/bin/sh\necho direct $RANK \"$@\"\n");
  const auto direct = with_python("/bin/echo", {"-n", "1", "--no-python", dir + "/direct.py", "x"});
  CHECK(direct.exit_status == 0);
  CHECK(direct.out == "[rank 0] direct 0 x\n");
  // Without ACCORD_LAUNCH_PYTHON: python3 on PATH, and one clear line where there is none.
  write_program("python3", "#!/bin/sh\necho python3 \"$@\"\n");
  const auto from_path = testing::run_program(ACCORD_LAUNCH_BINARY, {"-n", "1", "train.py"},
                                              {.environment = {"PATH=" + dir}, .environment_removed = {"ACCORD_LAUNCH_PYTHON=", "PATH="}});
  CHECK(from_path.exit_status == 0);
  CHECK(from_path.out == "[rank 0] python3 -u train.py\n");
  std::filesystem::remove_all(dir);
  const auto no_python = testing::run_program(ACCORD_LAUNCH_BINARY, {"-n", "1", "train.py"},
                                              {.environment = {"PATH=" + dir}, .environment_removed = {"ACCORD_LAUNCH_PYTHON=", "PATH="}});
  CHECK(no_python.exit_status == 127);
  CHECK(no_python.err == "accord-launch: program 'python3' not found in PATH\n");
}

TEST_CASE("as torchrun: --standalone, --rdzv-backend c10d's endpoint without a port, --rdzv-id naming the job") {
  const std::string show = "echo $MASTER_ADDR:$MASTER_PORT $(env | grep -c '^ACCORD_JOB_ID=') $ACCORD_JOB_ID";
  const auto standalone = run_launcher({"--standalone", "--nnodes=1", "--nproc-per-node=2", "sh", "-c", show});
  CHECK(standalone.exit_status == 0);
  std::set<std::string> lines;
  for (const auto& line : lines_of(standalone.out)) lines.insert(line.substr(line.find("] ") + 2));
  REQUIRE(lines.size() == 1);  // both ranks: one free port, one job named by the launcher
  CHECK(lines.begin()->starts_with("127.0.0.1:"));
  CHECK(lines.begin()->find(" 1 accord-launch:") != std::string::npos);

  // The id replaces an inherited ACCORD_JOB_ID rather than adding a second one.
  const auto c10d = testing::run_program(
      ACCORD_LAUNCH_BINARY,
      {"-n", "2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1", "--rdzv_id=run7", "sh", "-c", show},
      {.environment = {"ACCORD_JOB_ID=inherited"}, .environment_removed = {"ACCORD_JOB_ID="}});
  CHECK(c10d.exit_status == 0);
  std::set<std::string> c10d_lines;
  for (const auto& line : lines_of(c10d.out)) c10d_lines.insert(line);
  CHECK(c10d_lines == std::set<std::string>{"[rank 0] 127.0.0.1:29400 1 run7", "[rank 1] 127.0.0.1:29400 1 run7"});

  const auto static_backend =
      run_launcher({"-n", "1", "--rdzv-backend", "static", "--rdzv-endpoint", "127.0.0.1:29411", "sh", "-c", show});
  CHECK(static_backend.out.starts_with("[rank 0] 127.0.0.1:29411 1 accord-launch:"));
}

TEST_CASE("--redirects and --tee choose, as torchrun, which streams go to --log-dir's files and which to the console") {
  const std::string dir = "/tmp/accord_test_launch_streams_" + std::to_string(::getpid());
  const auto file_of = [&](int rank) {
    std::ifstream in(dir + "/rank-" + std::to_string(rank) + ".log");
    std::multiset<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.insert(line);
    return lines;
  };
  // Every worker's stdout to its file only; rank 0's stderr to its file and the console.
  const auto result = run_launcher({"-n", "2", "--log-dir", dir, "--redirects", "1", "--tee", "0:2", "--", "sh", "-c",
                                    "echo out $RANK; echo err $RANK >&2"});
  CHECK(result.exit_status == 0);
  CHECK(result.out.empty());
  std::multiset<std::string> console;
  for (const auto& line : lines_of(result.err)) console.insert(line);
  CHECK(console == std::multiset<std::string>{"[rank 0] err 0", "[rank 1] err 1"});
  CHECK(file_of(0) == std::multiset<std::string>{"out 0", "err 0"});
  CHECK(file_of(1) == std::multiset<std::string>{"out 1"});
  // --tee 3 alone: both streams in both places; --redirects 0: the console only.
  const auto teed = run_launcher({"-n", "1", "--log-dir", dir, "--tee", "3", "--", "sh", "-c", "echo out; echo err >&2"});
  CHECK(teed.out == "[rank 0] out\n");
  CHECK(teed.err == "[rank 0] err\n");
  CHECK(file_of(0) == std::multiset<std::string>{"out", "err"});
  const auto plain = run_launcher({"-n", "1", "--log-dir", dir, "--redirects", "0", "--", "echo", "console"});
  CHECK(plain.out == "[rank 0] console\n");
  CHECK(file_of(0).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("--max-restarts R without --elastic: a failed worker stops the group, which starts again, R times at most") {
  // As torchrun: rank 1 fails in the first two starts (rank 0 waits to be stopped), the third
  // start succeeds; each start sees its count in TORCHELASTIC_RESTART_COUNT. Rank 1 fails only
  // once rank 0 has said its line (a marker file per launcher and start), or a loaded machine
  // could stop rank 0 before it spoke.
  const auto result = run_launcher(
      {"-n", "2", "--max-restarts", "3", "--timeout", "60", "--", "sh", "-c",
       "echo start $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS; "
       "marker=/tmp/accord_launch_restart.$PPID.$TORCHELASTIC_RESTART_COUNT; "
       "if [ $TORCHELASTIC_RESTART_COUNT -lt 2 ]; then if [ $RANK = 1 ]; then "
       "while [ ! -e $marker ]; do sleep 0.01; done; rm -f $marker; exit 3; fi; touch $marker; exec sleep 1000; fi"});
  CHECK(result.exit_status == 0);
  std::multiset<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(line);
  CHECK(lines == std::multiset<std::string>{"[rank 0] start 0 of 3", "[rank 1] start 0 of 3", "[rank 0] start 1 of 3",
                                            "[rank 1] start 1 of 3", "[rank 0] start 2 of 3", "[rank 1] start 2 of 3"});
  CHECK(launcher_lines(result.err) ==
        std::vector<std::string>{"accord-launch: rank 1 exited with status 3; restarting all 2 worker(s) (restart 1 of 3)",
                                 "accord-launch: rank 1 exited with status 3; restarting all 2 worker(s) (restart 2 of 3)"});

  // Once no restart is left, the failure stops the job with the worker's status.
  const auto exhausted = run_launcher({"-n", "2", "--max-restarts", "1", "--timeout", "60", "--", "sh", "-c",
                                       "if [ $RANK = 1 ]; then exit 5; fi; exec sleep 1000"});
  CHECK(exhausted.exit_status == 5);
  CHECK(launcher_lines(exhausted.err) ==
        std::vector<std::string>{"accord-launch: rank 1 exited with status 5; restarting all 2 worker(s) (restart 1 of 1)",
                                 "accord-launch: rank 1 exited with status 5",
                                 "accord-launch: stopping the other 1 worker(s)"});
}

TEST_CASE("a failing worker stops the others and its status becomes the launcher's") {
  SUBCASE("exit status 3; the others sleep until stopped") {
    const auto result = run_launcher({"-n", "3", "--", "sh", "-c",
                                      "if [ $RANK = 1 ]; then echo failing >&2; exit 3; fi; sleep 1000"});
    CHECK(result.exit_status == 3);
    const auto own = launcher_lines(result.err);
    REQUIRE(own.size() == 2);
    CHECK(own[0] == "accord-launch: rank 1 exited with status 3");
    CHECK(own[1] == "accord-launch: stopping the other 2 worker(s)");
    // The worker's last words come before the verdict.
    CHECK(result.err.find("[rank 1] failing") < result.err.find("rank 1 exited"));
  }
  SUBCASE("a worker ignoring SIGTERM gets SIGKILL after the grace period") {
    // Rank 0 fails only once rank 1 has set its trap (a file marks that), or SIGTERM would win.
    char folder[] = "/tmp/accord-launch-test-XXXXXX";
    REQUIRE(mkdtemp(folder) != nullptr);
    const std::string ready = std::string(folder) + "/ready";
    const auto result = run_launcher(
        {"-n", "2", "--grace", "0.2", "--", "sh", "-c",
         "if [ $RANK = 0 ]; then while [ ! -e " + ready + " ]; do sleep 0.01; done; exit 5; fi; "
         "trap '' TERM; touch " + ready + "; sleep 1000"});
    std::remove(ready.c_str());
    rmdir(folder);
    CHECK(result.exit_status == 5);
    const auto own = launcher_lines(result.err);
    REQUIRE(own.size() == 3);
    CHECK(own[0] == "accord-launch: rank 0 exited with status 5");
    CHECK(own[2] == "accord-launch: rank 1 still running 0.2 s after being told to stop; sending SIGKILL");
  }
  SUBCASE("death by signal") {
    const auto result = run_launcher({"-n", "2", "--", "sh", "-c", "if [ $RANK = 1 ]; then kill -KILL $$; fi; sleep 1000"});
    CHECK(result.exit_status == 128 + SIGKILL);
    const auto own = launcher_lines(result.err);
    REQUIRE_FALSE(own.empty());
    CHECK(own[0] == "accord-launch: rank 1 was killed by signal 9 (Killed)");
  }
}

// In the elastic launches, --timeout 20 is a generous hang guard: a launcher that waits on a worker
// it should have stopped exits 124 instead of hanging the test.
TEST_CASE("--elastic: a worker other than RANK 0 that dies does not stop the job") {
  const auto result = run_launcher({"-n", "3", "--elastic", "--timeout", "20", "--", "sh", "-c",
                                    "if [ $RANK = 2 ]; then kill -9 $$; fi; sleep 0.3; echo trained $RANK"});
  CHECK(result.exit_status == 0);
  std::set<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(line);
  CHECK(lines == std::set<std::string>{"[rank 0] trained 0", "[rank 1] trained 1"});
  CHECK(launcher_lines(result.err) ==
        std::vector<std::string>{
            "accord-launch: rank 2 was killed by signal 9 (Killed); the job goes on without it (--elastic)"});
}

TEST_CASE("--elastic: RANK 0 failing does not stop the others (they elect a new coordinator)") {
  const auto result = run_launcher({"-n", "3", "--elastic", "--timeout", "20", "--", "sh", "-c",
                                    "if [ $RANK = 0 ]; then exit 3; fi; sleep 1"});
  CHECK(result.exit_status == 0);
  CHECK(launcher_lines(result.err) ==
        std::vector<std::string>{"accord-launch: rank 0 exited with status 3; the job goes on without it (--elastic)"});
}

TEST_CASE("without RANK 0 here (--elastic with --rank-offset, or --join): 0 if any worker exited 0, else the "
          "last failure's status") {
  struct machine {
    std::vector<std::string> flags;
    std::string first, second;  // how the launcher names LOCAL_RANK 0 and 1
    std::string mode;
  };
  const machine machines[] = {
      {{"--rank-offset", "1", "--world-size", "3", "--master-port", "29555", "--elastic"}, "rank 1", "rank 2",
       "--elastic"},
      {{"--join", "127.0.0.1:29555"}, "join 0", "join 1", "--join"},
  };
  for (const machine& here : machines) {
    CAPTURE(here.mode);
    const auto launch = [&](const std::string& script) {
      std::vector<std::string> arguments = {"-n", "2"};
      arguments.insert(arguments.end(), here.flags.begin(), here.flags.end());
      arguments.insert(arguments.end(), {"--timeout", "20", "--", "sh", "-c", script});
      return run_launcher(arguments);
    };
    const auto goes_on = [&](const std::string& name, int status) {
      return "accord-launch: " + name + " exited with status " + std::to_string(status) +
             "; the job goes on without it (" + here.mode + ")";
    };

    const auto one_succeeds = launch("if [ $LOCAL_RANK = 1 ]; then exit 4; fi");
    CHECK(one_succeeds.exit_status == 0);
    CHECK(launcher_lines(one_succeeds.err) == std::vector<std::string>{goes_on(here.second, 4)});

    // LOCAL_RANK 1 exits only once the launcher has reaped LOCAL_RANK 0, so its failure is the last.
    char folder[] = "/tmp/accord-launch-test-XXXXXX";
    REQUIRE(mkdtemp(folder) != nullptr);
    const std::string pid_file = std::string(folder) + "/local0.pid";
    const auto all_fail = launch("if [ $LOCAL_RANK = 0 ]; then echo $$ > " + pid_file + "; exit 4; fi; "
                                 "while [ ! -s " + pid_file + " ]; do sleep 0.01; done; "
                                 "while kill -0 $(cat " + pid_file + ") 2>/dev/null; do sleep 0.01; done; exit 6");
    std::remove(pid_file.c_str());
    rmdir(folder);
    CHECK(all_fail.exit_status == 6);
    CHECK(launcher_lines(all_fail.err) == std::vector<std::string>{goes_on(here.first, 4), goes_on(here.second, 6)});
  }
}

TEST_CASE("--join: each joiner gets ACCORD_JOIN, ACCORD_ELASTIC=1 and its local rank, but no rank or master") {
  // Even when the launcher's own environment has them: a joiner gets its rank from the job.
  scoped_environment env;
  env.set("RANK", "0").set("WORLD_SIZE", "8").set("MASTER_ADDR", "10.9.9.9").set("MASTER_PORT", "1111");
  env.set("ACCORD_JOIN", "elsewhere:2222").set("ACCORD_ELASTIC", "0");
  const auto result = run_launcher(
      {"-n", "2", "--join", "node1:29500", "--", "sh", "-c",
       "echo join=$ACCORD_JOIN elastic=$ACCORD_ELASTIC local=$LOCAL_RANK/$LOCAL_WORLD_SIZE rank=${RANK-unset} "
       "world=${WORLD_SIZE-unset} master=${MASTER_ADDR-unset}:${MASTER_PORT-unset}; echo bye >&2"});
  CHECK(result.exit_status == 0);
  std::set<std::string> lines;
  for (const auto& line : lines_of(result.out)) lines.insert(line);
  CHECK(lines == std::set<std::string>{
                     "[join 0] join=node1:29500 elastic=1 local=0/2 rank=unset world=unset master=unset:unset",
                     "[join 1] join=node1:29500 elastic=1 local=1/2 rank=unset world=unset master=unset:unset"});
  std::set<std::string> errors;
  for (const auto& line : lines_of(result.err)) errors.insert(line);
  CHECK(errors == std::set<std::string>{"[join 0] bye", "[join 1] bye"});
}

TEST_CASE("workers get ACCORD_ELASTIC=1 only with --elastic, ACCORD_JOIN only with --join") {
  const std::string show = "echo elastic=${ACCORD_ELASTIC-unset} join=${ACCORD_JOIN-unset}";
  const auto lines_from = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> arguments = {"-n", "2"};
    arguments.insert(arguments.end(), flags.begin(), flags.end());
    arguments.insert(arguments.end(), {"--", "sh", "-c", show});
    const auto result = run_launcher(arguments);
    CHECK(result.exit_status == 0);
    std::set<std::string> lines;
    for (const auto& line : lines_of(result.out)) lines.insert(line);
    return lines;
  };
  scoped_environment env;
  CHECK(lines_from({"--elastic"}) ==
        std::set<std::string>{"[rank 0] elastic=1 join=unset", "[rank 1] elastic=1 join=unset"});

  // Even ones inherited from the launcher's environment are removed without their flags.
  env.set("ACCORD_ELASTIC", "1").set("ACCORD_JOIN", "node1:29500");
  CHECK(lines_from({}) ==
        std::set<std::string>{"[rank 0] elastic=unset join=unset", "[rank 1] elastic=unset join=unset"});
}

TEST_CASE("accord-launch forwards SIGTERM to the workers and stops on its timeout") {
  SUBCASE("SIGTERM") {
    const auto result = run_launcher({"-n", "2", "--", "sh", "-c", "echo started; exec sleep 1000"}, 2);
    CHECK(result.exit_status == 128 + SIGTERM);
    const auto own = launcher_lines(result.err);
    REQUIRE(own.size() == 1);
    CHECK(own[0] == "accord-launch: received signal 15 (Terminated); forwarding it to the workers");
  }
  SUBCASE("timeout") {
    const auto result = run_launcher({"-n", "2", "--timeout", "0.3", "--", "sleep", "1000"});
    CHECK(result.exit_status == 124);
    const auto own = launcher_lines(result.err);
    REQUIRE(own.size() == 1);
    CHECK(own[0] == "accord-launch: timed out after 0.3 s; stopping the workers");
  }
}

TEST_CASE("accord-launch rejects bad command lines with one line and status 2") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-n", "0", "--", "true"}, "-n must be in 1..65536, got 0"},
      {{"-n", "two", "--", "true"}, "-n expects an integer, got 'two'"},
      {{"--", "true"}, "-n N is required (see --help)"},
      {{"-n", "2", "--bogus", "true"}, "unknown flag '--bogus' (see --help)"},
      {{"-n", "2"}, "no program to launch (give it after the flags, or after '--')"},
      {{"-n", "2", "--"}, "no program to launch (give it after the flags, or after '--')"},
      {{"--nproc_per_node", "-1", "true"}, "--nproc_per_node must be in 1..65536, got -1"},
      {{"-n", "2", "--nnodes", "0", "true"}, "--nnodes must be in 1..65536, got 0"},
      {{"-n", "2", "--nnodes", "-2", "true"}, "--nnodes must be in 1..65536, got -2"},
      {{"-n", "2", "--nnodes", "2", "--node-rank", "2", "--master-port", "1234", "true"},
       "--node-rank 2 must be below --nnodes 2"},
      {{"-n", "2", "--nnodes", "2", "--node_rank", "-1", "true"}, "--node_rank must be in 0..65535, got -1"},
      {{"-n", "2", "--node-rank", "1", "true"}, "--node-rank needs --nnodes"},
      {{"-n", "2", "--nnodes", "2", "--master-port", "1234", "true"}, "--nnodes 2 needs --node-rank"},
      {{"-n", "2", "--nnodes", "2", "--node-rank", "1", "true"},
       "--master-port or --rdzv-endpoint is required when the job spans machines (world size 4 > 2 workers here)"},
      {{"-n", "2", "--nnodes", "2", "--node-rank", "1", "--world-size", "4", "--master-port", "1234", "true"},
       "--nnodes conflicts with --world-size (it sets the world size to --nnodes x --nproc-per-node and the rank "
       "offset to --node-rank x --nproc-per-node)"},
      {{"-n", "65536", "--nnodes", "65536", "--node-rank", "0", "true"},
       "--nnodes 65536 x --nproc-per-node 65536 is more than 2^30 workers"},
      {{"-n", "2", "--rdzv-endpoint", "node1", "true"},
       "--rdzv-endpoint expects HOST:PORT with a port in 1..65535, got 'node1'"},
      {{"-n", "2", "--rdzv_endpoint=node1:0", "true"},
       "--rdzv_endpoint expects HOST:PORT with a port in 1..65535, got 'node1:0'"},
      {{"-n", "2", "--rdzv-endpoint", "node1:29500", "--master-port", "29500", "true"},
       "--rdzv-endpoint conflicts with --master-port (it sets the master address and port)"},
      {{"-n", "2", "--join", "node1:29500", "--nnodes", "2", "true"},
       "--join conflicts with --nnodes (joiners get their rank and master from the running job)"},
      {{"-n", "2", "--max-restarts", "-1", "--elastic", "true"}, "--max-restarts must be in 0..1048576, got -1"},
      {{"-n", "2", "--rdzv-backend", "etcd", "true"}, "--rdzv-backend: 'etcd' (expected static|c10d)"},
      {{"-n", "2", "--rdzv-backend", "static", "--rdzv-endpoint", "node1", "true"},
       "--rdzv-endpoint expects HOST:PORT with a port in 1..65535, got 'node1'"},
      {{"-n", "2", "--rdzv-id=", "true"}, "--rdzv-id must not be empty"},
      {{"-n", "2", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node1", "true"},
       "--nnodes 2 needs --node-rank (accord-launch does not hand out node ranks at the rendezvous as torchrun's "
       "c10d backend does: give each machine its --node-rank)"},
      {{"-n", "2", "--standalone", "--rdzv-endpoint", "node1:29500", "true"},
       "--standalone conflicts with --rdzv-endpoint (it runs the whole job on this machine)"},
      {{"-n", "2", "--standalone", "--nnodes", "2", "--node-rank", "0", "true"},
       "--standalone conflicts with --nnodes 2 (it runs the whole job on this machine)"},
      {{"-n", "2", "--standalone", "--join", "node1:29500", "true"},
       "--standalone conflicts with --join (it starts the whole job)"},
      {{"-n", "2", "--standalone=yes", "true"}, "--standalone takes no value, got '--standalone=yes'"},
      {{"-n", "2", "-m", "--no-python", "pkg.train"}, "-m conflicts with --no-python (a module runs with Python)"},
      {{"-n", "2", "--tee", "3", "true"}, "--tee needs --log-dir (its files hold the streams)"},
      {{"-n", "2", "--log-dir", "/tmp", "--redirects", "4", "true"}, "--redirects must be in 0..3, got 4"},
      {{"-n", "2", "--log-dir", "/tmp", "--redirects", "0:1,2:3", "true"},
       "--redirects's local rank must be in 0..1, got 2"},
      {{"-n", "2", "--log-dir", "/tmp", "--tee", "0:1,1", "true"},
       "--tee expects N or LOCAL_RANK:N,... with N in 0..3, got '0:1,1'"},
      {{"-n", "2", "--master-port", "70000", "--", "true"}, "--master-port must be in 1..65535, got 70000"},
      {{"-n", "2", "--timeout", "-1", "--", "true"}, "--timeout expects a positive number of seconds, got '-1'"},
      {{"-n", "2", "--world-size", "4", "--", "true"},
       "--master-port or --rdzv-endpoint is required when the job spans machines (world size 4 > 2 workers here)"},
      {{"-n", "3", "--rank-offset", "2", "--world-size", "4", "--master-port", "1234", "--", "true"},
       "--rank-offset 2 + -n 3 exceeds --world-size 4"},
      {{"-n", "2", "--master-addr"}, "--master-addr needs a value"},
      {{"-n", "2", "--elastic=yes", "--", "true"}, "--elastic takes no value, got '--elastic=yes'"},
      {{"-n", "2", "--join", "node1", "--", "true"}, "--join expects HOST:PORT with a port in 1..65535, got 'node1'"},
      {{"-n", "2", "--join", ":29500", "--", "true"}, "--join expects HOST:PORT with a port in 1..65535, got ':29500'"},
      {{"-n", "2", "--join=node1:", "--", "true"}, "--join expects HOST:PORT with a port in 1..65535, got 'node1:'"},
      {{"-n", "2", "--join", "node1:0", "--", "true"},
       "--join expects HOST:PORT with a port in 1..65535, got 'node1:0'"},
      {{"-n", "2", "--join", "node1:65536", "--", "true"},
       "--join expects HOST:PORT with a port in 1..65535, got 'node1:65536'"},
      {{"-n", "2", "--join", "node1:29500x", "--", "true"},
       "--join expects HOST:PORT with a port in 1..65535, got 'node1:29500x'"},
      {{"-n", "2", "--join"}, "--join needs a value"},
      {{"-n", "2", "--join", "node1:29500", "--master-addr", "node1", "--", "true"},
       "--join conflicts with --master-addr (joiners get their rank and master from the running job)"},
      {{"-n", "2", "--master-port", "29500", "--join", "node1:29500", "--", "true"},
       "--join conflicts with --master-port (joiners get their rank and master from the running job)"},
      {{"-n", "2", "--join", "node1:29500", "--rank-offset=4", "--", "true"},
       "--join conflicts with --rank-offset (joiners get their rank and master from the running job)"},
      {{"-n", "2", "--join", "node1:29500", "--world-size", "8", "--", "true"},
       "--join conflicts with --world-size (joiners get their rank and master from the running job)"},
  };
  for (const auto& [arguments, message] : cases) {
    CAPTURE(message);
    const auto result = run_launcher(arguments);
    CHECK(result.exit_status == 2);
    CHECK(result.out.empty());
    CHECK(result.err == "accord-launch: " + message + "\n");
  }
  // A program that cannot be run: 127, as the help says (and as a shell gives).
  for (const auto& [program, message] : std::vector<std::pair<std::string, std::string>>{
           {"accord-no-such-program", "program 'accord-no-such-program' not found in PATH"},
           {"/nonexistent/worker", "program '/nonexistent/worker' is not an executable file"}}) {
    const auto result = run_launcher({"-n", "2", "--", program});
    CHECK(result.exit_status == 127);
    CHECK(result.err == "accord-launch: " + message + "\n");
  }
  const auto help = run_launcher({"--help"});
  CHECK(help.exit_status == 0);
  CHECK(help.out.find("usage: accord-launch -n N") == 0);
  for (const char* documented : {"--nnodes M", "--node-rank K", "--rdzv-endpoint HOST:PORT", "--max-restarts R",
                                 "--nproc_per_node", "--master-addr", "--master-port", "--rank-offset", "--world-size", "--timeout",
                                 "--grace", "--elastic", "--join HOST:PORT", "ACCORD_ELASTIC", "ACCORD_JOIN",
                                 "[join L]", "LOCAL_WORLD_SIZE", "SIGKILL", "--trace FILE", "--log-dir DIR", "--standalone",
                                 "--rdzv-backend static|c10d", "--rdzv-id ID", "-m, --module", "--no-python",
                                 "--redirects N", "--tee N", "TORCHELASTIC_RESTART_COUNT", "ACCORD_LAUNCH_PYTHON"})
    CHECK(help.out.find(documented) != std::string::npos);
}

TEST_CASE("a worker started by accord-launch reads its place with process_group_from_environment") {
  if (std::getenv("ACCORD_TEST_LAUNCHED_WORKER") != nullptr) {  // this process is one of the workers
    const auto group = process_group_from_environment();
    REQUIRE(group);
    std::printf("rendezvous %d/%d local %d master %s:%d from %s, job %s\n", group->rank, group->world_size,
                group->local_rank, group->master_addr.c_str(), group->master_port, group->host.c_str(),
                group->job_id.starts_with("accord-launch:") ? "named by the launcher" : group->job_id.c_str());
    std::fflush(stdout);
    return;
  }
  char self[4096] = {};
  REQUIRE(readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  const auto result = run_launcher({"-n", "2", "--master-port", "30123", "--", "env", "ACCORD_TEST_LAUNCHED_WORKER=1",
                                    self, "--test-case=*started?by?accord-launch*"});
  CHECK(result.exit_status == 0);
  std::set<std::string> reports;
  for (const auto& line : lines_of(result.out))
    if (line.find("] rendezvous ") != std::string::npos) reports.insert(line);
  CHECK(reports == std::set<std::string>{
                       "[rank 0] rendezvous 0/2 local 0 master 127.0.0.1:30123 from 127.0.0.1, job named by the launcher",
                       "[rank 1] rendezvous 1/2 local 1 master 127.0.0.1:30123 from 127.0.0.1, job named by the launcher"});
}

TEST_CASE("BLAS threads: --blas-threads, then OPENBLAS_NUM_THREADS, then OMP_NUM_THREADS, then cores shared") {
  std::map<std::string, std::string> variables;
  auto environment = [&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  };
  auto choice = [&](int requested, int workers) {
    const auto c = choose_blas_threads(requested, workers, 16, environment);
    return std::to_string(c.threads) + " (" + c.reason + ")";
  };
  CHECK(choice(0, 1) == "16 (16 cores / 1 worker)");
  CHECK(choice(0, 4) == "4 (16 cores / 4 workers)");
  CHECK(choice(0, 32) == "1 (16 cores / 32 workers)");
  variables["LOCAL_WORLD_SIZE"] = "4";
  CHECK(choice(0, 1) == "4 (16 cores / 4 processes here (LOCAL_WORLD_SIZE) / 1 worker)");
  CHECK(choice(0, 2) == "2 (16 cores / 4 processes here (LOCAL_WORLD_SIZE) / 2 workers)");
  variables["OMP_NUM_THREADS"] = "3,1";
  CHECK(choice(0, 1) == "3 (OMP_NUM_THREADS)");
  variables["OPENBLAS_NUM_THREADS"] = "2";
  CHECK(choice(0, 1) == "2 (OPENBLAS_NUM_THREADS)");
  CHECK(choice(5, 1) == "5 (--blas-threads)");
  variables["OPENBLAS_NUM_THREADS"] = "0";
  CHECK_THROWS_WITH_AS(choice(0, 1), "OPENBLAS_NUM_THREADS='0' is not a positive integer", std::invalid_argument);
  CHECK(choice(5, 1) == "5 (--blas-threads)");  // an explicit choice needs no variable
  variables = {{"LOCAL_WORLD_SIZE", "two"}};
  CHECK_THROWS_WITH_AS(choice(0, 1), "LOCAL_WORLD_SIZE='two' is not a positive integer", std::invalid_argument);
  variables = {{"OMP_NUM_THREADS", "-1"}};
  CHECK_THROWS_WITH_AS(choice(0, 1), "OMP_NUM_THREADS='-1' is not a positive integer", std::invalid_argument);
  // An epoch between processes counts its members by host address. A launcher's LOCAL_WORLD_SIZE
  // wins over that guess (ranks in network namespaces of one machine each have an address of
  // their own: 4 of them on 2 cores must not take 2 threads each); the guess serves a joiner
  // started by hand, which has no LOCAL_WORLD_SIZE. The variables and the flag win over both.
  const auto in_epoch = [&](int requested, int processes_here) {
    const auto c = choose_blas_threads(requested, 1, 16, environment, processes_here);
    return std::to_string(c.threads) + " (" + c.reason + ")";
  };
  variables = {};
  CHECK(in_epoch(0, 4) == "4 (16 cores / 4 processes here of the job / 1 worker)");
  CHECK(in_epoch(0, 0) == "16 (16 cores / 1 worker)");
  variables = {{"LOCAL_WORLD_SIZE", "4"}};
  CHECK(in_epoch(0, 1) == "4 (16 cores / 4 processes here (LOCAL_WORLD_SIZE) / 1 worker)");
  CHECK(in_epoch(0, 2) == "4 (16 cores / 4 processes here (LOCAL_WORLD_SIZE) / 1 worker)");
  CHECK(in_epoch(0, 0) == "4 (16 cores / 4 processes here (LOCAL_WORLD_SIZE) / 1 worker)");
  CHECK(in_epoch(3, 1) == "3 (--blas-threads)");
  variables["OPENBLAS_NUM_THREADS"] = "2";
  CHECK(in_epoch(0, 4) == "2 (OPENBLAS_NUM_THREADS)");
}

TEST_CASE("workers started by accord-launch -n 2 share this machine's cores for BLAS") {
  if (std::getenv("ACCORD_TEST_BLAS_WORKER") != nullptr) {  // this process is one of the workers
    std::printf("blas reason: %s\n", choose_blas_threads(0, 1).reason.c_str());
    std::fflush(stdout);
    return;
  }
  char self[4096] = {};
  REQUIRE(readlink("/proc/self/exe", self, sizeof self - 1) > 0);
  const auto result = run_launcher({"-n", "2", "--", "env", "-u", "OMP_NUM_THREADS", "-u", "OPENBLAS_NUM_THREADS",
                                    "ACCORD_TEST_BLAS_WORKER=1", self, "--test-case=*share this machine*"});
  CHECK(result.exit_status == 0);
  CHECK(result.out.find("processes here (LOCAL_WORLD_SIZE) / 1 worker") != std::string::npos);
  CHECK(result.out.find(" 2 processes here") != std::string::npos);
}
