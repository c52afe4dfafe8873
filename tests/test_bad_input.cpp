// Bad input to every program in apps/ and to run_job: each refusal is one line on stderr naming
// the flag (or field), a non-zero exit (2 for a bad command line, 127 for a program the launcher
// cannot run), and nothing hangs: every program runs under a deadline and is killed past it.
#include <doctest/doctest.h>

#include <accord/job.hpp>

#include "recovery/checkpoint.hpp"
#include "program_run.hpp"
#include "test_job.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <regex>
#include <string>
#include <vector>

using namespace accord;
using accord::testing::test_job;

namespace {

using testing::lines_of;
using testing::program_run;

// Runs `program` without any launcher variable in its environment, `environment` entries
// ("NAME=value") added, killed past `deadline`.
program_run run_program(const std::string& program, const std::vector<std::string>& arguments,
                        const std::vector<std::string>& environment = {},
                        std::chrono::seconds deadline = std::chrono::seconds(20)) {
  return testing::run_program(program, arguments,
                              {.environment = environment,
                               .environment_removed = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=",
                                                       "MASTER_PORT=", "SLURM_PROCID=", "ACCORD_ELASTIC=",
                                                       "ACCORD_JOIN=", "ACCORD_REPLAY_MEMBERSHIP="},
                               .deadline = deadline});
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

struct bad_case {
  std::string program;
  std::string arguments;  // split at spaces; "''" stands for an empty argument
  std::string names;      // the error line must contain this (the flag, variable or value)
  int exit_status = 2;
  std::vector<std::string> environment = {};
};

void check_refused(const bad_case& c) {
  std::vector<std::string> arguments = split_words(c.arguments);
  for (auto& a : arguments)
    if (a == "''") a.clear();
  const program_run run = run_program(c.program, arguments, c.environment);
  const std::string program_name = c.program.substr(c.program.rfind('/') + 1);
  INFO(program_name << " " << c.arguments << "\nstderr: " << run.err);
  CHECK_FALSE(run.timed_out);
  CHECK(run.exit_status == c.exit_status);
  const auto lines = lines_of(run.err);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind(program_name + ": ", 0) == 0);
  CHECK(lines[0].find(c.names) != std::string::npos);
}

const std::string train = ACCORD_TRAIN_BINARY;
const std::string launch = ACCORD_LAUNCH_BINARY;
const std::string bench_algorithms = ACCORD_BENCH_ALGORITHMS_BINARY;
const std::string bench_models = ACCORD_BENCH_MODELS_BINARY;
const std::string bench_gpu = ACCORD_BENCH_GPU_BINARY;
const std::string bench_collectives = ACCORD_BENCH_COLLECTIVES_BINARY;
const std::string bench_topologies = ACCORD_BENCH_TOPOLOGIES_BINARY;
const std::string bench_time_to_loss = ACCORD_BENCH_TIME_TO_LOSS_BINARY;
const std::string bench_own_loop = ACCORD_BENCH_OWN_LOOP_BINARY;

// A job small enough that the refusals that come after loading the data stay quick.
const std::string tiny = " --width 16 --heads 2 --layers 1 --context 8 --steps 2";

}  // namespace

