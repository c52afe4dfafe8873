#include "actors/parameter_server.hpp"

#include "actors/topology_builtins.hpp"
#include "transport/shard.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace accord {

// Messages between workers and server shards, inside one process.
struct gradient_push {
  int worker = 0;
  std::uint64_t pulled_version = 0;  // of this shard, when the worker pulled the parameters
  tensor gradient;                   // the worker's full gradient sum (each shard reads its slice)
  double micro_batches = 0;
  double loss_sum = 0;
  double items = 0;
};
struct shard_pull {
  std::uint64_t at_least = 0;  // answered once the shard has applied this many updates
};
struct shard_values {
  std::uint64_t version = 0;
  std::vector<float> values;
};
using stop_atom = caf::atom_constant<caf::atom("psstop")>;

}  // namespace accord

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::gradient_push)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::shard_pull)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(accord::shard_values)

namespace accord {
namespace {

using clock_type = std::chrono::steady_clock;

// One applied gradient, as shard 0 saw it: the step bookkeeping follows shard 0.
struct applied_gradient {
  int worker = 0;
  std::uint64_t staleness = 0;
  double micro_batches = 0, loss_sum = 0, items = 0;
};

// Hands shard 0's applied gradients, in order, to the thread that reports steps.
class applied_queue {
public:
  void put(applied_gradient g) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(g);
    }
    changed_.notify_all();
  }
  // The next one, or nothing once closed and drained.
  std::optional<applied_gradient> take() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty() || closed_; });
    if (queue_.empty()) return std::nullopt;
    applied_gradient g = queue_.front();
    queue_.pop_front();
    return g;
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    changed_.notify_all();
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<applied_gradient> queue_;
  bool closed_ = false;
};

struct server_state {
  shard own;
  int workers = 0;
  bool synchronous = true;
  std::vector<float> master;
  std::unique_ptr<optimizer> opt;
  schedule_config schedule;
  std::uint64_t version = 0;                      // updates applied
  std::vector<std::optional<gradient_push>> round;  // synchronous: this round's pushes by worker
  std::vector<float> sum;
  std::vector<std::pair<std::uint64_t, caf::typed_response_promise<shard_values>>> waiting;
  std::shared_ptr<applied_queue> applied;           // shard 0 only
  bool stopped = false;
};

shard_values values_of(const server_state& s) { return {s.version, s.master}; }

void answer_waiting(server_state& s) {
  std::erase_if(s.waiting, [&](auto& entry) {
    if (entry.first > s.version) return false;
    entry.second.deliver(values_of(s));
    return true;
  });
}

void record(server_state& s, const gradient_push& push, std::uint64_t staleness) {
  if (s.applied) s.applied->put({push.worker, staleness, push.micro_batches, push.loss_sum, push.items});
}

// One optimizer step of the shard from a gradient sum over `micro_batches` micro-batches.
void step_shard(server_state& s, std::span<float> gradient, double micro_batches, std::uint64_t optimizer_step) {
  const float scale = micro_batches > 0 ? static_cast<float>(1.0 / micro_batches) : 0.f;
  for (float& g : gradient) g *= scale;
  s.opt->step(s.master, gradient, learning_rate_at(s.schedule, optimizer_step));
  ++s.version;
}

caf::behavior server_behavior(caf::stateful_actor<server_state>* self, std::shared_ptr<server_state> setup) {
  self->state = std::move(*setup);
  return {
      [self](gradient_push& push) {
        auto& s = self->state;
        if (s.stopped) return;
        const std::span<const float> slice(push.gradient->data() + s.own.begin, s.own.size());
        if (!s.synchronous) {  // applied on arrival, one optimizer step per push
          s.sum.assign(slice.begin(), slice.end());
          const std::uint64_t staleness = s.version - push.pulled_version;
          step_shard(s, s.sum, push.micro_batches, s.version / static_cast<std::uint64_t>(s.workers));
          record(s, push, staleness);
          answer_waiting(s);
          return;
        }
        s.round[static_cast<std::size_t>(push.worker)] = std::move(push);
        if (std::any_of(s.round.begin(), s.round.end(), [](const auto& p) { return !p; })) return;
        // Every worker's gradient of this round: summed in rank order, as one step (DDP).
        std::fill(s.sum.begin(), s.sum.end(), 0.f);
        double micro_batches = 0;
        for (const auto& p : s.round) {
          const float* g = p->gradient->data() + s.own.begin;
          for (std::size_t i = 0; i < s.sum.size(); ++i) s.sum[i] += g[i];
          micro_batches += p->micro_batches;
        }
        step_shard(s, s.sum, micro_batches, s.version);
        for (auto& p : s.round) {
          record(s, *p, 0);
          p.reset();
        }
        answer_waiting(s);
      },
      [self](const shard_pull& pull) -> caf::result<shard_values> {
        auto& s = self->state;
        if (s.stopped) return caf::make_error(caf::sec::runtime_error, "the parameter server stopped");
        if (pull.at_least <= s.version) return values_of(s);
        auto promise = self->make_response_promise<shard_values>();
        s.waiting.emplace_back(pull.at_least, promise);
        return promise;
      },
      [self](stop_atom) {
        auto& s = self->state;
        s.stopped = true;
        for (auto& entry : s.waiting) entry.second.deliver(caf::make_error(caf::sec::runtime_error, "the parameter server stopped"));
        s.waiting.clear();
        self->quit();
      },
  };
}

}  // namespace

