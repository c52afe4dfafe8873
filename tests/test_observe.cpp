// Seeing a job: the metrics accord-train writes (JSON lines and CSV), --config files, and the
// plots scripts/plot-metrics draws from a real metrics file.
#include <doctest/doctest.h>
#include <accord/metrics_fields.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "observe/progress_line.hpp"
#include "observe/stall_watchdog.hpp"
#include "observe/step_figures.hpp"
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

TEST_CASE("the progress line comes at the first step, every interval and the last, with the latest eval and an ETA") {
  // A resumed job of 10 steps that starts at step 5, a line every 2 steps (accord-train
  // --log-interval, accord.torch's log_interval).
  accord::progress_log log(10, 2, "ex");
  std::vector<std::string> lines;
  for (std::uint64_t step = 5; step <= 10; ++step) {
    accord::step_metrics m;
    m.step = step;
    m.train_loss = 1.0 / static_cast<double>(step);
    m.eval_loss = step == 7 ? 0.5 : -1;
    m.seconds = 10.0 + 2.0 * static_cast<double>(step - 5);  // 2 s a step
    m.items_per_second = 2500;
    m.bits_per_parameter = 32;
    m.hidden_fraction = 0.75;
    if (const std::string line = log.on_step(m); !line.empty()) lines.push_back(line);
  }
  CHECK(lines == std::vector<std::string>{
                     "step     6/10 | loss 0.1667 | eval    -   | 2.5k ex/s | 32.0 bits/param | hidden  75% | 12.0s | ETA 8s",
                     "step     8/10 | loss 0.1250 | eval 0.5000 | 2.5k ex/s | 32.0 bits/param | hidden  75% | 16.0s | ETA 4s",
                     "step    10/10 | loss 0.1000 | eval 0.5000 | 2.5k ex/s | 32.0 bits/param | hidden  75% | 20.0s | ETA 0s"});
  accord::progress_log silent(10, 0, "tok");
  CHECK(silent.on_step(accord::step_metrics{.step = 1}).empty());
  CHECK(accord::format_rate(1.25e6) == "1.25M");
  CHECK(accord::format_duration(3725) == "1h02m");
  CHECK(accord::format_duration(187) == "3m07s");
}

namespace {

// A step whose every field holds something: two workers, a stale gradient, an edge.
accord::step_metrics full_step(std::uint64_t step) {
  return {.step = step, .train_loss = 2.5, .eval_loss = 2.25, .seconds = 1.5, .items = 32, .items_per_second = 64,
          .bits_per_parameter = 16, .hidden_fraction = 0.5, .micro_batches = 4, .workers = 2, .epoch = 1,
          .learning_rate = 1e-3, .bytes_sent = 800, .gradient_norm = 0.75, .vote_agreement = 0.875,
          .per_worker = {{0.25, 0.125, 0.0625}, {0.5, 0.25, 0.125}}, .cpu = {1, 2, 3, 4, 5, 6},
          .consensus_distance = 0.125, .staleness = {3, 1}, .worker_gradients = {2, 2},
          .edge_bytes = {{0, 1, 300}, {1, 0, 500}}};
}

}  // namespace

