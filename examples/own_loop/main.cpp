// Your own training loop: the app computes every gradient itself (here a hand-written linear
// least-squares model; it could be any framework or a GPU) and accord runs the algorithm's
// rounds. In one process (2 workers, one thread each), or one worker per process under
// accord-launch / torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
//   accord-example-own-loop [algorithm]
//   accord-launch -n 2 -- accord-example-own-loop [algorithm]
#include <accord/worker.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t width = 16;

// Example p of an endless stream: features in [-1, 1) from a hash of (p, i), target w*·x with
// w*_i = (i + 1) / width.
float feature(std::uint64_t p, std::size_t i) {
  std::uint64_t x = p * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL + 1;
  x = (x ^ (x >> 31)) * 0x94d049bb133111ebULL;
  return static_cast<float>(static_cast<double>(x >> 11) * 0x1.0p-52 - 1.0);
}

// Mean of ½(w·x − y)² over examples [first, first + count), and its gradient.
double loss_and_gradient(std::span<const float> w, std::uint64_t first, std::size_t count, std::vector<float>& grad) {
  std::fill(grad.begin(), grad.end(), 0.0f);
  double loss = 0;
  for (std::uint64_t p = first; p < first + count; ++p) {
    double error = 0;
    for (std::size_t i = 0; i < width; ++i) error += (w[i] - (i + 1.0) / width) * feature(p, i);
    loss += 0.5 * error * error / count;
    for (std::size_t i = 0; i < width; ++i) grad[i] += static_cast<float>(error * feature(p, i) / count);
  }
  return loss;
}

// The app's loop on one worker: compute at the parameters accord hands out, submit, repeat
// until the job's steps are done. Were its data to run out first (an epoch loop), w.end() would
// end the job at the last completed step.
void drive(accord::worker& w) {
  std::vector<float> grad(width);
  while (auto request = w.next()) {
    const double loss = loss_and_gradient(request->parameters, request->first_position, request->examples, grad);
    w.submit(grad, static_cast<double>(request->examples), loss);
  }
}

std::uint64_t fnv1a(const std::vector<float>& values) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char* b = reinterpret_cast<const unsigned char*>(values.data());
       b != reinterpret_cast<const unsigned char*>(values.data() + values.size()); ++b)
    h = (h ^ *b) * 0x100000001b3ULL;
  return h;
}

}  // namespace

int main(int argc, char** argv) try {
  accord::job_config config;
  config.algorithm = argc > 1 ? argv[1] : "acco";
  config.workers = 2;
  config.steps = 60;
  config.micro_batch = 16;
  config.accumulation = 2;  // micro-batches per step (ACCO: one per stage), on every run
  config.optimizer = config.algorithm.find("dlion") != std::string::npos ? "" : "adamw";  // votes use Lion
  config.learning_rate = config.optimizer.empty() ? 0.03f : 0.05f;  // Lion moves each parameter by at most lr
  config.eval_interval = 0;

  accord::app_model model;
  model.signature = "least squares, width " + std::to_string(width);
  model.initial_parameters.assign(width, 0.0f);
  model.evaluate = [](std::span<const float> w) {
    std::vector<float> unused(width);
    return loss_and_gradient(w, 1u << 30, 256, unused);  // held-out positions
  };

  std::unique_ptr<accord::app_job> job;
  if (const char* rank = std::getenv("RANK")) {  // one worker of a job between processes
    accord::process_group group;
    group.rank = std::atoi(rank);
    group.world_size = std::atoi(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "1");
    if (const char* addr = std::getenv("MASTER_ADDR")) group.master_addr = addr;
    if (const char* port = std::getenv("MASTER_PORT")) group.master_port = std::atoi(port);
    if (const char* id = std::getenv("ACCORD_JOB_ID")) group.job_id = id;
    config.workers = group.world_size;
    job = accord::app_job::start_process(model, config, group);
  } else {
    job = accord::app_job::start(model, config);
  }
  if (job->local_worker(0).rank() == 0) std::printf("%s\n", job->step_counting().c_str());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < job->local_workers(); ++i) threads.emplace_back(drive, std::ref(job->local_worker(i)));
  for (auto& t : threads) t.join();
  const accord::job_result result = job->wait();

  if (!result.parameters.empty())
    std::printf("final parameters hash %016llx\n", static_cast<unsigned long long>(fnv1a(result.parameters)));
  if (result.steps.empty()) return 0;  // a worker other than rank 0: rank 0 reports
  const double first = result.steps.front().train_loss, eval = result.final_eval_loss;
  std::printf("%s: train loss %.4f -> %.4f, eval loss %.5f\n", config.algorithm.c_str(), first,
              result.steps.back().train_loss, eval);
  if (!(eval < 0.05 * first)) {
    std::fprintf(stderr, "accord-example-own-loop: training did not converge\n");
    return 1;
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "accord-example-own-loop: %s\n", error.what());
  return 1;
}