struct parameter_server_run::impl {
  parameter_server_setup setup;
  caf::actor_system& system;
  std::vector<caf::actor> servers;
  std::vector<shard> shards;
  std::shared_ptr<applied_queue> applied = std::make_shared<applied_queue>();
  std::vector<std::thread> workers;
  std::thread reporter;

  // Stale synchronous parallel: pushes each worker has sent (finished and idle workers count as
  // ahead of all).
  std::mutex clock_mutex;
  std::condition_variable clock_changed;
  std::vector<std::uint64_t> clocks;
  std::atomic<bool> stopping{false};

  // Asynchronous: gradient t (of steps x workers) reads the micro-batches that rank t % workers
  // reads at step t / workers, whoever computes it; a gradient lost with a crashed worker is
  // redone by another. Guarded by ticket_mutex.
  std::mutex ticket_mutex;
  std::condition_variable tickets_changed;
  std::uint64_t next_ticket = 0;
  std::deque<std::uint64_t> redo;
  std::uint64_t in_flight = 0;                 // claimed, neither pushed nor given back
  std::vector<bool> killed;                    // by a crash of the membership schedule
  std::size_t changes_applied = 0;             // of setup.membership, in order
  int active = 0;                              // workers taking gradients now
  // Steps the job runs: setup.steps, or fewer once a stop is asked for (then the step being
  // computed is the last; the reporter marks it, so the coordinator ends the job there).
  std::atomic<std::uint64_t> step_limit{0};
  bool stop_noticed = false;                   // guarded by ticket_mutex

  // Per worker, cumulative: what the reports carry.
  struct worker_figures {
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<double> compute{0}, communication{0}, wait{0};
  };
  std::vector<worker_figures> figures;

  impl(caf::actor_system& system, parameter_server_setup s)
      : setup(std::move(s)), system(system), clocks(static_cast<std::size_t>(most_workers(setup)), 0),
        killed(static_cast<std::size_t>(most_workers(setup))), active(setup.workers), step_limit(setup.steps),
        figures(static_cast<std::size_t>(setup.workers)) {
    for (std::size_t w = static_cast<std::size_t>(setup.workers); w < clocks.size(); ++w) clocks[w] = idle_clock;
  }

  // Where worker `w`'s figures go: the reports carry --workers ranks, a joiner's count with w % workers.
  std::size_t slot(int w) const { return static_cast<std::size_t>(w % setup.workers); }

  static constexpr std::uint64_t idle_clock = ~std::uint64_t{0} / 2;  // holds nobody back
  static int most_workers(const parameter_server_setup& s) {
    int most = s.workers;
    for (const auto& change : s.membership) most = std::max(most, change.workers);
    return most;
  }

  bool synchronous() const { return setup.max_staleness == 0; }
  std::uint64_t total_gradients() const { return step_limit.load() * static_cast<std::uint64_t>(setup.workers); }

  // With ticket_mutex held, `started` steps begun: a stop asked for since ends the job after
  // step `started` (at least one step, so the coordinator sees an end).
  void notice_stop(std::uint64_t started) {
    if (stop_noticed || !setup.stop_requested || !setup.stop_requested->load()) return;
    stop_noticed = true;
    step_limit = std::min(step_limit.load(), started + 1);
  }

