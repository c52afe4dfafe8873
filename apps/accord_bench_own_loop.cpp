// accord-bench-own-loop: what the user's own loop costs. The same model, data, algorithm and
// emulated link run two ways in one run, interleaved over repetitions: accord drives the loop
// (run_job, as accord-train does), and the app drives it (app_job: one app thread per worker
// asks next(), runs forward and backward itself, submit()s). Prints step time and its ratio,
// and where an app thread's time goes (forward/backward, the hand-off in submit, the wait in
// next), beside the accord-driven worker's compute and waiting time. The app reports its
// backward's progress (worker::gradients_final_from), so DDP's buckets overlap it both ways.
#include "apps/time_to_loss.hpp"

#include <accord/worker.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>

namespace po = boost::program_options;
using namespace accord;

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Where one app thread's time went, summed over its micro-batches.
struct app_thread_time {
  double compute = 0;  // forward and backward of the app's own model copy
  double submit = 0;   // handing the gradient to accord (added into the sum on accord's thread)
  double next = 0;     // waiting in next() for the parameters of the next micro-batch
};

struct own_loop_result {
  job_result job;
  std::vector<app_thread_time> threads;
};

// The loop an embedder writes with the model accord-train would train, reading the examples
// accord's own compute actor would read at each request's first_position.
own_loop_result run_own_loop(const model& prototype, const dataset& train, const job_config& job) {
  app_model app;
  app.signature = prototype.signature();
  app.initial_parameters.resize(prototype.parameter_count());
  prototype.initialize(app.initial_parameters, job.seed);
  app.data = train.describe();
  std::unique_ptr<app_job> running = app_job::start(std::move(app), job);
  own_loop_result result;
  result.threads.resize(running->local_workers());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < running->local_workers(); ++i)
    threads.emplace_back([&, i] {
      worker& w = running->local_worker(i);
      app_thread_time& time = result.threads[i];
      const std::unique_ptr<model> net = prototype.clone();
      std::vector<float> gradient(prototype.parameter_count());
      std::optional<micro_batch_request> request;
      // Backward's progress to DDP's buckets, as accord's own compute actor reports it.
      net->listen_to_gradients([&](std::size_t begin) {
        if (request->gradient_progress) w.gradients_final_from(gradient, begin);
      });
      try {
        for (;;) {
          auto start = clock_type::now();
          request = w.next();
          time.next += seconds_since(start);
          if (!request) break;
          start = clock_type::now();
          const batch input = train.examples(request->first_position, request->examples);
          const double loss = net->forward_backward(request->parameters, input, gradient);
          time.compute += seconds_since(start);
          start = clock_type::now();
          w.submit(gradient, static_cast<double>(input.items()), loss);
          time.submit += seconds_since(start);
        }
      } catch (const std::exception& e) {
        w.fail(e.what());
      }
    });
  for (std::thread& t : threads) t.join();
  result.job = running->wait();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  const job_config defaults = step_benchmark_defaults();
  po::options_description options("accord-bench-own-loop options");
  options.add_options()("help,h", "show this help")
      ("algos", po::value<std::string>()->default_value("ddp,acco"), "algorithms to compare, each both ways")
      ("repetitions", po::value<int>()->default_value(3), "interleaved repetitions (1 to 100)");
  add_training_options(options, defaults);
  try {
    const auto parsed = parse_flags(
        argc, argv, options,
        "usage: accord-bench-own-loop [options]\n"
        "Runs each algorithm on the same model, data and emulated link twice, interleaved over\n"
        "--repetitions: driven by accord (as accord-train) and driven by the app's own loop\n"
        "(app_job: next, forward and backward, submit), and prints the step time of both, their\n"
        "ratio, and where the app threads' time went. Every run has --accumulation micro-batches\n"
        "per step and at most that many (ACCO: half per stage), so both ways train alike.");
    if (!parsed) return 0;  // --help
    const po::variables_map& flags = *parsed;
    const int repetitions = flags["repetitions"].as<int>();
    if (repetitions < 1 || repetitions > 100)
      throw std::invalid_argument("--repetitions " + std::to_string(repetitions) + ": expected 1 to 100");
    const std::vector<std::string> names = algorithm_list(flags["algos"].as<std::string>());
    warn_ignored(flags, "accord-bench-own-loop", {{"algo", "here (--algos lists the algorithms)"}});
    warn_ignored_training_flags(flags, "accord-bench-own-loop");
    const training_setup setup = make_training_setup(flags);
    if (!setup.net->memory().on_host())
      throw std::invalid_argument("accord-bench-own-loop measures host models (--device cpu)");
    check_stage_split(names, setup.job);
    std::printf("%s, %d workers in one process, %llu steps of %zu micro-batches x %zu examples, link %s, "
                "%d repetitions\n",
                setup.net->signature().c_str(), setup.job.workers, static_cast<unsigned long long>(setup.job.steps),
                setup.job.accumulation, setup.job.micro_batch, setup.job.link.c_str(), repetitions);
    std::printf("%-10s %12s %12s %7s %13s %12s %12s %11s %11s %11s\n", "algorithm", "accord ms", "own loop ms",
                "ratio", "final loss", "(own loop)", "compute ms", "app fwd/bwd", "app submit", "app next");
    for (const auto& name : names) {
      job_config job = with_equal_tokens(setup.job, name);
      // Micro-batches per round (ACCO: per stage) as run_job counts them, capped: both ways train alike.
      job.accumulation_mode = "growing";
      job.max_accumulation = job.accumulation;
      job.eval_interval = 0;
      std::vector<double> accord_ms, own_ms, compute_ms, fwd_ms, submit_ms, next_ms;
      double accord_loss = 0, own_loss = 0;
      for (int r = 0; r < repetitions; ++r) {
        const job_result driven = run_job(*setup.net, setup.train, setup.eval, job);
        const own_loop_result own = run_own_loop(*setup.net, *setup.train, job);
        const double steps = static_cast<double>(driven.steps.size());
        const double own_steps = static_cast<double>(own.job.steps.size());
        if (own_steps != steps)
          throw std::runtime_error(name + ": the own loop took " + std::to_string(own.job.steps.size()) +
                                   " steps, accord " + std::to_string(driven.steps.size()));
        accord_ms.push_back(1e3 * driven.seconds / steps);
        own_ms.push_back(1e3 * own.job.seconds / own_steps);
        compute_ms.push_back(1e3 * driven.compute_seconds / steps);
        app_thread_time sum;
        for (const app_thread_time& t : own.threads) {
          sum.compute += t.compute;
          sum.submit += t.submit;
          sum.next += t.next;
        }
        const double per = 1e3 / (own_steps * static_cast<double>(own.threads.size()));
        fwd_ms.push_back(sum.compute * per);
        submit_ms.push_back(sum.submit * per);
        next_ms.push_back(sum.next * per);
        accord_loss = driven.steps.back().train_loss;
        own_loss = own.job.steps.back().train_loss;
      }
      const double a = median(accord_ms), o = median(own_ms);
      std::printf("%-10s %12.1f %12.1f %7.3f %13.4f %12.4f %12.1f %11.1f %11.2f %11.1f\n", name.c_str(), a, o, o / a,
                  accord_loss, own_loss, median(compute_ms), median(fwd_ms), median(submit_ms), median(next_ms));
      std::fflush(stdout);
    }
    std::printf("medians over the repetitions; ms per step (compute, app: per worker and step); ratio = own loop / "
                "accord; compute: the accord-driven worker's compute time; app fwd/bwd, submit, next: an app "
                "thread's forward and backward, its submit() hand-off and its wait in next()\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-bench-own-loop: %s\n", e.what());
    return 2;
  }
  return 0;
}
