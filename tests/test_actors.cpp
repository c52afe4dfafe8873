// The actor pipeline end to end (run_job): algorithms against their equations, DDP against a
// single big-batch worker, Distributed Lion with one worker against Lion, replica agreement.
#include <doctest/doctest.h>

#include <accord/job.hpp>

#include "recovery/checkpoint.hpp"
#include "quadratic_model.hpp"
#include "data/text.hpp"
#include "models/gpt.hpp"
#include "quadratic_model.hpp"
#include "transport/wire_precision.hpp"

#include <zlib.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>

#include "transport/block_quantize.hpp"
#include "test_job.hpp"

using namespace accord;
using accord::testing::test_job;
using accord::testing::quadratic;
using accord::testing::waves;
using accord::testing::run_quadratic;

namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr std::size_t dim = 5;

// Mean gradient over the micro-batch of `worker`'s k-th micro-batch at θ, in double.
std::vector<double> gradient(const std::vector<double>& theta, int worker, int workers,
                             std::uint64_t k, std::size_t micro_batch) {
  const micro_batch_stream stream{worker, workers, micro_batch};
  std::vector<double> g(dim, 0.0);
  for (std::size_t e = 0; e < micro_batch; ++e)
    for (std::size_t i = 0; i < dim; ++i)
      g[i] += (theta[i] - waves::value(stream.first_position(k) + e, i)) / static_cast<double>(micro_batch);
  return g;
}

// DDP with AdamW on 2 workers at a constant rate: the checkpoint tests resume its state.
job_config adamw_ddp_job() { return test_job("ddp", 2, 100).adamw(0.05f).constant_rate(); }

// Plain SGD (θ ← θ − η g), a fixed number of micro-batches per round: deterministic.
job_config sgd_job(const std::string& algorithm, int workers, std::uint64_t steps) {
  return test_job(algorithm, workers, steps).micro_batches_per_round(1).sgd(0.1f, 0.0f).constant_rate();
}

std::vector<double> initial_theta() {
  std::vector<float> p(dim);
  quadratic(dim).initialize(p, 0);
  return {p.begin(), p.end()};
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tolerance));
}

// A quadratic whose forward/backward fails on one worker's `fail_at`-th micro-batch, like a
// device error in the middle of a run.
class failing_quadratic final : public model {
public:
  failing_quadratic(std::size_t dim, int calls_before_failure)
      : inner_(dim), calls_left_(std::make_shared<std::atomic<int>>(calls_before_failure)) {}
  std::string signature() const override { return inner_.signature(); }
  std::size_t parameter_count() const override { return inner_.parameter_count(); }
  void initialize(std::span<float> p, std::uint64_t seed) const override { inner_.initialize(p, seed); }
  double forward_backward(std::span<const float> p, const batch& b, std::span<float> g) override {
    if (--*calls_left_ == 0) throw std::runtime_error("device lost");
    return inner_.forward_backward(p, b, g);
  }
  double evaluate(std::span<const float> p, const batch& b) override { return inner_.evaluate(p, b); }
  std::unique_ptr<model> clone() const override { return std::make_unique<failing_quadratic>(*this); }

private:
  mutable quadratic inner_;
  std::shared_ptr<std::atomic<int>> calls_left_;  // shared by all clones: one failure in the job
};

std::unique_ptr<gpt> small_gpt() {
  gpt_config c;
  c.context = 16;
  c.layers = 1;
  c.heads = 2;
  c.width = 32;
  return std::make_unique<gpt>(c);
}

job_result run_small_gpt(job_config job) {
  auto net = small_gpt();
  auto train = load_default_corpus(16, true, job.seed);
  auto eval = load_default_corpus(16, false, job.seed);
  job.eval_interval = 0;
  job.eval_examples = 16;
  return run_job(*net, train, eval, job);
}

}  // namespace

// Σ over workers of the mean gradient of micro-batch k, at θ.
std::vector<double> summed_gradient(const std::vector<double>& theta, int workers, std::uint64_t k) {
  std::vector<double> sum(dim, 0.0);
  for (int w = 0; w < workers; ++w) {
    const auto g = gradient(theta, w, workers, k, 3);
    for (std::size_t i = 0; i < dim; ++i) sum[i] += g[i];
  }
  return sum;
}

// θ − η · Σ(gradients) / count
std::vector<double> sgd_step(std::vector<double> theta, double eta, const std::vector<double>& sum,
                             double count) {
  for (std::size_t i = 0; i < dim; ++i) theta[i] -= eta * sum[i] / count;
  return theta;
}

TEST_CASE("ACCO follows its equations on a quadratic: estimate from g̃, real step from g̃ + g" *
          doctest::test_suite("pipeline")) {
  // {micro-batches per real round (at θ̃), per estimate round (at θ; 0: as many)}: the even
  // split is today's ACCO (estimate_accumulation unset), the others its uneven splits.
  for (const auto& [real, estimates] : {std::pair<std::size_t, std::size_t>{1, 0}, {3, 1}, {1, 2}, {2, 2}})
    for (int workers : {1, 2, 3}) {
      CAPTURE(real);
      CAPTURE(estimates);
      CAPTURE(workers);
      const std::uint64_t steps = 5;
      const double eta = 0.1;
      const std::size_t at_theta = estimates ? estimates : real;
      // Each worker's micro-batches in order: g̃_t at θ̃_t (θ̃_0 = θ_0; one micro-batch in step 0,
      // `real` later: those computed while the previous real round was in flight), then g_t at θ_t
      // (`at_theta`, while the estimate round is in flight); θ̃_{t+1} = θ_t − η mean(g̃_t) and
      // θ_{t+1} = θ_t − η mean(g̃_t + g_t), both from θ_t.
      std::vector<double> theta = initial_theta(), estimate = theta;
      std::uint64_t next = 0;  // the workers' next micro-batch
      std::size_t at_estimate = 1;
      auto sum_of = [&](const std::vector<double>& at, std::size_t count) {
        std::vector<double> sum(dim, 0.0);
        for (std::size_t m = 0; m < count; ++m) {
          const auto g = summed_gradient(at, workers, next++);
          for (std::size_t i = 0; i < dim; ++i) sum[i] += g[i];
        }
        return sum;
      };
      for (std::uint64_t t = 0; t < steps; ++t) {
        const auto first = sum_of(estimate, at_estimate);
        const auto second = sum_of(theta, at_theta);
        std::vector<double> both(dim);
        for (std::size_t i = 0; i < dim; ++i) both[i] = first[i] + second[i];
        estimate = sgd_step(theta, eta, first, static_cast<double>(at_estimate * workers));
        theta = sgd_step(theta, eta, both, static_cast<double>((at_estimate + at_theta) * workers));
        at_estimate = real;
      }
      job_config job = sgd_job("acco", workers, steps);
      job.accumulation = job.max_accumulation = real;  // capped: deterministic
      job.estimate_accumulation = estimates;
      std::vector<std::uint64_t> micro_batches;
      const job_result result = run_quadratic(job, [&](const step_metrics& m) { micro_batches.push_back(m.micro_batches); });
      check_close(result.parameters, theta, 1e-5);
      CHECK(result.rounds == 2 * steps);
      CHECK(result.replicas_identical);
      // The report's micro-batches per step: both stages, every worker.
      REQUIRE(micro_batches.size() == steps);
      CHECK(micro_batches.front() == (1 + at_theta) * workers);
      CHECK(micro_batches.back() == (real + at_theta) * workers);
    }
}

