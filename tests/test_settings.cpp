// Declared settings (include/accord/settings.hpp, config_settings.hpp): values parsed as declared,
// the topologies' own settings in a job's open bag, job_config's declarations against its fields,
// and the docs' tables of settings (docs/topologies.md, docs/training.md: job_config's and
// accord-train's own settings: the model's, the data's and the place's) and of a step's metrics
// (docs/observability.md, <accord/metrics_fields.hpp>), generated from the declarations
// (ACCORD_WRITE_DOCS=1 build/tests/test_settings rewrites them; the test fails when the docs drift).
#include <accord/config_fields.hpp>
#include <accord/config_settings.hpp>
#include <accord/settings.hpp>
#include <accord/topology.hpp>

#include "apps/training_options.hpp"
#include "observe/step_figures.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

using namespace accord;

namespace {

setting_declaration steps_setting() {
  return {.name = "local_steps", .flag = "local-steps", .kind = setting_kind::whole, .fallback = std::int64_t{1},
          .low = 1, .high = 1000};
}

std::string refusal(const setting_declaration& setting, const std::string& text) {
  try {
    parse_setting(setting, text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

// A table row's cell: '|' escaped.
std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string row(const std::string& first, const std::string& flag, const setting_declaration& s) {
  return "| " + first + " | " + flag + " | `" + s.name + "` | " + cell(accepted(s)) + " | " +
         cell(default_text(s).value_or("none")) + " | " + s.unit + " | " + (s.fingerprint ? "yes" : "no") + " | " +
         cell(s.help) + " |\n";
}

constexpr const char* columns = " | flag | key | accepts | default | unit | same in every process | what it does |\n"
                                "|---|---|---|---|---|---|---|---|\n";

// accord-train's --help sections, in order (apps/training_options.hpp's flag_sections).
constexpr const char* sections_in_order[] = {"model",       "data",    "algorithm", "topology", "precision",
                                             "distributed", "elastic", "output"};

// docs/topologies.md's table: a row per declared setting, by topology.
std::string topology_settings_table() {
  std::string table = std::string("| topology") + columns;
  for (const auto& [topology, settings] : declared_topology_settings())
    for (const setting_declaration& s : settings) table += row("`" + topology + "`", "`--" + s.flag + "`", s);
  return table;
}

// docs/training.md's table: a row per declared setting of job_config, by --help section.
std::string job_settings_table() {
  std::string table = std::string("| section") + columns;
  for (const char* group : sections_in_order)
    for (const job_setting& s : declared_job_settings())
      if (s.declared.group == group)
        table += row(group, "`--" + s.declared.flag + "`" + (s.command_line ? "" : " †"), s.declared);
  return table;
}

// Where a setting of accord-train's own is read, as its owner says: "always", "with --model gpt",
// "between processes", "with --elastic".
std::string read_where(const std::string& owner) {
  if (owner == "job") return "always";
  if (owner.starts_with("run ")) return owner.substr(4);
  if (owner.ends_with(" on")) return "with --" + owner.substr(0, owner.size() - 3);
  return "with --" + owner;
}

// docs/training.md's table of accord-train's own settings (apps/training_options.cpp): the model's,
// the data's, the emulation's lists, the place's (between processes) and the output's, with where
// each is read.
std::string own_settings_table() {
  std::vector<setting_declaration> own = declared_training_settings();
  for (const process_setting& s : declared_process_settings()) own.push_back(s.declared);
  own.insert(own.end(), declared_output_settings().begin(), declared_output_settings().end());
  std::string table = "| section | flag | accepts | default | unit | read | what it does |\n"
                      "|---|---|---|---|---|---|---|\n";
  for (const char* group : sections_in_order)
    for (const setting_declaration& s : own)
      if (s.group == group)
        table += "| " + s.group + " | `--" + s.flag + "` | " + cell(accepted(s)) + " | " +
                 cell(default_text(s).value_or("none")) + " | " + s.unit + " | " + read_where(s.owner) + " | " +
                 cell(s.help) + " |\n";
  return table;
}

// docs/observability.md's table: a row per declared field of step_metrics (<accord/metrics_fields.hpp>).
std::string metrics_table() {
  const auto names = [](const std::vector<std::string>& keys) {
    std::string text;
    for (const std::string& key : keys) text += (text.empty() ? "`" : ", `") + key + "`";
    return text.empty() ? std::string("—") : text;
  };
  std::string table =
      "| field | JSON key | CSV columns | what it is | Prometheus (`/metrics`) | status tile | progress line |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const figure_names& f : declared_figures())
    table += "| `" + f.field + "` | " + names(f.json) + " | " + names(f.csv) + " | " + cell(f.help) + " | " +
             (f.prometheus.empty() ? "—" : "`" + f.prometheus + "` " + f.prometheus_type) + " | " +
             (f.tile.empty() ? "—" : f.tile) + " | " + (f.progress.empty() ? "—" : "`" + f.progress + "`") + " |\n";
  return table;
}

// The generated table (of `what`: settings, metrics) of the docs page `page` is `table`; with
// ACCORD_WRITE_DOCS=1 it is written.
void check_docs_table(const std::string& page, const std::string& table, const std::string& what = "settings") {
  const std::string table_start = "<!-- " + what + " table: generated from the declarations by tests/test_settings.cpp -->\n";
  const std::string table_end = "<!-- end of the " + what + " table -->\n";
  const std::string path = std::string(ACCORD_SOURCE_DIR) + "/" + page;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  const auto start = doc.find(table_start), end = doc.find(table_end);
  REQUIRE_MESSAGE(start != std::string::npos, path << " lacks the line " << table_start);
  REQUIRE(end != std::string::npos);
  const std::size_t from = start + table_start.size();
  const std::string current = doc.substr(from, end - from);
  if (const char* write = std::getenv("ACCORD_WRITE_DOCS"); write && std::string(write) == "1" && current != table) {
    doc.replace(from, current.size(), table);
    std::ofstream(path) << doc;
    return;
  }
  CHECK_MESSAGE(current == table, page << "'s " << what << " table differs from the declarations: "
                                           "ACCORD_WRITE_DOCS=1 build/tests/test_settings rewrites it");
}

}  // namespace

TEST_CASE("the docs' settings tables are the declarations'") {
  // First in this file, so that only the built-ins have registered: the tables document
  // accord-train's flags.
  topology_names();
  check_docs_table("docs/topologies.md", topology_settings_table());
  check_docs_table("docs/training.md", job_settings_table());
  check_docs_table("docs/training.md", own_settings_table(), "accord-train's own settings");
}

TEST_CASE("docs/observability.md's table of a step's metrics is the declarations'") {
  check_docs_table("docs/observability.md", metrics_table(), "metrics");
}

TEST_CASE("every declared setting of job_config reads its field and writes it back") {
  job_config config;
  for (const job_setting& s : declared_job_settings()) {
    INFO(s.declared.name);
    CHECK(s.get);
    CHECK(s.declared.owner != "");
    CHECK(s.declared.group != "");
    if (s.command_line) {
      REQUIRE(s.set);
      s.set(config, s.get(job_config{}));  // the default goes back as it came
    }
  }
  CHECK(describe(config) == describe(job_config{}));
  // A float setting keeps the float's shortest text, a default as a flag shows it.
  for (const job_setting& s : declared_job_settings())
    if (s.declared.name == "min_lr_ratio") CHECK(default_text(s.declared) == "0.1");
}

TEST_CASE("a setting's text is parsed as declared, a refusal naming the flag and what it takes") {
  CHECK(std::get<std::int64_t>(parse_setting(steps_setting(), "4")) == 4);
  CHECK(refusal(steps_setting(), "0") == "--local-steps: '0' is not a whole number in 1..1000");
  CHECK(refusal(steps_setting(), "4.5") == "--local-steps: '4.5' is not a whole number in 1..1000");
  CHECK(refusal(steps_setting(), "") == "--local-steps: '' is not a whole number in 1..1000");
  const setting_declaration rate{.name = "outer_learning_rate", .flag = "outer-lr", .kind = setting_kind::number,
                                 .fallback = 0.7, .low = 0, .high = 10, .above_low = true};
  CHECK(std::get<double>(parse_setting(rate, "0.5")) == 0.5);
  CHECK(refusal(rate, "0") == "--outer-lr: '0' is not a number in (0, 10]");
  CHECK(refusal(rate, "nan") == "--outer-lr: 'nan' is not a number in (0, 10]");
  const setting_declaration lockstep{.name = "lockstep", .flag = "lockstep", .kind = setting_kind::boolean,
                                     .fallback = false};
  CHECK(std::get<bool>(parse_setting(lockstep, "on")));
  CHECK(refusal(lockstep, "maybe") == "--lockstep: 'maybe' is not on or off");
  const setting_declaration graph{.name = "graph", .flag = "graph", .kind = setting_kind::text,
                                  .fallback = std::string("ring"), .check = [](const setting_value& v) {
                                    if (std::get<std::string>(v) != "ring") throw std::invalid_argument("--graph: not ring");
                                  }};
  CHECK(refusal(graph, "star") == "--graph: not ring");
  // A text of choices takes only those, as they are when asked (the registered topologies).
  const setting_declaration shape{.name = "shape", .flag = "shape", .kind = setting_kind::text,
                                  .fallback = std::string("ring"),
                                  .choices = [] { return std::vector<std::string>{"complete", "ring"}; }};
  CHECK(std::get<std::string>(parse_setting(shape, "complete")) == "complete");
  CHECK(refusal(shape, "star") == "--shape: 'star' (expected complete|ring)");
  CHECK(accepted(shape) == "complete | ring");
  // A whole number's range reads up to the largest int64 (a seed's).
  const setting_declaration seed{.name = "seed", .flag = "seed", .kind = setting_kind::whole,
                                 .fallback = std::int64_t{1}, .low = 0, .high = 0x1p63};
  CHECK(accepted(seed) == "a whole number in 0..9223372036854775807");
  CHECK(std::get<std::int64_t>(parse_setting(seed, "9223372036854775807")) == 9223372036854775807);
  CHECK(refusal(seed, "9223372036854775808") == "--seed: '9223372036854775808' is not a whole number in 0..9223372036854775807");
  // Defaults as a flag shows them; one outside the range (or an empty text) means unset.
  CHECK(default_text(steps_setting()) == "1");
  CHECK(default_text(rate) == "0.7");
  CHECK(default_text(lockstep) == "off");
  setting_declaration unset = steps_setting();
  unset.fallback = std::int64_t{0};
  CHECK_FALSE(default_text(unset).has_value());
}

TEST_CASE("a job's topology settings read their declared defaults, and an undeclared one is refused") {
  topology_names();  // the built-ins have declared theirs
  topology_options options;
  CHECK(options.whole("local_steps") == 1);
  CHECK(options.number("outer_learning_rate") == 0.5);
  CHECK(options.text("gossip_graph") == "ring");
  CHECK_FALSE(options.boolean("gossip_lockstep"));
  options.set("local_steps", 4).set("outer_learning_rate", 2).set("gossip_graph", "complete");
  CHECK(options.whole("local_steps") == 4);
  CHECK(options.number("outer_learning_rate") == 2.0);  // a whole number is a number too
  CHECK(options.text("gossip_graph") == "complete");
  CHECK_NOTHROW(check_topology_options(options));
  options.set("nope", 1);
  CHECK_THROWS_WITH_AS(check_topology_options(options),
                       doctest::Contains("topology_settings.nope: no registered topology declares it"),
                       std::invalid_argument);
  topology_options wrong_kind;
  wrong_kind.set("local_steps", 2.5);
  CHECK_THROWS_WITH_AS(check_topology_options(wrong_kind), "topology_settings.local_steps = 2.5 is not a whole number",
                       std::invalid_argument);
}

TEST_CASE("a user's topology declares its own settings when it is registered") {
  register_topology(
      "declared-settings-test",
      [](const topology_job& job) -> std::unique_ptr<topology> {
        throw std::invalid_argument("period " + std::to_string(job.options.whole("test_period")));
      },
      {{.name = "test_period", .flag = "test-period", .kind = setting_kind::whole, .fallback = std::int64_t{3},
        .low = 1, .high = 100, .help = "steps between averages"}});
  const auto declared = declared_topology_settings();
  REQUIRE(declared.count("declared-settings-test") == 1);
  CHECK(declared.at("declared-settings-test").front().owner == "topology declared-settings-test");
  CHECK(declared.at("declared-settings-test").front().group == "topology");
  topology_job job;
  CHECK_THROWS_WITH(make_topology("declared-settings-test", job), "period 3");  // its default
  job.options.set("test_period", 7);
  CHECK_NOTHROW(check_topology_options(job.options));
  CHECK_THROWS_WITH(make_topology("declared-settings-test", job), "period 7");
}