TEST_CASE("accord-train refuses out-of-range numbers naming the flag") {
  const std::vector<bad_case> cases = {
      {train, "--steps -1", "--steps: '-1'"},
      {train, "--steps 0", "--steps"},
      {train, "--steps 1e12", "--steps"},
      {train, "--steps 2.5", "--steps"},
      {train, "--steps abc", "--steps"},
      {train, "--steps 2 --steps 3", "--steps"},
      {train, "--micro-batch -1", "--micro-batch"},
      {train, "--micro-batch 0", "--micro-batch"},
      {train, "--workers 0", "--workers"},
      {train, "--workers -4", "--workers"},
      {train, "--workers 100000", "--workers"},
      {train, "--accumulation 0", "--accumulation"},
      {train, "--max-accumulation -1", "--max-accumulation"},
      {train, "--estimate-accumulation -1", "--estimate-accumulation"},
      {train, "--estimate-accumulation 1000001", "--estimate-accumulation"},
      {train, "--dpu-warmup -1", "--dpu-warmup"},
      {train, "--seed -3", "--seed"},
      {train, "--context 0", "--context"},
      {train, "--vocab 0", "--vocab"},
      {train, "--vocab 65537", "--vocab"},
      {train, "--status-port 65536", "--status-port"},
      {train, "--status-port -1", "--status-port"},
      {train, "--layers -1", "--layers"},
      {train, "--heads 0", "--heads"},
      {train, "--width 0", "--width"},
      {train, "--lr nan", "--lr: 'nan'"},
      {train, "--lr inf", "--lr"},
      {train, "--lr 0", "--lr"},
      {train, "--lr -1", "--lr"},
      {train, "--beta1 2", "--beta1"},
      {train, "--beta1 -5", "--beta1"},
      {train, "--beta2 1.5", "--beta2"},
      {train, "--beta2 nan", "--beta2"},
      {train, "--weight-decay -1", "--weight-decay"},
      {train, "--weight-decay inf", "--weight-decay"},
      {train, "--min-lr-ratio 5", "--min-lr-ratio"},
      {train, "--min-lr-ratio -1", "--min-lr-ratio"},
      {train, "--warmup -1", "--warmup"},
      {train, "--eval-interval -1", "--eval-interval"},
      {train, "--eval-examples 0", "--eval-examples"},
      {train, "--wire-precision fp2", "--wire-precision"},
      {train, "--wire-precision fp16,sign", "--wire-precision: 'fp16,sign' (gradients and parameters may differ"},
      {train, "--estimate-precision fp4,sign,sign", "--estimate-precision: 'fp4,sign,sign' (expected P or P,Q"},
      {train, "--compute-precision fp16", "--compute-precision"},
      {train, "--compute-precision bf16 --device cpu", "--compute-precision bf16"},
      {train, "--compute-precision bf16 --model mlp", "--compute-precision bf16"},
      {train, "--replica-check -2", "--replica-check"},
      {train, "--checkpoint-interval -1", "--checkpoint-interval"},
      {train, "--blas-threads -1", "--blas-threads"},
      {train, "--blas-threads 100000", "--blas-threads"},
      {train, "--log-interval -1", "--log-interval"},
      {train, "--keep-interval 0", "--keep-interval"},
      {train, "--heartbeat-timeout 0", "--heartbeat-timeout"},
      {train, "--heartbeat-timeout nan", "--heartbeat-timeout"},
      {train, "--majority-wait -1", "--majority-wait"},
      {train, "--majority-wait nan", "--majority-wait"},
      {train, "--majority-wait 1e12", "--majority-wait"},
      {train, "--speed 1e300,1 --workers 2", "--speed: '1e300'"},
      {train, "--speed 0.5,1 --workers 2", "--speed"},
      {train, "--speed ''", "--speed"},
      {train, "--speed 1,,1", "--speed"},
      {train, "--membership 1:100000", "--membership"},
      {train, "--membership 1:-1", "--membership"},
      {train, "--membership -1:2", "--membership"},
      {train, "--model mlp --hidden 0", "--hidden"},
      {train, "--model mlp --hidden ''", "--hidden"},
      {train, "--local-steps 0", "--local-steps"},
      {train, "--local-steps -1", "--local-steps"},
      {train, "--outer-lr 0", "--outer-lr"},
      {train, "--outer-lr nan", "--outer-lr"},
      {train, "--outer-momentum 2", "--outer-momentum"},
      {train, "--overlap-steps soon", "--overlap-steps"},
      {train, "--group-size 0", "--group-size"},
      {train, "--max-staleness -1", "--max-staleness"},
      {train, "--gossip-rate -1", "--gossip-rate"},
      {train, "--gossip-rate nan", "--gossip-rate"},
      {train, "--group-size 100000", "--group-size"},
  };
  for (const auto& c : cases) check_refused(c);
}