TEST_CASE("ACCO's estimate accumulation, unset or equal to accumulation, is today's ACCO bit for bit, "
          "a cap keeps max-accumulation's headroom" * doctest::test_suite("pipeline")) {
  job_config job = sgd_job("acco", 2, 4);
  job.accumulation = 2;
  job.max_accumulation = 2;
  const job_result unset = run_quadratic(job);
  job.estimate_accumulation = 2;
  const job_result equal = run_quadratic(job);
  CHECK(unset.parameters == equal.parameters);  // bitwise
  // accumulation 2, cap 3 (headroom 1), estimates 1: an estimate round is capped at 2 micro-batches,
  // a real round at 3; on an unlimited link a round may end before compute reaches the cap.
  job.max_accumulation = 3;
  job.estimate_accumulation = 1;
  std::vector<std::uint64_t> micro_batches;
  const job_result capped = run_quadratic(job, [&](const step_metrics& m) { micro_batches.push_back(m.micro_batches); });
  CHECK(capped.replicas_identical);
  for (std::size_t t = 1; t < micro_batches.size(); ++t) {
    CAPTURE(t);
    CHECK(micro_batches[t] >= (2 + 1) * 2u);
    CHECK(micro_batches[t] <= (3 + 2) * 2u);
  }
}

TEST_CASE("acco-dlion follows its equations on a quadratic: estimate vote from g̃, real vote from g̃ + g" *
          doctest::test_suite("pipeline")) {
  for (int workers : {1, 3}) {  // odd: no tied votes
    CAPTURE(workers);
    const std::uint64_t steps = 6;
    const double lr = 0.05, beta1 = 0.9, beta2 = 0.99;
    const auto sign = [](double x) { return x > 0 ? 1.0 : -1.0; };
    // Per worker w: d̃ = sign(β1 m_w + (1−β1) g̃_w) votes θ̃_{t+1} = θ_t − lr·majority(d̃) without
    // touching m_w; the real round's d = sign(β1 m_w + (1−β1) ḡ_w), ḡ_w = (g̃_w + g_w)/2, votes
    // θ_{t+1} = θ_t − lr·majority(d) and only then m_w = β2 m_w + (1−β2) ḡ_w: momentum moves once per step.
    std::vector<double> theta = initial_theta(), estimate = theta;
    std::vector<std::vector<double>> momentum(workers, std::vector<double>(dim, 0.0));
    for (std::uint64_t t = 0; t < steps; ++t) {
      std::vector<double> estimate_votes(dim, 0.0), real_votes(dim, 0.0);
      for (int w = 0; w < workers; ++w) {
        const auto first = gradient(estimate, w, workers, 2 * t, 3);
        const auto second = gradient(theta, w, workers, 2 * t + 1, 3);
        for (std::size_t i = 0; i < dim; ++i) {
          const double mean = (first[i] + second[i]) / 2;
          estimate_votes[i] += sign(beta1 * momentum[w][i] + (1 - beta1) * first[i]);
          real_votes[i] += sign(beta1 * momentum[w][i] + (1 - beta1) * mean);
          momentum[w][i] = beta2 * momentum[w][i] + (1 - beta2) * mean;
        }
      }
      for (std::size_t i = 0; i < dim; ++i) {
        estimate[i] = theta[i] - lr * sign(estimate_votes[i]);
        theta[i] -= lr * sign(real_votes[i]);
      }
    }
    job_config job = sgd_job("acco-dlion", workers, steps);
    job.optimizer.clear();  // the algorithm's Lion
    job.learning_rate = static_cast<float>(lr);
    job.beta1 = static_cast<float>(beta1);
    job.beta2 = static_cast<float>(beta2);
    const job_result result = run_quadratic(job);
    check_close(result.parameters, theta, 1e-5);
    CHECK(result.replicas_identical);
  }
}

TEST_CASE("DPU applies each gradient one round late, DDP applies it at once" * doctest::test_suite("pipeline")) {
  const int workers = 2;
  const std::uint64_t steps = 5;
  const double eta = 0.1;
  std::vector<double> dpu = initial_theta(), previous = dpu, ddp = dpu;
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto stale = summed_gradient(previous, workers, t);  // taken at θ_{t−1} (θ_0 for t = 0)
    previous = dpu;
    dpu = sgd_step(dpu, eta, stale, workers);
    ddp = sgd_step(ddp, eta, summed_gradient(ddp, workers, t), workers);
  }
  check_close(run_quadratic(sgd_job("dpu", workers, steps)).parameters, dpu, 1e-5);
  check_close(run_quadratic(sgd_job("ddp", workers, steps)).parameters, ddp, 1e-5);
}

TEST_CASE("peak memory per worker reaches its minimum: DDP one gradient buffer, overlapping pipelines two" *
          doctest::test_suite("pipeline")) {
  for (const std::string algo : {"ddp", "dpu", "acco"}) {
    CAPTURE(algo);
    job_config job;
    job.algorithm = algo;
    job.workers = 2;
    job.steps = 3;
    const job_result r = run_small_gpt(job);
    const std::size_t parameter_bytes = r.parameters.size() * sizeof(float);
    CHECK(r.gradient_buffers == (algo == "ddp" ? 1 : 2));
    CHECK(r.minimum_bytes_per_worker ==
          (1 + static_cast<std::size_t>(r.gradient_buffers)) * parameter_bytes + r.state_bytes_per_worker);
    CHECK(r.peak_bytes_per_worker >= r.minimum_bytes_per_worker);
  }
}

TEST_CASE("DDP with N workers equals one worker with N times the micro-batch") {
  job_config job;
  job.algorithm = "ddp";
  job.steps = 4;
  job.seed = 7;
  job.workers = 3;
  job.micro_batch = 2;
  const job_result spread = run_small_gpt(job);
  job.workers = 1;
  job.micro_batch = 6;
  const job_result single = run_small_gpt(job);
  REQUIRE(spread.parameters.size() == single.parameters.size());
  double worst = 0;
  for (std::size_t i = 0; i < single.parameters.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(spread.parameters[i] - single.parameters[i])));
  CHECK(worst < 1e-4);  // only float summation order differs
  for (std::size_t s = 0; s < single.steps.size(); ++s)
    CHECK(spread.steps[s].train_loss == doctest::Approx(single.steps[s].train_loss).epsilon(1e-4));
}

