#include "observe/step_figures.hpp"

#include "observe/thread_cpu.hpp"

#include <accord/metrics_fields.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <type_traits>
#include <utility>

namespace accord {
namespace {

template <class T>
concept number = std::is_arithmetic_v<T>;

using named_cells = std::vector<std::pair<std::string, std::string>>;  // CSV: column, cell
using samples = std::vector<std::pair<std::string, double>>;           // Prometheus: labels, value

// `pattern` with the part's name for "{}".
std::string part_key(std::string_view pattern, std::string_view part) {
  std::string key(pattern);
  const auto at = key.find("{}");
  return at == std::string::npos ? key : key.replace(at, 2, part);
}

bool absent(const metric_shown& shown, double value) { return shown.absent_below_zero && value < 0; }

std::string dumped(const nlohmann::json& value) { return value.dump(); }

// The metrics file's JSON, by the field's type.
template <number T>
void put_json(nlohmann::json& line, const metric_shown& shown, T value) {
  if (!absent(shown, static_cast<double>(value))) line[std::string(shown.key)] = value;
}

void put_json(nlohmann::json& line, const metric_shown& shown, const thread_cpu& cpu) {
  nlohmann::json& parts = line[std::string(shown.key)];
  for_each_field<thread_cpu>([&](const auto& f) { parts[std::string(f.name)] = cpu.*f.member; });
}

void put_json(nlohmann::json& line, const metric_shown& shown, const std::vector<worker_seconds>& workers) {
  for_each_field<worker_seconds>([&](const auto& f) {
    nlohmann::json by_rank = nlohmann::json::array();
    for (const worker_seconds& w : workers) by_rank.push_back(w.*f.member);
    line[part_key(shown.key, f.name)] = std::move(by_rank);
  });
}

void put_json(nlohmann::json& line, const metric_shown& shown, const std::vector<std::uint64_t>& by_index) {
  if (!by_index.empty()) line[std::string(shown.key)] = by_index;
}

void put_json(nlohmann::json& line, const metric_shown& shown, const std::vector<edge_traffic>& edges) {
  if (edges.empty()) return;
  nlohmann::json rows = nlohmann::json::array();
  for (const edge_traffic& edge : edges) {
    nlohmann::json row = nlohmann::json::array();
    for_each_field<edge_traffic>([&](const auto& f) { row.push_back(edge.*f.member); });
    rows.push_back(std::move(row));
  }
  line[std::string(shown.key)] = std::move(rows);
}

// The metrics file's CSV cells, by the field's type; their columns depend on the type only. A
// number has the column of its key; counts by index have none (a row has a fixed width).
template <number T>
void put_csv(named_cells& cells, const metric_shown& shown, T value) {
  cells.emplace_back(shown.key, absent(shown, static_cast<double>(value)) ? "" : dumped(value));
}

void put_csv(named_cells& cells, const metric_shown& shown, const thread_cpu& cpu) {
  for_each_field<thread_cpu>([&](const auto& f) { cells.emplace_back(part_key(shown.csv, f.name), dumped(cpu.*f.member)); });
}

// Each part averaged over the workers.
void put_csv(named_cells& cells, const metric_shown& shown, const std::vector<worker_seconds>& workers) {
  for_each_field<worker_seconds>([&](const auto& f) {
    double sum = 0;
    for (const worker_seconds& w : workers) sum += w.*f.member;
    cells.emplace_back(part_key(shown.csv, f.name), dumped(workers.empty() ? 0.0 : sum / static_cast<double>(workers.size())));
  });
}

void put_csv(named_cells&, const metric_shown&, const std::vector<std::uint64_t>&) {}

// The most and the mean bytes over the edges that carried any in the step (none: empty cells).
void put_csv(named_cells& cells, const metric_shown& shown, const std::vector<edge_traffic>& edges) {
  std::string most, mean;
  if (!edges.empty()) {
    std::uint64_t largest = 0;
    double total = 0;
    for (const edge_traffic& e : edges) {
      largest = std::max(largest, e.bytes);
      total += static_cast<double>(e.bytes);
    }
    most = dumped(largest);
    mean = dumped(total / static_cast<double>(edges.size()));
  }
  cells.emplace_back(part_key(shown.csv, "max"), most);
  cells.emplace_back(part_key(shown.csv, "mean"), mean);
}

named_cells csv_cells(const step_metrics& m) {
  named_cells cells;
  for_each_field<step_metrics>([&](const auto& f) { put_csv(cells, f.shown, m.*f.member); });
  return cells;
}

// Prometheus: a number is one sample (gauge: the latest, counter: the latest or the sum); a field
// of parts sums each part into a labelled sample (what `labels` names, in the samples' order).
template <number T>
std::string labels(const metric_shown&, const T*) { return ""; }
std::string labels(const metric_shown& shown, const thread_cpu*) { return "{" + std::string(shown.label) + "}"; }
std::string labels(const metric_shown& shown, const std::vector<worker_seconds>*) {
  return "{rank," + std::string(shown.label) + "}";
}
std::string labels(const metric_shown& shown, const std::vector<std::uint64_t>*) {
  return "{" + std::string(shown.label) + "}";
}
std::string labels(const metric_shown&, const std::vector<edge_traffic>*) { return ""; }

std::string label(std::string_view name, const auto& value) {
  std::ostringstream text;
  text << name << "=\"" << value << '"';
  return text.str();
}

template <number T>
samples samples_of(const metric_shown& shown, const T* latest, T total) {
  switch (shown.kind) {
    case prometheus_kind::summed_counter: return {{"", static_cast<double>(total)}};
    case prometheus_kind::latest_counter: return {{"", latest ? static_cast<double>(*latest) : 0.0}};
    case prometheus_kind::gauge:
      if (latest && !absent(shown, static_cast<double>(*latest))) return {{"", static_cast<double>(*latest)}};
      return {};
    case prometheus_kind::none: return {};
  }
  return {};
}

samples samples_of(const metric_shown& shown, const thread_cpu*, const thread_cpu& total) {
  samples out;
  for_each_field<thread_cpu>([&](const auto& f) { out.emplace_back("{" + label(shown.label, f.name) + "}", total.*f.member); });
  return out;
}

samples samples_of(const metric_shown& shown, const std::vector<worker_seconds>*, const std::vector<worker_seconds>& total) {
  samples out;
  for (std::size_t rank = 0; rank < total.size(); ++rank)
    for_each_field<worker_seconds>([&](const auto& f) {
      out.emplace_back("{" + label("rank", rank) + "," + label(shown.label, f.name) + "}", total[rank].*f.member);
    });
  return out;
}

samples samples_of(const metric_shown& shown, const std::vector<std::uint64_t>*, const std::vector<std::uint64_t>& total) {
  samples out;
  for (std::size_t k = 0; k < total.size(); ++k)
    out.emplace_back("{" + label(shown.label, k) + "}", static_cast<double>(total[k]));
  return out;
}

samples samples_of(const metric_shown&, const std::vector<edge_traffic>*, const std::vector<edge_traffic>&) { return {}; }

// Whether /metrics can sum a field of type T over the steps.
template <class T>
struct summable : std::is_arithmetic<T> {};
template <>
struct summable<thread_cpu> : std::true_type {};
template <>
struct summable<worker_seconds> : std::true_type {};
template <class T>
struct summable<std::vector<T>> : summable<T> {};

template <number T>
void add_to(T& sum, T value) {
  sum += value;
}
void add_to(thread_cpu& sum, const thread_cpu& value) { sum += value; }
void add_to(worker_seconds& sum, const worker_seconds& value) {
  for_each_field<worker_seconds>([&](const auto& f) { sum.*f.member += value.*f.member; });
}
template <class T>
void add_to(std::vector<T>& sum, const std::vector<T>& value) {
  if (sum.size() < value.size()) sum.resize(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) add_to(sum[i], value[i]);
}

constexpr const char* format_names[] = {"plain", "fixed", "significant", "percent", "thousands", "bytes"};  // tile_format's

// The metrics file's keys of a field of type T (a field of parts: one per part, or its object's).
template <class T>
std::vector<std::string> json_keys(const metric_shown& shown, const T*) { return {std::string(shown.key)}; }
std::vector<std::string> json_keys(const metric_shown& shown, const std::vector<worker_seconds>*) {
  std::vector<std::string> keys;
  for_each_field<worker_seconds>([&](const auto& f) { keys.push_back(part_key(shown.key, f.name)); });
  return keys;
}

}  // namespace

nlohmann::json step_json(const step_metrics& m) {
  nlohmann::json line = nlohmann::json::object();
  for_each_field<step_metrics>([&](const auto& f) { put_json(line, f.shown, m.*f.member); });
  return line;
}

std::string csv_header() {
  std::string header;
  for (const auto& [column, cell] : csv_cells(step_metrics{})) header += (header.empty() ? "" : ",") + column;
  return header;
}

std::string csv_row(const step_metrics& m) {
  std::string row;
  bool first = true;
  for (const auto& [column, cell] : csv_cells(m)) {
    row += (first ? "" : ",") + cell;
    first = false;
  }
  return row;
}

step_metrics with_latest_measured(const std::optional<step_metrics>& before, const step_metrics& m) {
  step_metrics shown = m;
  for_each_field<step_metrics>([&](const auto& f) {
    using value_type = typename std::remove_cvref_t<decltype(f)>::value_type;
    if constexpr (std::is_arithmetic_v<value_type>)
      if (before && absent(f.shown, static_cast<double>(m.*f.member))) shown.*f.member = *before.*f.member;
  });
  return shown;
}

void step_figures::add(const step_metrics& m) {
  for_each_field<step_metrics>([&](const auto& f) {
    using value_type = typename std::remove_cvref_t<decltype(f)>::value_type;
    if constexpr (summable<value_type>::value)
      if (f.shown.kind == prometheus_kind::summed_counter) add_to(totals_.*f.member, m.*f.member);
  });
  latest_ = with_latest_measured(latest_, m);
}

std::string step_figures::prometheus() const {
  std::ostringstream text;
  for_each_field<step_metrics>([&](const auto& f) {
    if (f.shown.prometheus.empty()) return;
    const auto* latest = latest_ ? &(*latest_.*f.member) : nullptr;
    const samples values = samples_of(f.shown, latest, totals_.*f.member);
    if (values.empty()) return;
    const std::string name = "accord_" + std::string(f.shown.prometheus);
    text << "# HELP " << name << ' ' << f.shown.prometheus_help << "\n# TYPE " << name << ' '
         << (f.shown.kind == prometheus_kind::gauge ? "gauge" : "counter") << '\n';
    for (const auto& [sample_labels, value] : values) {
      char number[64];
      std::snprintf(number, sizeof number, "%.10g", value * f.shown.scale);
      text << name << sample_labels << ' ' << number << '\n';
    }
  });
  return text.str();
}

nlohmann::json status_page_figures() {
  nlohmann::json tiles = nlohmann::json::array(), worker_seconds_keys = nlohmann::json::array();
  for_each_field<step_metrics>([&](const auto& f) {
    using value_type = typename std::remove_cvref_t<decltype(f)>::value_type;
    if constexpr (std::is_same_v<value_type, std::vector<worker_seconds>>)
      for_each_field<worker_seconds>([&](const auto& part) {
        worker_seconds_keys.push_back({std::string(part.name), part_key(f.shown.key, part.name)});
      });
    if (f.shown.tile.empty()) return;
    tiles.push_back({{"label", std::string(f.shown.tile)},
                     {"key", std::string(f.shown.key)},
                     {"format", format_names[static_cast<int>(f.shown.format)]},
                     {"digits", f.shown.digits},
                     {"suffix", std::string(f.shown.suffix)}});
  });
  return {{"tiles", std::move(tiles)}, {"worker_seconds", std::move(worker_seconds_keys)}};
}

std::vector<figure_names> declared_figures() {
  std::vector<figure_names> figures;
  for_each_field<step_metrics>([&](const auto& f) {
    using value_type = typename std::remove_cvref_t<decltype(f)>::value_type;
    figure_names names;
    names.field = f.name;
    names.help = f.shown.help;
    names.json = json_keys(f.shown, static_cast<const value_type*>(nullptr));
    names.tile = f.shown.tile;
    names.progress = f.shown.progress.text;
    named_cells cells;
    put_csv(cells, f.shown, value_type{});
    for (const auto& [column, cell] : cells) names.csv.push_back(column);
    if (!f.shown.prometheus.empty()) {
      names.prometheus = "accord_" + std::string(f.shown.prometheus) + labels(f.shown, static_cast<const value_type*>(nullptr));
      names.prometheus_type = f.shown.kind == prometheus_kind::gauge ? "gauge" : "counter";
    }
    figures.push_back(std::move(names));
  });
  return figures;
}

}  // namespace accord
