#include "observe/metrics_file.hpp"

#include "observe/thread_cpu.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace accord {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr const char* csv_header =
    "step,train_loss,eval_loss,seconds,items,items_per_second,bits_per_parameter,hidden_fraction,micro_batches,"
    "workers,epoch,learning_rate,gradient_norm,vote_agreement,compute_seconds,communication_seconds,wait_seconds,"
    "bytes,consensus_distance,edge_bytes_max,edge_bytes_mean,cpu_compute_seconds,cpu_communicator_seconds,"
    "cpu_evaluator_seconds,cpu_actors_seconds,cpu_transport_seconds,cpu_other_seconds";

worker_seconds mean_of(const std::vector<worker_seconds>& workers) {
  worker_seconds mean;
  for (const worker_seconds& w : workers) {
    mean.compute += w.compute / static_cast<double>(workers.size());
    mean.communication += w.communication / static_cast<double>(workers.size());
    mean.wait += w.wait / static_cast<double>(workers.size());
  }
  return mean;
}

// The most and the mean bytes over the edges that carried any in the step (nothing: none).
std::pair<std::string, std::string> edge_summary(const std::vector<edge_traffic>& edges) {
  if (edges.empty()) return {};
  std::uint64_t most = 0;
  double total = 0;
  for (const edge_traffic& e : edges) {
    most = std::max(most, e.bytes);
    total += static_cast<double>(e.bytes);
  }
  return {std::to_string(most), nlohmann::json(total / static_cast<double>(edges.size())).dump()};
}

}  // namespace

metrics_file::metrics_file(const std::string& path, bool append) : csv_(ends_with(path, ".csv")) {
  std::error_code error;
  const bool continues = append && std::filesystem::file_size(path, error) > 0 && !error;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write metrics file " + path);
  if (csv_ && !continues) out_ << csv_header << '\n';
}

void metrics_file::write_event(const std::string& json_object) {
  if (!csv_) out_ << json_object << '\n';
}

void metrics_file::write(const step_metrics& m) {
  if (csv_) {
    const worker_seconds mean = mean_of(m.per_worker);
    const auto optional = [](double value) { return value >= 0 ? nlohmann::json(value).dump() : std::string(); };
    const auto [edge_most, edge_mean] = edge_summary(m.edge_bytes);
    out_ << m.step << ',' << nlohmann::json(m.train_loss).dump() << ',' << optional(m.eval_loss) << ','
         << nlohmann::json(m.seconds).dump() << ',' << m.items << ',' << nlohmann::json(m.items_per_second).dump()
         << ',' << m.bits_per_parameter << ',' << m.hidden_fraction << ',' << m.micro_batches << ',' << m.workers
         << ',' << m.epoch << ',' << m.learning_rate << ',' << m.gradient_norm << ',' << optional(m.vote_agreement)
         << ',' << mean.compute << ',' << mean.communication << ',' << mean.wait << ',' << m.bytes_sent << ','
         << optional(m.consensus_distance) << ',' << edge_most << ',' << edge_mean;
    for (const auto& [role, seconds] : by_role(m.cpu)) out_ << ',' << seconds;
    out_ << '\n' << std::flush;
    return;
  }
  nlohmann::json line = {{"step", m.step},
                         {"train_loss", m.train_loss},
                         {"seconds", m.seconds},
                         {"items", m.items},
                         {"items_per_second", m.items_per_second},
                         {"bits_per_parameter", m.bits_per_parameter},
                         {"hidden_fraction", m.hidden_fraction},
                         {"micro_batches", m.micro_batches},
                         {"workers", m.workers},
                         {"epoch", m.epoch},
                         {"learning_rate", m.learning_rate},
                         {"gradient_norm", m.gradient_norm},
                         {"bytes", m.bytes_sent}};
  nlohmann::json& cpu = line["cpu_seconds"];  // the step's CPU seconds by thread role, all processes
  for (const auto& [role, seconds] : by_role(m.cpu)) cpu[role] = seconds;
  if (m.eval_loss >= 0) line["eval_loss"] = m.eval_loss;
  if (m.vote_agreement >= 0) line["vote_agreement"] = m.vote_agreement;
  if (m.consensus_distance >= 0) line["consensus_distance"] = m.consensus_distance;
  if (!m.staleness.empty()) line["staleness"] = m.staleness;  // applied gradients k updates stale, by k
  if (!m.worker_gradients.empty()) line["worker_gradients"] = m.worker_gradients;  // by worker
  if (!m.edge_bytes.empty()) {  // [from, to, bytes] of each edge that carried any
    nlohmann::json edges = nlohmann::json::array();
    for (const edge_traffic& e : m.edge_bytes) edges.push_back({e.from, e.to, e.bytes});
    line["edge_bytes"] = edges;
  }
  nlohmann::json compute = nlohmann::json::array(), communication = nlohmann::json::array(),
                 wait = nlohmann::json::array();
  for (const worker_seconds& w : m.per_worker) {
    compute.push_back(w.compute);
    communication.push_back(w.communication);
    wait.push_back(w.wait);
  }
  line["worker_compute_seconds"] = compute;
  line["worker_communication_seconds"] = communication;
  line["worker_wait_seconds"] = wait;
  out_ << line.dump() << '\n' << std::flush;
}

}  // namespace accord