  // The parameters, each shard at `at_least` updates or more; empty once the servers stopped.
  std::optional<std::vector<float>> pull(caf::scoped_actor& self, std::uint64_t at_least,
                                         std::vector<std::uint64_t>* versions = nullptr) {
    std::vector<float> parameters(setup.initial.size());
    for (std::size_t k = 0; k < servers.size(); ++k) {
      bool ok = true;
      self->request(servers[k], caf::infinite, shard_pull{at_least})
          .receive(
              [&](shard_values& v) {
                std::copy(v.values.begin(), v.values.end(), parameters.begin() + static_cast<std::ptrdiff_t>(shards[k].begin));
                if (versions) (*versions)[k] = v.version;
              },
              [&](caf::error&) { ok = false; });
      if (!ok) return std::nullopt;
    }
    return parameters;
  }

  // The emulated link: a pull or a push of the parameters takes its wire time and latency.
  void cross_link(int worker) {
    const auto bytes = setup.initial.size() * sizeof(float);
    const auto took = setup.link.wire_time(bytes) + setup.link.latency();
    if (took.count() > 0) std::this_thread::sleep_for(took);
    figures[slot(worker)].bytes += bytes;
  }

  static void add(std::atomic<double>& total, double seconds) {
    double seen = total.load();
    while (!total.compare_exchange_weak(seen, seen + seconds)) {
    }
  }

  // The next gradient for worker `w` to compute, once it is among the active workers; nothing
  // once every gradient is pushed (or the servers stop). Applies the membership schedule as the
  // gradients of each changing step are reached: workers from the new count on stop taking
  // gradients (a crash also loses the ones they compute), new ranks start.
  std::optional<std::uint64_t> claim(int w) {
    std::unique_lock lock(ticket_mutex);
    for (;;) {
      while (changes_applied < setup.membership.size() &&
             next_ticket >= setup.membership[changes_applied].step * static_cast<std::uint64_t>(setup.workers)) {
        const membership_change& change = setup.membership[changes_applied++];
        if (change.crash)
          for (int k = change.workers; k < active; ++k) killed[static_cast<std::size_t>(k)] = true;
        active = change.workers;
        tickets_changed.notify_all();
      }
      notice_stop(next_ticket / static_cast<std::uint64_t>(setup.workers));
      if (stopping || (redo.empty() && next_ticket >= total_gradients() && in_flight == 0)) return std::nullopt;
      if (w < active && (!redo.empty() || next_ticket < total_gradients())) break;
      rest(w);
      killed[static_cast<std::size_t>(w)] = false;  // a crash finds an idle worker with nothing to lose
      tickets_changed.wait(lock);
    }
    wake(w);
    ++in_flight;
    if (!redo.empty()) {
      const std::uint64_t t = redo.front();
      redo.pop_front();
      return t;
    }
    return next_ticket++;
  }

  // Gradient `t` is applied (or, `lost`, must be computed again by someone).
  void settle(std::uint64_t t, bool lost) {
    {
      std::lock_guard lock(ticket_mutex);
      --in_flight;
      if (lost) redo.push_back(t);
    }
    tickets_changed.notify_all();
  }

  // Whether worker `w` died under the gradient it computed (it is not pushed).
  bool dies(int w) {
    std::lock_guard lock(ticket_mutex);
    const bool dead = killed[static_cast<std::size_t>(w)];
    killed[static_cast<std::size_t>(w)] = false;
    return dead;
  }

  // An idle worker holds nobody back; one that starts again starts level with the slowest.
  void rest(int w) { advance_clock(w, idle_clock); }
  void wake(int w) {
    std::lock_guard lock(clock_mutex);
    auto& mine = clocks[static_cast<std::size_t>(w)];
    if (mine != idle_clock) return;
    std::uint64_t slowest = idle_clock;
    for (std::size_t k = 0; k < clocks.size(); ++k)
      if (k != static_cast<std::size_t>(w)) slowest = std::min(slowest, clocks[k]);
    mine = slowest == idle_clock ? 0 : slowest;
  }

  // Waits until this worker may compute its gradient `k` (at most max_staleness ahead).
  bool may_compute(std::uint64_t k) {
    if (synchronous() || k <= setup.max_staleness) return !stopping;
    std::unique_lock lock(clock_mutex);
    clock_changed.wait(lock, [&] {
      return stopping || *std::min_element(clocks.begin(), clocks.end()) + setup.max_staleness >= k;
    });
    return !stopping;
  }

