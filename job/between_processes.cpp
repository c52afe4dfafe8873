// run_job_process: this process's worker of a job between processes; rank 0's process also
// hosts the membership actor, the coordinators and the master port.
#include <accord/job.hpp>

#include "job/plan.hpp"
#include "job/runners.hpp"
#include "cluster/master_port_guard.hpp"
#include "actors/membership_actor.hpp"
#include "actors/standby_actor.hpp"
#include "job/asynchronous_setup.hpp"
#include "job/coordinator_finding.hpp"
#include "cluster/fingerprint.hpp"
#include "cluster/membership_log.hpp"
#include "job/scope_exit.hpp"
#include "observe/metrics_file.hpp"
#include "observe/stall_watchdog.hpp"
#include "observe/trace.hpp"
#include "cluster/rendezvous.hpp"
#include "job/worker_spawn.hpp"

#include <caf/io/all.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace accord {
namespace {

// Rank 0's master port: a client handshake is a few hundred bytes; the largest later message
// is a report carrying a worker's optimizer state (at most two slots of the parameters).
master_port_limits master_limits(const process_group& group, std::size_t parameter_count) {
  master_port_limits limits;
  const std::uint64_t state_bytes = 2 * std::uint64_t{parameter_count} * sizeof(float);
  limits.message_payload =
      static_cast<std::uint32_t>(std::min<std::uint64_t>((1u << 20) + state_bytes, UINT32_MAX));
  limits.max_pending = group.world_size + 16;
  limits.max_connections = 2 * group.world_size + 16;  // elastic jobs admit joiners
  limits.idle_timeout = std::max(2 * group.heartbeat_timeout, std::chrono::milliseconds(10'000));
  return limits;
}


// How long rank 0's process waits, at the end, for the other members to hear that the job is over.
constexpr auto release_timeout = std::chrono::seconds(30);

// What a worker process carries from epoch to epoch.
struct process_member {
  std::uint64_t id = 0;
  membership_actor membership;
  member_agent agent;
  std::shared_ptr<state_keeper> keeper = std::make_shared<state_keeper>();
  std::shared_ptr<std::atomic<std::uint64_t>> change_epoch = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::shared_ptr<epoch_link> link = std::make_shared<epoch_link>();
  std::vector<float> parameters;  // the latest epoch's final parameters
  local_actors last_epoch;        // for the memory figures
  std::shared_ptr<worker::state> app;  // an app-driven worker's (include/accord/worker.hpp)
};

// Runs this process's worker for one epoch of `plan`. A failure (a peer lost, a transfer
// broken) is the epoch's coordinator's to report; the process then asks for the next epoch.
void run_process_epoch(caf::actor_system& system, caf::scoped_actor& self, const model& prototype,
                       std::shared_ptr<const dataset> train, const job_plan& origin, const job_hooks& hooks,
                       const epoch_plan& plan, transport_rendezvous& rendezvous, bool elastic,
                       process_member& me) {
  const std::size_t n = origin.initial.size();
  std::shared_ptr<transport> link;
  std::vector<float> parameters;
  std::optional<rule_state> state;
  if (const auto blas = size_blas_for_epoch(origin, plan.addresses, plan.rank)) {
    std::printf("epoch %llu: BLAS threads %d (%s)\n", static_cast<unsigned long long>(plan.epoch), blas->threads,
                blas->reason.c_str());
    std::fflush(stdout);
  }
  try {
    me.link->set(plan.epoch, [&rendezvous](const std::string& why) { rendezvous.interrupt(why); });
    link = rendezvous.connect(plan.rank, plan.addresses, plan.epoch);
    me.link->set(plan.epoch, [link](const std::string& why) { link->interrupt(why); });
    if (plan.from_origin) {
      parameters = origin.initial;
      state = origin.state_of(plan.world, plan.rank);
    } else {
      restored_state restored =
          transfer_state(*link, plan.source, me.keeper->find(plan.source.layout, plan.source.steps), n,
                         origin.sharded(), feedback_precision(origin.precision));
      parameters = std::move(restored.parameters);
      if (restored.own.present) state = std::move(restored.own);
      self->send(me.membership, restored_atom::value,
                 restored_report{plan.epoch, plan.rank, hash_parameters(parameters),
                                 state ? state_checksum(*state, n) : 0});
    }
  } catch (const std::exception& e) {
    if (link) link->interrupt("epoch " + std::to_string(plan.epoch) + " failed to start");
    me.link->set(0, {});
    self->send(plan.coordinator, worker_failure{plan.rank, std::string("epoch start: ") + e.what()});
    return;
  }
  const job_plan epoch = origin.continued(plan.start_steps, plan.data_position, std::move(parameters), plan.world);
  local_actors local;
  const scope_exit stop_on_exception([&](bool unwinding) {
    if (!unwinding) return;
    link->interrupt("epoch " + std::to_string(plan.epoch) + " failed");
    if (me.app) me.app->release();
    local.shut_down(self);
  });
  if (const auto* asynchronous = as_asynchronous(*epoch.topo)) {
    // Its own workers instead of rounds: this process's one worker, over the epoch's transport.
    asynchronous_setup setup = asynchronous_for(epoch, prototype, std::move(train), hooks, plan.coordinator);
    setup.peers = link;
    setup.first_step = plan.start_steps;
    setup.initial_state = std::move(state);
    if (elastic)  // kept steps are barriers here: every --keep-interval steps, and where a change ends the epoch
      setup.keep = asynchronous_setup::keeping{
          me.keeper, epoch.config.keep_interval, plan.epoch,
          [change = me.change_epoch, epoch = plan.epoch] { return change->load() >= epoch; }};
    std::unique_ptr<asynchronous_run> run = asynchronous->start(system, std::move(setup));
    if (const auto failure = run_to_end(system, self, {}, me.agent, plan.coordinator)) {
      link->interrupt("epoch " + std::to_string(plan.epoch) + " ended: " + *failure);
      run->stop();
    } else {
      me.parameters = run->finish();
    }
    me.last_epoch.state_bytes = run->state_bytes();
    me.last_epoch.workers = 1;
    run.reset();
    me.link->set(0, {});
    return;
  }
  worker_spec spec;
  spec.rank = plan.rank;
  spec.link = link;
  spec.coordinator = plan.coordinator;
  spec.state = std::move(state);
  spec.keeper = me.keeper;
  spec.layout = plan.epoch;
  spec.keep_interval = elastic ? epoch.config.keep_interval : 0;
  spec.change_epoch = me.change_epoch;
  spec.end_steps = plan.end_steps;
  spec.app = me.app;
  const std::vector<accumulator_actor> accumulators{
      spawn_worker(system, local, epoch, prototype, std::move(train), hooks, std::move(spec)).accumulator};
  // After a failure the communicator may wait on a dead peer: unblock it before shutting down.
  if (const auto failure = run_to_end(system, self, accumulators, me.agent, plan.coordinator))
    link->interrupt("epoch " + std::to_string(plan.epoch) + " ended: " + *failure);
  if (me.app) me.app->release();  // a compute actor waiting for the app would outlive the epoch
  local.shut_down(self);
  me.link->set(0, {});
  if (!local.final_parameters.empty()) me.parameters = std::move(local.final_parameters);
  me.last_epoch.meter = local.meter;
  me.last_epoch.state_bytes = local.state_bytes;
  me.last_epoch.workers = local.workers;
}

// The address other ranks reach this process at.
std::string host_of(const process_group& group) {
  if (!group.host.empty()) return group.host;
  require(is_loopback(group.master_addr),
          "process_group.host (this rank's reachable address) is required when the master is not on loopback");
  return "127.0.0.1";
}

}  // namespace

job_result run_job_process(const model& prototype, std::shared_ptr<const dataset> train,
                           std::shared_ptr<const dataset> eval, const job_config& config,
                           const process_group& group, std::function<void(const step_metrics&)> on_step) {
  const job_plan plan = plan_between_processes(prototype, train, config, group, 0);
  return run_between_processes(prototype, std::move(train), std::move(eval), plan, group,
                               hooks_of(config, std::move(on_step)));
}

job_plan plan_between_processes(const model& prototype, const std::shared_ptr<const dataset>& train,
                                const job_config& config, const process_group& group, std::size_t app_workers) {
  if (!train) throw std::invalid_argument("no training data set");
  require(app_workers <= 1, "a process of a job between processes runs one worker");
  if (!group.join) {
    require(group.world_size >= 1, "world size must be at least 1");
    require(group.rank >= 0 && group.rank < group.world_size,
            "rank " + std::to_string(group.rank) + " outside 0.." + std::to_string(group.world_size - 1));
    require(config.workers == group.world_size, "workers (" + std::to_string(config.workers) +
                                                    ") must equal the world size (" +
                                                    std::to_string(group.world_size) + ")");
  }
  require(group.master_port > 0 && group.master_port < 65536, "master port must be in 1..65535");
  require(config.membership.empty(),
          "membership changes are emulated in one process only; between processes, start (--join) and stop workers");
  require(find_algorithm(config.algorithm).aggregate != aggregation::registered || !(group.elastic || group.join),
          "algorithm " + config.algorithm + " (a registered rule) keeps no state an elastic job could recover");
  require(config.speed_factors.empty() || !(group.elastic || group.join),
          "speed factors cannot be combined with an elastic job");
  require(!config.stop_requested || !(group.elastic || group.join),
          "an elastic job's workers leave (process_group::leave_requested) rather than stop the job");
  host_of(group);
  require(group.transport == "ucx" || group.transport == "nccl",
          "unknown transport '" + group.transport + "' (expected ucx|nccl)");
  require_worker_memory(prototype, 1);
  job_plan origin = plan_job(prototype, *train, config, group.elastic || group.join);
  if (!group.membership_replay.empty()) {
    require(group.elastic || group.join, "replaying the membership between processes needs an elastic job (--elastic)");
    require(group.membership_replay != config.membership_log,
            "--record-membership " + config.membership_log + " would overwrite the log being replayed");
    require(!as_asynchronous(*origin.topo), "--topology " + config.topology +
                                                " does not replay a membership log between processes (its kept "
                                                "steps are barriers of their own)");
    const std::vector<membership_record> records = read_membership_log(group.membership_replay);
    // A joiner learns the world size from the job; the starting ranks check the log's.
    const int workers = group.join && !records.empty() ? records.front().workers : group.world_size;
    origin.membership_replay = process_replay_of(records, group.membership_replay, workers, config.steps);
  }
  if (const auto* asynchronous = as_asynchronous(*origin.topo)) {
    require(asynchronous->runs_between_processes(),
            "--topology " + config.topology + " runs its asynchronous workers in one process only");
    require(group.transport == "ucx", "--topology " + config.topology + " between processes runs over ucx only");
    require(!(group.elastic || group.join) || asynchronous->elastic_between_processes(),
            "--topology " + config.topology + " between processes has a fixed worker set (no --elastic or --join)" +
                " with these settings (--topology parameter-server needs --max-staleness >= 1)");
  }
  const bool master = !group.join && group.rank == 0;
  if (master && !config.checkpoint_path.empty()) check_checkpoint_path(config.checkpoint_path);
  origin.fingerprint = job_fingerprint(prototype, *train, config, group.transport, origin.resumed_from());
  return origin;
}

job_result run_between_processes(const model& prototype, std::shared_ptr<const dataset> train,
                                 std::shared_ptr<const dataset> eval, const job_plan& origin,
                                 const process_group& group, const job_hooks& hooks) {
  const trace_session trace(origin.config.trace_path, group.rank, group.join);
  // Watches the training; the coordinator's wait at the end for the members to hear that the
  // job is over is no stall (it goes before that wait).
  std::optional<stall_watchdog> watchdog;
  watchdog.emplace(std::chrono::duration<double>(origin.config.watchdog_seconds), census_report);
  const std::string host = host_of(group);
  const bool master = !group.join && group.rank == 0;
  const bool elastic = group.elastic || group.join;
  size_blas(origin, 1);
  auto system_config = std::make_unique<caf::actor_system_config>();
  configure_system(*system_config);
  system_config->load<caf::io::middleman>();
  // Every process sends heartbeats; a peer silent for the timeout (hung, or its machine gone)
  // loses its connection, and the membership actor hears of it as of a death. The membership
  // actor's adaptive detector, on the members' own heartbeats, usually hears first.
  const auto heartbeat = std::max(group.heartbeat_timeout, std::chrono::milliseconds(100));
  system_config->set("middleman.heartbeat-interval", caf::timespan{heartbeat / 4});
  system_config->set("middleman.connection-timeout", caf::timespan{heartbeat});
  // Rank 0's master port, and an elastic member's control port (its standby's); they outlive
  // the actor system, relaying what CAF says last.
  std::unique_ptr<master_port_guard> guard, control_guard;
  // On failure the system is abandoned rather than destroyed: its destructor would wait for a
  // communicator that may stay blocked in a collective with a dead peer. Its configuration goes
  // with it: the system's threads read it until the last one ends (thread hooks).
  auto system = std::make_unique<caf::actor_system>(*system_config);
  auto abandon_system = [&] {
    (void)system.release();
    (void)system_config.release();
  };
  const std::string job_id = !group.job_id.empty() || group.join
                                 ? group.job_id
                                 : group.master_addr + ":" + std::to_string(group.master_port);
  auto merged = std::make_shared<job_result>();
  // The process hosting the coordination: the evaluator, the membership actor, the coordinators.
  // Rank 0's from the start; a survivor's from the moment its standby takes over (on the
  // standby's thread, hence the lock).
  std::mutex coordination_mutex;
  local_actors coordination;
  std::atomic<bool> hosting{master};
  std::optional<heartbeat_detector_settings> detector;
  // Only where a suspicion buys recovery: a job that fails with any member gains nothing from
  // failing 1.5 s after a heartbeat was late on a loaded machine, and waits for the timeout.
  if (group.adaptive_failure_detection && (group.elastic || group.join)) {
    detector.emplace();
    detector->upper_bound = group.heartbeat_timeout;
  }
  process_member me;
  if (!hooks.apps.empty()) me.app = hooks.apps.front();
  std::optional<std::string> failure;
  bool failed_here = false;  // by this process's own fault, not the job's
  const auto started = std::chrono::steady_clock::now();
  std::string control;  // HOST:PORT of this process's standby (elastic jobs)
  // Starts this process's coordination: the job's first, or a lost coordinator's successor.
  auto start_coordination = [&](const std::optional<coordination_replica>& takeover,
                                const std::string& cause) -> membership_actor {
    std::lock_guard lock(coordination_mutex);
    hosting = true;
    const evaluator_actor evaluator = spawn_evaluation(*system, coordination, prototype, eval ? eval : train, origin);
    membership_setup setup;
    setup.initial_world = group.world_size;
    setup.elastic = group.elastic;
    setup.sharded = origin.sharded();
    setup.fingerprint = origin.fingerprint;
    setup.job_id = job_id;
    setup.rendezvous_timeout = group.rendezvous_timeout;
    setup.stop_requested = hooks.stop_requested;
    setup.pipe = origin.algo->pipe;
    setup.total_rounds = origin.rounds;
    setup.origin_steps = origin.resume ? origin.resume->steps : 0;
    setup.origin_data_position = origin.data_position;
    // Where nobody hears the events (an app's own loop, Python's accord), rank 0 still names
    // the starting ranks it waits for, on stderr.
    setup.on_event = group.on_event ? group.on_event : [](const std::string& line) {
      if (line.starts_with(rendezvous_wait_line)) std::fprintf(stderr, "accord: %s\n", line.c_str());
    };
    setup.control = control;
    setup.takeover = takeover;
    setup.takeover_cause = cause;
    setup.replay = origin.membership_replay;
    setup.majority_wait = group.majority_wait;
    if (!origin.config.metrics_path.empty())
      setup.on_unwritten_events = [path = origin.config.metrics_path](const std::vector<std::string>& events) {
        try {
          metrics_file metrics(path, true);
          for (const std::string& e : events) metrics.write_event(e);
        } catch (const std::exception& e) {  // the job is failing already: its own line matters more
          std::fprintf(stderr, "accord: the metrics file misses the events that stopped the job: %s\n", e.what());
        }
      };
    setup.ask_standby = [system = system.get()](const std::string& control) { return ask_standby(*system, control); };
    if (!origin.config.membership_log.empty()) {
      // Shared with the membership actor, which an abandoned system never stops. A successor
      // goes on with the lost coordinator's log.
      auto log = std::make_shared<membership_log_writer>(origin.config.membership_log, takeover.has_value());
      if (!takeover) log->write(job_record(group.world_size, origin.steps));
      setup.on_record = [log](const membership_record& r) { log->write(r); };
    }
    auto steps_done = std::make_shared<std::atomic<std::uint64_t>>(takeover ? takeover->steps_done : setup.origin_steps);
    setup.steps_done = steps_done;
    setup.detector = detector;
    setup.on_finished = [&guard] {
      if (guard) guard->stop_accepting();
    };
    setup.result = merged;
    setup.spawn_coordinator = [&, evaluator, steps_done](const epoch_spec& spec, std::shared_ptr<job_result> result,
                                                        std::function<void(std::uint64_t, std::uint64_t)> on_kept) {
      coordinator_setup c = coordination_for(origin, prototype, hooks, evaluator);
      c.workers = spec.workers;
      c.first_round = rounds_for_steps(origin.algo->pipe, spec.start_steps);
      c.data_offset = spec.data_position;
      c.on_step = [steps_done, on_step = hooks.on_step](const step_metrics& m) {
        steps_done->store(m.step);
        if (on_step) on_step(m);
      };
      c.result = std::move(result);
      c.epoch = spec.epoch;
      c.append_metrics = c.append_metrics || spec.epoch > 1;
      c.metrics_events = spec.metrics_events;
      c.started = started - origin.clock_before();
      c.on_kept = std::move(on_kept);
      std::lock_guard lock(coordination_mutex);
      return coordination.keep(spawn_coordinator_actor(*system, std::move(c)),
                               "coordinator, epoch " + std::to_string(spec.epoch));
    };
    return coordination.keep(spawn_membership_actor(*system, std::move(setup)), "membership");
  };
  standby_actor standby;
  {
    caf::scoped_actor self{*system};
    const scope_exit stop_on_exception([&](bool unwinding) {
      if (!unwinding) return;
      if (me.agent) self->send_exit(me.agent, caf::exit_reason::user_shutdown);
      if (standby) self->send_exit(standby, caf::exit_reason::user_shutdown);
      std::lock_guard lock(coordination_mutex);
      coordination.shut_down(self);
      abandon_system();  // as after a failure: a communicator may be blocked on a peer
    });
    if (elastic) {
      // The standby answers on the control port, behind a guard as the master port is.
      standby = spawn_standby_actor(*system, [&](const coordination_replica& replica, const std::string& cause) {
        return start_coordination(replica, cause);
      });
      census_add(caf::actor_cast<caf::actor>(standby), "standby");
      auto port = system->middleman().publish(standby, 0, "127.0.0.1", true);
      if (!port) throw std::runtime_error("cannot publish this worker's standby: " + system->render(port.error()));
      control_guard = std::make_unique<master_port_guard>(
          std::vector<std::string>{host}, 0, *port, master_limits(group, origin.initial.size()),
          [](const std::string& line) { std::fprintf(stderr, "control port: %s\n", line.c_str()); });
      control = host + ":" + std::to_string(control_guard->port());
      std::printf("elastic: control port %s (a joiner may name it: --join %s)\n", control.c_str(), control.c_str());
      std::fflush(stdout);
    }
    if (master) {
      me.membership = start_coordination(std::nullopt, "");
      // Its standby leads there too: a member that lost it (a partition) finds it again by its control port.
      if (standby) caf::anon_send(standby, membership_atom::value, me.membership);
      // CAF listens on loopback only; the guard faces the workers (cluster/master_port_guard.hpp).
      auto port = system->middleman().publish(me.membership, 0, "127.0.0.1", true);
      try {
        if (!port) throw std::runtime_error(system->render(port.error()));
        guard = std::make_unique<master_port_guard>(
            master_bind_addresses(group.master_bind, group.master_addr), group.master_port, *port,
            master_limits(group, origin.initial.size()),
            [](const std::string& line) { std::fprintf(stderr, "rank 0: %s\n", line.c_str()); });
      } catch (const std::exception& e) {
        {
          std::lock_guard lock(coordination_mutex);
          coordination.shut_down(self);
        }
        const std::string why = e.what();
        if (why.find("Address already in use") != std::string::npos)
          throw std::runtime_error("rank 0: port " + std::to_string(group.master_port) +
                                   " is in use by another job or program (cannot listen for workers there: " + why +
                                   ")");
        throw std::runtime_error("rank 0: cannot listen for workers on port " + std::to_string(group.master_port) +
                                 ": " + why);
      }
    } else {
      me.membership = find_coordinator(*system, group, hooks);
    }
    // Says hello to the coordinator: as a new member, or (`rejoin`) as this member to the one
    // that took over from a lost coordinator.
    auto admit = [&](bool rejoin) {
      member_hello hello;
      hello.rank = group.join ? -1 : group.rank;
      hello.world = group.world_size;
      hello.fingerprint = origin.fingerprint;
      hello.host = host;
      hello.job = job_id;
      hello.control = control;
      hello.rejoin = rejoin;
      hello.member = me.id;
      if (rejoin)  // the newest copy its standby holds: it may be of an epoch the coordination missed
        self->request(standby, std::chrono::seconds(2), replica_atom::value)
            .receive([&](coordination_replica& r) { hello.replica = std::move(r); }, [](caf::error&) {});
      me.agent = spawn_member_agent(*system, member_agent_setup{me.change_epoch, me.link, group.leave_requested,
                                                                me.membership, group.on_event,
                                                                caf::actor_cast<caf::actor>(standby),
                                                                elastic ? detector : std::nullopt,
                                                                master ? nullptr : hooks.stop_requested});
      census_add(caf::actor_cast<caf::actor>(me.agent), "member agent");
      self->request(me.agent, caf::infinite, hello_atom::value, std::move(hello))
          .receive([&](std::uint64_t id) { me.id = id; },
                   [&](caf::error& e) {
                     // A coordinator refuses with its reason; CAF's own error says that the one
                     // this member elected or found went away before it answered: lost as well,
                     // as one that gave way meanwhile.
                     const bool refused = e.context().match_elements<std::string>();
                     const std::string why = describe(*system, e);
                     failure = rejoin && (!refused || refused_as_gone(why)) ? std::string(coordinator_lost) + ": " + why
                                                                            : why;
                   });
    };
    // Says hello again as this member to `next`, the coordinator after a loss.
    auto follow = [&](const membership_actor& next) {
      self->send_exit(me.agent, caf::exit_reason::user_shutdown);
      me.membership = next;
      failure.reset();
      admit(true);
    };
    // The coordination this process hosts when its standby took over, for members that asked it,
    // while this member elected or waited: they follow it, and so does this member (a coordination
    // without its own process's member fails the job). Found by the membership simulation.
    auto own_coordination = [&]() -> std::optional<membership_actor> {
      if (!hosting) return std::nullopt;
      std::optional<membership_actor> own;
      self->request(standby, std::chrono::seconds(2), membership_atom::value)
          .receive([&](membership_actor& m) { own = std::move(m); }, [](caf::error&) {});
      return own;
    };
    // No member took over: those asked still hear the coordinator, or do not answer (a partition,
    // a flapping link, members that hung with it). This side keeps its state, trains nothing and
    // for --majority-wait asks the last coordinator (back, and waiting for its members) and the
    // last epoch's members again; a majority may then be reachable. `refusals` says why not.
    auto wait_for_majority = [&](const std::string& cause, std::string& refusals) -> std::optional<membership_actor> {
      constexpr auto retry = std::chrono::milliseconds(500);
      const auto since = std::chrono::steady_clock::now();
      bool announced = false;
      for (;;) {
        if (auto own = own_coordination()) return own;
        coordination_replica replica;
        self->request(standby, std::chrono::seconds(2), replica_atom::value)
            .receive([&](coordination_replica& r) { replica = std::move(r); }, [](caf::error&) {});
        if (!replica.coordinator_control.empty())
          if (auto last = membership_at(*system, replica.coordinator_control, std::chrono::milliseconds(2000))) {
            caf::anon_send(standby, follow_atom::value, replica.coordinator_control);
            return *last;
          }
        const auto waited = std::chrono::steady_clock::now() - since;
        if (waited >= group.majority_wait || (hooks.stop_requested && hooks.stop_requested->load())) {
          if (announced) {
            char text[96];
            std::snprintf(text, sizeof text, "; this side waited %.1f s for a majority (--majority-wait)",
                          std::chrono::duration<double>(waited).count());
            refusals += text;
          }
          return std::nullopt;
        }
        if (!announced && group.on_event) {
          std::string name = "member " + std::to_string(me.id), role = "worker";
          for (const replica_member& m : replica.members)
            if (m.id == me.id) name = member_name(m.initial_rank, m.id, m.host);
          for (const replica_member& m : succession(replica))
            if (m.id != replica.coordinator) {
              if (m.id == me.id) role = "standby";
              break;
            }
          char wait[32];
          std::snprintf(wait, sizeof wait, "%.1f s", std::chrono::duration<double>(group.majority_wait).count());
          group.on_event("membership: " + name + ", " + role + ", waits for a majority at step " +
                         std::to_string(replica.steps_done) + ": no member could take over from the lost coordinator (" +
                         cause + "): " + refusals + "; this side keeps its state, trains nothing and asks the last "
                         "epoch's members again for up to " + wait + " (--majority-wait)");
        }
        announced = true;
        std::this_thread::sleep_for(retry);
        std::string again;
        bool left_behind = false;
        if (auto elected = elect_coordinator(*system, self, standby, me.id, cause, again, left_behind)) return elected;
        if (!again.empty()) refusals = std::move(again);
        if (left_behind) return std::nullopt;
      }
    };
    // After the coordinator's loss (`cause`) the survivors elect the next coordinator and say
    // hello there, keeping their member ids; when that one goes away before it answers (killed
    // meanwhile), it is lost too and they elect again. Found by the membership simulation.
    auto follow_next = [&](std::string cause) {
      for (;;) {
        std::string refusals;
        bool left_behind = false;
        std::optional<membership_actor> elected =
            elect_coordinator(*system, self, standby, me.id, cause, refusals, left_behind);
        if (!elected && !left_behind) elected = wait_for_majority(cause, refusals);
        if (auto own = own_coordination()) elected = std::move(own);
        if (!elected) {
          failure = "no member could take over from the lost coordinator (" + cause + "): " + refusals;
          return;
        }
        follow(*elected);
        if (!failure || failure->rfind(coordinator_lost, 0) != 0) return;
        cause = failure->substr(std::string(coordinator_lost).size() + 2);
      }
    };
    admit(false);
    if (trace_recorder* trace = trace_recorder::active(); trace && !master && !failure)
      trace->set_clock_offset(clock_offset_to(self, me.membership));
    while (!failure) {
      // A throw here would leave the actors running and the system's destructor waiting on them.
      std::unique_ptr<transport_rendezvous> rendezvous;
      try {
        rendezvous = make_rendezvous(group, host, master);
      } catch (const std::exception& e) {
        failure = e.what();
        failed_here = true;
        break;
      }
      epoch_plan plan;
      self->request(me.agent, caf::infinite, epoch_atom::value,
                    epoch_request{me.id, rendezvous->address(), me.keeper->summaries()})
          .receive([&](epoch_plan& p) { plan = std::move(p); },
                   [&](caf::error& e) { failure = describe(*system, e); });
      if (failure && elastic && failure->rfind(coordinator_lost, 0) == 0) {
        follow_next(failure->substr(std::string(coordinator_lost).size() + 2));
        continue;
      }
      if (!failure && !plan.rejoin.empty()) {
        // This side had no majority and gave way to a coordinator earlier in the last epoch's
        // order: a coordination this process took over ends, and it says hello there again. The
        // agent goes first: it would take that end for the coordinator's loss and tell the standby.
        self->send_exit(me.agent, caf::exit_reason::user_shutdown);
        self->wait_for(me.agent);
        if (hosting) {
          std::lock_guard lock(coordination_mutex);
          coordination.shut_down(self);
          hosting = false;
        }
        caf::anon_send(standby, follow_atom::value, plan.rejoin);  // it hosts nothing from now on
        auto there = membership_at(*system, plan.rejoin, std::chrono::milliseconds(10'000));
        if (!there) {
          // Gone meanwhile (killed just after): lost as any coordinator, and this process's
          // standby may take over from now on, as after its agent's verdict. Found by the
          // membership simulation.
          const std::string cause = "this side gave way to the coordinator at " + plan.rejoin +
                                    ", which does not answer: " + describe(*system, there.error());
          caf::anon_send(standby, lost_atom::value, cause);
          follow_next(cause);
          continue;
        }
        follow(*there);
        continue;
      }
      if (failure || plan.finished) break;
      run_process_epoch(*system, self, prototype, train, origin, hooks, plan, *rendezvous, elastic, me);
    }
    watchdog.reset();
    // The coordinator's process stays until every member has heard that the job is over (unless
    // it failed on its own, as every rank does with a broken UCX setup: nobody would hear of it).
    if (hosting && !failed_here)
      self->request(me.membership, release_timeout, wait_atom::value).receive([](bool) {}, [](caf::error&) {});
    self->send_exit(me.agent, caf::exit_reason::user_shutdown);
    if (standby) self->send_exit(standby, caf::exit_reason::user_shutdown);
    std::lock_guard lock(coordination_mutex);
    coordination.shut_down(self);
  }
  if (failure && failure->rfind(coordinator_lost, 0) == 0 && !master) {
    // Rank 0 may be fine and have dropped this worker: if it answers, it says why.
    auto found = find_published<membership_actor>(*system, group.master_addr, group.master_port, std::chrono::seconds(5));
    if (found) {
      caf::scoped_actor self{*system};
      self->request(*found, std::chrono::seconds(5), dropped_atom::value, me.id)
          .receive([&](std::string& why) { if (!why.empty()) failure = why; }, [](caf::error&) {});
    }
  }
  if (failure) {
    abandon_system();
    throw std::runtime_error(*failure);
  }
  job_result result = hosting ? std::move(*merged) : job_result{};
  result.coordinated = hosting;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  average_over_steps(result);
  if (me.last_epoch.workers) me.last_epoch.account(result, origin);
  result.kept_bytes_per_worker = me.keeper->bytes();
  result.parameters = std::move(me.parameters);
  return result;
}

}  // namespace accord
