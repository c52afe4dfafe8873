#include <accord/blas_threads.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace accord {

namespace {

// A variable's positive integer value; OpenMP's nested list "4,2" gives its first level.
int positive_value(const char* name, const char* text) {
  const std::string value = text;
  const std::string first = value.substr(0, value.find(','));
  int n = 0;
  const auto [end, error] = std::from_chars(first.data(), first.data() + first.size(), n);
  if (error != std::errc{} || end != first.data() + first.size() || n < 1)
    throw std::invalid_argument(std::string(name) + "='" + value + "' is not a positive integer");
  return n;
}

}  // namespace

blas_threads_choice choose_blas_threads(int requested, int workers_here, int cores,
                                        const std::function<const char*(const char*)>& environment,
                                        int job_processes_here) {
  if (requested > 0) return {requested, "--blas-threads"};
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char* value = environment(name); value && *value) return {positive_value(name, value), name};
  // The launcher's LOCAL_WORLD_SIZE wins over the job's count by host address: ranks in network
  // namespaces of one machine have addresses of their own, yet share its cores.
  int processes = 1;
  std::string source = "(LOCAL_WORLD_SIZE)";
  if (const char* value = environment("LOCAL_WORLD_SIZE"); value && *value) {
    processes = positive_value("LOCAL_WORLD_SIZE", value);
  } else if (job_processes_here > 0) {
    processes = job_processes_here;
    source = "of the job";
  }
  const int workers = std::max(1, workers_here);
  std::string reason = std::to_string(cores) + " cores / ";
  if (processes > 1) reason += std::to_string(processes) + " processes here " + source + " / ";
  reason += std::to_string(workers) + (workers > 1 ? " workers" : " worker");
  const int sharing = workers * processes;
  return {std::max(1, cores / sharing), reason};
}

blas_threads_choice choose_blas_threads(int requested, int workers_here, int job_processes_here) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return choose_blas_threads(requested, workers_here, cores, [](const char* name) { return std::getenv(name); },
                             job_processes_here);
}

}  // namespace accord
