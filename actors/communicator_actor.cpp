#include "actors/communicator_actor.hpp"

#include "observe/thread_cpu.hpp"
#include "observe/trace.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <utility>

namespace accord {
namespace {

struct communicator_state {
  std::shared_ptr<communicator_setup> setup;
  // The gradient buckets reduced ahead of the next round: its buffer, when the first one
  // started (they travel from then on, beside backward), and the error of one that failed (the
  // round reports it).
  tensor bucketed;
  std::optional<std::chrono::steady_clock::time_point> first_bucket_start;
  std::string bucket_failure;
};

// A bucket's reduce-scatter, started on this thread while the compute thread finishes backward;
// it travels beside the next ones until the round finishes them.
void reduce_bucket(communicator_state& state, const gradient_bucket& bucket) {
  communicator_setup& s = *state.setup;
  if (!state.bucket_failure.empty()) return;
  if (state.bucketed && state.bucketed != bucket.buffer) {
    state.bucket_failure = "a gradient bucket of round " + std::to_string(bucket.round) +
                           " came for another buffer than the earlier buckets";
    return;
  }
  if (!state.first_bucket_start) state.first_bucket_start = std::chrono::steady_clock::now();
  set_thread_track(worker_track(s.link->rank(), trace_role::communicator));
  const trace_span span("reduce-scatter bucket", -1, static_cast<std::int64_t>(bucket.round));
  try {
    s.rule->reduce_bucket(*s.link, *bucket.buffer, bucket.range);
  } catch (const std::exception& e) {
    state.bucket_failure = e.what();
  }
  state.bucketed = bucket.buffer;
}

// Keeps the state after `round` (a real round: its step is complete); stored only once the
// buddies' copies arrived, so a death mid-replication leaves the previous generations intact.
void keep_step(communicator_setup& s, const std::vector<float>& parameters, std::uint64_t round) {
  kept_state kept;
  kept.layout = s.layout;
  kept.world = s.link->size();
  kept.rank = s.link->rank();
  kept.steps = step_of_round(s.pipe, round) + 1;
  kept.own = s.rule->snapshot();
  // Elastic recovery restarts from the kept compute copy; with error feedback (int8, fp8, fp4, sign, sign2, sign3) it is
  // not a function of the masters, which are kept beside it.
  if (kept.own.feedback.empty()) kept.own.master.clear();
  if (s.replicate && kept.world > 1) kept.copies = replicate_to_buddies(*s.link, kept.own, parameters.size());
  // A topology that keeps its own state (local-sgd) names what every worker restarts from (its
  // θ_global, the same on every member); this worker's copy may differ from it.
  kept.parameters = kept.own.topology.present ? std::move(kept.own.topology.parameters) : parameters;
  kept.own.topology.parameters.clear();
  s.keeper->keep(std::move(kept));
}

communicator_actor::behavior_type communicator_behavior(
    communicator_actor::stateful_pointer<communicator_state> self,
    std::shared_ptr<communicator_setup> setup) {
  name_thread(thread_role::communicator, setup->link->rank());  // a detached actor: its own thread
  self->state.setup = std::move(setup);
  return {
      [self](gradient_bucket& bucket) { reduce_bucket(self->state, bucket); },
      [self](round_request& request) -> caf::result<round_result> {
        auto& s = *self->state.setup;
        communicator_state& buckets = self->state;
        if (s.crash && request.round == s.crash_round) {
          s.crash();
          return caf::make_error(caf::sec::runtime_error, "rank " + std::to_string(s.link->rank()) +
                                                              " crashed (emulated) in round " +
                                                              std::to_string(request.round));
        }
        const auto start = std::chrono::steady_clock::now();
        // The buckets' time before the round counts as this round's communication, hidden
        // behind backward: from the first one's start, as they travel together.
        const auto first_bucket_start = std::exchange(buckets.first_bucket_start, std::nullopt);
        const double bucket_seconds =
            first_bucket_start ? std::chrono::duration<double>(start - *first_bucket_start).count() : 0.0;
        const tensor bucketed = std::exchange(buckets.bucketed, nullptr);
        if (const std::string failure = std::exchange(buckets.bucket_failure, {}); !failure.empty())
          return caf::make_error(caf::sec::runtime_error, "rank " + std::to_string(s.link->rank()) + " round " +
                                                              std::to_string(request.round) + ": " + failure);
        if (bucketed && bucketed != request.buffer)
          return caf::make_error(caf::sec::runtime_error, "rank " + std::to_string(s.link->rank()) + " round " +
                                                              std::to_string(request.round) +
                                                              ": its gradient buckets were for another buffer");
        // The update rule's phases below land on this worker's communicator track.
        set_thread_track(worker_track(s.link->rank(), trace_role::communicator));
        const trace_span span(request.estimate ? "estimate round" : "round", -1, static_cast<std::int64_t>(request.round));
        try {
          const std::uint64_t step = step_of_round(s.pipe, request.round);
          const bool change = (s.change_epoch && s.layout > 0 && s.change_epoch->load() >= s.layout) ||
                              (s.end_steps > 0 && step + 1 >= s.end_steps) ||
                              (s.stop_requested && s.stop_requested->load());
          if (bucketed) {
            // The buckets still traveling land before the totals' small messages, which would
            // otherwise queue behind them on every hop of their ring.
            const trace_span phase("finish buckets");
            s.rule->finish_buckets();
          }
          double totals[5] = {request.local.micro_batches, request.local.loss_sum, request.local.items,
                              change ? 1.0 : 0.0, request.local.ended};
          {
            const trace_span phase("all-reduce totals");
            s.link->all_reduce(std::span<double>(totals));
          }
          const round_totals global{totals[0], totals[1], totals[2], totals[3], totals[4]};
          // A worker's app ended: nothing is applied, the buffer goes back as it came, and the
          // accumulator answers with the last completed step's parameters.
          const bool ended = global.ended > 0;
          if (!ended && s.collectives) {
            // The accumulator's last writes to the buffer (zeroing, ACCO's copy) come first, on the device.
            s.memory->order_on(request.buffer, s.collectives->stream());
            s.rule->apply_on_device(*s.collectives, s.memory->buffer_of(request.buffer).values, request.local, global,
                                    request.learning_rate, step, request.estimate);
            s.memory->download(request.buffer);  // hash, divergence check, reports
          } else if (!ended) {
            s.rule->apply(*s.link, *request.buffer, request.local, global, request.learning_rate, step,
                          request.estimate,
                          request.current ? std::span<const float>(*request.current) : std::span<const float>());
          }
          round_result result;
          result.round = request.round;
          result.global = global;
          result.last_of_epoch = ended || (global.changes > 0 && !request.estimate);
          result.observations = s.rule->observations();
          const bool keeping = s.keeper && !ended && (request.keep || result.last_of_epoch);
          if (keeping || request.snapshot || result.last_of_epoch) s.rule->settle(*s.link);
          if (keeping) {
            keep_step(s, *request.buffer, request.round);
            result.kept = true;
          }
          if (s.topology) result.consensus_distance = s.topology->consensus_distance;
          if (!ended && s.hash_interval && request.round % s.hash_interval == 0 && (!s.topology || s.topology->replicas_agree))
            result.parameter_hash = hash_parameters(*request.buffer);
          // The last round of an epoch or of a stopped job is where a checkpoint is due.
          if (request.snapshot || result.last_of_epoch) result.state = s.rule->snapshot();
          result.parameters = std::move(request.buffer);
          result.traffic = s.link->stats();
          // A topology's collectives in flight count as communication too; the part the round
          // waited for is in its own time already.
          result.seconds = bucket_seconds + result.observations.unwaited_seconds +
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          return result;
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error,
                                 "rank " + std::to_string(s.link->rank()) + " round " +
                                     std::to_string(request.round) + ": " + e.what());
        }
      },
  };
}

}  // namespace

communicator_actor spawn_communicator_actor(caf::actor_system& system,
                                            std::shared_ptr<communicator_setup> setup) {
  return system.spawn<caf::detached>(communicator_behavior, std::move(setup));
}

}  // namespace accord