TEST_CASE("a step's figures are written from their declarations: JSON, CSV, Prometheus and the page's tiles") {
  // The CSV columns scripts read by name, in the order the file always had (a resumed job appends
  // to a file an older accord-train began).
  CHECK(accord::csv_header() ==
        "step,train_loss,eval_loss,seconds,items,items_per_second,bits_per_parameter,hidden_fraction,micro_batches,"
        "workers,epoch,learning_rate,gradient_norm,vote_agreement,compute_seconds,communication_seconds,wait_seconds,"
        "bytes,consensus_distance,edge_bytes_max,edge_bytes_mean,cpu_compute_seconds,cpu_communicator_seconds,"
        "cpu_evaluator_seconds,cpu_actors_seconds,cpu_transport_seconds,cpu_other_seconds");
  CHECK(accord::csv_row(full_step(7)) == "7,2.5,2.25,1.5,32.0,64.0,16.0,0.5,4,2,1,0.001,0.75,0.875,0.375,0.1875,0.09375,"
                                         "800,0.125,500,400.0,1.0,2.0,3.0,4.0,5.0,6.0");
  const nlohmann::json line = accord::step_json(full_step(7));
  CHECK(line.dump() ==
        R"({"bits_per_parameter":16.0,"bytes":800,"consensus_distance":0.125,)"
        R"("cpu_seconds":{"actors":4.0,"communicator":2.0,"compute":1.0,"evaluator":3.0,"other":6.0,"transport":5.0},)"
        R"("edge_bytes":[[0,1,300],[1,0,500]],"epoch":1,"eval_loss":2.25,"gradient_norm":0.75,"hidden_fraction":0.5,)"
        R"("items":32.0,"items_per_second":64.0,"learning_rate":0.001,"micro_batches":4,"seconds":1.5,"staleness":[3,1],)"
        R"("step":7,"train_loss":2.5,"vote_agreement":0.875,"worker_communication_seconds":[0.125,0.25],)"
        R"("worker_compute_seconds":[0.25,0.5],"worker_gradients":[2,2],"worker_wait_seconds":[0.0625,0.125],"workers":2})");
  // Not measured at a step (-1, empty): no key, an empty cell.
  accord::step_metrics plain;
  plain.step = 3;
  plain.workers = 1;
  const nlohmann::json sparse = accord::step_json(plain);
  for (const char* key : {"eval_loss", "vote_agreement", "consensus_distance", "staleness", "worker_gradients", "edge_bytes"})
    CHECK_MESSAGE(!sparse.contains(key), key);
  CHECK(sparse.at("worker_compute_seconds") == nlohmann::json::array());
  CHECK(accord::csv_row(plain).rfind("3,0.0,,0.0,", 0) == 0);

  // /metrics: every declared metric once its field has a value; sums over the steps; an optional
  // figure keeps its latest measured value.
  accord::step_figures figures;
  CHECK(figures.prometheus().find("# TYPE accord_steps_total counter\naccord_steps_total 0\n") != std::string::npos);
  CHECK(figures.prometheus().find("accord_train_loss") == std::string::npos);  // no step yet
  figures.add(full_step(1));
  accord::step_metrics later = full_step(2);
  later.eval_loss = -1;
  figures.add(later);
  const std::string metrics = figures.prometheus();
  for (const accord::figure_names& f : accord::declared_figures()) {
    if (f.prometheus.empty()) continue;
    const std::string name = f.prometheus.substr(0, f.prometheus.find('{'));
    CHECK_MESSAGE(metrics.find("# TYPE " + name + " " + f.prometheus_type + "\n" + name) != std::string::npos, name);
  }
  CHECK(metrics.find("accord_steps_total 2\n") != std::string::npos);
  CHECK(metrics.find("accord_items_total 64\n") != std::string::npos);
  CHECK(metrics.find("accord_eval_loss 2.25\n") != std::string::npos);
  CHECK(metrics.find("accord_sent_bytes_per_parameter 2\n") != std::string::npos);  // 16 bits
  CHECK(metrics.find("accord_worker_seconds_total{rank=\"1\",activity=\"wait\"} 0.25\n") != std::string::npos);
  CHECK(metrics.find("accord_cpu_seconds_total{role=\"other\"} 12\n") != std::string::npos);
  CHECK(metrics.find("accord_applied_gradients_total{staleness=\"0\"} 6\n") != std::string::npos);
  CHECK(figures.latest()->eval_loss == 2.25);
  {  // every declared metric, labelled ones too, as Prometheus' linter wants them (see below)
    const scratch_dir dir;
    std::ofstream(dir.file("all.prom")) << metrics;
    const accord::testing::run_output lint = accord::testing::run("promtool check metrics < " + dir.file("all.prom"));
    INFO(lint.text);
    CHECK(lint.status == 0);
    CHECK(lint.text.empty());
  }
  CHECK(figures.totals().staleness == std::vector<std::uint64_t>{6, 2});

  // The page's tiles and workers' bars: the declared ones, each naming a key of the step's line.
  const nlohmann::json page = accord::status_page_figures();
  REQUIRE(page.at("tiles").size() >= 10);
  for (const auto& tile : page.at("tiles")) CHECK_MESSAGE(line.contains(tile.at("key").get<std::string>()), tile.dump());
  CHECK(page.at("tiles").at(0) ==
        nlohmann::json{{"label", "step"}, {"key", "step"}, {"format", "plain"}, {"digits", 0}, {"suffix", ""}});
  CHECK(page.at("worker_seconds") == nlohmann::json::parse(R"([["compute", "worker_compute_seconds"],)"
                                                           R"( ["communication", "worker_communication_seconds"],)"
                                                           R"( ["wait", "worker_wait_seconds"]])"));
}

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