TEST_CASE("accord-train refuses what cannot fit in memory naming the flag, before allocating") {
  const std::vector<bad_case> cases = {
      {train, "--width 1000000", "--width 1000000: needs about"},
      {train, "--layers 100000", "--layers 100000"},
      {train, "--context 1000000", "--context 1000000"},
      {train, "--model mlp --hidden 100000000", "--hidden 100000000"},
      {train, "--micro-batch 1000000", "--micro-batch 1000000"},
      {train, "--workers 60000", "--workers 60000"},
      {train, "--membership 1:60000", "--membership 1:60000"},
  };
  for (const auto& c : cases) check_refused(c);
}

TEST_CASE("accord-train refuses bad words, stray arguments and bad environments with one line") {
  const std::vector<bad_case> cases = {
      {train, "train", "unexpected argument 'train'"},
      {train, "--steps 5 more", "'more'"},
      {train, "--frobnicate", "frobnicate"},
      {train, "--transport nope", "--transport: 'nope'"},
      {train, "--model resnet", "--model"},
      {train, "--schedule linear", "--schedule"},
      {train, "--device tpu", "--device: 'tpu' is not cpu, cuda, cuda:N or auto"},
      {train, "--device cuda:x", "--device: 'cuda:x' is not cpu, cuda, cuda:N or auto"},
      {train, "--device cuda --model mlp", "--device cuda: --model mlp runs on the cpu only"},
      {train, "--join nohost", "--join"},
      {train, "--link 3parsecs" + tiny, "3parsecs"},
      {train, "--data /nonexistent/corpus.txt" + tiny, "/nonexistent/corpus.txt"},
      {train, "--data /nonexistent/train_*.bin" + tiny, "/nonexistent/train_*.bin: matches no file"},
      {train, "--eval-data /nonexistent/val.bin" + tiny, "/nonexistent/val.bin"},
      {train, "--vocab 100" + tiny, "outside the vocabulary of 100"},
      {train, "--resume /nonexistent/state.ckpt" + tiny, "/nonexistent/state.ckpt"},
      {train, "--optimizer rmsprop" + tiny, "rmsprop"},
      {train, "--algo sgd-async" + tiny, "sgd-async"},
      {train, "--algo ddp --estimate-accumulation 1" + tiny, "estimate accumulation: algorithm ddp has no estimate rounds"},
      {train, "--topology star" + tiny, "--topology: 'star' (expected gossip|hierarchical|local-sgd|parameter-server|ring)"},
      {train, "--topology local-sgd --algo acco" + tiny, "--topology local-sgd: its inner steps"},
      {train, "--topology local-sgd --algo ddp --outer-momentum 1" + tiny, "--outer-momentum must be in [0, 1)"},
      {train, "--topology hierarchical" + tiny, "--topology hierarchical: needs a group size"},
      {train, "--topology gossip --gossip-graph star" + tiny, "--gossip-graph: 'star'"},
      {train, "--topology gossip --algo ddp --gossip-lockstep --gossip-graph exponential" + tiny, "with --gossip-lockstep"},
      {train, "--topology gossip --algo ddp --gossip-momentum nesterov" + tiny, "--gossip-momentum: 'nesterov' (expected none|a2cid2)"},
      {train, "--topology local-sgd --algo ddp --local-steps 2 --fragments 3" + tiny, "--fragments must be in 1..--local-steps"},
      {train, "--topology local-sgd --algo ddp --outer-update soon" + tiny, "--outer-update: 'soon' (expected delayed|eager)"},
      {train, "--topology local-sgd --algo ddp --outer-precision int4" + tiny, "--outer-precision: 'int4' (expected fp32|bf16"},
      {train, "--topology local-sgd --algo ddp --workers 4 --inner-group 3" + tiny,
       "--topology local-sgd: --inner-group must be a whole number of workers dividing the 4 workers, not 3"},
      {train, "--topology local-sgd --algo ddp --inner-group 0" + tiny, "--inner-group: '0' is not a whole number in 1..65535"},
      {train, "--topology parameter-server" + tiny, "--topology parameter-server: servers step a sharded optimizer"},
      {train, "--topology hierarchical --group-size 2 --inter-link 3parsecs" + tiny, "3parsecs"},
      {train, "--algo dlion-mavo --wire-precision int8" + tiny, "wire precision: 'int8' means nothing for dlion-mavo"},
      {train, "--algo acco-dlion --wire-precision sign" + tiny, "wire precision: 'sign' means nothing for acco-dlion"},
      {train, "--algo ddp --wire-precision sign --topology gossip" + tiny, "wire precision: 'sign' is for the ring topology"},
      {train, "--wire-precision int4" + tiny, "--wire-precision: 'int4' (expected fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3)"},
      {train, "--algo dlion-avg --wire-precision fp8" + tiny, "wire precision: 'fp8' means nothing for dlion-avg"},
      {train, "--estimate-precision int2" + tiny, "--estimate-precision: 'int2'"},
      {train, "--beta1 1" + tiny, "beta1"},
      {train, "--warmup 10" + tiny, "warmup"},
      {train, "--speed 1,1" + tiny, "speed factors"},
      {train, "--membership 5:2" + tiny, "membership"},
      {train, "--steps 1", "RANK=5", 2, {"RANK=5", "WORLD_SIZE=2"}},
      {train, "--steps 1", "WORLD_SIZE", 2, {"RANK=0", "WORLD_SIZE=0"}},
      {train, "--steps 1", "MASTER_PORT", 2, {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=99999"}},
      {train, "--steps 1", "LOCAL_RANK", 2, {"ACCORD_JOIN=127.0.0.1:29500", "LOCAL_RANK=x"}},
      {train, "--steps 1", "ACCORD_JOIN", 2, {"ACCORD_JOIN=nohost"}},
  };
  for (const auto& c : cases) check_refused(c);
}

TEST_CASE("a membership log that does not fit the job is refused with one line naming the file and line, before training") {
  const auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
    return path;
  };
  const std::string job_line = "{\"event\":\"job\",\"workers\":4,\"steps\":100}\n";
  const std::string other_world = write("bad_input_world.log", "{\"event\":\"job\",\"workers\":3,\"steps\":100}\n");
  const std::string too_late =
      write("bad_input_late.log", job_line + "{\"event\":\"epoch\",\"epoch\":1,\"step\":0,\"workers\":4}\n" +
                                      "{\"event\":\"epoch\",\"epoch\":2,\"step\":50,\"workers\":3}\n");
  const std::string malformed = write("bad_input_malformed.log", job_line + "{\"event\":\"epoch\",\"epoch\":2,\n");
  const std::vector<bad_case> cases = {
      {train, "--replay-membership " + other_world + tiny, other_world + ":1: the log is of a job of 3 workers, this one has 4"},
      {train, "--replay-membership " + too_late + tiny, too_late + ":3: epoch 2 starts after step 50, at or beyond --steps 2"},
      {train, "--replay-membership " + malformed + tiny, malformed + ":2: not a membership event ("},
      {train, "--replay-membership /nonexistent/churn.log" + tiny, "/nonexistent/churn.log: cannot read the membership log"},
      {train, "--replay-membership " + other_world + " --membership 1:2" + tiny, "give one"},
      {train, "--replay-membership " + other_world + " --record-membership " + other_world + tiny, "would overwrite"},
      // Between processes: before the coordinator starts.
      {train, "--replay-membership " + other_world + tiny, "replaying the membership between processes needs an elastic job", 2,
       {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"}},
      {train, "--replay-membership " + other_world + tiny, other_world + ":1: the log is of a job of 3 workers, this one has 2",
       2, {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "ACCORD_ELASTIC=1"}},
      {train, tiny.substr(1), too_late + ":3: epoch 2 starts after step 50, at or beyond --steps 2", 2,
       {"RANK=1", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "ACCORD_ELASTIC=1", "ACCORD_REPLAY_MEMBERSHIP=" + too_late}},
      {launch, "-n 2 --replay-membership " + other_world + " -- true",
       other_world + ":1: the log is of a job of 3 workers, this one has 2"},
      {launch, "-n 4 --replay-membership " + malformed + " -- true", malformed + ":2: not a membership event ("},
      {launch, "-n 4 --replay-membership " + too_late + " --join 127.0.0.1:29500 -- true", "conflicts with --join"},
      {train, "--failure-detector sometimes" + tiny, "--failure-detector: 'sometimes' (expected adaptive|timeout)"},
  };
  for (const auto& c : cases) check_refused(c);
}

TEST_CASE("a checkpoint whose error-feedback residuals were written for another wire precision is refused naming it") {
  const std::string path = "bad_input_feedback.ck";
  std::remove(path.c_str());
  const program_run written =
      run_program(train, split_words("--wire-precision int8 --checkpoint " + path + tiny), {}, std::chrono::seconds(60));
  INFO(written.err);
  REQUIRE(written.exit_status == 0);
  REQUIRE(read_checkpoint(path).feedback == "int8");
  for (const char* other : {"sign", "fp32"})
    check_refused({train, "--steps 4 --resume " + path + " --wire-precision " + std::string(other) + tiny.substr(0, tiny.find(" --steps")),
                   path + ": the checkpoint's error-feedback residuals were written for wire precision int8, this job's is " +
                       other + " (resume it with --wire-precision int8)"});
}

TEST_CASE("a flag that does nothing where it is given gets one warning line, and the job runs") {
  const program_run run =
      run_program(train, split_words("--transport ucx --elastic --model gpt --hidden 8 --log-interval 0 --link unlimited" + tiny));
  INFO(run.err);
  CHECK(run.exit_status == 0);
  CHECK(lines_of(run.err) ==
        std::vector<std::string>{"accord-train: warning: --hidden does nothing without --model mlp; ignored",
                                 "accord-train: warning: --transport does nothing in one process (it applies "
                                 "between processes); ignored",
                                 "accord-train: warning: --elastic does nothing in one process (it applies "
                                 "between processes); ignored"});
}

TEST_CASE("--help shows defaults as written") {
  const program_run run = run_program(train, {"--help"});
  CHECK(run.exit_status == 0);
  CHECK(run.out.find("(=0.1)") != std::string::npos);
  CHECK(run.out.find("0.100000001") == std::string::npos);
}

TEST_CASE("accord-train --help shows its flags by section: model, data, algorithm, topology, precision, distributed, "
          "elastic, output") {
  const program_run run = run_program(train, {"--help"});
  CHECK(run.exit_status == 0);
  // Each section's heading, in order, and flags that belong under it (before the next heading).
  const std::vector<std::pair<std::string, std::vector<std::string>>> sections = {
      {"\nmodel:\n", {"--model ", "--device ", "--width ", "--hidden "}},
      {"\ndata:\n", {"--data ", "--eval-data ", "--seed ", "--eval-interval "}},
      {"\nalgorithm:\n", {"--algo ", "--workers ", "--steps ", "--micro-batch ", "--optimizer ", "--lr "}},
      {"\ntopology:\n", {"--topology ", "--local-steps ", "--gossip-rate ", "--link "}},
      {"\nprecision:\n", {"--wire-precision ", "--estimate-precision ", "--compute-precision "}},
      {"\ndistributed (between processes):\n", {"--transport ", "--heartbeat-timeout ", "--master-bind "}},
      {"\nelastic jobs and checkpoints:\n", {"--elastic ", "--join ", "--membership ", "--checkpoint ", "--resume "}},
      {"\noutput:\n", {"--metrics ", "--trace ", "--status-port ", "--log-interval "}},
  };
  std::size_t previous = 0;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const auto& [heading, flags] = sections[i];
    CAPTURE(heading);
    const std::size_t at = run.out.find(heading);
    REQUIRE(at != std::string::npos);
    CHECK(at > previous);
    const std::size_t next = i + 1 < sections.size() ? run.out.find(sections[i + 1].first) : std::string::npos;
    for (const std::string& flag : flags) {
      CAPTURE(flag);
      const std::size_t where = run.out.find("  " + flag);
      CHECK(where > at);
      CHECK(where < next);
    }
    previous = at;
  }
}

TEST_CASE("accord-launch refuses bad flags (2) and programs it cannot run (127)") {
  const std::vector<bad_case> cases = {
      {launch, "-n 0 -- true", "-n"},
      {launch, "-n -1 -- true", "-n"},
      {launch, "-n 2 --timeout nan -- true", "--timeout"},
      {launch, "-n 2 --grace -1 -- true", "--grace"},
      {launch, "-n 2 --master-port 70000 -- true", "--master-port"},
      {launch, "-n 2 --stray -- true", "'--stray'"},
      {launch, "-n 2 --nnodes 2 --node-rank 2 true", "--node-rank"},
      {launch, "-n 2 --rdzv-endpoint node1: true", "--rdzv-endpoint"},
      {launch, "-n 2 --max-restarts -1 true", "--max-restarts"},
      {launch, "-n 2 --rdzv-backend etcd true", "--rdzv-backend"},
      {launch, "-n 2 --tee 3 true", "--tee"},
      {launch, "-n 2 stray -- true", "'stray'", 127},
      {launch, "-n 2 -- /nonexistent/worker", "/nonexistent/worker", 127},
      {launch, "-n 2 -- accord-no-such-program", "accord-no-such-program", 127},
  };
  for (const auto& c : cases) check_refused(c);
}

TEST_CASE("a bad flag under accord-launch fails every rank quickly and names the flag") {
  for (const char* flag : {"--beta1", "--workers"}) {
    const std::string value = std::string(flag) == "--beta1" ? "2" : "100000";
    const program_run run = run_program(launch, {"-n", "2", "--", train, flag, value, "--steps", "2"});
    INFO(run.err);
    CHECK_FALSE(run.timed_out);
    CHECK(run.exit_status == 2);
    CHECK(run.err.find(std::string("accord-train: ") + flag + ": '" + value + "'") != std::string::npos);
  }
}

TEST_CASE("the benchmarks refuse bad flags naming them") {
  const std::vector<bad_case> cases = {
      {bench_algorithms, "--algos ''", "--algos"},
      {bench_algorithms, "--algos ddp,,acco", "--algos"},
      {bench_algorithms, "--algos nope", "--algos: unknown algorithm 'nope' (expected ddp|"},
      {bench_algorithms, "--steps -1", "--steps"},
      {bench_algorithms, "--width 1000000", "--width"},
      {bench_algorithms, "extra", "'extra'"},
      {bench_algorithms, "--algos ddp,acco --accumulation 3", "--accumulation must be even"},
      {bench_algorithms, "--algos ddp,acco --accumulation 2 --estimate-accumulation 2",
       "--estimate-accumulation must be below --accumulation"},
      {bench_models, "--seconds nan", "--seconds"},
      {bench_models, "--seconds 0", "--seconds"},
      {bench_models, "--examples -1", "--examples"},
      {bench_models, "--examples 1000000", "--examples 1000000"},
      {bench_models, "--threads 0", "--threads"},
      {bench_models, "extra", "'extra'"},
      {bench_gpu, "--gpt-steps -1", "--gpt-steps"},
      {bench_gpu, "--elements 0", "--elements"},
      {bench_gpu, "--elements 68719476736", "--elements 68719476736"},
      {bench_gpu, "--iterations 0", "--iterations"},
      {bench_gpu, "--device tpu", "--device"},
      {bench_collectives, "--ranks 1", "--ranks"},
      {bench_collectives, "--min-bytes 4", "--min-bytes"},
      {bench_collectives, "--min-bytes 4096 --max-bytes 1024", "--max-bytes"},
      {bench_collectives, "--volume-mib nan", "--volume-mib"},
      {bench_collectives, "--max-bytes 17179869184 --ranks 64", "--max-bytes"},
      {bench_topologies, "--runs ring;;gossip", "--runs: an empty run"},
      {bench_topologies, "--runs star", "--runs 'star': --topology: 'star'"},
      {bench_topologies, "--runs local-sgd --algo acco", "--topology local-sgd: its inner steps"},
      {bench_topologies, "--topology gossip", "--topology: each run of --runs names its own topology"},
      {bench_topologies, "--target -1", "--target: '-1'"},
      {bench_topologies, "--repetitions 0", "--repetitions"},
      {bench_time_to_loss, "--comm-ratio nan", "--comm-ratio"},
      {bench_time_to_loss, "--comm-ratio 0", "--comm-ratio"},
      {bench_time_to_loss, "--targets 3.0", "--targets"},
      {bench_time_to_loss, "--algos ddp,nope", "--algos"},
      {bench_time_to_loss, "--repetitions 0", "--repetitions"},
      {bench_own_loop, "--algos ddp,nope", "--algos: unknown algorithm 'nope'"},
      {bench_own_loop, "--repetitions 0", "--repetitions 0: expected 1 to 100"},
      {bench_own_loop, "--repetitions 1000", "--repetitions 1000: expected 1 to 100"},
      {bench_own_loop, "--algos ddp,acco --accumulation 3", "--accumulation must be even"},
      {bench_own_loop, "--steps 0", "--steps"},
      {bench_time_to_loss, "--algos ddp,acco --accumulation 3", "--accumulation must be even"},
      {bench_time_to_loss, "--algos ddp,acco --accumulation 4 --estimate-accumulation 4",
       "--estimate-accumulation must be below --accumulation"},
  };
  for (const auto& c : cases) check_refused(c);
}

TEST_CASE("ranks that fail at once print whole lines, one each") {
  // Both ranks of accord-bench-collectives refuse a network device that does not exist in the
  // same instant; each line must stay whole (a garbled one read "rank accord-bench-collectives: rank 1: ...").
  const std::regex whole_line(
      "accord-bench-collectives: rank [01](: ucx: UCX_NET_DEVICES=bogus0: this machine has no network device "
      "'bogus0' \\(ucx_info -d lists the devices\\)| failed)");
  for (int attempt = 0; attempt < 3; ++attempt) {
    const program_run run = run_program(bench_collectives, {"--net-devices", "bogus0"});
    INFO("stderr: " << run.err);
    CHECK(run.exit_status == 1);
    const auto lines = lines_of(run.err);
    CHECK(!lines.empty());
    for (const std::string& line : lines) CHECK(std::regex_match(line, whole_line));
  }
}

namespace {

// ½‖θ‖² with a gradient θ, except that `poison` makes it diverge after `good_calls` calls (shared
// by every clone): a NaN loss, or a gradient so large that one update overflows the parameters.
// `clones_allowed` makes clone() throw once exceeded, like a device that runs out mid-spawn.
class fragile final : public model {
public:
  enum class poison { none, loss, gradient };
  fragile(poison p, int good_calls, int clones_allowed = 1 << 30)
      : poison_(p),
        calls_left_(std::make_shared<std::atomic<int>>(good_calls)),
        clones_left_(std::make_shared<std::atomic<int>>(clones_allowed)) {}
  std::string signature() const override { return "fragile"; }
  std::size_t parameter_count() const override { return 4; }
  void initialize(std::span<float> p, std::uint64_t) const override { std::fill(p.begin(), p.end(), 1.0f); }
  double forward_backward(std::span<const float> p, const batch&, std::span<float> g) override {
    const bool poisoned = --*calls_left_ < 0;
    double loss = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      g[i] = poisoned && poison_ == poison::gradient ? 3e38f : p[i];
      loss += 0.5 * p[i] * p[i];
    }
    return poisoned && poison_ == poison::loss ? std::numeric_limits<double>::quiet_NaN() : loss;
  }
  double evaluate(std::span<const float> p, const batch& b) override {
    std::vector<float> g(p.size());
    return forward_backward(p, b, g);
  }
  std::unique_ptr<model> clone() const override {
    if (--*clones_left_ < 0) throw std::runtime_error("clone: out of device memory");
    return std::make_unique<fragile>(*this);
  }

private:
  poison poison_;
  std::shared_ptr<std::atomic<int>> calls_left_, clones_left_;
};

class constant_data final : public dataset {
public:
  std::string describe() const override { return "constant"; }
  std::uint64_t size() const override { return 1u << 20; }
  batch examples(std::uint64_t, std::size_t count) const override {
    batch b;
    b.examples = count;
    b.features.assign(count * 4, 0.0f);
    b.targets.assign(count, 0);
    return b;
  }
};

job_config small_job() {
  job_config job = test_job("ddp", 2, 6).sgd(1e-3f).constant_rate().evaluate(0, 3);
  job.micro_batch = 2;
  return job;
}

std::string invalid_argument_of(job_config job) {
  fragile net(fragile::poison::none, 1 << 30);
  auto data = std::make_shared<constant_data>();
  try {
    run_job(net, data, data, job);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("run_job refuses bad job_config fields with std::invalid_argument naming the field") {
  struct field_case {
    const char* field;
    void (*spoil)(job_config&);
  };
  const field_case cases[] = {
      {"beta1", [](job_config& j) { j.beta1 = 2.0f; }},
      {"beta2", [](job_config& j) { j.beta2 = -5.0f; }},
      {"min_lr_ratio", [](job_config& j) { j.min_lr_ratio = 5.0f; }},
      {"learning_rate", [](job_config& j) { j.learning_rate = std::numeric_limits<float>::quiet_NaN(); }},
      {"weight_decay", [](job_config& j) { j.weight_decay = -1.0f; }},
      {"epsilon", [](job_config& j) { j.epsilon = 0.0f; }},
      {"speed factors", [](job_config& j) { j.speed_factors = {1e300, 1}; }},
      {"workers", [](job_config& j) { j.workers = 100000; }},
      {"workers", [](job_config& j) { j.workers = 2000; }},
      {"micro-batch", [](job_config& j) { j.micro_batch = 0; }},
      {"membership", [](job_config& j) { j.membership = {{1, 100000, false}}; }},
      {"keep_interval", [](job_config& j) { j.keep_interval = 0; }},
  };
  for (const auto& c : cases) {
    job_config job = small_job();
    c.spoil(job);
    const std::string message = invalid_argument_of(job);
    CAPTURE(message);
    CHECK(message.find(c.field) != std::string::npos);
  }
}

TEST_CASE("an exception while the actors exist comes out of run_job instead of hanging it") {
  // The coordinator's evaluator and the first worker get their clones; the second worker's fails.
  fragile net(fragile::poison::none, 1 << 30, 2);
  auto data = std::make_shared<constant_data>();
  CHECK_THROWS_WITH_AS(run_job(net, data, data, small_job()), "clone: out of device memory", std::runtime_error);
}

TEST_CASE("an exception while a process's actors exist comes out of run_job_process instead of hanging it") {
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(bind(probe, reinterpret_cast<sockaddr*>(&address), length) == 0);
  REQUIRE(getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(probe);
  process_group group;
  group.master_port = ntohs(address.sin_port);
  job_config job = small_job();
  job.workers = 1;
  // Rank 0's evaluator gets its clone; its worker's fails once the epoch has begun.
  fragile net(fragile::poison::none, 1 << 30, 1);
  auto data = std::make_shared<constant_data>();
  CHECK_THROWS_WITH_AS(run_job_process(net, data, data, job, group), "clone: out of device memory",
                       std::runtime_error);
}

TEST_CASE("a diverged job stops naming the step and the worker, keeping the last good checkpoint") {
  const std::string path = "bad_input_divergence.ckpt";
  for (const auto poison : {fragile::poison::loss, fragile::poison::gradient}) {
    std::remove(path.c_str());
    job_config job = small_job();
    job.checkpoint_path = path;
    job.checkpoint_interval = 1;
    fragile net(poison, 6);  // two workers, one micro-batch per step: three good steps
    auto data = std::make_shared<constant_data>();
    std::string message;
    try {
      run_job(net, data, data, job);
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find("worker ") != std::string::npos);
    CHECK(message.find("step 4: ") != std::string::npos);
    CHECK(message.find(poison == fragile::poison::loss ? "training loss is not finite"
                                                       : "parameters are not finite") != std::string::npos);
    // Step 3's checkpoint, unless the failure reached the coordinator before the last report of step 3.
    const checkpoint kept = read_checkpoint(path);
    CHECK((kept.steps == 2 || kept.steps == 3));
    CHECK(std::all_of(kept.parameters.begin(), kept.parameters.end(), [](float p) { return std::isfinite(p); }));
  }
  std::remove(path.c_str());
}
