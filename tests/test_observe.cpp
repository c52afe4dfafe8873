// Seeing a job: the metrics accord-train writes (JSON lines and CSV), --config files, and the
// plots scripts/plot-metrics draws from a real metrics file.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run_command.hpp"

namespace fs = std::filesystem;

namespace {

const std::string train = ACCORD_TRAIN_BINARY;
// A job of a few steps that takes about a second.
const std::string tiny = " --width 16 --heads 2 --layers 1 --context 8 --micro-batch 2 --eval-examples 16"
                         " --link unlimited --log-interval 0 --blas-threads 1";

struct scratch_dir {
  fs::path path = fs::temp_directory_path() / ("accord_test_observe_" + std::to_string(::getpid()));
  scratch_dir() { fs::create_directories(path); }
  ~scratch_dir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("metrics lines carry learning rate, gradient norm, vote agreement, per-worker times and epoch") {
  const scratch_dir dir;
  const std::string metrics = dir.file("ddp.jsonl");
  const accord::testing::run_output ddp =
      accord::testing::run(train + tiny + " --algo ddp --workers 2 --steps 4 --warmup 2 --metrics " + metrics);
  REQUIRE_MESSAGE(ddp.status == 0, ddp.text);
  const auto lines = json_lines(metrics);
  REQUIRE(lines.size() == 4);
  for (const auto& line : lines) {
    CHECK(line["gradient_norm"].get<double>() > 0);
    CHECK(std::isfinite(line["gradient_norm"].get<double>()));
    CHECK(line["items"].get<double>() == 2 * 2 * 8);  // 2 workers x 2 examples x 8 tokens
    CHECK(line.contains("epoch"));
    CHECK_FALSE(line.contains("vote_agreement"));
    for (const char* field : {"worker_compute_seconds", "worker_communication_seconds", "worker_wait_seconds"}) {
      REQUIRE(line[field].size() == 2);
      for (const auto& seconds : line[field]) CHECK(seconds.get<double>() >= 0);
    }
    CHECK(line["worker_compute_seconds"][0].get<double>() > 0);
  }
  // Linear warm-up over 2 steps to AdamW's 3e-3, then cosine down.
  CHECK(lines[0]["learning_rate"].get<double>() < lines[1]["learning_rate"].get<double>());
  CHECK(lines[1]["learning_rate"].get<double>() == doctest::Approx(3e-3));
  CHECK(lines[3]["learning_rate"].get<double>() < lines[2]["learning_rate"].get<double>());

  const std::string votes = dir.file("votes.jsonl");
  const accord::testing::run_output lion = accord::testing::run(train + tiny + " --algo dlion-mavo --workers 3 --steps 2 --metrics " + votes);
  REQUIRE_MESSAGE(lion.status == 0, lion.text);
  for (const auto& line : json_lines(votes)) {
    // Three voters: every majority holds at least two of them, so at least 2/3 of the signs agree.
    CHECK(line["vote_agreement"].get<double>() >= 2.0 / 3.0);
    CHECK(line["vote_agreement"].get<double>() <= 1.0);
    CHECK(line["gradient_norm"].get<double>() > 0);
  }
}

TEST_CASE("a metrics path ending in .csv gets a header row and one row per step") {
  const scratch_dir dir;
  const std::string metrics = dir.file("run.csv");
  const accord::testing::run_output run = accord::testing::run(train + tiny + " --algo acco --workers 2 --steps 3 --metrics " + metrics);
  REQUIRE_MESSAGE(run.status == 0, run.text);
  const auto rows = lines_of(metrics);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].rfind("step,train_loss,eval_loss,seconds,items,", 0) == 0);
  const auto columns = [](const std::string& row) { return std::count(row.begin(), row.end(), ',') + 1; };
  for (const auto& row : rows) CHECK(columns(row) == columns(rows[0]));
  CHECK(rows[3].rfind("3,", 0) == 0);
}