  void advance_clock(int worker, std::uint64_t to) {
    {
      std::lock_guard lock(clock_mutex);
      clocks[static_cast<std::size_t>(worker)] = to;
    }
    clock_changed.notify_all();
  }

  void run_worker(int w) {
    caf::scoped_actor self{system};
    std::unique_ptr<model> net = setup.prototype->clone();
    const auto workers = static_cast<std::uint64_t>(setup.workers);
    const double speed = static_cast<std::size_t>(w) < setup.speed_factors.size()
                             ? setup.speed_factors[static_cast<std::size_t>(w)] : 1.0;
    auto& mine = figures[slot(w)];
    std::vector<std::uint64_t> versions(servers.size());
    try {
      for (std::uint64_t k = 0;; ++k) {
        std::uint64_t ticket = k * workers + static_cast<std::uint64_t>(w);  // synchronous: round k's
        auto waited = clock_type::now();
        if (synchronous()) {
          std::lock_guard lock(ticket_mutex);
          notice_stop(k);
          if (k >= step_limit) break;
        } else {
          const auto claimed = claim(w);
          if (!claimed) break;
          ticket = *claimed;
          std::lock_guard lock(clock_mutex);
          k = clocks[static_cast<std::size_t>(w)];  // pushes so far (level with the slowest after a rest)
        }
        if (!may_compute(k)) return;
        // Synchronous: the parameters after round k; otherwise whatever the shards hold now.
        auto parameters = pull(self, synchronous() ? k : 0, &versions);
        if (!parameters) return;
        add(mine.wait, std::chrono::duration<double>(clock_type::now() - waited).count());
        auto communicating = clock_type::now();
        cross_link(w);
        add(mine.communication, std::chrono::duration<double>(clock_type::now() - communicating).count());
        const auto computing = clock_type::now();
        auto gradient = std::make_shared<std::vector<float>>(parameters->size(), 0.f);
        gradient_push push;
        push.worker = w;
        const micro_batch_stream stream{static_cast<int>(ticket % workers), setup.workers, setup.micro_batch,
                                        setup.data_position};
        for (std::size_t m = 0; m < setup.accumulation; ++m) {
          const batch input = setup.train->examples(stream.first_position((ticket / workers) * setup.accumulation + m),
                                                    stream.size);
          push.loss_sum += net->accumulate_gradients(*parameters, input, *gradient);
          push.items += static_cast<double>(input.items());
          push.micro_batches += 1;
        }
        const std::chrono::duration<double> took = clock_type::now() - computing;
        if (speed > 1.0) std::this_thread::sleep_for(took * (speed - 1.0));
        add(mine.compute, std::chrono::duration<double>(clock_type::now() - computing).count());
        if (!synchronous() && dies(w)) {  // the membership schedule's crash: this gradient is lost
          settle(ticket, true);
          continue;
        }
        push.gradient = std::move(gradient);
        communicating = clock_type::now();
        cross_link(w);
        for (std::size_t s = 0; s < servers.size(); ++s) {
          push.pulled_version = versions[s];
          self->send(servers[s], push);
        }
        add(mine.communication, std::chrono::duration<double>(clock_type::now() - communicating).count());
        advance_clock(w, k + 1);
        if (!synchronous()) settle(ticket, false);
      }
    } catch (const std::exception& e) {
      self->send(setup.coordinator, worker_failure{w, e.what()});
    }
    advance_clock(w, idle_clock);  // done: it holds nobody back
  }

  // Turns shard 0's applied gradients into steps of `workers` gradients each, one report per
  // worker to the coordinator (rank 0's with the step's staleness histogram, and the
  // parameters where an evaluation is due).
  void run_reporter() {
    caf::scoped_actor self{system};
    std::uint64_t step = 0, in_step = 0;
    round_totals totals;
    std::vector<std::uint64_t> histogram;
    while (auto g = applied->take()) {
      totals.micro_batches += g->micro_batches;
      totals.loss_sum += g->loss_sum;
      totals.items += g->items;
      if (histogram.size() <= g->staleness) histogram.resize(g->staleness + 1);
      ++histogram[g->staleness];
      if (++in_step < static_cast<std::uint64_t>(setup.workers)) continue;
      if (step + 1 == step_limit && step_limit < setup.steps) totals.changes = 1;  // a stop: the last step
      tensor parameters;
      if (step_due(pipeline::synchronous, step, setup.steps, setup.eval_interval)) {
        // Synchronous: every shard at this step's update; otherwise what they hold now.
        auto now = pull(self, synchronous() ? step + 1 : 0);
        if (!now) return;
        parameters = std::make_shared<std::vector<float>>(std::move(*now));
      }
      for (int r = 0; r < setup.workers; ++r) {
        const auto& f = figures[static_cast<std::size_t>(r)];
        round_report report;
        report.rank = r;
        report.round = step;
        report.global = totals;
        report.compute_seconds = f.compute.load();
        report.communication_seconds = f.communication.load();
        report.wait_seconds = f.wait.load();
        report.traffic.bytes_sent = f.bytes.load();
        if (r == 0) {
          report.staleness = histogram;
          report.parameters = parameters;
        }
        self->send(setup.coordinator, std::move(report));
      }
      ++step;
      in_step = 0;
      totals = {};
      histogram.clear();
    }
  }
};

