// Real multi-process jobs: accord-launch starts accord-train workers that rendezvous through
// the coordinator (CAF middleman) and exchange tensors over UCX on loopback.
#include <doctest/doctest.h>

#include "loopback_port.hpp"
#include "run_command.hpp"

#include "actors/standby_actor.hpp"
#include "cluster/membership_log.hpp"
#include "job/worker_spawn.hpp"
#include "recovery/checkpoint.hpp"
#include "recovery/parameter_hash.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using accord::testing::free_port;
using accord::testing::run;
using accord::testing::run_output;

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string text_of(const std::string& path) {
  const std::vector<char> bytes = read_all(path);
  return {bytes.begin(), bytes.end()};
}

// A small GPT and a fixed number of micro-batches per round, so runs are deterministic;
// one BLAS thread everywhere, since thread counts change the rounding of matrix products.
const std::string train_flags =
    " --width 32 --layers 1 --heads 2 --context 16 --micro-batch 4 --max-accumulation 1"
    " --eval-interval 0 --eval-examples 4 --log-interval 1 --blas-threads 1";
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

TEST_CASE("DDP's gradient buckets between 2 processes give the unbucketed in-process parameters bit for bit") {
  // Buckets of 1000 gradients (small enough for several per layer) on 2 micro-batches per step.
  const std::string job = " --algo ddp --width 32 --layers 2 --heads 2 --context 16 --micro-batch 4 --accumulation 2"
                          " --max-accumulation 2 --eval-interval 0 --eval-examples 4 --log-interval 1 --blas-threads 1"
                          " --steps 3";
  const run_output distributed =
      run(launch + "-n 2 -- " + train + job + " --bucket-cap-mb 0.003814697265625 --save-parameters multiprocess_buckets.f32");
  INFO(distributed.text);
  REQUIRE(distributed.status == 0);
  CHECK(distributed.text.find("replicas identical") != std::string::npos);
  REQUIRE(run(train + " --workers 2" + job + " --bucket-cap-mb 0 --save-parameters multiprocess_buckets_inproc.f32").status ==
          0);
  const auto a = read_all("multiprocess_buckets.f32"), b = read_all("multiprocess_buckets_inproc.f32");
  REQUIRE(a.size() > 0);
  CHECK(a == b);
  for (const char* cap : {"-1", "nan"}) {
    const run_output refused = run(train + job + " --bucket-cap-mb " + cap);
    CHECK(refused.status != 0);
    CHECK(refused.text == "accord-train: --bucket-cap-mb: '" + std::string(cap) + "' is not a number in [0, 10000]\n");
  }
}

TEST_CASE("two launchers with --nnodes 2 (two machines simulated on loopback) run one job of 4 ranks: the "
          "parameters of 4 in-process workers") {
  const std::string nodes = launch + "--nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:29573 ";
  const std::string job = " " + train + " --algo ddp" + train_flags + " --steps 3";
  const run_output distributed = run(nodes + "--node-rank 1" + job + " & second=$!; " + nodes + "--node-rank 0" + job +
                                     " --save-parameters multiprocess_nnodes.f32; first=$?; "
                                     "wait $second; echo \"launchers exited $first $?\"");
  INFO(distributed.text);
  CHECK(distributed.text.find("launchers exited 0 0") != std::string::npos);
  CHECK(distributed.text.find("[rank 0] done: 3 steps") != std::string::npos);
  CHECK(distributed.text.find("replicas identical") != std::string::npos);
  REQUIRE(run(train + " --workers 4 --algo ddp" + train_flags + " --steps 3 --save-parameters multiprocess_nnodes_inproc.f32")
              .status == 0);
  const auto a = read_all("multiprocess_nnodes.f32"), b = read_all("multiprocess_nnodes_inproc.f32");
  REQUIRE(a.size() > 0);
  CHECK(a == b);
}

TEST_CASE("int8 and sign real rounds with error feedback over UCX give the in-process parameters bit for bit, "
          "also where an elastic job folds the residuals at every kept step") {
  const std::pair<const char*, const char*> cases[] = {
      {"ddp_int8", " --algo ddp --wire-precision int8"},
      {"acco_sign", " --algo acco --wire-precision sign --estimate-precision sign"},
  };
  for (const auto& [name, flags] : cases) {
    CAPTURE(name);
    const std::string launched = std::string("multiprocess_ef_") + name + "_launched.f32";
    const std::string inproc = std::string("multiprocess_ef_") + name + "_inproc.f32";
    const run_output distributed =
        run(launch + "-n 3 -- " + train + flags + train_flags + " --steps 4 --save-parameters " + launched);
    INFO(distributed.text);
    REQUIRE(distributed.status == 0);
    CHECK(distributed.text.find("replicas identical") != std::string::npos);
    REQUIRE(run(train + " --workers 3" + flags + train_flags + " --steps 4 --save-parameters " + inproc).status == 0);
    const auto a = read_all(launched), b = read_all(inproc);
    REQUIRE(a.size() > 0);
    CHECK(a == b);
  }
  // An elastic job keeps every step, folding each worker's residuals into their owners' ranges
  // first: as an in-process job that writes a checkpoint every step does.
  const std::string flags = " --algo ddp --wire-precision int8" + train_flags + " --steps 4 --save-parameters ";
  const run_output elastic = run(launch + "--elastic -n 3 -- " + train + flags + "multiprocess_ef_elastic.f32");
  INFO(elastic.text);
  REQUIRE(elastic.status == 0);
  REQUIRE(run(train + " --workers 3 --checkpoint multiprocess_ef.ck --checkpoint-interval 1" + flags +
              "multiprocess_ef_checkpointed.f32")
              .status == 0);
  CHECK(read_all("multiprocess_ef_elastic.f32") == read_all("multiprocess_ef_checkpointed.f32"));
}

namespace {

// `flags` trained by `workers` processes over UCX (accord-launch) end with the parameters that
// `workers` workers in one process reach, bit for bit.
void check_launched_equals_one_process(const std::string& name, int workers, const std::string& flags) {
  CAPTURE(name);
  const std::string launched = "multiprocess_" + name + "_launched.f32", inproc = "multiprocess_" + name + "_inproc.f32";
  const std::string count = std::to_string(workers);
  const run_output distributed = run(launch + "-n " + count + " -- " + train + flags + train_flags + " --save-parameters " + launched);
  INFO(distributed.text);
  REQUIRE(distributed.status == 0);
  CHECK(distributed.text.find("replicas identical") != std::string::npos);
  const run_output local = run(train + " --workers " + count + flags + train_flags + " --save-parameters " + inproc);
  REQUIRE(local.status == 0);
  const auto a = read_all(launched), b = read_all(inproc);
  REQUIRE(a.size() > 0);
  CHECK(a == b);
}

}  // namespace

TEST_CASE("topologies over UCX between 3 processes give the same parameters as in one process") {
  const std::vector<std::pair<std::string, std::string>> topologies = {
      {"local_sgd", " --algo ddp --topology local-sgd --local-steps 2 --steps 5"},
      // Its outer all-reduces in flight, on the UCX worker's channel and on the in-process one.
      {"streaming_diloco", " --algo ddp --topology local-sgd --local-steps 4 --fragments 2 --overlap-steps 3"
                           " --overlap-mix 0.5 --steps 9"},
      // Eager, its pseudo-gradients in fp4 with error feedback.
      {"streaming_diloco_eager_fp4", " --algo ddp --topology local-sgd --local-steps 4 --fragments 2 --overlap-steps 3"
                                     " --overlap-mix 0.5 --outer-update eager --outer-precision fp4 --steps 9"},
      {"gossip", " --algo ddp --topology gossip --gossip-lockstep --gossip-graph complete --gossip-rate 2 --steps 4"},
      {"hierarchical", " --algo ddp --topology hierarchical --group-size 2 --steps 3"},
      {"hierarchical_vote", " --algo dlion-mavo --topology hierarchical --group-size 2 --steps 3"},
  };
  for (const auto& [name, flags] : topologies) check_launched_equals_one_process(name, 3, flags);
}

TEST_CASE("hierarchical DiLoCo, 2 groups of 2 processes over UCX, gives one process's parameters bit for bit") {
  // DDP inside each group every inner step; eager fp4 outer rounds in flight between the groups,
  // on each UCX worker's channel, over its column's subgroup.
  const std::string flags = " --algo ddp --topology local-sgd --inner-group 2 --local-steps 4 --fragments 2"
                            " --overlap-steps 3 --overlap-mix 0.5 --outer-update eager --outer-precision fp4 --steps 9";
  check_launched_equals_one_process("inner_group", 4, flags);
}

TEST_CASE("Streaming DiLoCo with --overlap-steps auto between 3 processes over UCX: every replica the same bits after "
          "each merge") {
  // τ follows the times measured, so the parameters are not one process's; every process must
  // still merge at the same step: the hashes are compared after each merge (one fragment, α = 0).
  const run_output launched = run(launch + "-n 3 -- " + train +
                                  " --algo ddp --topology local-sgd --local-steps 4 --overlap-steps auto --steps 13" +
                                  train_flags);
  INFO(launched.text);
  REQUIRE(launched.status == 0);
  CHECK(launched.text.find("replicas identical") != std::string::npos);
}

TEST_CASE("the asynchronous topologies between processes refuse an elastic job they cannot keep, with one line") {
  const run_output elastic = run(launch + "--elastic -n 2 -- " + train +
                                 " --algo ddp --topology parameter-server --max-staleness 0" + train_flags + " --steps 2");
  INFO(elastic.text);
  CHECK(elastic.status != 0);
  CHECK(elastic.text.find("--topology parameter-server: workers coming and going need --max-staleness >= 1") !=
        std::string::npos);
}