TEST_CASE("--config fills in flags, the command line wins, and a bad file gets one line") {
  const scratch_dir dir;
  const std::string config = dir.file("job.ini");
  const std::string metrics = dir.file("config.jsonl");
  write_text(config, "# a small job\nalgo = ddp\nworkers = 2\nsteps = 5\nmetrics = " + metrics + "\n");
  const accord::testing::run_output run = accord::testing::run(train + tiny + " --config " + config + " --steps 3");
  REQUIRE_MESSAGE(run.status == 0, run.text);
  CHECK(run.text.find("accord-train: ddp, 2 workers") != std::string::npos);
  CHECK(json_lines(metrics).size() == 3);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"stepz = 5\n", "unrecognised option 'stepz'"},
      {"steps = -1\n", "steps: '-1' is not a whole number"},
      {"steps 5\n", "invalid line 'steps 5'"},
      {"steps = 1\nsteps = 2\n", "'steps' cannot be specified more than once"},
  };
  for (const auto& [text, expected] : bad) {
    write_text(config, text);
    // The command line's --steps wins, and the file's bad value is refused all the same.
    const accord::testing::run_output refused = accord::testing::run(train + " --config " + config + " --steps 1");
    CHECK(refused.status == 2);
    CHECK_MESSAGE(refused.text.rfind("accord-train: --config: " + config + ": ", 0) == 0, refused.text);
    CHECK_MESSAGE(refused.text.find(expected) != std::string::npos, refused.text);
    CHECK(std::count(refused.text.begin(), refused.text.end(), '\n') == 1);
  }
  const accord::testing::run_output missing = accord::testing::run(train + " --config " + dir.file("absent.ini"));
  CHECK(missing.status == 2);
  CHECK(missing.text == "accord-train: --config: " + dir.file("absent.ini") + ": no such file\n");
}

