#pragma once
// Public embedder API: bring your own training loop. The app computes each micro-batch's
// gradient however it likes (its own model code, another framework, a GPU) and submits it;
// accord accumulates, runs the algorithm's rounds (ACCO's estimate and real rounds, DDP, DPU,
// Distributed Lion) and hands back the parameters to compute the next micro-batch at. No CAF.
//
//   auto job = accord::app_job::start(model, config);          // config.workers workers here
//   // one thread per worker (the workers of a round wait for each other):
//   accord::worker& w = job->local_worker(i);
//   while (auto request = w.next()) {                           // nullopt: the job is over
//     loss = my_forward_backward(request->parameters, my_data(request->first_position), grad);
//     w.submit(grad, items, loss);
//   }
//   accord::job_result result = job->wait();                    // final parameters, metrics
//
// A model on a GPU says so (app_model::memory = {memory_space::cuda, N}): its worker then keeps
// the parameters and the gradient sum on that device, hands out the parameters there
// (micro_batch_request::parameters_at) and takes device gradients, so no tensor crosses to the
// host per micro-batch.
#include <accord/device_span.hpp>
#include <accord/job.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace accord {

// What an app-driven job trains: parameters that only the app's own code computes with.
struct app_model {
  // Names the architecture: workers train together (and checkpoints resume) only if equal.
  std::string signature;
  // The starting point, identical on every worker (between processes: checked only by size
  // and signature; seed the app's initialisation the same everywhere).
  std::vector<float> initial_parameters;
  // Describes the app's training data, for the settings workers must agree on between processes.
  std::string data = "the app's own data";
  // Where the app computes: the host, or a CUDA device (every local worker on it). A device
  // that this build or machine lacks is refused at start.
  memory_location memory;
  // Optional held-out loss at the given parameters (on the host, whatever `memory`), called from
  // accord's evaluator thread at job_config::eval_interval and at the end. Without it, eval
  // losses stay -1 (not evaluated).
  std::function<double(std::span<const float> parameters)> evaluate;
};

// What accord asks a worker for next: one micro-batch's gradient at these parameters.
struct micro_batch_request {
  // Valid until the next submit() or next() of this worker, with no writes pending: in
  // app_model::memory (parameters_at), and the same values as a host span when that is the
  // host (parameters; empty for a device model).
  std::span<const float> parameters;
  device_span<const float> parameters_at;
  // This worker's micro-batch counter, and where its examples start in the stream that
  // run_job would feed it (micro_batch_stream{rank, workers, micro_batch, resume offset}):
  // use it to give each worker disjoint data, or ignore it.
  std::uint64_t index = 0;
  std::uint64_t first_position = 0;
  std::size_t examples = 0;  // job_config::micro_batch
  // Grows every time a round's new parameters are swapped in (between two micro-batches).
  std::uint64_t parameters_version = 0;
  // Elements: when positive, accord starts reducing gradients as soon as the app reports them
  // final (worker::gradients_final_from), in buckets of this many (DDP's, job_config::
  // bucket_cap_mb); reports closer together than this are wasted. 0: accord takes the whole
  // gradient at submit() and reports are merely accepted.
  std::size_t gradient_progress = 0;
};

// One worker of an app-driven job, driven by one app thread.
class worker {
public:
  class state;  // internal (actors/app_bridge.hpp)
  explicit worker(std::shared_ptr<state> s);
  ~worker();

  // Waits until accord wants this worker's next micro-batch; nullopt once the job is over
  // (finished, cancelled or failed: app_job::wait() says which). Keep calling it until then:
  // the other workers of a round wait for this one.
  std::optional<micro_batch_request> next();
  // Waits at most `timeout` until next() would answer at once (a request, or the job's end);
  // true when it would. An app that must stay responsive while accord waits (the rendezvous,
  // the other workers) waits in slices: Python's binding runs its signal handlers in between.
  bool wait_ready(std::chrono::milliseconds timeout);
  // The gradient of the mean loss over the micro-batch's `items` (examples or tokens), at the
  // parameters of the last next(), and that mean loss. It lives in app_model::memory (a host
  // span converts) with no writes pending on any CUDA stream. Added into the sum before this
  // returns; it may be reused at once. Throws std::invalid_argument for a gradient of the
  // wrong size or memory, or a submit without a request.
  void submit(device_span<const float> gradient, double items, double loss);
  // While backward runs (torch DDP's autograd hooks do this): the values [begin, end) of the
  // gradient that submit() will hand over are final. accord adds them into its sum on its own
  // thread at once and, when the request says gradient_progress, reduces them while backward
  // goes on; submit() then adds only [0, begin). `gradient` stays valid and those values
  // unchanged until submit() returns. Reports may only grow the final suffix (begin
  // decreasing); one that does not is ignored. Same exceptions as submit(); returns at once.
  void gradients_final_from(device_span<const float> gradient, std::size_t begin);
  // Called from next() on the app's thread when new parameters arrived, before it returns.
  // Host models only (std::invalid_argument otherwise): a device model watches
  // micro_batch_request::parameters_version.
  void on_parameters(std::function<void(std::span<const float> parameters, std::uint64_t version)> callback);
  // The app's computation failed: the job fails with this message (wait() throws it).
  void fail(const std::string& why);
  // The app's data ran out, or its loop stops early (an error it handles, Ctrl-C): this worker
  // submits no more micro-batches, and a request it holds stays unanswered. The job ends after
  // the last step whose micro-batches every worker submitted: a step in progress is dropped,
  // with no optimizer step on a partial gradient, and the result's parameters (and
  // checkpoint) are the last completed step's, the same on every worker. next() returns
  // nullopt from now on; the other workers' next() once the job is over.
  void end();
  int rank() const;

private:
  std::shared_ptr<state> state_;
};

// A running app-driven job: the actors run on accord's threads, the micro-batches on the app's.
class app_job {
public:
  // All config.workers workers in this process (over the in-process transport, config.link).
  // config.membership and config.stop_requested are refused: use cancel().
  static std::unique_ptr<app_job> start(app_model model, const job_config& config,
                                        std::function<void(const step_metrics&)> on_step = {});
  // This process's worker of a job between processes (UCX or NCCL, as run_job_process).
  static std::unique_ptr<app_job> start_process(app_model model, const job_config& config,
                                                const process_group& group,
                                                std::function<void(const step_metrics&)> on_step = {});
  // Cancels a job still running, and waits for its actors.
  ~app_job();
  app_job(const app_job&) = delete;
  app_job& operator=(const app_job&) = delete;

  std::size_t local_workers() const;
  worker& local_worker(std::size_t index);
  // One line saying how the job counts steps, for the app to show at its start: "accord: a step
  // is 4 micro-batches of 16 examples per worker (acco: 2 at the estimate stage, 2 at the real
  // stage), so N micro-batches make N / 4 steps; 100 steps" (job_config::accumulation_mode).
  std::string step_counting() const;
  // Every worker stops after the same step (the checkpoint is written when configured);
  // next() then returns nullopt and wait() the steps done. Safe from any thread.
  void cancel();
  // Waits for the end; rethrows what failed the job (a bad configuration: std::invalid_argument).
  job_result wait();

  class runner;  // internal

private:
  explicit app_job(std::unique_ptr<runner> r);
  std::unique_ptr<runner> runner_;
};

}  // namespace accord
