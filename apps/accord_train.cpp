// accord-train: data-parallel training with actors in one process. With no flags it trains the
// byte-level GPT on the fortunes corpus with ACCO on 4 workers over an emulated link.
#include "observe/progress_line.hpp"
#include "observe/status_server.hpp"
#include "apps/training_options.hpp"
#include "gpu/device.hpp"
#include <accord/blas_threads.hpp>
#include <accord/config_fields.hpp>
#include <accord/metrics_fields.hpp>

#include <atomic>
#include <cmath>
#include <optional>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

namespace po = boost::program_options;
using namespace accord;

namespace {

// accord-train's defaults where they differ from job_config{}'s: a run that shows ACCO on a slow
// emulated link in a minute.
job_config default_job() {
  job_config job;
  job.algorithm = "acco";
  job.workers = 4;
  job.steps = 300;
  job.micro_batch = 8;
  job.link = "200mbit,100us";
  return job;
}

std::string format_megabytes(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

// Raw little-endian float32, parameter_count() values in the model's flat layout.
void save_parameters(const std::string& path, const std::vector<float>& parameters) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(parameters.data()),
            static_cast<std::streamsize>(parameters.size() * sizeof(float)));
  if (!out) throw std::runtime_error(path + ": cannot write the parameters");
}

// Set by SIGTERM in an elastic worker: it leaves at the next step boundary instead of dying.
std::atomic<bool> leave_requested{false};
// Set by SIGTERM or SIGINT in a job that is not elastic (Slurm preemption, Ctrl-C): every
// worker stops after the same step and rank 0 writes the checkpoint; a second signal kills.
std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};

void request_stop(int signal) {
  if (stop_requested.exchange(true)) std::_Exit(128 + signal);
  stop_signal = signal;
}

}  // namespace