TEST_CASE("Distributed Lion with one worker is Lion, bit for bit") {
  // The tied-head GPT gives every parameter a non-zero gradient, so sign(0) never arises.
  job_config job;
  job.workers = 1;
  job.steps = 5;
  job.weight_decay = 0.1f;
  job.algorithm = "lion";
  const job_result lion = run_small_gpt(job);
  for (const char* vote : {"dlion-mavo", "dlion-avg"}) {
    CAPTURE(vote);
    job.algorithm = vote;
    const job_result dlion = run_small_gpt(job);
    CHECK(dlion.parameters == lion.parameters);
  }
}

// 3 workers, the third 3x slower, on an emulated link with uncapped accumulation: how many
// micro-batches each worker adds while a round is in flight depends on thread timing. The
// replica check runs after every round; replicas are the point, so evaluations stay short (a
// long one only slows the sanitizer run).
job_result run_uneven(const std::string& algorithm, const std::string& precision, std::uint64_t steps,
                      std::uint64_t eval_interval, std::size_t width) {
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  job_config job;
  job.algorithm = algorithm;
  job.wire_precision = precision;
  job.workers = 3;
  job.steps = steps;
  job.micro_batch = 2;
  job.speed_factors = {1.0, 1.0, 3.0};
  job.link = "1gbit,200us";
  job.replica_check_interval = 1;
  job.eval_interval = eval_interval;
  job.eval_examples = 32;
  return run_job(net, data, data, job);
}

TEST_CASE("every algorithm keeps all replicas bit-identical, also with unequal workers" *
          doctest::test_suite("pipeline")) {
  // Uncapped accumulation on an emulated link: how many micro-batches each worker adds while
  // a round is in flight depends on thread timing, and the replicas must still agree.
  for (const auto& name : algorithm_names())
    for (const char* precision : {"fp32", "bf16"}) {
    CAPTURE(name);
    CAPTURE(precision);
    const job_result result = run_uneven(name, precision, 4, 2, 1000);
    CHECK(result.replicas_identical);
    CHECK(result.steps.size() == 4);
    CHECK(std::isfinite(result.final_eval_loss));
  }
}

TEST_CASE("a resident worker (a GPU worker's data path, on host copies) trains bitwise as the default one" *
          doctest::test_suite("pipeline")) {
  // Resident: the compute actor keeps parameters and the gradient sum in the model's memory,
  // the accumulator fetches the sum before each round, or the round runs on that memory. Two micro-batches per round exercise
  // the sum staying put between micro-batches, ACCO's kept accumulation its re-upload.
  for (const auto& name : algorithm_names())
    for (const char* precision : {"fp32", "bf16"}) {
      CAPTURE(name);
      CAPTURE(precision);
      job_config job;
      job.algorithm = name;
      job.wire_precision = precision;
      job.workers = 2;
      job.steps = 4;
      job.micro_batch = 2;
      job.accumulation = 2;
      job.max_accumulation = 2;  // a fixed number of micro-batches per round: deterministic
      job.eval_interval = 2;
      job.eval_examples = 4;
      const job_result host = run_quadratic(job);
      job.resident_on_host = true;
      // Rounds on the host (the sum fetched), and on the "device" (resident_memory, the rules'
      // device forms on the reference collectives and CPU kernels; custom rules fall back).
      for (const bool device_rounds : {false, true}) {
        CAPTURE(device_rounds);
        job.device_rounds = device_rounds;
        const job_result resident = run_quadratic(job);
        CHECK(resident.parameters == host.parameters);
        REQUIRE(resident.steps.size() == host.steps.size());
        for (std::size_t i = 0; i < host.steps.size(); ++i) {
          CHECK(resident.steps[i].train_loss == host.steps[i].train_loss);
          CHECK(resident.steps[i].micro_batches == host.steps[i].micro_batches);
        }
        CHECK(resident.final_eval_loss == host.final_eval_loss);
      }
    }
}

TEST_CASE("bf16 and fp16 on the wire: half the bits per parameter, the loss of fp32") {
  job_config job;
  job.workers = 3;
  job.steps = 20;
  job.max_accumulation = 1;
  job.learning_rate = 1e-2f;
  job.algorithm = "acco";
  job.wire_precision = "fp32";
  const job_result exact = run_small_gpt(job);
  for (const char* precision : {"bf16", "fp16"}) {
    CAPTURE(precision);
    job.wire_precision = precision;
    const job_result rounded = run_small_gpt(job);
    CHECK(rounded.replicas_identical);
    CHECK(rounded.bits_per_parameter_per_step == doctest::Approx(exact.bits_per_parameter_per_step / 2).epsilon(0.01));
    CHECK(rounded.steps.back().train_loss == doctest::Approx(exact.steps.back().train_loss).epsilon(0.02));
    // The compute copy is the rounded one on every worker: each parameter is a 16-bit value.
    std::vector<float> again = rounded.parameters;
    round_to_wire(parse_wire_precision(precision, "precision"), again);
    CHECK(again == rounded.parameters);
  }
  // ACCO's estimate rounds alone in bf16: between the two in bits.
  job.wire_precision = "fp32";
  job.estimate_precision = "bf16";
  const job_result cheap_estimate = run_small_gpt(job);
  CHECK(cheap_estimate.bits_per_parameter_per_step ==
        doctest::Approx(0.75 * exact.bits_per_parameter_per_step).epsilon(0.01));
}

TEST_CASE("ACCO with int8 and sign estimates trains on the quadratic, replicas agree, bits come from the records sent" *
          doctest::test_suite("pipeline")) {
  // 2 workers, shards of 1024 values: 4 blocks each. Per step and worker the estimate round sends
  // 2 × 4 records where fp32 sends 2 × 1024 floats; everything else is the same.
  constexpr std::size_t values = 2048;
  job_config job = sgd_job("acco", 2, 20);
  const job_result exact = run_quadratic(job, {}, values);
  const double records_per_value = 4.0 / 1024;
  for (const std::string code : {"int8", "sign"}) {
    CAPTURE(code);
    job.estimate_precision = code;
    const job_result cheap = run_quadratic(job, {}, values);
    CHECK(cheap.replicas_identical);
    CHECK(cheap.steps.back().train_loss < 0.5 * cheap.steps.front().train_loss);
    const double record_bytes = code == "int8" ? sizeof(int8_block) : sizeof(sign_block);
    const double estimate_bits = 2 * 8 * record_bytes * records_per_value / 2, fp32_bits = 2 * 32.0 / 2;
    CHECK(cheap.bits_per_parameter_per_step ==
          doctest::Approx(exact.bits_per_parameter_per_step - fp32_bits + estimate_bits).epsilon(1e-6));
    // θ̃ only places the second half's gradients: the trajectory stays near fp32 estimates'.
    double worst = 0;
    for (std::size_t i = 0; i < values; ++i) worst = std::max(worst, std::fabs(double(cheap.parameters[i]) - exact.parameters[i]));
    MESSAGE(code << " estimates: largest parameter difference to fp32 estimates " << worst);
    CHECK(worst < (code == "int8" ? 0.01 : 0.25));
  }
}