namespace {

// The metrics file's lines, in order.
std::vector<std::string> metrics_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.back() == '}') lines.push_back(line);
  return lines;
}

// The line's consensus_distance, -1 without one.
double consensus_of(const std::string& line) {
  const std::string key = "\"consensus_distance\":";
  const auto at = line.find(key);
  return at == std::string::npos ? -1 : std::stod(line.substr(at + key.size()));
}

// Parameters saved by --save-parameters.
std::vector<float> floats_of(const std::string& path) {
  const std::vector<char> bytes = read_all(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double square = 0;
  for (std::size_t i = 0; i < a.size(); ++i) square += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
  return std::sqrt(square);
}

double train_loss_of(const std::string& line) {
  const std::string key = "\"train_loss\":";
  const auto at = line.find(key);
  REQUIRE(at != std::string::npos);
  return std::stod(line.substr(at + key.size()));
}

// The (from, to) pairs of every step's edge_bytes that carried bytes.
std::set<std::pair<int, int>> edges_of(const std::vector<std::string>& lines) {
  std::set<std::pair<int, int>> edges;
  const std::string key = "\"edge_bytes\":[";
  for (const auto& line : lines) {
    const auto at = line.find(key);
    if (at == std::string::npos) continue;
    std::istringstream in(line.substr(at + key.size()));
    for (char c = 0; in >> c && c == '[';) {
      int from = -1, to = -1;
      std::uint64_t bytes = 0;
      char comma = 0, close = 0;
      if (!(in >> from >> comma >> to >> comma >> bytes >> close)) break;
      if (bytes > 0) edges.insert({from, to});
      if (!(in >> c) || c != ',') break;  // ',' or the closing ']'
    }
  }
  return edges;
}

const std::string parameter_server = " --algo ddp --topology parameter-server" + train_flags;

}  // namespace

TEST_CASE("the synchronous parameter server between 3 processes gives the in-process servers' parameters") {
  const run_output distributed = run(launch + "-n 3 -- " + train + parameter_server +
                                     " --max-staleness 0 --steps 4 --save-parameters multiprocess_ps0_launched.f32");
  INFO(distributed.text);
  REQUIRE(distributed.status == 0);
  CHECK(distributed.text.find("[rank 0] done: 4 steps") != std::string::npos);
  const run_output local = run(train + " --workers 3" + parameter_server +
                               " --max-staleness 0 --steps 4 --save-parameters multiprocess_ps0_inproc.f32");
  INFO(local.text);
  REQUIRE(local.status == 0);
  const auto a = read_all("multiprocess_ps0_launched.f32"), b = read_all("multiprocess_ps0_inproc.f32");
  REQUIRE(a.size() > 0);
  CHECK(a == b);  // one round of every worker's gradient per shard, summed in rank order
  // DDP's ring sums in another order: the same parameters up to rounding.
  const run_output ddp = run(train + " --workers 3 --algo ddp" + train_flags +
                             " --wire-precision fp32 --steps 4 --save-parameters multiprocess_ps0_ddp.f32");
  REQUIRE(ddp.status == 0);
  const auto c = read_all("multiprocess_ps0_ddp.f32");
  REQUIRE(c.size() == a.size());
  float worst = 0;
  for (std::size_t i = 0; i + sizeof(float) <= a.size(); i += sizeof(float)) {
    float x = 0, y = 0;
    std::memcpy(&x, a.data() + i, sizeof x);
    std::memcpy(&y, c.data() + i, sizeof y);
    worst = std::max(worst, std::fabs(x - y));
  }
  CHECK(worst < 1e-5f);
}

TEST_CASE("the asynchronous parameter server between 3 processes trains and records staleness") {
  const run_output out = run(launch + "-n 3 -- " + train + parameter_server +
                             " --max-staleness 2 --steps 12 --metrics multiprocess_ps2.jsonl");
  INFO(out.text);
  REQUIRE(out.status == 0);
  const auto lines = metrics_lines("multiprocess_ps2.jsonl");
  REQUIRE(lines.size() == 12);
  CHECK(train_loss_of(lines.back()) < train_loss_of(lines.front()));
  for (const auto& line : lines) {
    CAPTURE(line);
    CHECK(line.find("\"staleness\":[") != std::string::npos);
    CHECK(line.find("\"bytes\":0,") == std::string::npos);
  }
  CHECK(edges_of(lines).size() == 3 * 3);  // every worker to and from every shard (its own beside it)
}

TEST_CASE("asynchronous gossip between 3 processes trains and reports the consensus distance") {
  const run_output out = run(launch + "-n 3 -- " + train + " --algo ddp --topology gossip --gossip-rate 2" + train_flags +
                             " --steps 12 --metrics multiprocess_gossip.jsonl --save-parameters multiprocess_gossip.f32");
  INFO(out.text);
  REQUIRE(out.status == 0);
  const auto lines = metrics_lines("multiprocess_gossip.jsonl");
  REQUIRE(lines.size() == 12);
  CHECK(train_loss_of(lines.back()) < train_loss_of(lines.front()));
  for (const auto& line : lines) CHECK(consensus_of(line) >= 0);  // every step: estimated, exact where evaluated
  CHECK(lines.back().find("\"worker_gradients\":[") != std::string::npos);
  CHECK(read_all("multiprocess_gossip.f32").size() > 0);
  // Every process's bytes to each neighbour reach rank 0's reports: edges between distinct ranks.
  const std::set<std::pair<int, int>> edges = edges_of(lines);
  CHECK(std::none_of(edges.begin(), edges.end(), [](const auto& e) { return e.first == e.second; }));
  std::set<int> senders;
  for (const auto& [from, to] : edges) senders.insert(from);
  CHECK(senders.size() == 3);  // ranks 1 and 2 too, not only rank 0's own
}

TEST_CASE("A2CiD2 gossip between 4 processes on a ring: the mean of the copies is DDP's up to the curvature, the copies agree") {
  // Plain SGD: an update is the same on any copy up to the gradient's dependence on it, and the
  // exchanges and A2CiD2's mixing keep the sum of θ (Σ(θ̃ − θ) = 0 on one clock), so the mean of
  // the copies stays near DDP's parameters: 2-5% of the distance DDP travels, measured; 50% if
  // the gradients' updates skipped θ̃ (θ then mixes back towards the start).
  const std::string sgd = train_flags + " --optimizer sgd --beta1 0 --weight-decay 0";
  const run_output ddp = run(train + " --workers 4 --algo ddp" + sgd +
                             " --steps 12 --wire-precision fp32 --save-parameters multiprocess_a2cid2_ddp.f32");
  REQUIRE(ddp.status == 0);
  const run_output start =  // the initial parameters: one step of a negligible rate
      run(train + " --workers 4 --algo ddp" + sgd + " --steps 1 --lr 1e-30 --save-parameters multiprocess_a2cid2_start.f32");
  REQUIRE(start.status == 0);
  const std::string gossip = " --algo ddp --topology gossip --gossip-graph ring --steps 12" + sgd;
  const run_output accelerated = run(launch + "-n 4 -- " + train + gossip +
                                     " --gossip-rate 2 --gossip-momentum a2cid2 --metrics multiprocess_a2cid2.jsonl"
                                     " --save-parameters multiprocess_a2cid2.f32");
  INFO(accelerated.text);
  REQUIRE(accelerated.status == 0);
  const std::vector<float> reference = floats_of("multiprocess_a2cid2_ddp.f32");
  const double travelled = distance(reference, floats_of("multiprocess_a2cid2_start.f32"));
  const double off = distance(floats_of("multiprocess_a2cid2.f32"), reference);
  MESSAGE("A2CiD2 between 4 processes: the mean of the copies " << off << " from DDP's parameters, which travelled "
                                                                << travelled);
  CHECK(off < 0.15 * travelled);
  const auto lines = metrics_lines("multiprocess_a2cid2.jsonl");
  REQUIRE(lines.size() == 12);
  for (const auto& line : lines) CHECK(consensus_of(line) >= 0);
  // Without exchanges the copies drift apart; A2CiD2's exchanges keep them together (the last
  // step's figure is exact: evaluated, every copy collected).
  const run_output apart = run(launch + "-n 4 -- " + train + gossip + " --gossip-rate 0 --metrics multiprocess_apart.jsonl");
  REQUIRE(apart.status == 0);
  const double together = consensus_of(lines.back()), drift = consensus_of(metrics_lines("multiprocess_apart.jsonl").back());
  MESSAGE("consensus distance at the last step: " << together << " with A2CiD2 at rate 2, " << drift << " without exchanges");
  CHECK(together < 0.5 * drift);
}

TEST_CASE("an asynchronous worker killed mid-run fails the job instead of hanging it") {
  for (const std::string topology : {"parameter-server --max-staleness 1", "gossip"}) {
    CAPTURE(topology);
    const run_output out = run(launch + "-n 3 -- /bin/sh -c 'if [ \"$RANK\" = 2 ]; then (sleep 2; kill -9 $$) & fi; exec " +
                               train + " --algo ddp --topology " + topology + train_flags + " --steps 100000'");
    INFO(out.text);
    CHECK(out.status != 0);
    CHECK(out.text.find("rank 2 was killed by signal 9") != std::string::npos);
  }
}

