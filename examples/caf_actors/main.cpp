// Your own actor system: accord's actors for a job spawned into the app's caf::actor_system
// (CAF 0.17), started and awaited by the app, whose own actor then asks accord's evaluator,
// through its typed handle, for the held-out loss of the final parameters.
//   accord-example-caf-actors
#include <accord/caf/worker_actors.hpp>

#include "data/text.hpp"  // accord's own corpus and model, installed with the package
#include "models/gpt.hpp"

#include <caf/all.hpp>

#include <cstdio>
#include <exception>

int main() try {
  caf::actor_system_config system_config;
  accord::configure_actor_system(system_config);
  caf::actor_system system{system_config};

  accord::gpt_config shape;
  shape.context = 32, shape.layers = 1, shape.heads = 2, shape.width = 32;
  accord::gpt net(shape);
  accord::job_config config;
  config.algorithm = "acco";
  config.workers = 2;
  config.steps = 30;
  config.eval_interval = 0;
  config.eval_examples = 64;
  config.blas_threads = 1;
  accord::job_actors job(system, net, accord::load_default_corpus(shape.context, true, 1),
                         accord::load_default_corpus(shape.context, false, 1), config);
  std::printf("spawned: coordinator, evaluator and %zu workers (compute, communicator, accumulator)\n",
              job.workers().size());

  caf::scoped_actor self{system};
  job.start();
  std::string failure;
  self->request(job.coordinator(), caf::infinite, accord::wait_atom::value)
      .receive([](bool) {}, [&](caf::error& e) { failure = system.render(e); });
  if (!failure.empty()) throw std::runtime_error(failure);
  const accord::job_result result = job.result();

  double loss = 0;
  self->request(job.evaluator(), caf::infinite, accord::evaluate_atom::value,
                std::make_shared<std::vector<float>>(result.parameters))
      .receive([&](double l) { loss = l; }, [&](caf::error& e) { failure = system.render(e); });
  if (!failure.empty()) throw std::runtime_error(failure);
  std::printf("%zu steps, train loss %.4f -> %.4f, eval loss %.4f (the coordinator's: %.4f)\n", result.steps.size(),
              result.steps.front().train_loss, result.steps.back().train_loss, loss, result.final_eval_loss);
  return loss < result.steps.front().train_loss && loss == result.final_eval_loss ? 0 : 1;
} catch (const std::exception& error) {
  std::fprintf(stderr, "accord-example-caf-actors: %s\n", error.what());
  return 1;
}
