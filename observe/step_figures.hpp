#pragma once
// A step's figures where they show, each written from its declaration in
// <accord/metrics_fields.hpp> (fields_of<step_metrics>): the metrics file's JSON line and CSV
// row, /status.json's "last", the Prometheus metrics of /metrics, the status page's tiles and the
// names docs/observability.md's table lists (the progress line's columns are observe/progress_line's). A field's type picks its writer: a number; a
// thread_cpu (parts by role); per-worker times (parts by rank); counts by index; edges.
#include <accord/metrics.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace accord {

// The step as one JSON object: the metrics file's line, /status.json's "last".
nlohmann::json step_json(const step_metrics& m);
// The metrics file's CSV header and the step's row (no newline).
std::string csv_header();
std::string csv_row(const step_metrics& m);

// `m`, each optional figure not measured there holding `before`'s (the latest one measured).
step_metrics with_latest_measured(const std::optional<step_metrics>& before, const step_metrics& m);

// The steps a process saw, as /metrics and the status page show them.
class step_figures {
public:
  void add(const step_metrics& m);
  // The last step, an optional figure not measured there holding the latest one measured.
  const std::optional<step_metrics>& latest() const { return latest_; }
  // Each field that /metrics sums, summed over the steps (the rest as step_metrics{} has them).
  const step_metrics& totals() const { return totals_; }
  // The fields' Prometheus metrics, each with its # HELP and # TYPE lines.
  std::string prometheus() const;

private:
  std::optional<step_metrics> latest_;
  step_metrics totals_;
};

// What the status page shows of a step: {"tiles": its tiles, in declaration order, each
// {"label", "key", "format", "digits", "suffix"}; "worker_seconds": [[part, its key], ...], the
// parts of a worker's time ("compute", "worker_compute_seconds")}.
nlohmann::json status_page_figures();

// Where a declared field shows, by name: for docs/observability.md's table.
struct figure_names {
  std::string field;                    // step_metrics' member
  std::string help;
  std::vector<std::string> json, csv;   // the metrics file's keys and columns
  std::string prometheus;               // "accord_cpu_seconds_total{role}" (empty: none)
  std::string prometheus_type;          // gauge | counter
  std::string tile;                     // the status page's tile (empty: none)
  std::string progress;                 // its progress line's column, "{}" for the value (empty: none)
};
std::vector<figure_names> declared_figures();

}  // namespace accord
