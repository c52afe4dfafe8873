#include "actors/coordinator_actor.hpp"

#include "recovery/checkpoint.hpp"
#include "observe/metrics_file.hpp"
#include "observe/thread_cpu.hpp"
#include "observe/trace.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <utility>

namespace accord {
namespace {

using clock_type = std::chrono::steady_clock;

// What the coordinator remembers of a worker's cumulative counters at its previous report.
struct worker_marks {
  std::uint64_t bytes_sent = 0;
  double communication_seconds = 0;
  double wait_seconds = 0;
  double compute_seconds = 0;
  thread_cpu cpu;
};

struct round_progress {
  int reports = 0;
  std::uint64_t hash = 0;
  int hash_rank = -1;
  round_totals global;
  tensor parameters;
  std::vector<rule_state> states;    // every worker's, when a checkpoint is due
  std::uint64_t fewest_consumed = ~0ull;
  bool kept = false;
  double consensus_distance = -1;
  std::vector<std::uint64_t> staleness;  // summed over the reports
  std::vector<std::uint64_t> worker_gradients;
  std::vector<edge_traffic> edge_bytes;
  double gradient_square_sum = 0;
  double vote_agreement_sum = 0;
  int votes = 0;
  float learning_rate = -1;  // the workers' (-1: none reported)
};

struct coordinator_state {
  coordinator_setup setup;
  clock_type::time_point epoch_started = clock_type::now();
  clock_type::time_point last_step = clock_type::now();
  std::map<std::uint64_t, round_progress> rounds;
  std::vector<worker_marks> marks;
  // Sums over workers since the last completed step (ACCO: its estimate round included).
  double step_bytes = 0, step_communication = 0, step_wait = 0;
  std::vector<worker_seconds> step_workers;  // by rank, since the last completed step
  thread_cpu step_cpu;
  std::deque<step_metrics> pending;  // completed steps waiting for their evaluation
  std::map<std::uint64_t, double> evaluations;
  int evaluations_running = 0;
  std::uint64_t last_evaluated_step = 0;  // the last step evaluate() was asked for
  std::vector<std::pair<std::uint64_t, tensor>> deferred;  // (step, parameters) to evaluate at the end
  std::uint64_t completed_rounds = 0;
  std::optional<metrics_file> metrics;
  std::vector<caf::typed_response_promise<bool>> waiters;
  std::optional<std::string> failure;
  bool done = false;
};

using self_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

void finish_if_done(self_pointer self) {
  auto& s = self->state;
  if (s.done) return;
  if (s.failure) {
    s.done = true;
    for (auto& w : s.waiters) w.deliver(caf::make_error(caf::sec::runtime_error, *s.failure));
    return;
  }
  if (s.completed_rounds == s.setup.rounds && s.pending.empty() && s.evaluations_running == 0) {
    s.done = true;
    auto& r = *s.setup.result;
    r.seconds = std::chrono::duration<double>(clock_type::now() - s.setup.started).count();
    if (trace_recorder* trace = trace_recorder::active()) {
      const auto wall_now = trace_clock::now();
      trace->span(coordinator_track, "epoch",
                  wall_now - std::chrono::duration_cast<trace_clock::duration>(clock_type::now() - s.epoch_started),
                  wall_now, static_cast<std::int64_t>(s.setup.epoch));
    }
    const double n = s.setup.workers;
    double compute = 0, communication = 0, wait = 0;
    for (const auto& m : s.marks) {
      compute += m.compute_seconds;
      communication += m.communication_seconds;
      wait += m.wait_seconds;
      r.bytes_sent += m.bytes_sent;
      r.cpu += m.cpu;
    }
    r.compute_seconds = compute / n;
    r.communication_seconds = communication / n;
    r.wait_seconds = wait / n;
    r.hidden_fraction = communication > 0 ? std::clamp(1.0 - wait / communication, 0.0, 1.0) : 1.0;
    const double steps = static_cast<double>(std::max<std::size_t>(1, r.steps.size()));
    r.bits_per_parameter_per_step =
        8.0 * static_cast<double>(r.bytes_sent) / n / static_cast<double>(s.setup.parameter_count) / steps;
    r.rounds = s.completed_rounds;
    for (auto& w : s.waiters) w.deliver(true);
  }
}

void fail_job(self_pointer self, std::string what) {
  auto& s = self->state;
  if (s.failure) return;
  s.failure = std::move(what);
  if (s.setup.abort) s.setup.abort();
  finish_if_done(self);
}

void flush_steps(self_pointer self) {
  auto& s = self->state;
  while (!s.pending.empty()) {
    step_metrics& m = s.pending.front();
    auto evaluated = s.evaluations.find(m.step);
    if (m.eval_loss == -2) {  // evaluation requested, not back yet
      if (evaluated == s.evaluations.end()) break;
      m.eval_loss = evaluated->second;
    }
    if (s.metrics) s.metrics->write(m);
    if (s.setup.on_step) s.setup.on_step(m);
    s.setup.result->steps.push_back(m);
    if (m.eval_loss >= 0) s.setup.result->final_eval_loss = m.eval_loss;
    s.pending.pop_front();
  }
  finish_if_done(self);
}

// Asks the evaluator for the held-out loss at `parameters`; `take` records it, then the steps
// waiting for it go out.
void request_evaluation(self_pointer self, tensor parameters, std::function<void(coordinator_state&, double)> take) {
  ++self->state.evaluations_running;
  self->request(self->state.setup.evaluator, caf::infinite, evaluate_atom::value, std::move(parameters))
      .then(
          [self, take = std::move(take)](double loss) {
            --self->state.evaluations_running;
            take(self->state, loss);
            flush_steps(self);
          },
          [self](caf::error& e) {
            --self->state.evaluations_running;
            fail_job(self, "evaluator: " + describe(self->system(), e));
          });
}

void evaluate(self_pointer self, std::uint64_t step, tensor parameters) {
  auto& s = self->state;
  s.last_evaluated_step = std::max(s.last_evaluated_step, step);
  if (s.setup.defer_evaluation && s.completed_rounds < s.setup.rounds) {
    // An unmetered copy: waiting evaluations are not the workers' memory.
    s.deferred.emplace_back(step, std::make_shared<std::vector<float>>(*parameters));
    return;
  }
  request_evaluation(self, std::move(parameters),
                     [step](coordinator_state& state, double loss) { state.evaluations[step] = loss; });
}

// Where every worker's stream can restart after this round: the slowest worker's count of
// micro-batches, interleaved over the workers.
std::uint64_t data_position(const coordinator_state& s, const round_progress& progress) {
  return s.setup.data_offset +
         progress.fewest_consumed * static_cast<std::uint64_t>(s.setup.workers) * s.setup.micro_batch;
}

// Optimizer steps done once `round` completed: an ending round (round_totals::ended) stepped nothing.
std::uint64_t steps_through(pipeline pipe, std::uint64_t round, const round_totals& global) {
  return step_of_round(pipe, round) + (global.ended > 0 ? 0 : 1);
}

// A worker's app ended (worker::end): the round before was the job's last step. Its final
// parameters are evaluated unless that step's were.
void end_without_step(self_pointer self, std::uint64_t round, const round_progress& progress) {
  auto& s = self->state;
  s.setup.rounds = round + 1;
  s.setup.result->data_ended = true;
  const std::uint64_t steps = steps_through(s.setup.pipe, round, progress.global);
  if (progress.parameters && steps > s.last_evaluated_step) {
    s.last_evaluated_step = steps;
    // No step's metrics wait for it (that step went out unevaluated): it is the job's final loss.
    request_evaluation(self, progress.parameters, [](coordinator_state& state, double loss) {
      if (loss >= 0) state.setup.result->final_eval_loss = loss;
    });
  }
  for (auto& [step, parameters] : std::exchange(s.deferred, {})) evaluate(self, step, std::move(parameters));
  flush_steps(self);
}

// Reassembles the workers' states into one checkpoint: sharded optimizer slots go back to
// their place in the flat buffer, Distributed Lion momenta and a topology's own states are kept
// one per worker.
void write_job_checkpoint(self_pointer self, std::uint64_t round, round_progress& progress) {
  auto& s = self->state;
  const std::size_t n = s.setup.parameter_count;
  checkpoint c;
  c.steps = steps_through(s.setup.pipe, round, progress.global);
  c.data_position = data_position(s, progress);
  c.signature = s.setup.signature;
  c.algorithm = s.setup.algorithm;
  c.seconds = std::chrono::duration<double>(clock_type::now() - s.setup.started).count();
  c.data_hash = s.setup.data_hash;
  c.parameters = *progress.parameters;
  const std::vector<float>* restart_from = nullptr;
  for (const rule_state& state : progress.states) {
    // A topology's own state (local-sgd's), one per worker in rank order; its parameters are
    // what every worker restarts from (the copies may differ from them, and from each other).
    if (state.topology.present) {
      const kept_topology& kept = state.topology;
      if (kept.parameters.size() != n) throw std::invalid_argument("checkpoint: a worker's topology parameters do not fit");
      restart_from = &kept.parameters;
      c.topology_shared = kept.shared;
      c.topology_workers.push_back({kept.local_step, kept.local_slots, kept.local_values, kept.own});
    }
    if (state.momentum) {
      c.momenta.push_back(state.values);
      continue;
    }
    // Error feedback (int8, fp8, fp4, sign, sign2, sign3): each owner's range of the residuals summed over workers, and
    // the replica, which the masters below replace in c.parameters.
    if (!state.feedback.empty()) {
      if (c.feedback.empty()) {
        c.feedback = state.feedback;
        c.residuals.assign(n, 0.f);
        c.replica = *progress.parameters;
      }
      if (state.feedback != c.feedback || state.begin > n || state.residual.size() > n - state.begin)
        throw std::invalid_argument("checkpoint: a worker's error-feedback residuals do not fit the others'");
      std::copy(state.residual.begin(), state.residual.end(), c.residuals.begin() + static_cast<std::ptrdiff_t>(state.begin));
    }
    // A 16-bit wire leaves every worker a rounded copy: the checkpoint holds the fp32 masters.
    if (state.begin > n || state.master.size() > n - state.begin)
      throw std::invalid_argument("checkpoint: a worker's master weights do not fit the parameters");
    std::copy(state.master.begin(), state.master.end(), c.parameters.begin() + static_cast<std::ptrdiff_t>(state.begin));
    c.optimizer_step = state.optimizer_step;
    c.slots = state.slots;
    c.optimizer.resize(std::size_t{state.slots} * n);
    const std::size_t shard = state.slots ? state.values.size() / state.slots : 0;
    for (std::size_t slot = 0; slot < state.slots; ++slot)
      std::copy_n(state.values.begin() + static_cast<std::ptrdiff_t>(slot * shard), shard,
                  c.optimizer.begin() + static_cast<std::ptrdiff_t>(slot * n + state.begin));
  }
  if (restart_from) c.parameters = *restart_from;  // not the masters of an algorithm the topology does not step
  if (!s.setup.checkpoint_path.empty()) {
    write_checkpoint(s.setup.checkpoint_path, c);
    if (s.setup.on_checkpoint_written) s.setup.on_checkpoint_written(s.setup.checkpoint_path, c.steps);
  }
  if (s.setup.on_checkpoint) s.setup.on_checkpoint(c);
}

void complete_round(self_pointer self, std::uint64_t round, round_progress& progress) {
  auto& s = self->state;
  ++s.completed_rounds;
  if (!progress.states.empty()) {
    try {
      write_job_checkpoint(self, round, progress);
    } catch (const std::exception& e) {
      fail_job(self, e.what());
      return;
    }
  }
  if (progress.global.ended > 0) return end_without_step(self, round, progress);
  if (is_estimate_round(s.setup.pipe, round)) return;  // its traffic counts towards the step
  if (progress.kept && s.setup.on_kept) s.setup.on_kept(step_of_round(s.setup.pipe, round) + 1, data_position(s, progress));

  const auto now = clock_type::now();
  step_metrics m;
  m.step = step_of_round(s.setup.pipe, round) + 1;
  m.workers = s.setup.workers;
  m.epoch = s.setup.epoch;
  m.train_loss = progress.global.micro_batches > 0 ? progress.global.loss_sum / progress.global.micro_batches : 0;
  m.micro_batches = static_cast<std::uint64_t>(progress.global.micro_batches);
  m.seconds = std::chrono::duration<double>(now - s.setup.started).count();
  const double step_seconds = std::chrono::duration<double>(now - s.last_step).count();
  m.items = progress.global.items;
  m.items_per_second = step_seconds > 0 ? m.items / step_seconds : 0;
  m.consensus_distance = progress.consensus_distance;
  m.staleness = progress.staleness;
  m.worker_gradients = progress.worker_gradients;
  m.edge_bytes = progress.edge_bytes;
  m.bits_per_parameter = 8.0 * s.step_bytes / s.setup.workers / static_cast<double>(s.setup.parameter_count);
  m.hidden_fraction = s.step_communication > 0
                          ? std::clamp(1.0 - s.step_wait / s.step_communication, 0.0, 1.0)
                          : 1.0;
  if (trace_recorder* trace = trace_recorder::active()) {
    const auto wall_now = trace_clock::now();
    trace->span(coordinator_track, "step", wall_now - std::chrono::duration_cast<trace_clock::duration>(now - s.last_step),
                wall_now, static_cast<std::int64_t>(m.step));
  }
  if (progress.learning_rate >= 0)
    m.learning_rate = progress.learning_rate;
  else if (s.setup.learning_rate)
    m.learning_rate = s.setup.learning_rate(m.step - 1);
  m.bytes_sent = static_cast<std::uint64_t>(s.step_bytes);
  m.gradient_norm = std::sqrt(progress.gradient_square_sum);
  if (progress.votes > 0) m.vote_agreement = progress.vote_agreement_sum / progress.votes;
  m.per_worker = std::exchange(s.step_workers, std::vector<worker_seconds>(s.step_workers.size()));
  m.cpu = std::exchange(s.step_cpu, {});
  s.last_step = now;
  s.step_bytes = s.step_communication = s.step_wait = 0;
  if (progress.parameters && step_due(s.setup.pipe, round, s.setup.rounds, s.setup.eval_interval)) {
    m.eval_loss = -2;
    evaluate(self, m.step, progress.parameters);
  }
  s.pending.push_back(m);
  if (progress.global.changes > 0) s.setup.rounds = round + 1;  // the workers end the epoch here
  if (s.completed_rounds == s.setup.rounds)
    for (auto& [step, parameters] : std::exchange(s.deferred, {})) evaluate(self, step, std::move(parameters));
  flush_steps(self);
}

coordinator_actor::behavior_type coordinator_behavior(self_pointer self, coordinator_setup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.marks.resize(static_cast<std::size_t>(s.setup.workers));
  s.step_workers.resize(static_cast<std::size_t>(s.setup.workers));
  s.completed_rounds = s.setup.first_round;
  if (!s.setup.metrics_path.empty()) {
    try {
      s.metrics.emplace(s.setup.metrics_path, s.setup.append_metrics);
      for (const std::string& line : s.setup.metrics_events) s.metrics->write_event(line);
    } catch (const std::exception& e) {
      s.failure = e.what();
    }
  }
  return {
      [self](round_report& report) {
        auto& s = self->state;
        if (s.failure) return;
        auto& mark = s.marks.at(static_cast<std::size_t>(report.rank));
        s.step_bytes += static_cast<double>(report.traffic.bytes_sent - mark.bytes_sent);
        s.step_communication += report.communication_seconds - mark.communication_seconds;
        s.step_wait += report.wait_seconds - mark.wait_seconds;
        worker_seconds& spent = s.step_workers.at(static_cast<std::size_t>(report.rank));
        spent.compute += report.compute_seconds - mark.compute_seconds;
        spent.communication += report.communication_seconds - mark.communication_seconds;
        spent.wait += report.wait_seconds - mark.wait_seconds;
        s.step_cpu += report.cpu - mark.cpu;
        mark = {report.traffic.bytes_sent, report.communication_seconds, report.wait_seconds,
                report.compute_seconds, report.cpu};

        auto& progress = s.rounds[report.round];
        progress.global = report.global;
        progress.fewest_consumed = std::min(progress.fewest_consumed, report.consumed);
        if (report.state.present) {
          progress.states.resize(static_cast<std::size_t>(s.setup.workers));
          progress.states[static_cast<std::size_t>(report.rank)] = std::move(report.state);
        }
        if (report.parameters) progress.parameters = std::move(report.parameters);
        progress.kept = progress.kept || report.kept;
        // The app's optimizer's own rate (a torch scheduler's) where it has one, else the schedule's.
        progress.learning_rate = static_cast<float>(
            report.observations.learning_rate >= 0 ? report.observations.learning_rate : report.learning_rate);
        progress.consensus_distance = std::max(progress.consensus_distance, report.consensus_distance);
        if (progress.staleness.size() < report.staleness.size()) progress.staleness.resize(report.staleness.size());
        for (std::size_t k = 0; k < report.staleness.size(); ++k) progress.staleness[k] += report.staleness[k];
        if (!report.worker_gradients.empty()) progress.worker_gradients = std::move(report.worker_gradients);
        if (!report.edge_bytes.empty()) progress.edge_bytes = std::move(report.edge_bytes);
        progress.gradient_square_sum += report.observations.gradient_square_sum;
        if (report.observations.vote_agreement >= 0) {
          progress.vote_agreement_sum += report.observations.vote_agreement;
          ++progress.votes;
        }
        if (report.parameter_hash) {
          if (progress.hash_rank < 0) {
            progress.hash = report.parameter_hash;
            progress.hash_rank = report.rank;
          } else if (progress.hash != report.parameter_hash) {
            s.setup.result->replicas_identical = false;
            fail_job(self, "replicas diverged after round " + std::to_string(report.round) +
                               ": rank " + std::to_string(progress.hash_rank) + " and rank " +
                               std::to_string(report.rank) + " hold different parameters");
            return;
          }
        }
        if (++progress.reports == s.setup.workers) {
          complete_round(self, report.round, progress);
          s.rounds.erase(report.round);
        }
      },
      [self](const worker_failure& failure) {
        fail_job(self, "worker " + std::to_string(failure.rank) + " failed: " + failure.what);
      },
      [self](wait_atom) -> caf::result<bool> {
        auto& s = self->state;
        if (s.done) {
          if (s.failure) return caf::make_error(caf::sec::runtime_error, *s.failure);
          return true;
        }
        s.waiters.push_back(self->make_response_promise<bool>());
        auto promise = s.waiters.back();
        finish_if_done(self);
        return promise;
      },
  };
}

}  // namespace

bool step_due(pipeline pipe, std::uint64_t round, std::uint64_t rounds, std::uint64_t interval) {
  if (is_estimate_round(pipe, round)) return false;
  if (round + 1 == rounds) return true;
  const std::uint64_t step = step_of_round(pipe, round) + 1;
  return interval && step % interval == 0;
}

coordinator_actor spawn_coordinator_actor(caf::actor_system& system, coordinator_setup setup) {
  return system.spawn(coordinator_behavior, std::move(setup));
}

void add_epoch_result(job_result& total, job_result&& epoch) {
  if (!epoch.parameters.empty()) total.parameters = std::move(epoch.parameters);
  if (epoch.final_eval_loss >= 0) total.final_eval_loss = epoch.final_eval_loss;
  total.compute_seconds += epoch.compute_seconds;
  total.communication_seconds += epoch.communication_seconds;
  total.wait_seconds += epoch.wait_seconds;
  total.bytes_sent += epoch.bytes_sent;
  total.cpu += epoch.cpu;
  total.rounds = epoch.rounds;  // counted from the job's start
  total.replicas_identical = total.replicas_identical && epoch.replicas_identical;
  total.data_ended = total.data_ended || epoch.data_ended;
  total.state_bytes_per_worker = epoch.state_bytes_per_worker;
  total.peak_bytes_per_worker = std::max(total.peak_bytes_per_worker, epoch.peak_bytes_per_worker);
  total.minimum_bytes_per_worker = epoch.minimum_bytes_per_worker;
  total.gradient_buffers = epoch.gradient_buffers;
}

}  // namespace accord