TEST_CASE("scripts/plot-metrics turns metrics files of several runs into PNG plots") {
  if (accord::testing::run("/usr/bin/python3 -c 'import matplotlib'").status != 0) {
    MESSAGE("ACCORD_SKIPPED: Debian's python3-matplotlib is not installed");
    return;
  }
  const scratch_dir dir;
  const std::string jsonl = dir.file("acco.jsonl"), csv = dir.file("ddp.csv");
  for (const auto& [algorithm, metrics] : {std::pair{"acco", jsonl}, std::pair{"ddp", csv}}) {
    const accord::testing::run_output run = accord::testing::run(train + tiny + " --algo " + algorithm +
                                           " --workers 2 --steps 6 --eval-interval 2 --metrics " + metrics);
    REQUIRE_MESSAGE(run.status == 0, run.text);
  }
  const std::string plot = std::string(ACCORD_SOURCE_DIR) + "/scripts/plot-metrics";
  const accord::testing::run_output plotted = accord::testing::run(plot + " " + jsonl + " " + csv + " --out " + dir.file("plots"));
  REQUIRE_MESSAGE(plotted.status == 0, plotted.text);
  for (const char* name : {"loss-vs-step.png", "loss-vs-tokens.png", "loss-vs-seconds.png", "training.png"}) {
    std::ifstream in(dir.file(std::string("plots/") + name), std::ios::binary);
    const std::string png{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    // A PNG: its signature, the IHDR chunk with a non-empty image, and the IEND chunk last.
    REQUIRE_MESSAGE(png.size() > 1000, name);
    CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
    CHECK(png.compare(12, 4, "IHDR") == 0);
    const auto big_endian = [&](std::size_t at) {
      return (std::uint32_t(std::uint8_t(png[at])) << 24) | (std::uint32_t(std::uint8_t(png[at + 1])) << 16) |
             (std::uint32_t(std::uint8_t(png[at + 2])) << 8) | std::uint32_t(std::uint8_t(png[at + 3]));
    };
    CHECK(big_endian(16) >= 400);  // width
    CHECK(big_endian(20) >= 300);  // height
    CHECK(png.compare(png.size() - 8, 4, "IEND") == 0);
  }
  const accord::testing::run_output bad = accord::testing::run(plot + " /etc/hostname --out " + dir.file("plots"));
  CHECK(bad.status == 2);
  CHECK_MESSAGE(bad.text.rfind("plot-metrics: /etc/hostname:1: not a metrics line", 0) == 0, bad.text);
}

namespace {

struct trace_file {
  std::map<int, std::string> track_names;    // tid -> name
  std::vector<nlohmann::json> spans;         // complete events ("X")
  std::set<int> processes;

  explicit trace_file(const std::string& path) {
    std::ifstream in(path);
    const nlohmann::json trace = nlohmann::json::parse(in);
    for (const auto& event : trace.at("traceEvents")) {
      processes.insert(event.at("pid").get<int>());
      if (event.at("ph") == "M" && event.at("name") == "thread_name")
        track_names[event.at("tid").get<int>()] = event.at("args").at("name").get<std::string>();
      if (event.at("ph") == "X") spans.push_back(event);
    }
  }
  // Spans called `name` on the track called `track`.
  std::vector<nlohmann::json> on(const std::string& track, const std::string& name) const {
    std::vector<nlohmann::json> found;
    for (const auto& span : spans)
      if (track_names.at(span.at("tid").get<int>()) == track && span.at("name") == name) found.push_back(span);
    return found;
  }
};

bool inside(const nlohmann::json& inner, const nlohmann::json& outer) {
  const auto begin = [](const nlohmann::json& s) { return s.at("ts").get<std::int64_t>(); };
  const auto end = [&](const nlohmann::json& s) { return begin(s) + s.at("dur").get<std::int64_t>(); };
  return begin(inner) >= begin(outer) && end(inner) <= end(outer);
}

}  // namespace

TEST_CASE("--trace writes a Chrome trace: a track per actor, spans for micro-batches, rounds, phases, waits, steps") {
  const scratch_dir dir;
  const std::string trace = dir.file("ddp.json");
  const accord::testing::run_output run = accord::testing::run(train + tiny + " --algo ddp --workers 2 --steps 3 --trace " + trace);
  REQUIRE_MESSAGE(run.status == 0, run.text);
  const trace_file file(trace);
  CHECK(file.processes == std::set<int>{0});
  for (int rank : {0, 1}) {
    const std::string worker = "worker " + std::to_string(rank);
    CHECK(file.on(worker + " compute", "micro-batch").size() >= 3);
    const auto rounds = file.on(worker + " communicator", "round");
    REQUIRE(rounds.size() == 3);
    for (const char* phase : {"all-reduce totals", "reduce-scatter", "optimizer step", "all-gather"}) {
      const auto phases = file.on(worker + " communicator", phase);
      REQUIRE_MESSAGE(phases.size() == 3, phase);
      for (std::size_t r = 0; r < 3; ++r) CHECK_MESSAGE(inside(phases[r], rounds[r]), phase);
    }
    CHECK(rounds[2].at("args").at("index") == 2);
    // DDP waits for every round.
    CHECK(file.on(worker + " accumulator", "wait for a round").size() >= 2);
  }
  const auto steps = file.on("coordinator", "step");
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].at("args").at("index") == 1);
  const auto epochs = file.on("coordinator", "epoch");
  REQUIRE(epochs.size() == 1);
  for (const auto& step : steps) CHECK(inside(step, epochs[0]));
  CHECK(file.on("evaluator", "evaluate").size() == 1);

  const std::string votes = dir.file("votes.json");
  const accord::testing::run_output lion = accord::testing::run(train + tiny + " --algo dlion-mavo --workers 2 --steps 2 --trace " + votes);
  REQUIRE_MESSAGE(lion.status == 0, lion.text);
  CHECK(trace_file(votes).on("worker 1 communicator", "vote").size() == 2);

  // A membership change: an epoch span each, steps inside their epoch.
  const std::string elastic = dir.file("elastic.json");
  const accord::testing::run_output churn =
      accord::testing::run(train + tiny + " --algo ddp --workers 2 --steps 3 --membership 2:1 --trace " + elastic);
  REQUIRE_MESSAGE(churn.status == 0, churn.text);
  const trace_file churned(elastic);
  const auto churn_epochs = churned.on("coordinator", "epoch");
  REQUIRE(churn_epochs.size() == 2);
  CHECK(churn_epochs[0].at("args").at("index") == 1);
  CHECK(churn_epochs[1].at("args").at("index") == 2);
  CHECK(churned.on("worker 1 communicator", "round").size() == 2);  // worker 1 leaves after step 2

  const accord::testing::run_output refused = accord::testing::run(train + tiny + " --trace /nonexistent/dir/trace.json");
  CHECK(refused.status == 2);
  CHECK(refused.text == "accord-train: --trace: /nonexistent/dir/trace.json: cannot write into /nonexistent/dir\n");
}