parameter_server_run::parameter_server_run(caf::actor_system& system, parameter_server_setup setup)
    : impl_(std::make_unique<impl>(system, std::move(setup))) {
  impl& p = *impl_;
  const int shards = p.setup.workers;  // one server shard per worker
  for (int k = 0; k < shards; ++k) {
    auto s = std::make_shared<server_state>();
    s->own = shard_of(p.setup.initial.size(), shards, k);
    s->workers = p.setup.workers;
    s->synchronous = p.synchronous();
    s->master.assign(p.setup.initial.begin() + static_cast<std::ptrdiff_t>(s->own.begin),
                     p.setup.initial.begin() + static_cast<std::ptrdiff_t>(s->own.end));
    s->opt = make_optimizer(p.setup.optimizer, s->own.size());
    s->schedule = p.setup.schedule;
    s->round.resize(static_cast<std::size_t>(p.setup.workers));
    s->sum.resize(s->own.size());
    if (k == 0) s->applied = p.applied;
    state_bytes_ += (s->master.size() + s->opt->state().values.size()) * sizeof(float);
    p.shards.push_back(s->own);
    p.servers.push_back(system.spawn(server_behavior, std::move(s)));
  }
  p.reporter = std::thread([&p] { p.run_reporter(); });
  const int threads = p.synchronous() ? p.setup.workers : impl::most_workers(p.setup);  // joiners wait their turn
  for (int w = 0; w < threads; ++w) p.workers.emplace_back([&p, w] { p.run_worker(w); });
}

parameter_server_run::~parameter_server_run() {
  stop();
  join();
}

void parameter_server_run::stop() {
  impl& p = *impl_;
  if (p.stopping.exchange(true)) return;
  for (auto& server : p.servers) caf::anon_send(server, stop_atom::value);
  p.clock_changed.notify_all();
  {
    std::lock_guard lock(p.ticket_mutex);  // a waiting claim sees `stopping`
  }
  p.tickets_changed.notify_all();
  p.applied->close();
}

void parameter_server_run::join() {
  impl& p = *impl_;
  for (auto& w : p.workers)
    if (w.joinable()) w.join();
  p.applied->close();
  if (p.reporter.joinable()) p.reporter.join();
}

std::vector<float> parameter_server_run::finish() {
  impl& p = *impl_;
  join();
  caf::scoped_actor self{p.system};
  // Every shard has applied every push: one update per round, or one per gradient.
  auto parameters = p.pull(self, p.synchronous() ? p.step_limit.load() : p.total_gradients());
  stop();
  if (!parameters) throw std::runtime_error("the parameter server stopped before the last update");
  return std::move(*parameters);
}

namespace {

class parameter_server final : public topology {
public:
  std::unique_ptr<worker_topology> make_worker(int, std::span<const float>) const override {
    throw std::logic_error("parameter-server runs server actors, not rounds");
  }
};

void refuse(const std::string& why) { throw std::invalid_argument("--topology parameter-server: " + why); }

}  // namespace

topology_factory parameter_server_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    if (!job.synchronous || !job.sharded_optimizer)
      refuse("servers step a sharded optimizer on pushed gradients (--algo ddp or lion), not --algo " + job.algorithm);
    if (job.checkpoints) refuse("checkpoints are not supported");
    if (job.membership_changes && job.options.max_staleness == 0)
      refuse("workers coming and going need --max-staleness >= 1 (synchronous rounds wait for every worker)");
    return std::make_unique<parameter_server>();
  };
}

bool is_parameter_server(const topology& t) { return dynamic_cast<const parameter_server*>(&t) != nullptr; }

}  // namespace accord