TEST_CASE("the stall watchdog reports once a set time passed without progress, once per stall, from the first step") {
  using namespace std::chrono_literals;
  const auto t0 = std::chrono::steady_clock::time_point(10s);
  accord::stall_judge judge(2000ms, 7);
  // Before the first progress the job has not started: nothing to report, however long.
  CHECK(!judge.report(7, t0));
  CHECK(!judge.report(7, t0 + 60s));
  // From the first progress on, a silence of the limit reports, once.
  CHECK(!judge.report(8, t0 + 61s));
  CHECK(!judge.report(8, t0 + 62s));
  CHECK(judge.report(8, t0 + 63s));
  CHECK(!judge.report(8, t0 + 64s));
  CHECK(!judge.report(8, t0 + 600s));
  // Progress again re-arms it: the next stall reports too.
  CHECK(!judge.report(9, t0 + 601s));
  CHECK(!judge.report(9, t0 + 602999ms));
  CHECK(judge.report(9, t0 + 603s));
  // A limit of 0 never reports.
  accord::stall_judge off(0ms, 0);
  CHECK(!off.report(1, t0));
  CHECK(!off.report(1, t0 + 3600s));
}

TEST_CASE("--watchdog: a process whose steps stall writes every thread's stack and its actors to stderr, once") {
  // A worker 1000 times slower (--speed) holds DDP's round for most of a second per micro-batch:
  // a real stall of the other worker, which the watchdog names with every thread.
  const std::string slow = train + " --width 32 --heads 2 --layers 1 --context 16 --micro-batch 4 --eval-examples 16"
                                   " --link unlimited --log-interval 0 --blas-threads 1 --algo ddp --workers 2 --steps 2"
                                   " --max-accumulation 1 --speed 1,1000";
  const accord::testing::run_output stalled = accord::testing::run(slow + " --watchdog 0.3");
  REQUIRE_MESSAGE(stalled.status == 0, stalled.text);
  const auto report = stalled.text.find("accord: watchdog: no step completed in this process for 0.3 s (--watchdog)");
  REQUIRE_MESSAGE(report != std::string::npos, stalled.text);
  const std::string after = stalled.text.substr(report);
  for (const char* named : {"thread ", "(compute.0)", "(compute.1)", "(comm.0)", ", the watchdog's own:",
                            "actors (", "(compute, rank 1): ", "(accumulator, rank 0): ", "(coordinator): ",
                            "accord: watchdog: end of the report"})
    CHECK_MESSAGE(after.find(named) != std::string::npos, named << " missing from:\n" << after);
  // The main thread is named after the program.
  CHECK(after.find("(accord-train)") != std::string::npos);
  const accord::testing::run_output off = accord::testing::run(slow + " --watchdog 0");
  REQUIRE_MESSAGE(off.status == 0, off.text);
  CHECK(off.text.find("accord: watchdog") == std::string::npos);
}

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

