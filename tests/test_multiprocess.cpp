// Real multi-process jobs: accord-launch starts accord-train workers that rendezvous through
// the coordinator (CAF middleman) and exchange tensors over UCX on loopback.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace {

struct run_output {
  int status = -1;
  std::string text;
};

run_output run(const std::string& command) {
  run_output out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe);
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) out.text.append(buffer.data(), n);
  const int raw = pclose(pipe);
  out.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return out;
}

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small GPT and a fixed number of micro-batches per round, so runs are deterministic;
// one BLAS thread everywhere, since thread counts change the rounding of matrix products.
const std::string train_flags =
    " --width 32 --layers 1 --heads 2 --context 16 --micro-batch 4 --max-accumulation 1"
    " --eval-interval 0 --eval-batches 1 --log-interval 1 --blas-threads 1";
const std::string launch = std::string(ACCORD_LAUNCH_BINARY) + " --timeout 120 ";
const std::string train = ACCORD_TRAIN_BINARY;

}  // namespace

TEST_CASE("3 processes over UCX give the same parameters as 3 in-process workers") {
  for (const char* algo : {"ddp", "acco", "dlion-mavo"}) {
    CAPTURE(algo);
    const std::string launched = "multiprocess_" + std::string(algo) + "_launched.f32";
    const std::string inproc = "multiprocess_" + std::string(algo) + "_inproc.f32";
    const run_output distributed = run(launch + "-n 3 -- " + train + " --algo " + algo + train_flags + " --steps 3" +
                                       " --save-parameters " + launched);
    INFO(distributed.text);
    REQUIRE(distributed.status == 0);
    CHECK(distributed.text.find("[rank 0] done: 3 steps") != std::string::npos);
    CHECK(distributed.text.find("replicas identical") != std::string::npos);
    const run_output local =
        run(train + " --workers 3 --algo " + algo + train_flags + " --steps 3 --save-parameters " + inproc);
    REQUIRE(local.status == 0);
    const auto a = read_all(launched), b = read_all(inproc);
    REQUIRE(a.size() > 0);
    CHECK(a == b);  // bit-identical: the same ring collectives over another transport
  }
}

TEST_CASE("a worker whose model differs is refused with a message naming it") {
  const run_output out = run(launch + "-n 2 -- /bin/sh -c 'if [ \"$RANK\" = 1 ]; then exec " + train + train_flags +
                             " --untied-head; else exec " + train + train_flags + "; fi'");
  INFO(out.text);
  CHECK(out.status != 0);
  CHECK(out.text.find("rank 1 refused: its model/configuration") != std::string::npos);
}

TEST_CASE("a worker killed mid-run fails the job instead of hanging it") {
  const run_output out = run(launch + "-n 3 -- /bin/sh -c 'if [ \"$RANK\" = 2 ]; then (sleep 2; kill -9 $$) & fi; exec " +
                             train + " --width 32 --layers 1 --heads 2 --context 16 --micro-batch 4 --steps 100000"
                             " --log-interval 0 --blas-threads 1'");
  INFO(out.text);
  CHECK(out.status != 0);
  CHECK(out.text.find("rank 2 was killed by signal 9") != std::string::npos);
}

TEST_CASE("accord-train rejects bad flags and environments with one line") {
  auto bad = [](const std::string& args, const std::string& expected) {
    const run_output out = run(train + " " + args);
    CAPTURE(args);
    INFO(out.text);
    CHECK(out.status == 2);
    CHECK(out.text.find(expected) != std::string::npos);
  };
  bad("--algo sgd-async", "unknown algorithm 'sgd-async'");
  bad("--workers 0", "workers must be at least 1");
  bad("--speed 1,x", "--speed: 'x' is not a number");
  bad("--link 3parsecs", "3parsecs");
  bad("--model resnet", "--model: 'resnet'");
  bad("--data /nonexistent/corpus.txt", "/nonexistent/corpus.txt");
  bad("--context 0", "context");
  bad("--frobnicate", "frobnicate");
  bad("--device tpu", "tpu");
}

TEST_CASE("a worker with a bad rendezvous environment says which variable is wrong") {
  const run_output out = run("RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 " + train + " --steps 1");
  CHECK(out.status == 2);
  CHECK(out.text.find("RANK=5 is out of range for WORLD_SIZE=2") != std::string::npos);
}

TEST_CASE("a checkpoint written by a multi-process job resumes in one process and under 3 processes") {
  const std::string constant = train_flags + " --schedule constant --algo ddp";
  const run_output saved = run(launch + "-n 2 -- " + train + constant + " --steps 3 --checkpoint multiprocess_ck.bin");
  INFO(saved.text);
  REQUIRE(saved.status == 0);
  REQUIRE(run(train + " --workers 2" + constant + " --steps 6 --save-parameters multiprocess_full.f32").status == 0);
  REQUIRE(run(train + " --workers 2" + constant + " --steps 6 --resume multiprocess_ck.bin"
                      " --save-parameters multiprocess_resumed.f32").status == 0);
  CHECK(read_all("multiprocess_full.f32") == read_all("multiprocess_resumed.f32"));
  const run_output wider = run(launch + "-n 3 -- " + train + constant + " --steps 6 --resume multiprocess_ck.bin");
  INFO(wider.text);
  CHECK(wider.status == 0);
  CHECK(wider.text.find("[rank 0] step     6/6") != std::string::npos);
}

TEST_CASE("--transport nccl without usable GPUs fails with one line instead of hanging") {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    MESSAGE("a GPU is present: covered by scripts/gpu-check.sh instead");
    return;
  }
  const run_output out = run(launch + "-n 2 -- " + train + train_flags + " --steps 1 --transport nccl");
  INFO(out.text);
  CHECK(out.status != 0);
  CHECK(out.text.find("accord-train: ") != std::string::npos);
  CHECK((out.text.find("nccl") != std::string::npos || out.text.find("NCCL") != std::string::npos));
}