TEST_CASE("a worker whose model differs is refused with a message naming it") {
  const run_output out = run(launch + "-n 2 -- /bin/sh -c 'if [ \"$RANK\" = 1 ]; then exec " + train + train_flags +
                             " --untied-head; else exec " + train + train_flags + "; fi'");
  INFO(out.text);
  CHECK(out.status != 0);
  CHECK(out.text.find("rank 1 refused: --model differs: rank 0 has gpt(") != std::string::npos);
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
  bad("--workers 0", "--workers: '0' is not a whole number in 1..65535");
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
  // fp32 on the wire: a checkpoint holds the parameters, not 16-bit compute copies of them.
  const std::string constant = train_flags + " --schedule constant --algo ddp --wire-precision fp32";
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

namespace {

// The newest metrics line's step and epoch (0, 0 before the first).
std::pair<std::uint64_t, std::uint64_t> progress_of(const std::string& metrics) {
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line.back() == '}') last = line;
  auto field = [&](const std::string& name) -> std::uint64_t {
    const auto at = last.find("\"" + name + "\":");
    return at == std::string::npos ? 0 : std::stoull(last.substr(at + name.size() + 3));
  };
  return {field("step"), field("epoch")};
}

// Waits until the job's metrics reach `step` in epoch `epoch` or later; false after 3 minutes.
bool wait_for(const std::string& metrics, std::uint64_t step, std::uint64_t epoch) {
  for (int i = 0; i < 9000; ++i) {
    const auto [at, in] = progress_of(metrics);
    if (in >= epoch && at >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int read_pid(const std::string& path) {
  std::ifstream in(path);
  int pid = 0;
  in >> pid;
  return pid;
}

// "checksum A before the transfer, B after" lines of rank 0's output.
std::vector<std::pair<std::string, std::string>> transfer_checksums(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> found;
  const std::regex line("checksum ([0-9a-f]+) before the transfer, ([0-9a-f]+) after");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it)
    found.emplace_back((*it)[1], (*it)[2]);
  return found;
}

double final_eval_loss(const std::string& text) {
  const auto at = text.find("final eval loss ");
  REQUIRE(at != std::string::npos);
  return std::stod(text.substr(at + 16));
}

// Churned jobs run 800 steps and several epochs: a generous limit for a loaded machine.
const std::string elastic_launch = std::string(ACCORD_LAUNCH_BINARY) + " --timeout 400 ";

const std::string elastic_flags =
    " --width 64 --layers 1 --heads 2 --context 32 --micro-batch 4 --steps 800 --eval-interval 0"
    " --eval-examples 256 --log-interval 100";

// A 4-process elastic job (the flags' algorithm and topology) that loses rank 2 after step 40
// (killed, or stopped when `hangs`: it goes silent), lets rank 3 leave after step 90 and, after
// step 140, refuses a joiner whose model differs and admits one that matches.
struct churned_job {
  run_output job, joiner, mismatched;
  bool reached_join = false;
};
churned_job run_with_churn(const std::string& flags, const std::string& metrics, bool hangs) {
  std::remove(metrics.c_str());
  const int port = free_port();
  churned_job out;
  // Each worker records its pid (exec keeps it) so that the test can kill rank 2 and stop rank 3
  // (named after the metrics: tests run in parallel).
  const std::string pids = metrics + ".pid.";
  std::thread job_thread([&] {
    out.job = run(elastic_launch + "--elastic -n 4 --master-port " + std::to_string(port) + " -- /bin/sh -c 'echo $$ > " +
                  pids + "$RANK; exec " + train + flags + " --metrics " + metrics + "'");
  });
  const std::string master = " --join 127.0.0.1:" + std::to_string(port);
  const bool reached_crash = wait_for(metrics, 40, 1);
  if (reached_crash) kill(read_pid(pids + "2"), hangs ? SIGSTOP : SIGKILL);
  const bool reached_leave = reached_crash && wait_for(metrics, 90, 2);
  if (hangs) kill(read_pid(pids + "2"), SIGKILL);  // the launcher waits for every worker
  if (reached_leave) kill(read_pid(pids + "3"), SIGTERM);
  out.reached_join = reached_leave && wait_for(metrics, 140, 3);
  if (out.reached_join) {
    out.mismatched = run(train + flags + " --untied-head" + master);
    out.joiner = run(train + flags + master);
  }
  job_thread.join();
  return out;
}

// What every churned job must show: the death, the leave and both joiners handled, the job done.
void check_churned(const churned_job& churned) {
  INFO(churned.job.text);
  INFO(churned.joiner.text);
  REQUIRE(churned.reached_join);
  CHECK(churned.job.status == 0);
  CHECK(churned.job.text.find("rank 2 was killed by signal 9") != std::string::npos);
  CHECK(churned.job.text.find("[rank 3] left the job") != std::string::npos);
  CHECK(churned.job.text.find("4 -> 3 workers") != std::string::npos);
  CHECK(churned.job.text.find("3 -> 2 workers") != std::string::npos);
  CHECK(churned.job.text.find("2 -> 3 workers") != std::string::npos);
  CHECK(churned.mismatched.status == 2);
  CHECK(churned.mismatched.text.find("a joiner at 127.0.0.1 refused: --model differs") != std::string::npos);
  CHECK(churned.joiner.status == 0);
  // The joiner, started by hand without LOCAL_WORLD_SIZE, shares the cores with the members
  // already on this host instead of sizing its BLAS threads as if alone.
  if (std::thread::hardware_concurrency() > 1)
    CHECK(churned.joiner.text.find("processes here of the job / 1 worker)") != std::string::npos);
}

// Training went on as it would have: the final loss is in line with an undisturbed run of
// `flags` (workers were fewer for a while, fewer tokens per step, so it may lag a little).
void check_loss_as_undisturbed(const std::string& flags, const run_output& churned, const std::string& what) {
  const run_output undisturbed = run(elastic_launch + "-n 4 -- " + train + flags);
  INFO(undisturbed.text);
  REQUIRE(undisturbed.status == 0);
  MESSAGE(what << ": final eval loss " << final_eval_loss(churned.text) << " with churn, "
               << final_eval_loss(undisturbed.text) << " undisturbed");
  CHECK(std::abs(final_eval_loss(churned.text) - final_eval_loss(undisturbed.text)) <
        0.15 * final_eval_loss(undisturbed.text));
}

}  // namespace

TEST_CASE("a job that is not elastic waits out a worker stopped for 3 s: late heartbeats do not fail it") {
  const std::string metrics = "multiprocess_stopped.jsonl", pids = "multiprocess_stopped.pid.";
  std::remove(metrics.c_str());
  run_output job;
  std::thread job_thread([&] {
    job = run(launch + "-n 2 -- /bin/sh -c 'echo $$ > " + pids + "$RANK; exec " + train + elastic_flags +
              " --metrics " + metrics + "'");
  });
  const bool started = wait_for(metrics, 20, 0);
  if (started) {
    kill(read_pid(pids + "1"), SIGSTOP);  // past the adaptive detector's 1.5 s floor
    std::this_thread::sleep_for(std::chrono::seconds(3));
    kill(read_pid(pids + "1"), SIGCONT);
  }
  job_thread.join();
  INFO(job.text);
  REQUIRE(started);
  CHECK(job.status == 0);
  CHECK(progress_of(metrics).first == 800);
}

TEST_CASE("an elastic job loses a worker (killed, or hung: its heartbeats stop), lets one leave, admits a joiner "
          "and refuses a mismatched one") {
  // ACCO's rank 2 is killed (its connections close), also with fp8 error-feedback rounds (the
  // residuals travel with the shards); D-Lion's is stopped (it goes silent), and the adaptive
  // detector finds it without a --heartbeat-timeout (30 s by default).
  for (const std::string algo : {"acco", "acco --wire-precision fp8", "dlion-mavo"}) {
    CAPTURE(algo);
    const bool hangs = algo == "dlion-mavo";
    const std::string flags = elastic_flags + " --algo " + algo;
    const std::string name = algo.substr(0, algo.find(' ')) + (algo.find("fp8") != std::string::npos ? "_fp8" : "");
    const std::string metrics = "elastic_" + name + ".jsonl";
    const churned_job churned = run_with_churn(flags, metrics, hangs);
    check_churned(churned);
    const run_output& job = churned.job;
    INFO(job.text);
    CHECK(job.text.find("replicas identical") != std::string::npos);
    // Every surviving rank names the lost member and the leaver, with role, step and cause; the
    // metrics file records them.
    const std::string cause = hangs ? ": hung (silent for " : ": connection closed (killed";
    for (const char* rank : {"[rank 0] ", "[rank 1] "}) {
      CHECK(job.text.find(rank + std::string("membership: rank 2 (127.0.0.1), worker, lost at step ")) !=
            std::string::npos);
      CHECK(job.text.find(cause) != std::string::npos);
      CHECK(job.text.find(rank + std::string("membership: rank 3 (127.0.0.1), worker, left at step ")) !=
            std::string::npos);
    }
    const std::vector<char> recorded = read_all(metrics);
    const std::string metrics_text(recorded.begin(), recorded.end());
    CHECK(metrics_text.find(R"({"event":"lost","epoch":1,"step":)") != std::string::npos);
    CHECK(metrics_text.find(R"("rank":2,"host":"127.0.0.1","role":"worker","cause":)") != std::string::npos);
    CHECK(metrics_text.find(R"({"event":"left",)") != std::string::npos);
    // Every epoch restored the kept state: the same parameters everywhere, and (ZeRO-1) the
    // optimizer state's checksum unchanged by the re-sharding.
    if (!hangs) {
      const auto checksums = transfer_checksums(job.text);
      CHECK(checksums.size() >= 3);
      for (const auto& [before, after] : checksums) CHECK(before == after);
    } else {
      CHECK(job.text.find("restored the parameters of step") != std::string::npos);
    }
    check_loss_as_undisturbed(flags, job, algo);
  }
}

TEST_CASE("accord-launch --elastic --max-restarts 1: a killed worker starts again as a joiner and the job takes it back") {
  const std::string metrics = "elastic_restart.jsonl";
  std::remove(metrics.c_str());
  const int port = free_port();
  // Each worker records its pid (exec keeps it) so that the test can kill rank 2.
  const std::string pids = metrics + ".pid.";
  run_output job;
  std::thread job_thread([&] {
    job = run(elastic_launch + "--elastic --max-restarts 1 -n 3 --master-port " + std::to_string(port) +
              " -- /bin/sh -c 'echo $$ > " + pids + "${RANK-joiner}; exec " + train + elastic_flags +
              " --algo ddp --metrics " + metrics + "'");
  });
  const bool reached_crash = wait_for(metrics, 40, 1);
  if (reached_crash) kill(read_pid(pids + "2"), SIGKILL);
  job_thread.join();
  INFO(job.text);
  REQUIRE(reached_crash);
  CHECK(job.status == 0);
  CHECK(job.text.find("accord-launch: rank 2 was killed by signal 9 (Killed); restarting it to join the job again "
                      "(restart 1 of 1)") != std::string::npos);
  CHECK(job.text.find("3 -> 2 workers") != std::string::npos);
  CHECK(job.text.find("2 -> 3 workers") != std::string::npos);  // the restarted worker, taken back as a joiner
  CHECK(job.text.find(" joins)") != std::string::npos);
  CHECK(job.text.find("replicas identical") != std::string::npos);
}

namespace {

// An asynchronous topology's churned job: the death rolled back to a kept step, every transfer
// intact, the loss in line with an undisturbed run (`metrics`: a file of its own, as tests run in parallel).
void check_asynchronous_churn(const std::string& topology, const std::string& metrics) {
  CAPTURE(topology);
  const std::string flags = elastic_flags + " --algo ddp --keep-interval 10 --topology " + topology;
  const churned_job churned = run_with_churn(flags, metrics, false);
  check_churned(churned);
  const run_output& job = churned.job;
  INFO(job.text);
  // The death rolled back to a kept step (a multiple of --keep-interval, every gradient before
  // it applied everywhere); every epoch restored the optimizer state unchanged by re-sharding.
  const std::smatch first = [&] {
    std::smatch m;
    std::regex_search(job.text, m, std::regex("restored the state of step ([0-9]+)"));
    return m;
  }();
  REQUIRE(first.size() == 2);
  CHECK(std::stoull(first[1]) % 10 == 0);
  const auto checksums = transfer_checksums(job.text);
  CHECK(checksums.size() == 3);
  for (const auto& [before, after] : checksums) CHECK(before == after);
  check_loss_as_undisturbed(flags, job, topology);
}

}  // namespace

TEST_CASE("the asynchronous topologies between processes lose a worker, let one leave and admit a joiner, state intact") {
  for (const char* topology : {"parameter-server --max-staleness 2", "gossip --gossip-rate 1"})
    check_asynchronous_churn(topology, "elastic_asynchronous.jsonl");
}

TEST_CASE("A2CiD2 gossip between processes loses a worker, lets one leave and admits a joiner, its θ̃ settled at the "
          "kept steps") {
  check_asynchronous_churn("gossip --gossip-rate 1 --gossip-momentum a2cid2", "elastic_a2cid2.jsonl");
}

TEST_CASE("without --elastic a joiner is refused and the job goes on") {
  const int port = free_port();
  std::remove("fixed_job.jsonl");
  run_output job;
  std::thread job_thread([&] {
    job = run(launch + "-n 2 --master-port " + std::to_string(port) + " -- " + train + elastic_flags +
              " --metrics fixed_job.jsonl");
  });
  const bool started = wait_for("fixed_job.jsonl", 5, 1);
  const run_output joiner = run(train + elastic_flags + " --join 127.0.0.1:" + std::to_string(port));
  job_thread.join();
  REQUIRE(started);
  CHECK(joiner.status == 2);
  CHECK(joiner.text.find("refused: the job is not elastic") != std::string::npos);
  CHECK(job.status == 0);
}

TEST_CASE("a joiner killed while its epoch starts leaves the job to the others, state intact") {
  const int port = free_port();
  const std::string flags = elastic_flags + " --algo acco";
  const std::string log = "joiner_killed_job.log";
  run_output job;
  std::thread job_thread([&] {  // the output goes to `log`, which the joiner's script watches
    job = run(elastic_launch + "--elastic -n 3 --master-port " + std::to_string(port) + " -- " + train + flags +
              " --metrics joiner_killed.jsonl > " + log);
    const std::vector<char> text = read_all(log);
    job.text.assign(text.begin(), text.end());
  });
  std::remove("joiner_killed.jsonl");
  // The joiner dies as soon as rank 0 announces the epoch it joins: the others are connecting
  // to it, or restoring the state with it, or in its first rounds.
  const bool started = wait_for("joiner_killed.jsonl", 20, 1);
  const run_output joiner = run("/bin/sh -c '" + train + flags + " --join 127.0.0.1:" + std::to_string(port) +
                                " & pid=$!; for i in $(seq 3000); do grep -q joins " + log +
                                " && break; sleep 0.02; done; kill -9 $pid; wait $pid'");
  job_thread.join();
  INFO(job.text);
  REQUIRE(started);
  CHECK(joiner.status == 128 + 9);
  CHECK(job.status == 0);
  CHECK(job.text.find("3 -> 4 workers") != std::string::npos);
  CHECK(job.text.find("4 -> 3 workers") != std::string::npos);
  CHECK(job.text.find("replicas identical") != std::string::npos);
  for (const auto& [before, after] : transfer_checksums(job.text)) CHECK(before == after);
}

TEST_CASE("keeping state and replicating shards changes nothing: an elastic job without churn equals a fixed one") {
  for (const char* algo : {"acco", "ddp"}) {
    CAPTURE(algo);
    // Exact rounds: with error feedback every kept step settles the residuals (their sum is
    // unchanged, but when each is paid moves), so block-coded rounds are equal only in loss.
    const std::string flags = train_flags + " --steps 6 --wire-precision fp32 --algo " + algo + " --save-parameters ";
    const run_output fixed = run(launch + "-n 3 -- " + train + flags + "kept_fixed.f32");
    const run_output elastic = run(launch + "--elastic -n 3 -- " + train + flags + "kept_elastic.f32");
    INFO(elastic.text);
    REQUIRE(fixed.status == 0);
    REQUIRE(elastic.status == 0);
    CHECK(read_all("kept_fixed.f32") == read_all("kept_elastic.f32"));
    CHECK(elastic.text.find("kept for elastic recovery") != std::string::npos);
  }
}

TEST_CASE("a worker whose data or schedule differs is refused naming the setting") {
  {
    std::ofstream other("multiprocess_other.txt");
    for (int line = 0; line < 400; ++line) other << "another corpus, line " << line << "\n";
  }
  const std::pair<const char*, const char*> cases[] = {
      {" --data multiprocess_other.txt", "rank 1 refused: --data differs: rank 0 has /usr/share/games/fortunes"},
      {" --min-lr-ratio 0.5", "rank 1 refused: --min-lr-ratio differs: rank 0 has 0.100000001, this worker has 0.5"},
  };
  for (const auto& [flag, expected] : cases) {
    CAPTURE(flag);
    const run_output out = run(launch + "-n 2 -- /bin/sh -c 'if [ \"$RANK\" = 1 ]; then exec " + train + train_flags +
                               flag + "; else exec " + train + train_flags + "; fi'");
    INFO(out.text);
    CHECK(out.status != 0);
    CHECK(out.text.find(expected) != std::string::npos);
  }
}

TEST_CASE("rank 0 names the ranks it waits for and gives up after the rendezvous timeout") {
  const run_output out = run("RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                             " timeout 60 " + train + train_flags + " --steps 1 --rendezvous-timeout 2");
  INFO(out.text);
  CHECK(out.status == 2);
  CHECK(out.text.find("accord-train: rendezvous: ranks 1, 2 of 3 did not say hello within 2 s") != std::string::npos);
}

TEST_CASE("Ctrl-C ends the rendezvous at once: rank 0 stops the job, another waiting rank stops waiting, also under accord-launch") {
  // Rank 0 alone (rank 1 never comes), interrupted once it has printed its first lines: it ends
  // the rendezvous naming whom it waited for, long before the rendezvous timeout.
  const auto master = accord::testing::run_program(
      train, {"--steps", "1", "--width", "32", "--layers", "1", "--heads", "2", "--context", "16", "--rendezvous-timeout", "300"},
      {.environment = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(free_port())},
       .deadline = std::chrono::seconds(60), .terminate_after_lines = 1, .terminate_signal = SIGINT});
  INFO(master.out << master.err);
  CHECK(!master.timed_out);
  CHECK(master.exit_status == 128 + SIGINT);
  // (Its own hello may not have reached its membership actor yet: "ranks 0, 1 of 2" then.)
  CHECK(master.err.find("accord-train: rendezvous: asked to stop while waiting for rank") != std::string::npos);
  CHECK(master.err.find("1 of 2\n") != std::string::npos);
  // Rank 1 has said hello (rank 0's line every 10 s names rank 2 only) and waits for rank 2.
  // (timeout --foreground passes the SIGINT on once; without it, once more to the group: a second
  // Ctrl-C, which kills at once.)
  const std::string place = "WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
  const std::string log = "multiprocess_rendezvous_" + std::to_string(getpid()) + ".log";
  const run_output waiting = run(
      "RANK=0 " + place + " timeout 60 " + train + train_flags + " --steps 1 > " + log + " 2>&1 & RANK=1 " + place +
      " timeout --foreground 60 " + train + train_flags + " --steps 1 & rank1=$!; i=0; until grep -q 'waiting for rank 2 of 3' " + log +
      "; do sleep 0.2; i=$((i+1)); [ $i -lt 150 ] || break; done; kill -INT $rank1; wait $rank1; echo rank 1 status $?; "
      "wait; cat " + log);
  std::remove(log.c_str());
  INFO(waiting.text);
  CHECK(waiting.text.find("membership: waiting for rank 2 of 3 (10 s)") != std::string::npos);
  CHECK(waiting.text.find("accord-train: asked to stop while waiting for the job's other ranks (rendezvous)") !=
        std::string::npos);
  CHECK(waiting.text.find("rank 1 status 130") != std::string::npos);
  // Ctrl-C to accord-launch reaches its waiting worker, which ends at once too.
  const auto launched = accord::testing::run_program(
      ACCORD_LAUNCH_BINARY, {"-n", "1", "--world-size", "2", "--master-port", std::to_string(free_port()), "--", train,
                             "--steps", "1", "--width", "32", "--layers", "1", "--heads", "2", "--context", "16"},
      {.deadline = std::chrono::seconds(60), .terminate_after_lines = 1, .terminate_signal = SIGINT});
  INFO(launched.out << launched.err);
  CHECK(!launched.timed_out);
  CHECK(launched.exit_status == 128 + SIGINT);
  CHECK(launched.err.find("[rank 0] accord-train: rendezvous: asked to stop while waiting for rank") != std::string::npos);
}

TEST_CASE("a worker whose master port accepts but never answers fails naming the handshake") {
  // A listening socket that never accepts: the kernel completes the connection, nobody speaks.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(fd, 8) == 0);
  socklen_t length = sizeof address;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const run_output out = run("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                             std::to_string(ntohs(address.sin_port)) + " timeout 100 " + train + train_flags +
                             " --steps 1");
  close(fd);
  INFO(out.text);
  CHECK(out.status == 2);
  CHECK(out.text.find("accepted the connection but did not answer the handshake") != std::string::npos);
}

TEST_CASE("UCX variables naming no transport or device fail at once, naming the variable") {
  const std::pair<const char*, const char*> cases[] = {
      {"UCX_TLS=bogus", "ucx: no usable UCX transport (UCX_TLS=bogus"},
      {"UCX_NET_DEVICES=bogus0", "ucx: UCX_NET_DEVICES=bogus0: this machine has no network device 'bogus0'"},
  };
  for (const auto& [variable, expected] : cases) {
    CAPTURE(variable);
    const run_output out = run(std::string(variable) + " " + launch + "-n 2 -- " + train + train_flags + " --steps 1");
    INFO(out.text);
    CHECK(out.status == 2);
    CHECK(out.text.find(expected) != std::string::npos);
  }
}

TEST_CASE("a second job on a busy master port is refused as such, SIGTERM stops the first with a checkpoint") {
  const int port = free_port();
  const std::string flags = train_flags + " --algo ddp --checkpoint multiprocess_term.bin";
  std::remove("multiprocess_term.jsonl");
  std::remove("multiprocess_term.bin");
  run_output first;
  std::thread job_thread([&] {
    first = run("/bin/sh -c 'echo $$ > multiprocess_term.pid; exec " + launch + "-n 2 --master-port " +
                std::to_string(port) + " -- " + train + flags + " --steps 100000 --metrics multiprocess_term.jsonl'");
  });
  const bool started = wait_for("multiprocess_term.jsonl", 5, 1);
  const run_output second = run(launch + "-n 2 --master-port " + std::to_string(port) + " -- " + train + train_flags +
                                " --steps 10");
  kill(read_pid("multiprocess_term.pid"), SIGTERM);  // a scheduler's preemption
  job_thread.join();
  INFO(first.text);
  INFO(second.text);
  REQUIRE(started);
  CHECK(second.status == 2);
  // Whichever of its ranks fails first says so: its rank 0 cannot bind, the others are refused.
  CHECK((second.text.find("port " + std::to_string(port) + " is in use by another job or program") != std::string::npos ||
         second.text.find("(another job holds the port)") != std::string::npos));
  CHECK(first.status == 128 + SIGTERM);
  const std::regex stopped("stopped after step ([0-9]+) of 100000: checkpoint multiprocess_term.bin written");
  std::smatch at;
  REQUIRE(std::regex_search(first.text, at, stopped));
  const int step = std::stoi(at[1]);
  const run_output resumed = run(launch + "-n 2 -- " + train + flags + " --steps " + std::to_string(step + 3) +
                                 " --resume multiprocess_term.bin --metrics multiprocess_term.jsonl");
  INFO(resumed.text);
  CHECK(resumed.status == 0);
  CHECK(resumed.text.find("[rank 0] resumed from step " + std::to_string(step)) != std::string::npos);
  CHECK(progress_of("multiprocess_term.jsonl").first == static_cast<std::uint64_t>(step + 3));
  const run_output again = run(launch + "-n 2 -- " + train + flags + " --steps " + std::to_string(step + 3) +
                               " --resume multiprocess_term.bin");
  CHECK(again.status == 0);
  CHECK(again.text.find("the job already finished, nothing to do") != std::string::npos);
}

TEST_CASE("a worker of another job is refused naming both jobs") {
  const run_output out = run(launch + "-n 2 -- /bin/sh -c 'if [ \"$RANK\" = 1 ]; then ACCORD_JOB_ID=other exec " +
                             train + train_flags + "; else ACCORD_JOB_ID=mine exec " + train + train_flags + "; fi'");
  INFO(out.text);
  CHECK(out.status != 0);
  CHECK(out.text.find("rank 1 refused: it belongs to job 'other', but this master port is held by job 'mine'") !=
        std::string::npos);
}

TEST_CASE("a worker dropped from an elastic job for silence is told so when it wakes") {
  const std::string metrics = "multiprocess_dropped.jsonl";
  std::remove(metrics.c_str());
  run_output job;
  std::thread job_thread([&] {
    job = run(elastic_launch + "--elastic -n 3 -- /bin/sh -c 'echo $$ > dropped_pid.$RANK; exec " + train +
              elastic_flags + " --algo ddp --metrics " + metrics + "'");
  });
  const bool started = wait_for(metrics, 20, 1);
  if (started) kill(read_pid("dropped_pid.2"), SIGSTOP);
  const bool dropped = started && wait_for(metrics, 1, 2);  // the job went on without it
  if (started) kill(read_pid("dropped_pid.2"), SIGCONT);
  job_thread.join();
  INFO(job.text);
  REQUIRE(dropped);
  CHECK(job.status == 0);
  CHECK(job.text.find("[rank 2] accord-train: this worker (rank 2 (127.0.0.1)) was dropped from the job") !=
        std::string::npos);
  // Found by the adaptive detector, not by the heartbeat timeout (30 s, not given).
  CHECK(job.text.find("[rank 1] membership: rank 2 (127.0.0.1), worker, lost at step ") != std::string::npos);
  CHECK(job.text.find("the coordinator counted it as lost (hung (silent for ") != std::string::npos);
}

TEST_CASE("a churned elastic job recorded with --record-membership replays in one process, bit for bit") {
  const std::string log = "elastic_record.log", saved = "elastic_record.parameters",
                    replayed = "elastic_replayed.parameters";
  for (const std::string& path : {log, saved, replayed}) std::remove(path.c_str());
  // Deterministic rounds, as in one process: one micro-batch a round, one BLAS thread.
  const std::string flags = elastic_flags + " --algo acco --max-accumulation 1 --blas-threads 1";
  const churned_job churned =
      run_with_churn(flags + " --record-membership " + log + " --save-parameters " + saved, "elastic_record.jsonl", false);
  INFO(churned.job.text);
  REQUIRE(churned.reached_join);
  REQUIRE(churned.job.status == 0);
  const run_output replay = run(train + flags + " --workers 4 --replay-membership " + log + " --save-parameters " + replayed);
  INFO(replay.text);
  REQUIRE(replay.status == 0);
  CHECK(replay.text.find("membership: 4 -> 3 workers") != std::string::npos);
  const std::vector<char> churned_parameters = read_all(saved);
  CHECK(!churned_parameters.empty());
  CHECK(churned_parameters == read_all(replayed));
}

namespace {

// A 4-process elastic job whose coordinator (rank 0's process) is killed, or stopped when
// `hangs`, after step 40 of 300; `--log-dir` keeps each rank's lines readable while it runs.
struct failover_job {
  run_output job, joiner;
  bool reached_loss = false, reached_end = false;
  std::uint64_t last_step = 0;
  double loss_to_next_step = -1;  // seconds from the signal to the next epoch's first step
};
// `before_loss`, when set, runs once the job reached step 40 (with the logs' folder); the
// coordinator is then lost after step `loss_step`.
failover_job run_with_coordinator_loss(const std::string& name, const std::string& flags, bool hangs, bool join,
                                       const std::function<void(const std::string& logs)>& before_loss = {},
                                       std::uint64_t loss_step = 40) {
  const std::string metrics = name + ".jsonl", logs = name + ".logs", pids = name + ".pid.";
  std::remove(metrics.c_str());
  std::remove((name + ".f32").c_str());
  const int port = free_port();
  failover_job out;
  std::thread job_thread([&] {
    out.job = run(elastic_launch + "--elastic -n 4 --log-dir " + logs + " --master-port " + std::to_string(port) +
                  " -- /bin/sh -c 'echo $$ > " + pids + "$RANK; exec " + train + flags + " --metrics " + metrics +
                  " --save-parameters " + name + ".f32'");
  });
  out.reached_loss = wait_for(metrics, 40, 1);
  if (out.reached_loss && before_loss) {
    before_loss(logs);
    out.reached_loss = wait_for(metrics, loss_step, 1);
  }
  const auto lost_at = std::chrono::steady_clock::now();
  if (out.reached_loss) kill(read_pid(pids + "0"), hangs ? SIGSTOP : SIGKILL);
  if (out.reached_loss && wait_for(metrics, 1, 2))
    out.loss_to_next_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - lost_at).count();
  if (join && out.loss_to_next_step >= 0) {
    // The dead master port first, then rank 2's control port: its standby knows the new coordinator.
    const std::string text = text_of(logs + "/rank-2.log");
    std::smatch control;
    if (std::regex_search(text, control, std::regex("control port ([0-9.]+:[0-9]+)")))
      out.joiner = run(train + flags + " --join 127.0.0.1:" + std::to_string(port) + "," + control[1].str());
  }
  out.reached_end = out.reached_loss && wait_for(metrics, 300, 2);
  if (hangs) kill(read_pid(pids + "0"), SIGKILL);  // the launcher waits for every worker
  job_thread.join();
  out.last_step = progress_of(metrics).first;
  return out;
}

const std::string failover_flags = std::regex_replace(elastic_flags, std::regex("--steps 800"), "--steps 300");

// The survivors went on: one new coordinator, every survivor naming the lost one, the kept state
// restored intact, the job's every step done and its parameters saved by the new coordinator.
void check_failover(const failover_job& failover, const std::string& name, const std::string& cause) {
  const std::string& text = failover.job.text;
  INFO(text);
  REQUIRE(failover.reached_loss);
  MESSAGE(name << ": coordinator lost to the next step trained in " << failover.loss_to_next_step << " s");
  CHECK(failover.reached_end);
  CHECK(failover.job.status == 0);
  CHECK(failover.last_step == 300);
  for (const char* rank : {"[rank 1] ", "[rank 2] ", "[rank 3] "})
    CHECK(text.find(rank + std::string("membership: rank 0 (127.0.0.1), coordinator, lost at step ") + "") !=
          std::string::npos);
  CHECK(text.find(cause) != std::string::npos);
  // Only rank 0 was lost: the new coordinator's process ending with the job is no loss.
  CHECK_FALSE(std::regex_search(text, std::regex(R"(membership: (rank [1-9]|member [0-9]+) \([^)]*\), coordinator, lost)")));
  CHECK(text.find("[rank 1] membership: epoch 2, 4 -> 3 workers from step ") != std::string::npos);
  // The survivors' final parameters agree (the new coordinator compares every replica's hash),
  // and the optimizer state crossed the re-sharding unchanged.
  CHECK(text.find("[rank 1] done: ") != std::string::npos);
  CHECK(text.find("replicas identical") != std::string::npos);
  const auto checksums = transfer_checksums(text);
  CHECK(!checksums.empty());
  for (const auto& [before, after] : checksums) CHECK(before == after);
  CHECK(read_all(name + ".f32").size() > 0);
  const std::vector<char> recorded = read_all(name + ".jsonl");
  const std::string metrics(recorded.begin(), recorded.end());
  CHECK(metrics.find(R"("rank":0,"host":"127.0.0.1","role":"coordinator","cause":)") != std::string::npos);
}

}  // namespace

TEST_CASE("an elastic job whose coordinator is killed elects a new one, goes on from the kept steps and admits a "
          "joiner that names a live member's address") {
  const failover_job failover = run_with_coordinator_loss("failover_killed", failover_flags + " --algo acco", false, true);
  check_failover(failover, "failover_killed", "coordinator, lost at step");
  INFO(failover.joiner.text);
  CHECK(failover.job.text.find("connection closed (killed") != std::string::npos);
  // accord-launch --elastic goes on without rank 0's process.
  CHECK(failover.job.text.find("rank 0 was killed by signal 9 (Killed); the job goes on without it") !=
        std::string::npos);
  CHECK(failover.joiner.status == 0);
  CHECK(failover.job.text.find("3 -> 4 workers") != std::string::npos);
}

TEST_CASE("an elastic parameter server or gossip job whose coordinator is killed elects a new one and goes on from "
          "the kept steps") {
  // Rank 0's process also hands out the asynchronous topologies' gradient tickets: they move too.
  for (const std::string topology : {"parameter-server --max-staleness 2", "gossip --gossip-rate 1"}) {
    CAPTURE(topology);
    const std::string name = "failover_" + topology.substr(0, topology.find(' '));
    const failover_job failover =
        run_with_coordinator_loss(name, failover_flags + " --algo ddp --keep-interval 10 --topology " + topology, false,
                                  false);
    check_failover(failover, name, "coordinator, lost at step");
    CHECK(failover.job.text.find("connection closed (killed") != std::string::npos);
  }
}

TEST_CASE("an elastic local-sgd job with fp4 outer rounds whose coordinator is killed goes on from θ_global, which "
          "every survivor kept, admits a joiner with it, and its copies agree after every outer step") {
  const std::string name = "failover_local_sgd";
  const failover_job failover = run_with_coordinator_loss(
      name,
      failover_flags + " --algo ddp --topology local-sgd --local-steps 10 --outer-precision fp4 --replica-check 1",
      false, true);
  check_failover(failover, name, "coordinator, lost at step");
  INFO(failover.joiner.text);
  CHECK(failover.job.text.find("connection closed (killed") != std::string::npos);
  CHECK(failover.joiner.status == 0);
  CHECK(failover.job.text.find("3 -> 4 workers") != std::string::npos);
}

TEST_CASE("an elastic job whose coordinator hangs finds it by its heartbeats and elects a new one") {
  const failover_job failover = run_with_coordinator_loss("failover_hung", failover_flags + " --algo ddp", true, false);
  check_failover(failover, "failover_hung", "coordinator, lost at step");
  CHECK(failover.job.text.find(": hung (silent for ") != std::string::npos);
}

namespace {

// HOST:PORT of a rank's control port, from its log.
std::string control_port_of(const std::string& logs, int rank) {
  const std::string text = text_of(logs + "/rank-" + std::to_string(rank) + ".log");
  std::smatch control;
  return std::regex_search(text, control, std::regex("control port ([0-9.]+:[0-9]+)")) ? control[1].str() : "";
}

// Asks the standby at `control` to take over from the coordinator of `epoch`, as a member cut off
// from a live coordinator (a partition, a flapping link) does; its answer, or why it refused.
std::string ask_to_take_over(const std::string& control, std::uint64_t epoch) {
  caf::actor_system_config config;
  accord::configure_system(config);
  config.load<caf::io::middleman>();
  caf::actor_system system{config};
  const auto colon = control.rfind(':');
  if (colon == std::string::npos) return "no control port in the log";
  auto standby = system.middleman().remote_actor<accord::standby_actor>(
      control.substr(0, colon), static_cast<std::uint16_t>(std::stoi(control.substr(colon + 1))));
  if (!standby) return "no standby at " + control + ": " + system.render(standby.error());
  caf::scoped_actor self{system};
  std::string answer;
  self->request(*standby, std::chrono::seconds(20), accord::elect_atom::value, epoch,
                std::string("hung (as a member cut off from it saw it)"))
      .receive([&](accord::membership_actor&) { answer = "took over"; },
               [&](caf::error& e) { answer = system.render(e); });
  return answer;
}

}  // namespace

TEST_CASE("a member cut off from a live coordinator cannot make the next in line take over, and the coordinator's "
          "later loss is survived") {
  // The chaos run's loss: a partitioned member asked rank 1 to take over while the coordinator
  // lived; rank 1 started a second coordinator from its copy of then, and when the real one was
  // killed later, the survivors reconnected to that stale one and the job was lost. Here the
  // test asks rank 1 as that member would, then kills the coordinator 60 steps later.
  std::string answer;
  const failover_job failover = run_with_coordinator_loss(
      "failover_cut_off", failover_flags + " --algo acco", false, false,
      [&](const std::string& logs) { answer = ask_to_take_over(control_port_of(logs, 1), 1); }, 100);
  INFO(answer);
  CHECK(answer.find(accord::coordinator_still_heard) != std::string::npos);
  check_failover(failover, "failover_cut_off", "coordinator, lost at step");
  CHECK(failover.job.text.find("connection closed (killed") != std::string::npos);
}

namespace {

// An elastic job of `workers` processes whose ranks `victims` are SIGKILLed together after step
// 40; `started`: step 40 came.
struct job_with_kills {
  run_output job;
  bool started = false;
};
job_with_kills run_with_ranks_killed(const std::string& name, int workers, const std::vector<int>& victims,
                                     const std::string& algo, const std::string& more_flags = {}) {
  const std::string metrics = name + ".jsonl", pids = name + ".pid.";
  std::remove(metrics.c_str());
  job_with_kills outcome;
  std::thread job_thread([&] {
    outcome.job = run(elastic_launch + "--elastic -n " + std::to_string(workers) + " -- /bin/sh -c 'echo $$ > " +
                      pids + "$RANK; exec " + train + failover_flags + " --algo " + algo + more_flags + " --metrics " +
                      metrics + "'");
  });
  outcome.started = wait_for(metrics, 40, 1);
  if (outcome.started)
    for (const int victim : victims) kill(read_pid(pids + std::to_string(victim)), SIGKILL);
  job_thread.join();
  return outcome;
}

}  // namespace

TEST_CASE("a side without a majority of the last epoch's members stops with one line") {
  // Of 3 processes, the coordinator and rank 1 die together: rank 2 alone is no majority. It
  // waits for the others (they might be behind a partition) for --majority-wait, then stops.
  const auto [job, started] = run_with_ranks_killed("failover_minority", 3, {0, 1}, "ddp", " --majority-wait 1");
  INFO(job.text);
  REQUIRE(started);
  CHECK(job.status != 0);
  CHECK(job.text.find("[rank 2] membership: rank 2 (127.0.0.1), coordinator, waits for a majority at step ") !=
        std::string::npos);
  CHECK(job.text.find("[rank 2] accord-train: no majority: 1 of the last epoch's 3 members are reachable") !=
        std::string::npos);
  CHECK(job.text.find(" for one: --majority-wait)") != std::string::npos);
}

namespace {

// A 4-process elastic job (DDP, --log-dir) whose ranks 2 and 3 are SIGSTOPped together after
// step 40: the coordinator's side holds 2 of the last epoch's 4 members, no majority. Once rank
// 0's log shows `until` they get SIGCONT (also when it never shows, so that the job ends), rank 3
// `second_wakes_later` after rank 2.
struct stopped_pair {
  run_output job;
  std::string metrics;
  bool started = false, seen = false;
};
stopped_pair run_with_pair_stopped(const std::string& name, const std::string& more_flags, const std::string& until,
                                   std::chrono::milliseconds second_wakes_later = {}) {
  stopped_pair out;
  out.metrics = name + ".jsonl";
  const std::string logs = name + ".logs", pids = name + ".pid.";
  std::remove(out.metrics.c_str());
  std::remove((logs + "/rank-0.log").c_str());
  std::thread job_thread([&] {
    out.job = run(elastic_launch + "--elastic -n 4 --log-dir " + logs + " -- /bin/sh -c 'echo $$ > " + pids +
                  "$RANK; exec " + train + failover_flags + " --algo ddp" + more_flags + " --metrics " + out.metrics +
                  "'");
  });
  out.started = wait_for(out.metrics, 40, 1);
  if (out.started) {
    for (const int rank : {2, 3}) kill(read_pid(pids + std::to_string(rank)), SIGSTOP);
    for (int i = 0; i < 3000 && !out.seen; ++i) {
      const std::string text = text_of(logs + "/rank-0.log");
      out.seen = text.find(until) != std::string::npos;
      // The old rule stopped this side at once: nothing to wait for then.
      if (!out.seen && text.find("accord-train: no majority") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(read_pid(pids + "2"), SIGCONT);
    std::this_thread::sleep_for(second_wakes_later);
    kill(read_pid(pids + "3"), SIGCONT);
  }
  job_thread.join();
  return out;
}

}  // namespace

TEST_CASE("an elastic job of 4 whose ranks 2 and 3 stop for a while keeps its state on the coordinator's side (2 of "
          "4, no majority), trains nothing, and goes on from the kept step once they wake, replicas identical") {
  // Woken once the coordinator's side waits (--majority-wait 60), as a healed partition would be;
  // rank 3 a moment after rank 2, whose return alone makes a majority: rank 3 still comes back as
  // a member, not as a joiner.
  const std::string waits = "membership: rank 0 (127.0.0.1), coordinator, waits for a majority at step ";
  const stopped_pair run =
      run_with_pair_stopped("majority_back", " --majority-wait 60", waits, std::chrono::milliseconds(300));
  INFO(run.job.text);
  REQUIRE(run.started);
  CHECK(run.seen);
  CHECK(run.job.status == 0);
  // Every rank of the waiting side says so; none stopped.
  CHECK(run.job.text.find("[rank 1] " + waits) != std::string::npos);
  CHECK(run.job.text.find("2 of the last epoch's 4 members are reachable, 0 known dead") != std::string::npos);
  CHECK(run.job.text.find("no majority") == std::string::npos);
  CHECK(run.job.text.find(", worker, back at step ") != std::string::npos);
  CHECK(run.job.text.find("[rank 0] membership: epoch 2, 4 -> 4 workers") != std::string::npos);
  CHECK(run.job.text.find("[rank 0] done: ") != std::string::npos);
  CHECK(run.job.text.find("replicas identical") != std::string::npos);
  const auto checksums = transfer_checksums(run.job.text);
  CHECK(!checksums.empty());
  for (const auto& [before, after] : checksums) CHECK(before == after);
  // The metrics file tells the wait and the losses that undid themselves.
  const std::string metrics = text_of(run.metrics);
  for (const char* event : {"\"event\":\"lost\"", "\"event\":\"waiting\"", "\"event\":\"back\""})
    CHECK_MESSAGE(metrics.find(event) != std::string::npos, event);
}

TEST_CASE("when the wait for a majority runs out, every side stops with one line and nothing trains on") {
  const stopped_pair run = run_with_pair_stopped("majority_gone", " --majority-wait 1", "accord-train: no majority");
  INFO(run.job.text);
  REQUIRE(run.started);
  CHECK(run.job.status != 0);
  for (const int rank : {0, 1})
    CHECK(run.job.text.find("[rank " + std::to_string(rank) +
                            "] accord-train: no majority: 2 of the last epoch's 4 members are reachable, 0 known dead") !=
          std::string::npos);
  CHECK(run.job.text.find("(it waited ") != std::string::npos);
  // The woken pair is the other side: 2 of 4 too, it stops as well.
  for (const int rank : {2, 3})
    CHECK(run.job.text.find("[rank " + std::to_string(rank) + "] accord-train: no m") != std::string::npos);
  CHECK(run.job.text.find("done: ") == std::string::npos);
  CHECK(progress_of(run.metrics).second == 1);  // no epoch formed after the loss
  // No later epoch writes the losses and the wait that stopped the job: the stopping side does.
  const std::string metrics = text_of(run.metrics);
  for (const char* event : {"\"event\":\"lost\"", "\"event\":\"waiting\""})
    CHECK_MESSAGE(metrics.find(event) != std::string::npos, event);
}

namespace {

// What a job ended with, from its final checkpoint: the steps, and hashes of the parameters and
// of the optimizer state (reassembled over the shards, so any worker count compares).
struct final_state {
  std::uint64_t steps = 0, parameters = 0, optimizer = 0;
  bool operator==(const final_state&) const = default;
};
final_state final_state_of(const std::string& checkpoint_path) {
  const accord::checkpoint c = accord::read_checkpoint(checkpoint_path);
  return {c.steps, accord::hash_parameters(c.parameters), accord::hash_parameters(c.optimizer)};
}

// Each epoch of a membership log: the step it started from and its workers.
std::vector<std::pair<std::uint64_t, int>> epochs_of(const std::string& log) {
  std::vector<std::pair<std::uint64_t, int>> epochs;
  for (const accord::membership_record& r : accord::read_membership_log(log))
    if (r.event == "epoch") epochs.emplace_back(r.step, r.workers);
  return epochs;
}

// A 2-process elastic job of 150 steps whose rank `victim` gets `signal` after step 40; a stopped
// one is killed once rank 0 has printed `stop_line` (the launcher waits for every worker).
run_output run_pair_with_loss(const std::string& name, int victim, int signal, const std::string& stop_line = {},
                              const std::string& more_flags = {}) {
  const std::string metrics = name + ".jsonl", logs = name + ".logs", pids = name + ".pid.";
  std::remove(metrics.c_str());
  run_output job;
  std::thread job_thread([&] {
    job = run(elastic_launch + "--elastic -n 2 --log-dir " + logs + " -- /bin/sh -c 'echo $$ > " + pids +
              "$RANK; exec " + train + std::regex_replace(failover_flags, std::regex("--steps 300"), "--steps 150") +
              " --algo acco" + more_flags + " --metrics " + metrics + "'");
  });
  const bool started = wait_for(metrics, 40, 1);
  if (started) kill(read_pid(pids + std::to_string(victim)), signal);
  if (started && !stop_line.empty()) {
    for (int i = 0; i < 3000; ++i) {
      if (text_of(logs + "/rank-0.log").find(stop_line) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(read_pid(pids + std::to_string(victim)), SIGKILL);
  }
  job_thread.join();
  REQUIRE(started);
  return job;
}


// A churned run between processes (a worker killed, one leaving, a joiner, the coordinator
// killed) of `algo`, recorded, then replayed in one process and between processes: all three end
// with the same parameters and optimizer state. Files are named after `name`.
void check_churn_replays(const std::string& name, const std::string& algo) {
  // Deterministic rounds: one micro-batch a round, one BLAS thread. A step kept every 5 makes a
  // crash roll back (the steps after the kept one are redone), which the replay renders as a
  // departure at the kept step. 800 steps leave a joiner time to start on a quiet machine, where
  // this model trains about a hundred steps a second.
  // Exact rounds: with block codes the in-process replay settles error-feedback residuals at other steps.
  const std::string flags = elastic_flags + " --algo " + algo +
                            " --wire-precision fp32 --max-accumulation 1 --blas-threads 1 --keep-interval 5";
  const std::string log = name + "_recorded.log", metrics = name + "_recorded.jsonl", pids = name + "_recorded.pid.",
                    replayed_log = name + "_between.log", recorded_checkpoint = name + "_recorded.ck",
                    in_process_checkpoint = name + "_in_process.ck", between_checkpoint = name + "_between.ck";
  for (const std::string& path : {log, metrics, replayed_log, recorded_checkpoint, in_process_checkpoint, between_checkpoint})
    std::remove(path.c_str());
  const std::string recorded_flags =
      flags + " --record-membership " + log + " --checkpoint " + recorded_checkpoint + " --metrics " + metrics;
  const int port = free_port();
  run_output job, joiner;
  std::thread job_thread([&] {
    job = run(elastic_launch + "--elastic -n 4 --master-port " + std::to_string(port) + " -- /bin/sh -c 'echo $$ > " +
              pids + "$RANK; exec " + train + recorded_flags + "'");
  });
  std::thread joiner_thread;
  bool churned = wait_for(metrics, 23, 1);  // between kept steps
  if (churned) kill(read_pid(pids + "2"), SIGKILL);
  churned = churned && wait_for(metrics, 40, 2);
  if (churned) kill(read_pid(pids + "3"), SIGTERM);
  churned = churned && wait_for(metrics, 60, 3);
  if (churned)
    joiner_thread = std::thread([&] { joiner = run(train + recorded_flags + " --join 127.0.0.1:" + std::to_string(port)); });
  // The coordinator is killed a few steps after the joiner's epoch kept its first step (every 5):
  // killed before, the loss rolls back to where that epoch began, which undoes the joiner's epoch
  // and the replay (rightly) merges the two changes into one.
  churned = churned && wait_for(metrics, 1, 4) && wait_for(metrics, (progress_of(metrics).first / 5 + 1) * 5 + 4, 4);
  if (churned) kill(read_pid(pids + "0"), SIGKILL);
  churned = churned && wait_for(metrics, 1, 5);
  job_thread.join();
  if (joiner_thread.joinable()) joiner_thread.join();
  INFO(job.text);
  INFO(joiner.text);
  REQUIRE(churned);
  REQUIRE(job.status == 0);
  REQUIRE(joiner.status == 0);
  // The new coordinator went on with the lost one's log.
  const std::vector<accord::membership_record> records = accord::read_membership_log(log);
  const auto recorded = [&](const std::string& event, int rank, const std::string& role) {
    return std::any_of(records.begin(), records.end(), [&](const accord::membership_record& r) {
      return r.event == event && r.rank == rank && (role.empty() || r.role == role);
    });
  };
  CHECK(recorded("lost", 2, ""));
  CHECK(recorded("left", 3, ""));
  CHECK(recorded("joined", -1, ""));
  CHECK(recorded("lost", 0, "coordinator"));
  const final_state expected = final_state_of(recorded_checkpoint);

  const run_output in_process =
      run(train + flags + " --workers 4 --replay-membership " + log + " --checkpoint " + in_process_checkpoint);
  INFO(in_process.text);
  REQUIRE(in_process.status == 0);

  const run_output between = run(elastic_launch + "--replay-membership " + log + " -n 4 -- " + train + flags +
                                 " --record-membership " + replayed_log + " --checkpoint " + between_checkpoint);
  INFO(between.text);
  REQUIRE(between.status == 0);
  // Real processes went: rank 2 and rank 3 left at their steps, the coordinator's process was
  // killed (the survivors elected a new one); the launcher's joiner ([join 4]) came at its step.
  CHECK(between.text.find("membership: rank 2 (127.0.0.1), worker, left at step") != std::string::npos);
  CHECK(between.text.find("replaying the coordinator's loss after step") != std::string::npos);
  CHECK(between.text.find("rank 0 was killed by signal 9 (Killed); the job goes on without it") != std::string::npos);
  CHECK(between.text.find("2 -> 3 workers") != std::string::npos);
  CHECK(epochs_of(replayed_log) == epochs_of(log));

  char line[160];
  std::snprintf(line, sizeof line, "%llu steps, parameters %016llx, optimizer state %016llx",
                static_cast<unsigned long long>(expected.steps), static_cast<unsigned long long>(expected.parameters),
                static_cast<unsigned long long>(expected.optimizer));
  MESSAGE(algo << ", recorded run: " << line);
  CHECK(expected.steps == 800);
  CHECK(final_state_of(in_process_checkpoint) == expected);
  CHECK(final_state_of(between_checkpoint) == expected);
}

}  // namespace

TEST_CASE("a churned run between processes (a worker killed, one leaving, a joiner, the coordinator killed), "
          "recorded, replays in one process and between processes to its parameters and optimizer state") {
  check_churn_replays("replay", "acco");
}

// D-Lion keeps a momentum per worker: a departing worker's is dropped and a joiner starts from the
// mean of the kept ones, so the replay matches only if the same ranks depart at the same steps.
TEST_CASE("a churned D-Lion run between processes, recorded, replays in one process and between processes to its "
          "parameters and momenta") {
  check_churn_replays("replay_dlion", "dlion-mavo");
}

TEST_CASE("a replay between processes waits at a joiner's step until it says hello, then admits it there") {
  // A log written by hand: a joiner comes after step 10 of a 3-worker job. accord-launch --elastic
  // without --replay-membership starts no joiner: the test starts it once the coordinator waits.
  const std::string log = "replay_waiting.log", logs = "replay_waiting.logs";
  std::ofstream(log) << R"({"event":"job","workers":3,"steps":60}
{"event":"epoch","epoch":1,"step":0,"workers":3,"after_loss":false}
{"event":"joined","epoch":1,"step":9,"rank":-1,"host":"127.0.0.1","role":"worker","cause":"said hello as a joiner"}
{"event":"epoch","epoch":2,"step":10,"workers":4,"after_loss":false}
)";
  const std::string flags = train_flags + " --algo ddp --steps 60 --replay-membership " + log;
  std::remove((logs + "/rank-0.log").c_str());  // a line of the last run's would start the joiner early
  const int port = free_port();
  run_output job;
  std::thread job_thread([&] {
    job = run(elastic_launch + "--elastic -n 3 --log-dir " + logs + " --master-port " + std::to_string(port) + " -- " +
              train + flags);
  });
  bool waits = false;
  for (int i = 0; i < 9000 && !waits; ++i) {
    const std::vector<char> rank0 = read_all(logs + "/rank-0.log");
    waits = std::string(rank0.begin(), rank0.end()).find("the replay waits after step 10 for 1 joiner(s)") !=
            std::string::npos;
    if (!waits) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const run_output joiner = run(train + flags + " --join 127.0.0.1:" + std::to_string(port));
  job_thread.join();
  INFO(job.text);
  INFO(joiner.text);
  REQUIRE(waits);
  CHECK(job.status == 0);
  CHECK(joiner.status == 0);
  CHECK(job.text.find("membership: epoch 2, 3 -> 4 workers from step 11") != std::string::npos);
  CHECK(job.text.find("step    60/60") != std::string::npos);
}

TEST_CASE("a 2-member elastic job goes on when the other member is killed, and stops with one line when it is "
          "stopped") {
  // A killed process's connection closes while it is in contact and its control port then
  // refuses: it is dead, on no side of a partition, so the survivor alone is a majority of the
  // members not known dead. A stopped one keeps its connections and its port: it may be alive
  // on the other side of a partition, so the survivor stops.
  for (const int victim : {1, 0}) {
    CAPTURE(victim);
    const run_output job = run_pair_with_loss("pair_killed_" + std::to_string(victim), victim, SIGKILL);
    const std::string survivor = "[rank " + std::to_string(1 - victim) + "] ";
    INFO(job.text);
    CHECK(job.status == 0);
    // Of two, rank 1 is the next in line: the standby.
    CHECK(job.text.find(survivor + "membership: rank " + std::to_string(victim) + " (127.0.0.1), " +
                        (victim == 0 ? "coordinator" : "standby") + ", lost at step ") != std::string::npos);
    CHECK(job.text.find("connection closed (killed, or its host went away)") != std::string::npos);
    CHECK(job.text.find(survivor + "membership: epoch 2, 2 -> 1 workers from step ") != std::string::npos);
    CHECK(job.text.find(survivor + "done: ") != std::string::npos);
    CHECK(job.text.find("no majority") == std::string::npos);
  }
  const std::string stop_line = "no majority: 1 of the last epoch's 2 members are reachable, 0 known dead";
  const run_output stopped = run_pair_with_loss("pair_stopped", 1, SIGSTOP, stop_line, " --majority-wait 1");
  INFO(stopped.text);
  CHECK(stopped.status != 0);
  CHECK(stopped.text.find("[rank 0] membership: rank 1 (127.0.0.1), standby, lost at step ") != std::string::npos);
  CHECK(stopped.text.find(": hung (silent for ") != std::string::npos);
  CHECK(stopped.text.find("[rank 0] accord-train: " + stop_line) != std::string::npos);
}

TEST_CASE("an elastic job of 5 loses the coordinator and the member whose shard only the coordinator copied, "
          "together, and the survivors finish with identical replicas") {
  // With one copy per shard on the next rank, rank 4's was on rank 0: losing both lost it. Rank
  // 0's shard now has two copies and nobody's only copy is on rank 0 (recovery/elastic_state.hpp).
  const auto [job, started] = run_with_ranks_killed("failover_pair", 5, {0, 4}, "acco");
  INFO(job.text);
  REQUIRE(started);
  CHECK(job.status == 0);
  CHECK(job.text.find("[rank 1] membership: epoch 2, 5 -> 3 workers from step ") != std::string::npos);
  CHECK(job.text.find("the training state cannot be rebuilt") == std::string::npos);
  CHECK(job.text.find("[rank 1] done: ") != std::string::npos);
  CHECK(job.text.find("replicas identical") != std::string::npos);
  const auto checksums = transfer_checksums(job.text);
  CHECK(!checksums.empty());
  for (const auto& [before, after] : checksums) CHECK(before == after);
}
