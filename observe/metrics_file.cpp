#include "observe/metrics_file.hpp"

#include "observe/step_figures.hpp"

#include <filesystem>
#include <stdexcept>

namespace accord {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

metrics_file::metrics_file(const std::string& path, bool append) : csv_(ends_with(path, ".csv")) {
  std::error_code error;
  const bool continues = append && std::filesystem::file_size(path, error) > 0 && !error;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write metrics file " + path);
  if (csv_ && !continues) out_ << csv_header() << '\n';
}

void metrics_file::write_event(const std::string& json_object) {
  if (!csv_) out_ << json_object << '\n';
}

void metrics_file::write(const step_metrics& m) {
  out_ << (csv_ ? csv_row(m) : step_json(m).dump()) << '\n' << std::flush;
}

}  // namespace accord