TEST_CASE("between processes every rank writes its own trace, on one clock") {
  const scratch_dir dir;
  const accord::testing::run_output run =
      accord::testing::run(std::string(ACCORD_LAUNCH_BINARY) + " -n 2 -- " + train + tiny + " --algo ddp --steps 2 --trace " +
                  dir.file("job.json"));
  REQUIRE_MESSAGE(run.status == 0, run.text);
  const trace_file rank0(dir.file("job.rank0.json")), rank1(dir.file("job.rank1.json"));
  CHECK(rank0.processes == std::set<int>{0});
  CHECK(rank1.processes == std::set<int>{1});
  CHECK(rank0.on("coordinator", "step").size() == 2);
  const auto rounds0 = rank0.on("worker 0 communicator", "round"), rounds1 = rank1.on("worker 1 communicator", "round");
  REQUIRE(rounds0.size() == 2);
  REQUIRE(rounds1.size() == 2);
  // One clock: the two ranks' rounds of a synchronous job overlap in time.
  for (std::size_t r = 0; r < 2; ++r) {
    const auto begin0 = rounds0[r].at("ts").get<std::int64_t>(), begin1 = rounds1[r].at("ts").get<std::int64_t>();
    CHECK(begin1 <= begin0 + rounds0[r].at("dur").get<std::int64_t>());
    CHECK(begin0 <= begin1 + rounds1[r].at("dur").get<std::int64_t>());
  }
}

namespace {

// The whole answer to "GET target" from 127.0.0.1:port (empty when nothing listens).
std::string http_get(int port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    (void)!::write(fd, request.data(), request.size());
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) answer.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

}  // namespace

TEST_CASE("--status-port serves the live page and Prometheus metrics over HTTP while the job runs") {
  // The shell prints its pid and becomes accord-train, which prints where the page is.
  FILE* job = popen(("sh -c 'echo $$; exec " + train + tiny +
                     " --algo ddp --workers 2 --steps 1000000 --eval-interval 5 --status-port 0' 2>&1")
                        .c_str(),
                    "r");
  REQUIRE(job);
  char line[1024];
  REQUIRE(std::fgets(line, sizeof line, job));
  const pid_t pid = std::stoi(line);
  int port = 0;
  while (port == 0 && std::fgets(line, sizeof line, job)) {
    const std::string text = line;
    if (const auto at = text.find("status page: http://127.0.0.1:"); at != std::string::npos)
      port = std::stoi(text.substr(at + 30));
  }
  REQUIRE(port > 0);
  // Wait (without a time bound on the answer's content) until held-out losses are in.
  std::string metrics;
  for (int attempt = 0; attempt < 600 && metrics.find("accord_eval_loss") == std::string::npos; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    metrics = http_get(port, "/metrics");
  }
  CHECK(metrics.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(metrics.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(metrics.find("# TYPE accord_train_loss gauge\naccord_train_loss ") != std::string::npos);
  CHECK(metrics.find("accord_eval_loss ") != std::string::npos);
  CHECK(metrics.find("accord_workers 2\n") != std::string::npos);
  CHECK(metrics.find("accord_worker_seconds{rank=\"1\",activity=\"wait\"} ") != std::string::npos);

  const std::string page = http_get(port, "/");
  CHECK(page.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(page.find("<svg") != std::string::npos);
  CHECK(page.find("<polyline") != std::string::npos);
  CHECK(page.find("<td>1</td>") != std::string::npos);  // worker 1's row
  CHECK(page.find("<script") == std::string::npos);     // self-contained
  CHECK(page.find("</html>") != std::string::npos);
  CHECK(http_get(port, "/nope").rfind("HTTP/1.1 404", 0) == 0);

  ::kill(pid, SIGTERM);  // stops after the current step
  while (std::fgets(line, sizeof line, job)) {
  }
  const int status = pclose(job);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 143);
}