int main(int argc, char** argv) {
  flag_sections sections;
  add_training_options(sections, default_job());
  add_output_options(sections);
  add_process_options(sections);
  po::options_description options("accord-train options");
  options.add_options()("help,h", "show this help");
  sections.add_to(options);
  try {
    const auto parsed = parse_flags(argc, argv, options,
                                   "usage: accord-train [options]\n"
                                   "Trains a model data-parallel with CAF actors: per worker a compute, an\n"
                                   "accumulator and a communicator actor. In one process the workers talk\n"
                                   "over an emulated link (--link); started with RANK, WORLD_SIZE,\n"
                                   "MASTER_ADDR and MASTER_PORT set (accord-launch, torchrun-style, or\n"
                                   "Slurm's srun), each process is one worker and tensors travel over UCX.\n"
                                   "With --elastic the job survives workers that die or leave and admits\n"
                                   "new ones started with --join HOST:PORT (rank 0's MASTER_ADDR:MASTER_PORT).\n"
                                   "SIGTERM or SIGINT stops a job that is not elastic after the current step,\n"
                                   "writes --checkpoint and exits 128+signal (143, 130); a second one kills.");
    if (!parsed) return 0;  // --help
    const po::variables_map& flags = *parsed;
    // RANK, WORLD_SIZE, ... (or Slurm's), ACCORD_ELASTIC, and --join or ACCORD_JOIN as
    // accord-launch --join sets it, then what the flags add; nullopt: a job in this process.
    std::optional<process_group> place =
        process_group_from_environment(flags.count("join") ? flags["join"].as<std::string>() : std::string());
    if (place) read_process_options(flags, *place);
    const bool joining = place && place->join;
    const bool elastic = place && place->elastic;  // --elastic, ACCORD_ELASTIC=1 or a joiner
    // One process per GPU: its model (and so its resident tensors) on GPU LOCAL_RANK, where
    // its NCCL rank is too; the CUDA device current now is the one the model is made on.
    const std::string device = flags["device"].as<std::string>();
    if (const std::optional<int> gpu = cuda_index(device);
        place && gpu && place->transport == "nccl" && *gpu != place->local_rank)
      throw std::invalid_argument("--device " + device + ": with --transport nccl each process computes on GPU "
                                  "LOCAL_RANK (" + std::to_string(place->local_rank) + "), where its NCCL rank is: "
                                  "give --device cuda");
    if (place && device != "cpu" && place->local_rank < cuda_device_count()) use_cuda_device(place->local_rank);
    // Between processes each process runs one worker; in one process, all of them.
    training_setup setup = make_training_setup(flags, place ? 1 : 0);
    warn_ignored_training_flags(flags, "accord-train", job_place{.between_processes = place.has_value(), .elastic = elastic});
    // accord-launch --trace FILE: every rank writes its part beside FILE, the launcher merges them.
    if (const char* trace = std::getenv("ACCORD_TRACE"); trace && *trace && !flags.count("trace"))
      setup.job.trace_path = trace;
    if (!joining && place) {
      if (flags["workers"].defaulted())
        setup.job.workers = place->world_size;
      else if (setup.job.workers != place->world_size)
        throw std::invalid_argument("--workers " + std::to_string(setup.job.workers) + " disagrees with WORLD_SIZE=" +
                                    std::to_string(place->world_size));
    }
    const bool leader = !place || place->rank == 0;
    // An elastic worker other than rank 0 leaves gracefully on SIGTERM (a second one kills it).
    if (place && elastic && !leader)
      std::signal(SIGTERM, [](int) {
        if (leave_requested.exchange(true)) std::_Exit(128 + SIGTERM);
      });
    if (!(place && elastic)) {
      std::signal(SIGTERM, request_stop);
      std::signal(SIGINT, request_stop);
      setup.job.stop_requested = &stop_requested;
    }
    if (place) {  // what this process adds to its place
      place->leave_requested = &leave_requested;
      // The coordinator's process records the job's; in an elastic job any may come to be it.
      if (!elastic && place->rank != 0) setup.job.membership_log.clear();
      // accord-launch --replay-membership names the log for every worker, its joiners included.
      if (flags.count("replay-membership"))
        place->membership_replay = flags["replay-membership"].as<std::string>();
      else if (const char* log = std::getenv("ACCORD_REPLAY_MEMBERSHIP"); log && *log)
        place->membership_replay = log;
    }
    if (flags["show-config"].as<bool>()) {
      std::printf("%s%s", describe(setup.job).c_str(), place ? describe(*place, "group.").c_str() : "");
      return 0;
    }
    // In an elastic job any process may come to host the coordinator (a failover), and only the
    // coordinator's process hears of the steps: each is ready to report them.
    const bool may_coordinate = leader || (place && elastic);
    const std::uint64_t log_interval = may_coordinate ? static_cast<std::uint64_t>(whole_flag(flags, "log-interval")) : 0;
    const job_config& job = setup.job;
    const bool language_model = flags["model"].as<std::string>() == "gpt";
    const blas_threads_choice blas = choose_blas_threads(job.blas_threads, place ? 1 : job.workers);
    if (leader) {
      std::printf("accord-train: %s, %d workers, %s, %zu parameters, BLAS %d thread%s per worker (%s)\n"
                  "  data: %s\n  link: %s, device: %s\n",
                  job.algorithm.c_str(), job.workers, setup.net->signature().c_str(), setup.net->parameter_count(),
                  blas.threads, blas.threads == 1 ? "" : "s", blas.reason.c_str(),
                  setup.data_description.c_str(),
                  place ? ("UCX between processes, master " + place->master_addr + ":" +
                           std::to_string(place->master_port) + (elastic ? ", elastic" : "")).c_str()
                        : job.link.c_str(),
                  setup.device_description.c_str());
      std::fflush(stdout);
    }
    std::unique_ptr<status_server> status;
    // The job's page, where the coordinator is: from the start on rank 0, from the first step it
    // reports in a process that took over (on --status-port, or any free port while a hung
    // coordinator still holds it there).
    auto serve_status = [&] {
      const std::string description = job.algorithm + ", " + std::to_string(job.workers) + " workers, " +
                                      setup.net->signature() + ", " + setup.data_description;
      try {
        status = std::make_unique<status_server>(static_cast<int>(whole_flag(flags, "status-port")), description, job.steps);
      } catch (const std::exception&) {
        if (leader) throw;
        status = std::make_unique<status_server>(0, description, job.steps);
      }
      std::printf("status page: http://%s:%d/ (Prometheus: /metrics)\n", place ? place->host.c_str() : "127.0.0.1",
                  status->port());
      std::fflush(stdout);
    };
    if (leader && flags.count("status-port")) {
      serve_status();
    } else if (flags.count("status-port") && !may_coordinate) {
      warn_ignored(flags, "accord-train", {{"status-port", "on a rank other than 0 (rank 0 serves the job's page)"}});
    }
    int last_workers = job.workers;
    bool resumed_reported = false;
    progress_log lines(job.steps, log_interval, language_model ? "tok" : "img");
    auto progress = [&](const step_metrics& m) {
          if (!status && flags.count("status-port")) serve_status();
          // Between processes the membership actor's own lines tell of each change.
          if (status) status->on_step(m);
          if (m.workers != last_workers && !place) {
            char line[128];
            std::snprintf(line, sizeof line, "membership: %d -> %d workers from step %llu", last_workers, m.workers,
                          static_cast<unsigned long long>(m.step));
            if (log_interval) std::printf("%s\n", line);
            if (status) status->on_event(line);
            last_workers = m.workers;
          }
          if (!job.resume_path.empty() && !resumed_reported && log_interval) {
            std::printf("resumed from step %llu (%s)\n", static_cast<unsigned long long>(m.step - 1),
                        job.resume_path.c_str());
            resumed_reported = true;
          }
          if (const std::string line = lines.on_step(m); !line.empty()) {
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
          }
        };
    job_result result;
    if (place) {
      process_group group = *place;
      group.on_event = [&status](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        if (status) status->on_event(line);
      };
      result = run_job_process(*setup.net, setup.train, setup.eval, job, group, progress);
    } else {
      result = run_job(*setup.net, setup.train, setup.eval, job, progress);
    }
    // Stopped by a signal (here or, between processes, in another worker) before the last step.
    // Between processes, the process hosting the coordinator at the end speaks for the job.
    const bool speaks = !place || result.coordinated;
    const bool stopped = stop_requested || (speaks && !result.steps.empty() && result.steps.back().step < job.steps);
    if (stopped) {
      const int status = 128 + (stop_signal ? stop_signal.load() : SIGTERM);
      if (!speaks) return status;
      const auto step = static_cast<unsigned long long>(result.steps.empty() ? 0 : result.steps.back().step);
      if (job.checkpoint_path.empty())
        std::printf("stopped after step %llu of %llu: no --checkpoint was given, nothing is saved\n", step,
                    static_cast<unsigned long long>(job.steps));
      else
        std::printf("stopped after step %llu of %llu: checkpoint %s written; continue with --resume %s\n", step,
                    static_cast<unsigned long long>(job.steps), job.checkpoint_path.c_str(),
                    job.checkpoint_path.c_str());
      std::fflush(stdout);
      return status;
    }
    // Every rank holds the same parameters: one file, from the coordinator's process, instead of
    // every rank racing to write it.
    if (flags.count("save-parameters") && speaks)
      save_parameters(flags["save-parameters"].as<std::string>(), result.parameters);
    if (!speaks) {
      if (leave_requested) std::printf("left the job\n");
      return 0;
    }
    std::printf("done: %llu steps in %.1fs | final eval loss %.4f | compute %.1fs, communication %.1fs, "
                "waiting %.1fs per worker | %.1f%% of communication hidden | %.2f bits/param/step | "
                "replicas %s\n",
                static_cast<unsigned long long>(result.steps.size()), result.seconds, result.final_eval_loss,
                result.compute_seconds, result.communication_seconds, result.wait_seconds,
                100 * result.hidden_fraction, result.bits_per_parameter_per_step,
                result.replicas_identical ? "identical" : "DIVERGED");
    // What communication costs the compute it overlaps, in CPU: the threads' own clocks, by role.
    const double steps = static_cast<double>(std::max<std::size_t>(1, result.steps.size()));
    std::string by_role;
    for_each_field<thread_cpu>([&](const auto& role) {
      char text[96];
      std::snprintf(text, sizeof text, "%s%.*s %.1f ms", by_role.empty() ? "" : ", ", static_cast<int>(role.name.size()),
                    role.name.data(), 1e3 * result.cpu.*role.member / steps);
      by_role += text;
    });
    std::printf("CPU per step, all processes: %s\n", by_role.c_str());
    std::printf("memory per worker: %.1f MB peak (minimum %.1f MB: parameters, %s, its optimizer shard)%s\n",
                result.peak_bytes_per_worker / 1e6, result.minimum_bytes_per_worker / 1e6,
                result.gradient_buffers == 1 ? "one gradient buffer" : "two gradient buffers",
                result.kept_bytes_per_worker
                    ? (", plus " + format_megabytes(result.kept_bytes_per_worker) + " kept for elastic recovery").c_str()
                    : "");
    // GPU workers: copies per step well below micro-batches per step say no micro-batch crossed PCIe.
    if (const std::uint64_t copies = tensor_copies_to_and_from_devices())
      std::printf("host<->device tensor copies in this process: %llu (%.1f per step)\n",
                  static_cast<unsigned long long>(copies),
                  result.steps.empty() ? 0.0 : static_cast<double>(copies) / static_cast<double>(result.steps.size()));
    if (!job.metrics_path.empty()) std::printf("metrics: %s\n", job.metrics_path.c_str());
    return 0;
  } catch (const job_already_finished& e) {
    std::printf("accord-train: %s\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-train: %s\n", e.what());
    std::fflush(stderr);
    // After a failed multi-process job a communicator may stay blocked on a dead peer. A job
    // stopped by a signal before it started (the rendezvous ended) exits as one stopped later.
    std::_Exit(stop_requested && stop_signal ? 128 + stop_signal.load() : 2);
  }
}