TEST_CASE("accord-launch --trace merges the ranks' traces into one, on rank 0's clock") {
  const scratch_dir dir;
  const std::string trace = dir.file("job.json");
  const accord::testing::run_output run = accord::testing::run(std::string(ACCORD_LAUNCH_BINARY) + " -n 2 --trace " + trace +
                                                               " -- " + train + tiny + " --algo ddp --steps 2");
  REQUIRE_MESSAGE(run.status == 0, run.text);
  CHECK_MESSAGE(run.text.find("accord-launch: trace of 2 worker(s): " + trace + "\n") != std::string::npos, run.text);
  CHECK_FALSE(fs::exists(dir.file("job.rank0.json")));  // merged, then removed
  CHECK_FALSE(fs::exists(dir.file("job.rank1.json")));
  const trace_file merged(trace);
  CHECK(merged.processes == std::set<int>{0, 1});
  CHECK(merged.on("coordinator", "step").size() == 2);
  CHECK(merged.on("membership", "epoch forming").size() == 1);  // the rendezvous
  // Each process row says by how much its clock was moved onto rank 0's.
  std::ifstream in(trace);
  const nlohmann::json whole = nlohmann::json::parse(in);
  std::set<int> offsets_stated;
  for (const auto& event : whole.at("traceEvents"))
    if (event.at("name") == "process_name" && event.at("args").at("clock_offset_us").is_number_integer())
      offsets_stated.insert(event.at("pid").get<int>());
  CHECK(offsets_stated == std::set<int>{0, 1});
  const auto rounds0 = merged.on("worker 0 communicator", "round"), rounds1 = merged.on("worker 1 communicator", "round");
  REQUIRE(rounds0.size() == 2);
  REQUIRE(rounds1.size() == 2);
  // One clock: the two ranks' rounds of a synchronous job overlap in time.
  for (std::size_t r = 0; r < 2; ++r) {
    const auto begin0 = rounds0[r].at("ts").get<std::int64_t>(), begin1 = rounds1[r].at("ts").get<std::int64_t>();
    CHECK(begin1 <= begin0 + rounds0[r].at("dur").get<std::int64_t>());
    CHECK(begin0 <= begin1 + rounds1[r].at("dur").get<std::int64_t>());
  }

  // accord-train's own --trace under the launcher: each rank's part stays where it wrote it.
  const accord::testing::run_output parts = accord::testing::run(std::string(ACCORD_LAUNCH_BINARY) + " -n 2 -- " + train +
                                                                 tiny + " --algo ddp --steps 1 --trace " + dir.file("own.json"));
  REQUIRE_MESSAGE(parts.status == 0, parts.text);
  CHECK(trace_file(dir.file("own.rank1.json")).processes == std::set<int>{1});

  const accord::testing::run_output refused =
      accord::testing::run(std::string(ACCORD_LAUNCH_BINARY) + " -n 1 --trace /nonexistent/dir/t.json -- /bin/true");
  CHECK(refused.status == 2);
  CHECK(refused.text == "accord-launch: --trace: '/nonexistent/dir/t.json': cannot write into /nonexistent/dir\n");
  // A program that writes no trace: named, and the launch's status stands.
  const accord::testing::run_output none =
      accord::testing::run(std::string(ACCORD_LAUNCH_BINARY) + " -n 1 --trace " + dir.file("none.json") + " -- /bin/true");
  CHECK(none.status == 0);
  CHECK(none.text == "accord-launch: --trace: rank 0 wrote no trace (" + dir.file("none.rank0.json") + ")\n");
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

// A job of accord-train --status-port 0 `flags` that runs until stop(): the shell prints its pid
// and becomes accord-train, which prints where the page is.
struct status_job {
  FILE* output = nullptr;
  pid_t pid = 0;
  int port = 0;

  explicit status_job(const std::string& flags) {
    output = popen(("sh -c 'echo $$; exec " + train + tiny + " --steps 1000000 --status-port 0 " + flags + "' 2>&1").c_str(), "r");
    REQUIRE(output);
    char line[1024];
    REQUIRE(std::fgets(line, sizeof line, output));
    pid = std::stoi(line);
    while (port == 0 && std::fgets(line, sizeof line, output)) {
      const std::string text = line;
      if (const auto at = text.find("status page: http://127.0.0.1:"); at != std::string::npos)
        port = std::stoi(text.substr(at + 30));
    }
    REQUIRE(port > 0);
  }
  nlohmann::json status() const {
    const std::string answer = http_get(port, "/status.json");
    REQUIRE(answer.rfind("HTTP/1.1 200 OK", 0) == 0);
    return nlohmann::json::parse(answer.substr(answer.find("\r\n\r\n") + 4));
  }
  // Polls /status.json until `ready` holds for it (a minute at most: the steps take milliseconds).
  void wait_for(const std::function<bool(const nlohmann::json&)>& ready) const {
    for (int attempt = 0; attempt < 600; ++attempt) {
      if (ready(status())) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL("status.json never got there: " << status().dump());
  }
  // `signal` (SIGTERM: it stops after the current step); the exit status.
  int stop(int signal = SIGTERM) {
    ::kill(pid, signal);
    char line[1024];
    while (std::fgets(line, sizeof line, output)) {
    }
    const int status = pclose(output);
    output = nullptr;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~status_job() {
    if (output) stop();
  }
};

}  // namespace

TEST_CASE("--status-port serves the live page, its figures and Prometheus metrics over HTTP while the job runs") {
  status_job job("--algo ddp --workers 2 --eval-interval 5");
  job.wait_for([](const nlohmann::json& status) { return !status.at("eval").empty(); });
  const std::string metrics = http_get(job.port, "/metrics");
  CHECK(metrics.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(metrics.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  // Prometheus' conventions: counters end in _total, fractions in _ratio, build_info holds the version.
  CHECK(metrics.find("# TYPE accord_train_loss gauge\naccord_train_loss ") != std::string::npos);
  CHECK(metrics.find("accord_eval_loss ") != std::string::npos);
  CHECK(metrics.find("accord_workers 2\n") != std::string::npos);
  CHECK(metrics.find("# TYPE accord_build_info gauge\naccord_build_info{version=\"") != std::string::npos);
  CHECK(metrics.find("# TYPE accord_steps_target gauge\naccord_steps_target 1000000\n") != std::string::npos);
  for (const char* counter : {"steps_total", "items_total", "sent_bytes_total", "elapsed_seconds_total"})
    CHECK_MESSAGE(metrics.find("# TYPE accord_" + std::string(counter) + " counter\naccord_" + counter + " ") !=
                      std::string::npos,
                  counter);
  CHECK(metrics.find("# TYPE accord_communication_hidden_ratio gauge\n") != std::string::npos);
  CHECK(metrics.find("# TYPE accord_worker_seconds_total counter\n") != std::string::npos);
  CHECK(metrics.find("accord_worker_seconds_total{rank=\"1\",activity=\"wait\"} ") != std::string::npos);
  CHECK(metrics.find("hidden_fraction") == std::string::npos);
  // What each thread role spent in CPU: the compute threads, at least, spent some.
  CHECK(metrics.find("# TYPE accord_cpu_seconds_total counter\n") != std::string::npos);
  CHECK(metrics.find("accord_cpu_seconds_total{role=\"communicator\"} ") != std::string::npos);
  // The counters count what was done: steps as the job reports them, 2 workers x 2 examples x 8
  // tokens a step, and they only grow.
  const auto sample = [](const std::string& text, const std::string& name) {
    const auto at = text.find("\n" + name + " ");
    REQUIRE_MESSAGE(at != std::string::npos, name);
    return std::stod(text.substr(at + name.size() + 2));
  };
  const double steps_done = sample(metrics, "accord_steps_total");
  CHECK(steps_done >= 5);
  CHECK(sample(metrics, "accord_items_total") >= steps_done * 32);
  CHECK(sample(metrics, "accord_sent_bytes_total") > 0);
  CHECK(sample(metrics, "accord_cpu_seconds_total{role=\"compute\"}") > 0);
  CHECK(sample(metrics, "accord_sent_bytes_per_parameter") > 0);
  // Prometheus' own linter (promtool, Debian's prometheus package, installed by scripts/setup.sh)
  // passes on the body with nothing to say.
  {
    const std::string body_path = "status_metrics.prom";
    std::ofstream(body_path) << metrics.substr(metrics.find("\r\n\r\n") + 4);
    const accord::testing::run_output lint = accord::testing::run("promtool check metrics < " + body_path);
    INFO(lint.text);
    CHECK(lint.status == 0);
    CHECK(lint.text.empty());
  }
  const std::string later = http_get(job.port, "/metrics");
  for (const char* counter : {"accord_steps_total", "accord_items_total", "accord_sent_bytes_total"})
    CHECK(sample(later, counter) >= sample(metrics, counter));

  const nlohmann::json status = job.status();
  CHECK(status.at("steps") == 1000000);
  CHECK(status.at("job").get<std::string>().rfind("ddp, 2 workers", 0) == 0);
  CHECK(status.at("last").at("step").get<int>() >= 5);
  CHECK(status.at("last").at("worker_compute_seconds").size() == 2);
  CHECK(status.at("points").size() >= 5);
  CHECK(status.at("eval").at(0).at(0) == 5);
  CHECK(status.at("events").empty());

  const std::string page = http_get(job.port, "/");
  CHECK(page.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(page.find("fetch(\"status.json\"") != std::string::npos);
  // Self-contained: nothing loaded from elsewhere.
  for (const char* outside : {" src=", " href=", "@import", "url("}) CHECK_MESSAGE(page.find(outside) == std::string::npos, outside);
  CHECK(page.find("</html>") != std::string::npos);
  CHECK(http_get(job.port, "/nope").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(job.stop() == 143);
}

namespace {

// The page at 127.0.0.1:port as headless Chromium leaves it in a window of 1280 x 800 (a laptop's
// first screen) after 5 s of virtual time (its script fetches status.json at once and every 2 s):
// the DOM the script built, serialised. A script added for the test measures where the panels
// lie and appends "id left top right bottom" lines in <pre id="layout">, after the window's size.
// The copy loads from a file, its base the job's server (hence --disable-web-security).
std::string rendered_page(int port, const std::string& profile_dir) {
  fs::create_directories(profile_dir);
  const std::string server = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::string answer = http_get(port, "/");
  std::string page = answer.substr(answer.find("\r\n\r\n") + 4);
  page.insert(page.find("<head>") + 6, "<base href=\"" + server + "\">");
  page.insert(page.rfind("</body>"), R"(<script>
setTimeout(() => {
  const lines = [innerWidth + "x" + innerHeight];
  for (const id of ["figures", "loss-chart", "throughput-chart", "hidden-chart", "worker-bars", "events"]) {
    const box = document.getElementById(id).getBoundingClientRect();
    lines.push(id + " " + [box.left, box.top, box.right, box.bottom].map(Math.round).join(" "));
  }
  const layout = document.createElement("pre");
  layout.id = "layout";
  layout.textContent = lines.join("\n");
  document.body.appendChild(layout);
}, 4500);
</script>)");
  const std::string copy = profile_dir + "/page.html";
  std::ofstream(copy) << page;
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  const accord::testing::run_output dump = accord::testing::run(
      "(timeout -k 5 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--disable-web-security --window-size=1280,800 --user-data-dir=" + profile_dir +
      " --virtual-time-budget=5000 --dump-dom file://" + copy + " 2>" + profile_dir + "/stderr.txt)");
  REQUIRE_MESSAGE(dump.status == 0, dump.text);
  return dump.text;
}

// The boxes <pre id="layout"> holds, by element id; the window's inner size under "window".
std::map<std::string, std::array<int, 4>> layout_of(const std::string& page) {
  std::map<std::string, std::array<int, 4>> boxes;
  const auto begin = page.find("<pre id=\"layout\">");
  if (begin == std::string::npos) return boxes;
  std::istringstream lines(page.substr(begin + 17, page.find("</pre>", begin) - begin - 17));
  std::string line;
  std::getline(lines, line);
  int width = 0, height = 0;
  if (std::sscanf(line.c_str(), "%dx%d", &width, &height) == 2) boxes["window"] = {0, 0, width, height};
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string id;
    std::array<int, 4> box{};
    if (fields >> id >> box[0] >> box[1] >> box[2] >> box[3]) boxes[id] = box;
  }
  return boxes;
}

// The texts of the cells (<td>) of the first table row that holds `marker`.
std::vector<std::string> row_cells(const std::string& page, const std::string& marker) {
  std::vector<std::string> cells;
  const auto at = page.find(marker);
  if (at == std::string::npos) return cells;
  const auto row_end = page.find("</tr>", at);
  for (auto open = page.find("<td>", at); open < row_end; open = page.find("<td>", open + 4))
    cells.push_back(page.substr(open + 4, page.find('<', open + 4) - open - 4));
  return cells;
}

// The value of a figure of the page's tiles ("" when absent).
std::string figure(const std::string& page, const std::string& name) {
  const auto at = page.find("<div data-figure=\"" + name + "\">");
  if (at == std::string::npos) return "";
  const auto value = page.find("<b>", at) + 3;
  return page.substr(value, page.find("</b>", value) - value);
}

// Points of the polyline drawn for `series` (0 when there is none).
std::size_t polyline_points(const std::string& page, const std::string& series) {
  const auto at = page.find("<polyline data-series=\"" + series + "\"");
  if (at == std::string::npos) return 0;
  const auto begin = page.find("points=\"", at) + 8;
  const std::string points = page.substr(begin, page.find('"', begin) - begin);
  return static_cast<std::size_t>(std::count(points.begin(), points.end(), ','));
}

}  // namespace

TEST_CASE("in headless Chromium the status page's script draws curves, workers, staleness and membership events") {
  if (accord::testing::run("command -v chromium").status != 0) {
    MESSAGE("ACCORD_SKIPPED: Debian's chromium is not installed");
    return;
  }
  const scratch_dir dir;
  {
    // A worker leaves after step 3: the page lists the change.
    status_job job("--algo ddp --workers 3 --membership 3:2 --eval-interval 2");
    job.wait_for([](const nlohmann::json& status) { return !status.at("events").empty() && status.at("eval").size() >= 2; });
    const std::string page = rendered_page(job.port, dir.file("profile-ddp"));
    CHECK(job.stop() == 143);
    CHECK_MESSAGE(page.find("<p id=\"job\">ddp, 3 workers") != std::string::npos, page);
    CHECK(page.find("running: step ") != std::string::npos);
    CHECK(std::stoi(figure(page, "step")) >= 4);
    CHECK(std::stod(figure(page, "train loss")) > 0);
    CHECK(std::stod(figure(page, "held-out loss")) > 0);
    CHECK(figure(page, "hidden").find('%') != std::string::npos);
    CHECK(figure(page, "workers") == "2");
    // Human units: "147k items/s", "88.4 KiB", not 147043 or 90521.
    CHECK_MESSAGE(std::regex_match(figure(page, "throughput"), std::regex(R"(\d{1,3}(\.\d{1,2})?[kMGT]? items/s)")),
                  figure(page, "throughput"));
    CHECK_MESSAGE(std::regex_match(figure(page, "bytes sent (step)"), std::regex(R"(\d{1,4}(\.\d{1,2})? (B|KiB|MiB|GiB))")),
                  figure(page, "bytes sent (step)"));
    CHECK(polyline_points(page, "train loss") >= 4);
    CHECK(polyline_points(page, "items/s") >= 4);
    CHECK(polyline_points(page, "hidden %") >= 4);
    CHECK(page.find("<circle data-series=\"held-out loss\"") != std::string::npos);
    // A stacked bar per worker still in the job: compute, communication and wait.
    const auto bar = page.find("<g data-rank=\"1\">");
    REQUIRE(bar != std::string::npos);
    for (const char* activity : {"compute", "communication", "wait"})
      CHECK(page.find("<rect data-activity=\"" + std::string(activity) + "\"", bar) < page.find("</g>", bar));
    CHECK(page.find("<g data-rank=\"2\">") == std::string::npos);  // left
    // The first screen (1280 x 800) holds the figures, the loss, throughput and hidden-communication
    // curves, the workers' bars and the membership events, each whole.
    const auto boxes = layout_of(page);
    REQUIRE_MESSAGE(boxes.count("window"), page);
    // The page's layout follows the window's width only (nothing is sized by its height, which
    // headless Chromium gives less of than --window-size asks, keeping some for a frame).
    CHECK(boxes.at("window")[2] == 1280);
    for (const std::string panel : {"figures", "loss-chart", "throughput-chart", "hidden-chart", "worker-bars", "events"}) {
      CAPTURE(panel);
      REQUIRE(boxes.count(panel));
      const auto [left, top, right, bottom] = boxes.at(panel);
      CHECK(left >= 0);
      CHECK(top >= 0);
      CHECK(right > left);
      CHECK(bottom > top);
      CHECK(right <= 1280);
      CHECK(bottom <= 800);
    }
    CHECK(page.find("<li>membership: 3 -&gt; 2 workers from step 4</li>") != std::string::npos);
    CHECK(page.find("no stale gradients") != std::string::npos);
    CHECK(page.find("<p id=\"connection\"></p>") != std::string::npos);  // every fetch answered
  }
  {
    status_job job("--algo ddp --workers 2 --topology parameter-server --max-staleness 1");
    job.wait_for([](const nlohmann::json& status) { return !status.at("staleness").empty(); });
    const std::string page = rendered_page(job.port, dir.file("profile-ps"));
    // SIGKILL: the parameter-server topology does not stop after the current step on SIGTERM.
    CHECK(job.stop(SIGKILL) == 128 + SIGKILL);
    CHECK_MESSAGE(page.find("<table id=\"staleness-table\">") != std::string::npos, page);
    const auto fresh = row_cells(page, "<tr data-staleness=\"0\">");
    REQUIRE(fresh.size() == 2);
    CHECK(fresh[0] == "0");
    CHECK(std::stoi(fresh[1]) > 0);
    CHECK(page.find("<li>no membership events</li>") != std::string::npos);
  }
}