TEST_CASE("int8, fp8, fp4, sign, sign2 and sign3 real rounds with error feedback keep replicas bit-identical over many rounds, also with unequal workers" *
          doctest::test_suite("pipeline")) {
  // As the fp32/bf16 test above: uncapped accumulation on an emulated link, so the micro-batch
  // counts differ between workers and rounds; the replica check runs after every round.
  const std::size_t width = 1500;
  for (const std::string algorithm : {"ddp", "dpu", "acco", "lion"})
    for (const std::string precision : {"int8", "fp8", "fp4", "sign", "fp4,sign", "fp4,sign2", "fp4,sign3"}) {
      CAPTURE(algorithm);
      CAPTURE(precision);
      const job_result result = run_uneven(algorithm, precision, 25, 5, width);
      CHECK(result.replicas_identical);
      CHECK(result.steps.size() == 25);
      CHECK(std::isfinite(result.final_eval_loss));
      CHECK(result.final_eval_loss < result.steps.front().train_loss);
      // Per round each worker sends the records of the 2 other shards up and of its own to the 2
      // others (shards of 500: 2 records each, the second short); ACCO's estimate rounds travel
      // as the wire does (no --estimate-precision). Plus the totals' all-reduce (4 doubles).
      // "P,Q": gradients' records P, parameters' records Q.
      const std::string gradients = precision.substr(0, precision.find(','));
      const std::string parameters = precision.substr(precision.find(',') + 1);
      const auto record_bits = [](const std::string& code) {
        return 8.0 * (code == "sign"    ? sizeof(sign_block)
                      : code == "sign2" ? sizeof(sign2_block)
                      : code == "sign3" ? sizeof(sign3_block)
                      : code == "fp4"   ? sizeof(fp4_block)
                                        : sizeof(int8_block));
      };
      const double per_round = 2 * 2 * (record_bits(gradients) + record_bits(parameters)) / width;
      const double rounds = algorithm == "acco" ? 2 : 1;
      CHECK(result.bits_per_parameter_per_step >= rounds * per_round);
      CHECK(result.bits_per_parameter_per_step <= rounds * (per_round + 0.3));
    }
}

TEST_CASE("compressed rounds with error feedback train a short GPT run to within a few percent of fp32" *
          doctest::test_suite("pipeline")) {
  job_config job;
  job.workers = 2;
  job.steps = 30;
  job.max_accumulation = 1;
  job.learning_rate = 1e-2f;
  job.cosine = false;
  job.algorithm = "ddp";
  const job_result exact = run_small_gpt(job);
  for (const std::string algorithm : {"ddp", "acco"})
    for (const std::string precision : {"int8", "fp8", "fp4", "sign", "fp4,sign"}) {
      CAPTURE(algorithm);
      CAPTURE(precision);
      job.algorithm = algorithm;
      job.wire_precision = precision;
      const job_result compressed = run_small_gpt(job);
      MESSAGE(algorithm << " " << precision << ": final eval " << compressed.final_eval_loss << " against fp32 ddp's "
                        << exact.final_eval_loss << ", " << compressed.bits_per_parameter_per_step << " bits/param/step");
      CHECK(compressed.replicas_identical);
      CHECK(compressed.final_eval_loss < 1.05 * exact.final_eval_loss);
    }
}

TEST_CASE("ACCO tracks DDP's loss on a short GPT run while DPU lags early") {
  auto mean_loss = [](const job_result& r, std::size_t first, std::size_t last) {
    double sum = 0;
    for (std::size_t s = first; s < last; ++s) sum += r.steps[s].train_loss;
    return sum / static_cast<double>(last - first);
  };
  job_config job;
  job.workers = 2;
  job.steps = 30;
  job.max_accumulation = 1;  // same micro-batches per step for every algorithm
  job.learning_rate = 1e-2f;
  job.cosine = false;
  job.algorithm = "ddp";
  const job_result ddp = run_small_gpt(job);
  job.algorithm = "acco";
  const job_result acco = run_small_gpt(job);
  job.algorithm = "dpu";
  const job_result dpu = run_small_gpt(job);
  // ACCO consumes two micro-batches per worker and step, DDP one: compare per step.
  const double d = mean_loss(ddp, 0, 10), a = mean_loss(acco, 0, 10), p = mean_loss(dpu, 0, 10);
  MESSAGE("mean loss over steps 1-10: ddp " << d << ", acco " << a << ", dpu " << p);
  CHECK(std::fabs(a - d) < 0.1 * d);
  CHECK(p > d);
  CHECK(p > a);
}

TEST_CASE("bad job configurations are refused with a message naming the problem" *
          doctest::test_suite("pipeline")) {
  quadratic net(dim);
  auto data = std::make_shared<waves>(dim);
  auto refused = [&](job_config job, const std::string& expected) {
    CAPTURE(expected);
    try {
      run_job(net, data, data, job);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(expected) != std::string::npos);
    }
  };
  job_config job = sgd_job("acco", 2, 2);
  job.algorithm = "adam-async";
  refused(job, "unknown algorithm 'adam-async'");
  job = sgd_job("acco", 2, 2);
  job.workers = 0;
  refused(job, "workers must be at least 1");
  job = sgd_job("acco", 2, 2);
  job.speed_factors = {1.0};
  refused(job, "expected 2 values");
  job = sgd_job("acco", 2, 2);
  job.link = "fast";
  refused(job, "fast");
  job = sgd_job("dlion-mavo", 2, 2);
  job.optimizer = "adamw";
  refused(job, "votes on Lion directions");
  job = sgd_job("acco", 2, 2);
  job.wire_precision = "fp2";
  refused(job, "wire precision: 'fp2' (expected fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3) or auto");
  job = sgd_job("acco", 2, 2);
  job.estimate_precision = "int4";
  refused(job, "estimate precision: 'int4' (expected fp32|bf16|fp16|int8|fp8|fp4|sign|sign2|sign3)");
  for (const char* algorithm : {"dlion-mavo", "dlion-avg", "acco-dlion"}) {
    job = sgd_job(algorithm, 2, 2);
    job.optimizer.clear();
    job.wire_precision = "int8";
    refused(job, "wire precision: 'int8' means nothing for " + std::string(algorithm) +
                     ", whose votes travel as 1 bit whatever the wire");
  }
  job = sgd_job("ddp", 4, 2);
  job.wire_precision = "sign";
  job.topology = "hierarchical";
  job.topology_settings.set("group_size", 2);
  refused(job, "wire precision: 'sign' is for the ring topology (--topology hierarchical");
  job = sgd_job("ddp", 2, 2);
  job.wire_precision = "int8";
  job.topology = "local-sgd";
  refused(job, "wire precision: 'int8' is for the ring topology (--topology local-sgd");
  job = sgd_job("acco", 4, 2);
  job.estimate_precision = "sign";
  job.topology = "hierarchical";
  job.topology_settings.set("group_size", 2);
  refused(job, "estimate precision: 'sign' is not supported by the hierarchical topology");
  for (const char* algorithm : {"ddp", "dpu", "dlion-mavo"}) {
    job = sgd_job(algorithm, 2, 2);
    job.estimate_accumulation = 1;
    refused(job, "estimate accumulation: algorithm " + std::string(algorithm) + " has no estimate rounds");
  }
  job = sgd_job("acco", 2, 2);
  job.estimate_accumulation = std::size_t{1} << 62;
  refused(job, "estimate accumulation must be at most 1000000");
}


