#include "actors/accumulator_actor.hpp"

#include "observe/thread_cpu.hpp"
#include "observe/trace.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <optional>

namespace accord {
namespace {

using clock_type = std::chrono::steady_clock;

struct accumulator_state {
  accumulator_setup setup;
  tensor accumulated;                  // gradient sum still being filled
  tensor parameters;                   // the compute actor's current parameters (shared, not a copy)
  round_totals totals;                 // what `accumulated` holds
  std::size_t since_launch = 0;        // micro-batches since the last round was launched
  std::uint64_t round = 0;             // the round in flight, or the next to launch
  std::uint64_t consumed = 0;          // micro-batches the compute actor has taken
  bool in_flight = false;
  bool computing = false;              // the compute actor holds `accumulated`
  bool swapping = false;               // new parameters go in, the old ones are on their way back
  bool fetching = false;               // the sum comes back from a resident compute actor
  bool fetched = false;                // `accumulated` holds the sum of every micro-batch it was lent for
  bool finished = false;
  std::uint64_t applied = 0;           // micro-batches of every worker the real rounds applied
  float learning_rate = 0;             // the in-flight round's
  bool app_ended = false;              // the app submits no more micro-batches (worker::end)
  tensor completed;                    // app-driven: the parameters of the last completed step
  std::optional<round_result> arrived;  // the in-flight round's result, not yet applied
  std::vector<tensor> spares;          // buffers to reuse, so a worker allocates no more than three
  double compute_seconds = 0;
  double communication_seconds = 0;
  double wait_seconds = 0;
  std::optional<clock_type::time_point> idle_since;  // compute idle waiting for a round
  thread_cpu cpu_at_start;  // this process may have run other jobs' threads before
};

using self_pointer = accumulator_actor::stateful_pointer<accumulator_state>;

// A spare buffer (stale contents), or a new one of zeros.
tensor take_spare(accumulator_state& s) {
  if (s.spares.empty()) return make_tensor(s.setup.parameter_count, s.setup.meter);
  tensor t = std::move(s.spares.back());
  s.spares.pop_back();
  return t;
}

tensor take_zeroed(accumulator_state& s) {
  tensor t = take_spare(s);
  if (s.setup.memory)
    s.setup.memory->zero(t);
  else
    std::fill(t->begin(), t->end(), 0.f);
  return t;
}

void fail(self_pointer self, const std::string& what) {
  self->state.finished = true;
  self->send(self->state.setup.coordinator, worker_failure{self->state.setup.rank, what});
}

// A diverged job stops at the first non-finite loss or parameter, before that state reaches a
// checkpoint: the last one written stays the last good one.
std::string divergence(const accumulator_state& s, std::uint64_t round, const std::string& what) {
  return "step " + std::to_string(step_of_round(s.setup.pipe, round) + 1) + ": " + what +
         " (the training diverged; a lower learning rate may help)";
}

void stop_idling(accumulator_state& s) {
  if (!s.idle_since) return;
  const auto waited = clock_type::now() - *s.idle_since;
  s.wait_seconds += std::chrono::duration<double>(waited).count();
  if (trace_recorder* trace = trace_recorder::active()) {
    const auto now = trace_clock::now();
    trace->span(worker_track(s.setup.rank, trace_role::accumulator), "wait for a round",
                now - std::chrono::duration_cast<trace_clock::duration>(waited), now);
  }
  s.idle_since.reset();
}

void advance(self_pointer self);

void on_gradient(self_pointer self, gradient_result& g) {
  auto& s = self->state;
  if (s.setup.buckets) s.setup.buckets->disarm();
  s.computing = false;
  s.compute_seconds += g.seconds;
  s.consumed = g.position;
  s.accumulated = std::move(g.sum);
  if (g.ended) {  // the next round ends the job without a step
    s.app_ended = true;
    return advance(self);
  }
  if (!s.finished && !std::isfinite(g.loss))
    fail(self, divergence(s, s.round, "the training loss is not finite"));
  if (!s.finished) {
    s.totals.micro_batches += 1;
    s.totals.loss_sum += g.loss;
    s.totals.items += g.items;
    ++s.since_launch;
  }
  advance(self);
}

void request_micro_batch(self_pointer self) {
  auto& s = self->state;
  stop_idling(s);
  s.computing = true;
  s.fetched = false;
  // The model adds the micro-batch's gradient straight into the sum: no gradient buffer of its own.
  if (!s.accumulated) s.accumulated = take_zeroed(s);
  // The micro-batch that completes a synchronous round (the only rounds with buckets): its
  // finished gradients go out as buckets while its backward runs; the round launches right after.
  if (s.setup.buckets && s.since_launch + 1 >= s.setup.accumulation) s.setup.buckets->arm(s.round, s.accumulated);
  self->request(s.setup.compute, caf::infinite, compute_atom::value, std::move(s.accumulated))
      .then([self](gradient_result& g) { on_gradient(self, g); },
            [self](caf::error& e) { fail(self, "compute: " + describe(self->system(), e)); });
}

void on_round_result(self_pointer self, round_result& r) {
  auto& s = self->state;
  s.communication_seconds += r.seconds;
  s.arrived = std::move(r);
  advance(self);
}

void launch_round(self_pointer self) {
  auto& s = self->state;
  const auto& setup = s.setup;
  round_request request;
  request.round = s.round;
  request.estimate = is_estimate_round(setup.pipe, s.round);
  request.learning_rate = setup.learning_rate(setup.schedule_micro_batches ? s.applied / setup.schedule_micro_batches
                                                                           : step_of_round(setup.pipe, s.round));
  s.learning_rate = request.learning_rate;
  request.local = s.totals;
  request.local.ended = s.app_ended ? 1 : 0;
  request.snapshot = setup.wants_snapshot && setup.wants_snapshot(s.round);
  request.keep = setup.wants_kept && setup.wants_kept(s.round);
  // Compute only reads its parameters until this round's result swaps them, so the round may
  // read them too: block-quantized estimates and real rounds travel as a difference from them,
  // with no copy kept anywhere.
  request.current = s.parameters;
  if (keeps_accumulation(setup.pipe, s.round)) {
    // ACCO's estimate round: g̃ goes on the wire and also stays for the real round.
    request.buffer = take_spare(s);
    if (setup.memory)
      setup.memory->copy(s.accumulated, request.buffer);
    else
      std::copy(s.accumulated->begin(), s.accumulated->end(), request.buffer->begin());
  } else {
    request.buffer = std::move(s.accumulated);
    s.totals = {};
  }
  s.since_launch = 0;
  s.in_flight = true;
  self->request(setup.communicator, caf::infinite, std::move(request))
      .then([self](round_result& r) { on_round_result(self, r); },
            [self](caf::error& e) { fail(self, describe(self->system(), e)); });
}

// A resident compute actor hands the sum's values back (once per round, never per micro-batch).
void fetch_sum(self_pointer self) {
  auto& s = self->state;
  s.fetching = true;
  self->request(s.setup.compute, caf::infinite, fetch_atom::value, std::move(s.accumulated))
      .then(
          [self](tensor& sum) {
            auto& s = self->state;
            s.accumulated = std::move(sum);
            s.fetching = false;
            s.fetched = true;
            advance(self);
          },
          [self](caf::error& e) { fail(self, "compute: " + describe(self->system(), e)); });
}

void finish_round(self_pointer self) {
  auto& s = self->state;
  round_result r = std::move(*s.arrived);
  s.arrived.reset();
  s.in_flight = false;
  stop_idling(s);
  const bool ended = r.global.ended > 0;
  if (ended) r.parameters = s.completed;  // the round stepped nothing: the job ends where it stood

  if (!std::all_of(r.parameters->begin(), r.parameters->end(), [](float p) { return std::isfinite(p); })) {
    fail(self, divergence(s, r.round, "the parameters are not finite after the update"));
    return;
  }
  const bool last = r.round + 1 == s.setup.rounds || r.last_of_epoch;
  if (last && s.setup.on_final_parameters) s.setup.on_final_parameters(*r.parameters);
  round_report report;
  report.rank = s.setup.rank;
  report.round = r.round;
  report.estimate = is_estimate_round(s.setup.pipe, r.round);
  report.global = r.global;
  report.compute_seconds = s.compute_seconds;
  report.communication_seconds = s.communication_seconds;
  report.wait_seconds = s.wait_seconds;
  report.cpu = thread_cpu_seconds(s.setup.rank, s.setup.reports_shared_threads) - s.cpu_at_start;
  report.parameter_hash = r.parameter_hash;
  report.traffic = r.traffic;
  report.consensus_distance = r.consensus_distance;
  report.consumed = s.consumed;
  report.state = std::move(r.state);
  report.kept = r.kept;
  report.observations = r.observations;
  report.learning_rate = s.learning_rate;
  if (!ended && !report.estimate) s.applied += static_cast<std::uint64_t>(r.global.micro_batches);
  if (s.setup.wants_parameters(r.round) || r.last_of_epoch)  // the last round's are needed nowhere else
    report.parameters = last ? std::move(r.parameters) : make_tensor(*r.parameters, s.setup.meter);
  self->send(s.setup.coordinator, std::move(report));
  ++s.round;
  if (last) {
    s.finished = true;
    self->quit();
    return;
  }

  // A completed step's parameters replace the last ones kept; those go back to the spares
  // unless compute still holds them (it returns them below).
  if (s.setup.app_driven && !is_estimate_round(s.setup.pipe, r.round)) {
    tensor previous = std::exchange(s.completed, r.parameters);
    if (previous != s.parameters) s.spares.push_back(std::move(previous));
  }
  // Between two micro-batches (compute is idle now): the new parameters take effect. The next
  // round launches once the old ones are back, so that it reuses their buffer.
  s.swapping = true;
  s.parameters = r.parameters;
  self->request(s.setup.compute, caf::infinite, params_atom::value, std::move(r.parameters))
      .then(
          [self](tensor& old) {
            // ACCO's θ_t stays kept while θ̃ computes.
            if (old != self->state.completed) self->state.spares.push_back(std::move(old));
            self->state.swapping = false;
            advance(self);
          },
          [self](caf::error& e) { fail(self, "compute: " + describe(self->system(), e)); });
}

// Micro-batches round `round` waits for before it launches: a synchronous round its
// accumulation; an overlapped one, which fills up while in flight, anything — with fixed steps
// what the stage before it takes (ACCO's real round: the estimate stage's), so that the first
// round takes as many as the later ones.
std::size_t launch_after(const accumulator_setup& setup, std::uint64_t round, bool overlap, std::size_t least) {
  if (!overlap) return least;
  if (!setup.fixed_steps) return 1;
  return is_estimate_round(setup.pipe, round + 1) ? setup.estimate_accumulation : setup.accumulation;
}

// The one place that decides what the worker does next.
void advance(self_pointer self) {
  auto& s = self->state;
  // A micro-batch in flight belongs to the current round.
  if (s.finished || s.computing || s.swapping || s.fetching) return;
  const auto& setup = s.setup;
  const bool overlap = overlaps_round(setup.pipe, s.round, setup.dpu_warmup);
  // Micro-batches while this round is in flight: at least `least`, at most `most` (0: no cap).
  const bool estimate = is_estimate_round(setup.pipe, s.round);
  const std::size_t least = estimate ? setup.estimate_accumulation : setup.accumulation;
  const std::size_t most = estimate ? setup.estimate_max_accumulation : setup.max_accumulation;
  // With fixed steps nothing is computed while the job's last round is in flight: no round
  // would use it (the app's loop sees its last step end with its last micro-batch).
  const bool unused = setup.fixed_steps && s.round + 1 == setup.rounds;
  if (!s.in_flight) {
    // Overlapped rounds launch as soon as there is anything to send and fill up while in
    // flight; synchronous rounds launch once the accumulation is complete. Once the app has
    // ended, the next round tells every worker so.
    if (s.app_ended || s.since_launch >= launch_after(setup, s.round, overlap, least)) {
      if (setup.fetch_sums && !s.fetched) return fetch_sum(self);  // advances again once back
      launch_round(self);
    }
  } else if (s.arrived && (!overlap || s.app_ended || unused || s.since_launch >= least)) {
    finish_round(self);
    return;
  }
  const bool capped = unused || (most && s.since_launch >= most);
  if (s.app_ended) return;  // nothing more to compute
  if (!s.in_flight || (overlap && !capped))
    request_micro_batch(self);
  else if (!s.idle_since)
    s.idle_since = clock_type::now();  // compute waits for the round
}

accumulator_actor::behavior_type accumulator_behavior(self_pointer self, accumulator_setup setup) {
  self->state.setup = std::move(setup);
  self->state.round = self->state.setup.first_round;
  self->state.parameters = std::move(self->state.setup.parameters);
  if (self->state.setup.app_driven) self->state.completed = self->state.parameters;
  self->state.applied = self->state.setup.applied;
  return {
      [self](start_atom) {
        self->state.cpu_at_start = thread_cpu_seconds(self->state.setup.rank, self->state.setup.reports_shared_threads);
        advance(self);
      },
  };
}

}  // namespace

accumulator_actor spawn_accumulator_actor(caf::actor_system& system, accumulator_setup setup) {
  return system.spawn(accumulator_behavior, std::move(setup));
}

}  // namespace accord