// `bytes` written to `name` are refused by read_checkpoint with "name: expected".
// A checkpoint's bytes with a valid crc over whatever they say.
std::string with_crc(std::string bytes) {
  bytes.resize(bytes.size() - 4);
  const std::uint32_t crc = static_cast<std::uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
  bytes.append(reinterpret_cast<const char*>(&crc), sizeof crc);
  return bytes;
}

void refused_checkpoint(const std::string& name, const std::string& bytes, const std::string& expected) {
  std::ofstream(name, std::ios::binary) << bytes;
  try {
    read_checkpoint(name);
    FAIL("accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == name + ": " + expected);
  }
}

TEST_CASE("checkpoints round-trip, and malformed ones are refused naming the problem" *
          doctest::test_suite("pipeline")) {
  checkpoint c;
  c.steps = 7;
  c.data_position = 96;
  c.signature = "quadratic(3)";
  c.algorithm = "ddp";
  c.parameters = {1.f, 2.f, 3.f};
  c.optimizer_step = 7;
  c.slots = 2;
  c.optimizer = {1, 2, 3, 4, 5, 6};
  c.momenta = {{0.5f, 0.25f, 0.125f}};
  const std::string path = "test_actors_checkpoint.bin";
  write_checkpoint(path, c);
  const checkpoint back = read_checkpoint(path);
  CHECK(back.steps == 7);
  CHECK(back.data_position == 96);
  CHECK(back.signature == c.signature);
  CHECK(back.algorithm == "ddp");
  CHECK(back.parameters == c.parameters);
  CHECK(back.optimizer_step == 7);
  CHECK(back.optimizer == c.optimizer);
  CHECK(back.momenta == c.momenta);

  const auto refused = [](const std::string& bytes, const std::string& expected) {
    refused_checkpoint("test_actors_bad_checkpoint.bin", bytes, expected);
  };
  const std::string whole = file_text(path);
  refused("NOTACKPT" + whole.substr(8), "not an accord checkpoint (bad magic)");
  refused(whole.substr(0, 5), "truncated checkpoint (5 bytes, shorter than a header)");
  std::string forged = whole;  // the data position (after magic, version, flags and steps): 2^64 − 1
  forged.replace(24, 8, std::string(8, '\xff'));
  refused(with_crc(forged), "data position 18446744073709551615 is past any a run reaches (2^62 examples): a "
                            "corrupt or forged checkpoint");
  std::string old_version = whole;
  old_version[8] = 1;
  refused(old_version, "checkpoint format version 1, this build reads versions 2 to 4 only (start the run afresh, "
                       "or resume it with the build that wrote it)");
  try {
    read_checkpoint("no/such/checkpoint.bin");
    FAIL("accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "no/such/checkpoint.bin: cannot open the checkpoint");
  }
}

// A DDP checkpoint of a 3-parameter quadratic at step 4, AdamW's two slots.
checkpoint small_ddp_checkpoint() {
  checkpoint c;
  c.steps = 4;
  c.signature = "quadratic(3)";
  c.algorithm = "ddp";
  c.parameters = {1.f, 2.f, 3.f};
  c.optimizer_step = 4;
  c.slots = 2;
  c.optimizer = {1, 2, 3, 4, 5, 6};
  return c;
}

TEST_CASE("error-feedback residuals round-trip in a version 3 checkpoint, version 2 files still load, a wrong count "
          "or precision is refused naming the file" *
          doctest::test_suite("pipeline")) {
  checkpoint c = small_ddp_checkpoint();
  c.feedback = "sign";
  c.residuals = {0.25f, -0.5f, 0.f};
  c.replica = {1.125f, 1.875f, 3.f};
  const std::string path = "test_actors_feedback_checkpoint.bin";
  write_checkpoint(path, c);
  const checkpoint back = read_checkpoint(path);
  CHECK(back.feedback == "sign");
  CHECK(back.residuals == c.residuals);
  CHECK(back.replica == c.replica);
  CHECK(back.parameters == c.parameters);

  const auto refused = [](const std::string& bytes, const std::string& expected) {
    refused_checkpoint("test_actors_bad_feedback_checkpoint.bin", bytes, expected);
  };
  const std::string whole = file_text(path);
  // The section: u32 4, "sign", u64 count, 3 residuals, 3 replica values, then no topology state and the crc.
  const std::size_t section = whole.size() - 4 - 4 - 6 * sizeof(float) - 8 - 4 - 4;
  std::string forged = whole;
  forged[section + 8] = 4;  // 4 residuals claimed for 3 parameters
  refused(with_crc(forged), "the error-feedback residuals (sign) hold 4 values for 3 parameters");
  forged = whole;
  forged.replace(section + 4, 4, "int4");
  refused(with_crc(forged), "unknown error-feedback precision 'int4' (expected int8|fp8|fp4|sign|sign2|sign3)");

  // Version 2: the same file without the section (and version 2 in its header).
  c.feedback.clear();
  c.residuals.clear();
  c.replica.clear();
  write_checkpoint(path, c);
  std::string version_2 = file_text(path);
  version_2.erase(version_2.size() - 12, 8);  // the empty precision's length and the topology's worker count
  version_2[8] = 2;
  const std::string old_path = "test_actors_version_2_checkpoint.bin";
  std::ofstream(old_path, std::ios::binary) << with_crc(version_2);
  const checkpoint old = read_checkpoint(old_path);
  CHECK(old.feedback.empty());
  CHECK(old.parameters == c.parameters);
  CHECK(old.optimizer == c.optimizer);
  std::string future = file_text(path);
  future[8] = 5;
  refused(with_crc(future), "checkpoint format version 5, this build reads versions 2 to 4");
}

TEST_CASE("a topology's own state round-trips in a version 4 checkpoint, version 3 files still load, and a worker's "
          "local optimizer state that does not fit is refused" *
          doctest::test_suite("pipeline")) {
  checkpoint c = small_ddp_checkpoint();
  c.topology_shared = {0.5f, -0.5f, 0.25f};
  c.topology_workers = {{4, 2, {1, 2, 3, 4, 5, 6}, {0.125f, 0.f, -0.125f}}, {3, 0, {}, {}}};
  const std::string path = "test_actors_topology_checkpoint.bin";
  write_checkpoint(path, c);
  const checkpoint back = read_checkpoint(path);
  CHECK(back.topology_shared == c.topology_shared);
  REQUIRE(back.topology_workers.size() == 2);
  CHECK(back.topology_workers[0].local_step == 4);
  CHECK(back.topology_workers[0].local_slots == 2);
  CHECK(back.topology_workers[0].local_values == c.topology_workers[0].local_values);
  CHECK(back.topology_workers[0].own == c.topology_workers[0].own);
  CHECK(back.topology_workers[1].local_values.empty());

  c.topology_workers[0].local_step = 5;  // beyond the checkpoint's 4 steps
  write_checkpoint(path, c);
  refused_checkpoint("test_actors_bad_topology_checkpoint.bin", file_text(path),
                     "worker 0's local optimizer step 5 is beyond the checkpoint's step count 4");
  c.topology_workers[0].local_values.pop_back();
  CHECK_THROWS_WITH(write_checkpoint(path, c),
                    (path + ": a worker's local optimizer state must hold one value per parameter and slot").c_str());

  // Version 3: a file without the section (and version 3 in its header).
  c.topology_shared.clear();
  c.topology_workers.clear();
  write_checkpoint(path, c);
  std::string version_3 = file_text(path);
  version_3.erase(version_3.size() - 8, 4);  // the topology's worker count
  version_3[8] = 3;
  const std::string old_path = "test_actors_version_3_checkpoint.bin";
  std::ofstream(old_path, std::ios::binary) << with_crc(version_3);
  const checkpoint old = read_checkpoint(old_path);
  CHECK(old.topology_workers.empty());
  CHECK(old.optimizer == c.optimizer);
}

TEST_CASE("a damaged, truncated or forged checkpoint is refused before anything big is allocated") {
  checkpoint c = small_ddp_checkpoint();
  write_checkpoint("test_actors_forged.bin", c);
  const std::string whole = file_text("test_actors_forged.bin");
  auto refusal = [](const std::string& bytes) -> std::string {
    try {
      parse_checkpoint(bytes, "ck");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(refusal(whole) == "accepted");
  // Every single flipped byte is caught (by the crc, or the magic and version before it).
  for (std::size_t at = 12; at < whole.size(); ++at) {
    std::string flipped = whole;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    CAPTURE(at);
    CHECK(refusal(flipped).find("ck: corrupt checkpoint: crc32") == 0);
  }
  CHECK(refusal(whole.substr(0, whole.size() - 9)).find("ck: corrupt checkpoint: crc32") == 0);
  // 2^29 parameters claimed by a file of a few dozen bytes, crc and all.
  std::string forged = whole;
  const std::uint64_t huge = 1ull << 29;
  std::memcpy(forged.data() + 32, &huge, sizeof huge);
  CHECK(refusal(with_crc(forged)) ==
        "ck: the parameters claim 536870912 values, more than the file holds (" + std::to_string(whole.size()) + " bytes)");
  // The slot count sits after the parameters and the optimizer step, before the optimizer state,
  // the momenta count, the (empty) error-feedback precision and the (absent) topology state.
  std::string slots = whole;
  const std::size_t slots_at = whole.size() - 4 - 4 - 4 - 4 - 6 * 4 - 4;
  const std::uint32_t many = 7;
  std::memcpy(slots.data() + slots_at, &many, sizeof many);
  CHECK(refusal(with_crc(slots)).find("ck: the optimizer state claim 21 values") == 0);
}

TEST_CASE("a checkpoint whose values cannot be trained from is refused naming the value") {
  checkpoint c = small_ddp_checkpoint();
  auto refusal = [](const checkpoint& bad) -> std::string {
    write_checkpoint("test_actors_values.bin", bad);
    try {
      read_checkpoint("test_actors_values.bin");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(refusal(c) == "accepted");
  checkpoint bad = c;
  bad.parameters[1] = std::nanf("");
  CHECK(refusal(bad) == "test_actors_values.bin: parameter 1 is not finite (nan)");
  bad = c;
  bad.optimizer[4] = -0.5f;  // v of parameter 1
  CHECK(refusal(bad) == "test_actors_values.bin: AdamW second moment 1 is negative (-0.500000)");
  bad = c;
  bad.optimizer[0] = INFINITY;
  CHECK(refusal(bad) == "test_actors_values.bin: optimizer state value 0 is not finite (inf)");
  bad = c;
  bad.optimizer_step = ~0ull;
  CHECK(refusal(bad) == "test_actors_values.bin: optimizer step 18446744073709551615 is beyond the checkpoint's "
                        "step count 4");
}

TEST_CASE("a job with an unwritable checkpoint path fails before training, a finished one says so" *
          doctest::test_suite("pipeline")) {
  quadratic net(dim);
  auto data = std::make_shared<waves>(dim);
  job_config job = sgd_job("ddp", 2, 2);
  job.checkpoint_path = "no/such/directory/ck.bin";
  CHECK_THROWS_WITH_AS(run_job(net, data, data, job),
                       "checkpoint no/such/directory/ck.bin: cannot create a file there (No such file or directory)",
                       std::invalid_argument);
  job.checkpoint_path = "test_actors_finished.bin";
  run_job(net, data, data, job);
  job.resume_path = job.checkpoint_path;
  CHECK_THROWS_WITH_AS(run_job(net, data, data, job),
                       "test_actors_finished.bin: the checkpoint is at step 2 of 2: the job already finished, nothing "
                       "to do",
                       job_already_finished);
  job.steps = 1;
  CHECK_THROWS_WITH_AS(run_job(net, data, data, job),
                       "test_actors_finished.bin: the checkpoint is at step 2, beyond the job's 1 steps",
                       std::invalid_argument);
  // Other data than the checkpoint was written with.
  job.steps = 4;
  auto other = std::make_shared<waves>(dim, 0.5);
  try {
    run_job(net, other, other, job);
    FAIL("resumed on other data");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("test_actors_finished.bin: the checkpoint was written training on other data") == 0);
  }
}

TEST_CASE("a stop request ends every worker after the same step with a checkpoint that resumes exactly" *
          doctest::test_suite("pipeline")) {
  quadratic net(dim);
  auto data = std::make_shared<waves>(dim);
  for (const char* algorithm : {"ddp", "acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    job_config job = sgd_job(algorithm, 3, 6);
    if (std::string(algorithm) == "dlion-mavo") job.optimizer.clear();
    job.metrics_path = "test_actors_stop.jsonl";
    const job_result uninterrupted = run_job(net, data, data, job);

    std::atomic<bool> stop{true};  // asked before the first step: the job stops after it
    job.stop_requested = &stop;
    job.checkpoint_path = "test_actors_stop.bin";
    const job_result stopped = run_job(net, data, data, job);
    REQUIRE(stopped.steps.size() == 1);
    CHECK(read_checkpoint(job.checkpoint_path).steps == 1);

    job.stop_requested = nullptr;
    job.resume_path = job.checkpoint_path;
    job.checkpoint_path.clear();
    const job_result resumed = run_job(net, data, data, job);
    CHECK(resumed.steps.front().step == 2);
    if (std::string(algorithm) != "acco") CHECK(resumed.parameters == uninterrupted.parameters);
    // The metrics file goes on: the stopped step, then the resumed ones.
    std::ifstream metrics(job.metrics_path);
    std::size_t lines = 0;
    for (std::string line; std::getline(metrics, line);) ++lines;
    CHECK(lines == 6);
  }
}

TEST_CASE("a checkpoint resumes bit-identically, and re-shards for another worker count" *
          doctest::test_suite("pipeline")) {
  const std::size_t width = 50;
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  job_config job = adamw_ddp_job();
  job.steps = 6;
  const job_result uninterrupted = run_job(net, data, data, job);

  job.checkpoint_path = "test_actors_resume_3.bin";
  job.steps = 3;
  run_job(net, data, data, job);
  const checkpoint saved = read_checkpoint("test_actors_resume_3.bin");
  CHECK(saved.steps == 3);
  CHECK(saved.data_position == 3 * 2 * 3);
  CHECK(saved.optimizer_step == 3);
  CHECK(saved.slots == 2);

  job.checkpoint_path.clear();
  job.resume_path = "test_actors_resume_3.bin";
  job.steps = 6;
  const job_result resumed = run_job(net, data, data, job);
  CHECK(resumed.parameters == uninterrupted.parameters);
  CHECK(resumed.steps.front().step == 4);

  // 3 workers and 1 worker with 3x the micro-batch see the same examples from the checkpoint on.
  job.steps = 5;
  job.workers = 3;
  const job_result three = run_job(net, data, data, job);
  job.workers = 1;
  job.micro_batch = 9;
  const job_result one = run_job(net, data, data, job);
  REQUIRE(three.parameters.size() == one.parameters.size());
  for (std::size_t i = 0; i < one.parameters.size(); ++i)
    CHECK(three.parameters[i] == doctest::Approx(one.parameters[i]).epsilon(1e-5));

  job.resume_path = "test_actors_resume_3.bin";
  job.algorithm = "dlion-mavo";
  job.optimizer.clear();
  CHECK_THROWS_WITH_AS(run_job(net, data, data, job),
                       "test_actors_resume_3.bin: a ddp checkpoint cannot resume a dlion-mavo job",
                       std::invalid_argument);
}

TEST_CASE("with a 16-bit wire a checkpoint holds the fp32 master weights and resumes bit-identically" *
          doctest::test_suite("pipeline")) {
  const std::size_t width = 50;
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  job_config job = adamw_ddp_job();
  job.wire_precision = "bf16";
  job.steps = 6;
  const job_result uninterrupted = run_job(net, data, data, job);

  job.checkpoint_path = "test_actors_resume_bf16.bin";
  job.steps = 3;
  const job_result first = run_job(net, data, data, job);
  const checkpoint saved = read_checkpoint("test_actors_resume_bf16.bin");
  std::vector<float> rounded = saved.parameters;
  round_to_wire(wire_precision::bf16, rounded);
  CHECK(rounded == first.parameters);             // the workers computed with the rounded copy ...
  CHECK(saved.parameters != first.parameters);    // ... of masters that bf16 cannot hold

  job.checkpoint_path.clear();
  job.resume_path = "test_actors_resume_bf16.bin";
  job.steps = 6;
  CHECK(run_job(net, data, data, job).parameters == uninterrupted.parameters);
}

TEST_CASE("with int8, fp8, fp4, sign, sign2 or sign3 on the wire a checkpoint holds the residuals, masters and replica, and resumes bit-identically" *
          doctest::test_suite("pipeline")) {
  // A snapshot folds each worker's residuals into their ranges' owners (docs/algorithms.md), so
  // the run to compare with writes its checkpoints at the same steps.
  const std::size_t width = 700;
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  for (const std::string precision : {"int8", "fp8", "fp4", "sign", "sign2", "sign3"}) {
    CAPTURE(precision);
    job_config job = adamw_ddp_job();
    job.wire_precision = precision;
    job.steps = 6;
    job.checkpoint_interval = 3;
    job.checkpoint_path = "test_actors_feedback_all_" + precision + ".bin";
    const job_result uninterrupted = run_job(net, data, data, job);

    const std::string path = "test_actors_feedback_" + precision + ".bin";
    job.checkpoint_path = path;
    job.steps = 3;
    const job_result first = run_job(net, data, data, job);
    const checkpoint saved = read_checkpoint(path);
    CHECK(saved.feedback == precision);
    CHECK(saved.replica == first.parameters);     // what the workers compute with ...
    CHECK(saved.parameters != saved.replica);     // ... is not the masters
    CHECK(std::any_of(saved.residuals.begin(), saved.residuals.end(), [](float e) { return e != 0.f; }));

    job.checkpoint_path.clear();
    job.resume_path = path;
    job.steps = 6;
    CHECK(run_job(net, data, data, job).parameters == uninterrupted.parameters);

    // At another worker count each new owner takes its ranges' residuals; the job trains on.
    job.workers = 3;
    const job_result three = run_job(net, data, data, job);
    CHECK(three.replicas_identical);
    CHECK(std::isfinite(three.final_eval_loss));
    job.workers = 2;

    // Residuals written for another precision, or a checkpoint claiming another residual count.
    job.wire_precision = precision == "sign" ? "int8" : "sign";
    CHECK_THROWS_WITH_AS(run_job(net, data, data, job),
                         (path + ": the checkpoint's error-feedback residuals were written for wire precision " +
                          precision + ", this job's is " + job.wire_precision + " (resume it with --wire-precision " +
                          precision + ")")
                             .c_str(),
                         std::invalid_argument);
    job.wire_precision = "fp32";
    CHECK_THROWS_WITH_AS(run_job(net, data, data, job),
                         (path + ": the checkpoint's error-feedback residuals were written for wire precision " +
                          precision + ", this job's is fp32 (resume it with --wire-precision " + precision + ")")
                             .c_str(),
                         std::invalid_argument);
  }
  // An fp32 checkpoint owes nothing: it resumes under int8 with zero residuals.
  job_config job = adamw_ddp_job();
  job.steps = 3;
  job.checkpoint_path = "test_actors_feedback_from_fp32.bin";
  run_job(net, data, data, job);
  CHECK(read_checkpoint(job.checkpoint_path).feedback.empty());
  job.resume_path = job.checkpoint_path;
  job.checkpoint_path.clear();
  job.steps = 5;
  job.wire_precision = "int8";
  CHECK(run_job(net, data, data, job).replicas_identical);
}

namespace {

// A 10-step job of 4 workers, one micro-batch per round, whose worker set the churn tests change.
job_config churn_job(const std::string& algorithm) {
  job_config job;
  job.algorithm = algorithm;
  job.workers = 4;
  job.steps = 10;
  job.micro_batch = 2;
  job.max_accumulation = 1;
  job.cosine = false;
  job.eval_examples = 3;
  return job;
}

}  // namespace

TEST_CASE("error-feedback residuals survive workers leaving, joining and crashing: deterministic, nothing lost" *
          doctest::test_suite("pipeline")) {
  const std::size_t width = 600;
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  for (const auto& [algorithm, precision] :
       {std::pair<std::string, std::string>{"ddp", "int8"}, {"dpu", "fp8"}, {"acco", "sign"}}) {
    CAPTURE(algorithm);
    job_config job = churn_job(algorithm);
    job.wire_precision = precision;
    job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, true}};
    const job_result first = run_job(net, data, data, job);
    CHECK(first.replicas_identical);
    CHECK(run_job(net, data, data, job).parameters == first.parameters);  // replayed: bit-identical
    job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, false}};
    CHECK(run_job(net, data, data, job).parameters == first.parameters);  // the crash lost nothing
  }
}

TEST_CASE("a global batch is kept when workers leave, join and crash: the same micro-batches every step" *
          doctest::test_suite("pipeline")) {
  const std::size_t width = 40;
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  for (const char* algorithm : {"ddp", "acco"}) {
    CAPTURE(algorithm);
    const bool acco = std::string(algorithm) == "acco";
    job_config job = churn_job(algorithm);
    job.global_batch = acco ? 16 : 8;  // 4 workers' one micro-batch per round (ACCO: two rounds a step)
    // 4 → 3 (leave) → 5 (join: each at least one) → 2 (crash).
    job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, true}};
    std::vector<std::uint64_t> micro_batches;
    const job_result first = run_job(net, data, data, job, [&](const step_metrics& m) {
      micro_batches.push_back(m.micro_batches);
    });
    REQUIRE(first.steps.size() == 10);
    for (std::size_t s = 0; s < 10; ++s) {
      CAPTURE(s);
      const std::uint64_t workers = first.steps[s].workers, per_round = std::max<std::uint64_t>(4, workers);
      // An overlapped epoch's first round goes out with each worker's first micro-batch
      // (nothing was in flight to hide more behind): ACCO's first estimate round of an epoch.
      const bool epoch_start = s == 0 || workers != static_cast<std::uint64_t>(first.steps[s - 1].workers);
      CHECK(first.steps[s].micro_batches == (acco ? (epoch_start ? workers : per_round) + per_round : per_round));
    }
    CHECK(first.steps[2].workers == 3);
    CHECK(first.steps[7].workers == 2);
    CHECK(first.replicas_identical);
    CHECK(run_job(net, data, data, job).parameters == first.parameters);  // replayed: bit-identical
    job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, false}};
    CHECK(run_job(net, data, data, job).parameters == first.parameters);  // the crash lost nothing
    // Without it the batch follows the workers: 3 workers train 3 micro-batches a round.
    job.global_batch = 0;
    const job_result following = run_job(net, data, data, job);
    CHECK(following.steps[2].micro_batches == (acco ? 6 : 3));
    CHECK(following.parameters != first.parameters);
  }
}

TEST_CASE("a worker whose model fails mid-run fails the job with its message, without hanging" *
          doctest::test_suite("pipeline")) {
  for (const char* algorithm : {"ddp", "acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    failing_quadratic net(dim, 7);
    auto data = std::make_shared<waves>(dim);
    job_config job = sgd_job(algorithm, 3, 20);
    if (std::string(algorithm) == "dlion-mavo") job.optimizer.clear();
    try {
      run_job(net, data, data, job);
      FAIL("the job succeeded");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      CHECK(what.find(" failed: compute: device lost") != std::string::npos);
    }
  }
}

TEST_CASE("workers leave, join and crash in a running job: deterministic, nothing lost" *
          doctest::test_suite("pipeline")) {
  const std::size_t width = 40;
  quadratic net(width);
  auto data = std::make_shared<waves>(width);
  for (const char* algorithm : {"acco", "dlion-mavo"}) {
    CAPTURE(algorithm);
    job_config job = churn_job(algorithm);
    // 4 → 3 (leave) → 5 (join) → 2 (crash: a worker dies mid-round, three others leave with it).
    job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, true}};
    job.metrics_path = std::string("churn_") + algorithm + ".jsonl";
    std::vector<int> workers_per_step;
    const job_result first = run_job(net, data, data, job, [&](const step_metrics& m) {
      workers_per_step.push_back(m.workers);
    });
    // The metrics file holds every epoch's lines, each with its epoch (the crashed epoch's
    // partial step, if its line was written, comes again with the next epoch).
    std::ifstream metrics(job.metrics_path);
    std::string line, last;
    int lines = 0;
    while (std::getline(metrics, line)) ++lines, last = line;
    CHECK(lines >= 10);
    CHECK(last.find("\"epoch\":4") != std::string::npos);
    CHECK(last.find("\"step\":10") != std::string::npos);
    job.metrics_path.clear();
    const job_result second = run_job(net, data, data, job);
    CHECK(first.parameters == second.parameters);  // replayed: bit-identical
    REQUIRE(first.steps.size() == 10);
    for (std::size_t s = 0; s < 10; ++s) CHECK(first.steps[s].step == s + 1);
    CHECK(first.steps[1].workers == 4);
    CHECK(first.steps[2].workers == 3);
    CHECK(first.steps[4].workers == 5);
    CHECK(first.steps[7].workers == 2);
    CHECK(first.replicas_identical);

    // Nothing lost in the crash: the survivors continue from exactly the state after step 7,
    // the same as a clean change to 2 workers at step 7.
    job.membership = {{2, 3, false}, {4, 5, false}, {7, 2, false}};
    const job_result clean = run_job(net, data, data, job);
    CHECK(clean.parameters == first.parameters);
  }
}
