#include "topologies/asynchronous/workers.hpp"

#include "observe/stall_watchdog.hpp"
#include "observe/thread_cpu.hpp"


#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace accord {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Hands the applied gradients, in order, to the thread that reports steps.
class applied_queue {
public:
  void put(const applied_gradient& g) {
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

}  // namespace

struct asynchronous_workers::impl {
  asynchronous_setup setup;
  caf::actor_system& system;
  asynchronous_use* use = nullptr;
  applied_queue applied;
  std::vector<std::thread> workers;
  std::thread reporter;
  std::atomic<bool> stopping{false};

  // Stale synchronous parallel: gradients each worker has delivered (resting workers count as
  // ahead of all).
  std::mutex clock_mutex;
  std::condition_variable clock_changed;
  std::vector<std::uint64_t> clocks;

  // Without lockstep: gradient t (of steps × workers) reads the micro-batches that rank
  // t % workers reads at step t / workers, whoever computes it; a gradient lost with a crashed
  // worker is redone by another. Guarded by ticket_mutex.
  std::mutex ticket_mutex;
  std::condition_variable tickets_changed;
  std::uint64_t next_ticket = 0;
  std::deque<std::uint64_t> redo;
  std::uint64_t in_flight = 0;                 // claimed, neither delivered nor given back
  std::vector<bool> killed;                    // by a crash of the membership schedule
  std::size_t changes_applied = 0;             // of setup.membership, in order
  int active = 0;                              // workers taking gradients now
  // Steps the job runs: setup.steps, or fewer once a stop is asked for (then the step being
  // computed is the last; the reporter marks it, so the coordinator ends the job there).
  std::atomic<std::uint64_t> step_limit{0};
  bool stop_noticed = false;                   // guarded by ticket_mutex

  // Per worker, cumulative: what the reports carry.
  struct running_figures {
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<double> compute{0}, communication{0}, wait{0};
  };
  std::vector<running_figures> figures;
  // Bytes sent from worker to worker (by rank), cumulative; guarded by edge_mutex.
  std::mutex edge_mutex;
  std::map<std::pair<int, int>, std::uint64_t> edge_bytes;

  static constexpr std::uint64_t idle_clock = ~std::uint64_t{0} / 2;  // holds nobody back

  impl(caf::actor_system& system, asynchronous_setup s)
      : setup(std::move(s)), system(system), clocks(static_cast<std::size_t>(most_workers()), 0),
        killed(static_cast<std::size_t>(most_workers())), active(setup.workers), step_limit(setup.steps),
        figures(static_cast<std::size_t>(setup.workers)) {
    for (std::size_t w = static_cast<std::size_t>(setup.workers); w < clocks.size(); ++w) clocks[w] = idle_clock;
  }

  int most_workers() const {
    int most = setup.workers;
    if (lockstep()) return most;
    for (const auto& change : setup.membership) most = std::max(most, change.workers);
    return most;
  }
  bool lockstep() const { return setup.max_ahead == 0; }
  // Of this run (an elastic epoch's start at first_step: its gradients and data count from there).
  std::uint64_t total_gradients() const {
    return (step_limit.load() - setup.first_step) * static_cast<std::uint64_t>(setup.workers);
  }
  // Where worker `w`'s figures go: the reports carry --workers ranks, a joiner's count with w % workers.
  std::size_t slot(int w) const { return static_cast<std::size_t>(w % setup.workers); }

  void count(int w, std::size_t bytes, int to) {
    figures[slot(w)].bytes += bytes;
    if (to >= 0) count_edge(w, to, bytes);
  }
  void count_edge(int from, int to, std::size_t bytes) {
    std::lock_guard lock(edge_mutex);
    edge_bytes[{from, to}] += bytes;
  }

  // The bytes each edge carried since `before` (which becomes the totals now).
  std::vector<edge_traffic> edges_since(std::map<std::pair<int, int>, std::uint64_t>& before) {
    std::vector<edge_traffic> step;
    std::lock_guard lock(edge_mutex);
    for (const auto& [edge, bytes] : edge_bytes)
      if (const std::uint64_t sent = bytes - before[edge]; sent > 0) step.push_back({edge.first, edge.second, sent});
    before = edge_bytes;
    return step;
  }

  static void add(std::atomic<double>& total, double seconds) {
    double seen = total.load();
    while (!total.compare_exchange_weak(seen, seen + seconds)) {
    }
  }

  // With ticket_mutex held, `started` steps begun: a stop asked for since ends the job after
  // step `started` (at least one step, so the coordinator sees an end).
  void notice_stop(std::uint64_t started) {
    if (stop_noticed || !setup.stop_requested || !setup.stop_requested->load()) return;
    stop_noticed = true;
    step_limit = std::min(step_limit.load(), setup.first_step + started + 1);
  }

  // The next gradient for worker `w` to compute, once it is among the active workers; nothing
  // once every gradient is delivered (or the job stops). Applies the membership schedule as
  // the gradients of each changing step are reached.
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
      if (w >= active) use->rest(w, killed[static_cast<std::size_t>(w)]);  // a crash between gradients loses its state too
      advance_clock(w, idle_clock);  // waiting, it holds nobody back
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

  // Gradient `t` is delivered (or, `lost`, must be computed again by someone).
  void settle(std::uint64_t t, bool lost) {
    {
      std::lock_guard lock(ticket_mutex);
      --in_flight;
      if (lost) redo.push_back(t);
    }
    tickets_changed.notify_all();
  }

  // Whether worker `w` died under the gradient it computed (it is not delivered).
  bool dies(int w) {
    std::lock_guard lock(ticket_mutex);
    const bool dead = killed[static_cast<std::size_t>(w)];
    killed[static_cast<std::size_t>(w)] = false;
    if (dead) use->rest(w, true);
    return dead;
  }

  // A worker that starts (again) starts level with the slowest.
  void wake(int w) {
    std::lock_guard lock(clock_mutex);
    auto& mine = clocks[static_cast<std::size_t>(w)];
    if (mine != idle_clock) return;
    std::uint64_t slowest = idle_clock;
    for (std::size_t k = 0; k < clocks.size(); ++k)
      if (k != static_cast<std::size_t>(w)) slowest = std::min(slowest, clocks[k]);
    mine = slowest == idle_clock ? 0 : slowest;
    use->wake(w);
  }

  // Waits until this worker may compute its gradient `k` (at most max_ahead ahead).
  bool may_compute(std::uint64_t k) {
    if (lockstep() || k <= setup.max_ahead) return !stopping;
    std::unique_lock lock(clock_mutex);
    clock_changed.wait(lock, [&] {
      return stopping || *std::min_element(clocks.begin(), clocks.end()) + setup.max_ahead >= k;
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
    name_thread(thread_role::compute, w);
    caf::scoped_actor self{system};
    std::unique_ptr<model> net = setup.prototype->clone();
    const auto workers = static_cast<std::uint64_t>(setup.workers);
    const double speed = static_cast<std::size_t>(w) < setup.speed_factors.size()
                             ? setup.speed_factors[static_cast<std::size_t>(w)] : 1.0;
    auto& mine = figures[slot(w)];
    try {
      for (std::uint64_t k = 0;; ++k) {
        std::uint64_t ticket = k * workers + static_cast<std::uint64_t>(w);  // lockstep: round k's
        const auto waited = clock_type::now();
        if (lockstep()) {
          std::lock_guard lock(ticket_mutex);
          notice_stop(k);
          if (setup.first_step + k >= step_limit) break;
        } else {
          const auto claimed = setup.claim_next ? setup.claim_next() : claim(w);
          if (!claimed) break;
          ticket = *claimed;
          std::lock_guard lock(clock_mutex);
          k = clocks[static_cast<std::size_t>(w)];  // gradients so far (level with the slowest after a rest)
        }
        if (!may_compute(k)) return;
        const double linked_before = mine.communication.load();
        auto parameters = use->fetch(w, k, self);
        if (!parameters) return;
        add(mine.wait, seconds_since(waited) - (mine.communication.load() - linked_before));
        const auto computing = clock_type::now();
        computed_gradient g;
        g.ticket = ticket;
        g.sum = std::make_shared<std::vector<float>>(parameters->size(), 0.f);
        const micro_batch_stream stream{static_cast<int>(ticket % workers), setup.workers, setup.micro_batch,
                                        setup.data_position};
        for (std::size_t m = 0; m < setup.accumulation; ++m) {
          const batch input = setup.train->examples(stream.first_position((ticket / workers) * setup.accumulation + m),
                                                    stream.size);
          g.loss_sum += net->accumulate_gradients(*parameters, input, *g.sum);
          g.items += static_cast<double>(input.items());
          g.micro_batches += 1;
        }
        const std::chrono::duration<double> took = clock_type::now() - computing;
        if (speed > 1.0) std::this_thread::sleep_for(took * (speed - 1.0));
        note_progress();  // the stall watchdog's sign of life
        add(mine.compute, seconds_since(computing));
        if (!lockstep() && !setup.claim_next && dies(w)) {  // the membership schedule's crash: this gradient is lost
          settle(ticket, true);
          continue;
        }
        use->deliver(w, std::move(g), self);
        advance_clock(w, k + 1);
        if (!lockstep() && !setup.claim_next) settle(ticket, false);
      }
    } catch (const std::exception& e) {
      self->send(setup.coordinator, worker_failure{w, e.what()});
    }
    advance_clock(w, idle_clock);  // done: it holds nobody back
  }

  // Turns the applied gradients into steps of `workers` gradients each, one report per worker
  // to the coordinator (rank 0's with the step's staleness histogram, gradients per worker,
  // consensus distance, and the model where an evaluation is due).
  void run_reporter() {
    caf::scoped_actor self{system};
    // CPU by thread role from here on, each worker's own; the process's shared threads go with
    // its first worker's report.
    const int first_local = setup.peers ? setup.peers->rank() : 0;
    const auto cpu_of = [first_local](int r) { return thread_cpu_seconds(r, r == first_local); };
    std::vector<thread_cpu> cpu_at_start;
    for (int r = 0; r < most_workers(); ++r) cpu_at_start.push_back(cpu_of(r));
    std::uint64_t step = setup.first_step, in_step = 0;
    round_totals totals;
    std::vector<std::uint64_t> histogram;
    std::vector<std::uint64_t> per_worker(static_cast<std::size_t>(most_workers()));
    std::map<std::pair<int, int>, std::uint64_t> edges_reported;
    while (auto g = applied.take()) {
      totals.micro_batches += g->micro_batches;
      totals.loss_sum += g->loss_sum;
      totals.items += g->items;
      if (histogram.size() <= g->staleness) histogram.resize(g->staleness + 1);
      ++histogram[g->staleness];
      ++per_worker[static_cast<std::size_t>(g->worker)];
      if (++in_step < static_cast<std::uint64_t>(setup.workers)) continue;
      const asynchronous_view view =
          use->observe(step, step_due(pipeline::synchronous, step, setup.steps, setup.eval_interval), self);
      if (view.stopped) return;
      // A stop or a membership change: the run's last step (known once observe waited for its keep).
      if (step + 1 == step_limit && step_limit < setup.steps) totals.changes = 1;
      std::vector<edge_traffic> edges = edges_since(edges_reported);
      for (int r = 0; r < setup.workers; ++r) {
        const auto& f = figures[static_cast<std::size_t>(r)];
        round_report report;
        report.rank = r;
        report.round = step;
        report.global = totals;
        report.compute_seconds = f.compute.load();
        report.communication_seconds = f.communication.load();
        report.wait_seconds = f.wait.load();
        report.cpu = cpu_of(r) - cpu_at_start[static_cast<std::size_t>(r)];
        report.traffic.bytes_sent = f.bytes.load();
        report.consumed = (step + 1 - setup.first_step) * setup.accumulation;  // every stream, up to this step
        report.kept = view.kept;
        if (r == 0) {
          if (use->measures_staleness()) report.staleness = histogram;
          report.worker_gradients = per_worker;
          report.edge_bytes = std::move(edges);
          report.parameters = view.parameters;
          report.consensus_distance = view.consensus_distance;
        }
        self->send(setup.coordinator, std::move(report));
      }
      ++step;
      in_step = 0;
      totals = {};
      histogram.clear();
      std::fill(per_worker.begin(), per_worker.end(), 0);
    }
  }
};

asynchronous_workers::asynchronous_workers(caf::actor_system& system, asynchronous_setup setup)
    : impl_(std::make_unique<impl>(system, std::move(setup))) {}

asynchronous_workers::~asynchronous_workers() {
  stop();
  join();
}

void asynchronous_workers::start(asynchronous_use& use) {
  impl& p = *impl_;
  p.use = &use;
  p.reporter = std::thread([&p] { p.run_reporter(); });
  if (p.setup.peers) {
    p.workers.emplace_back([&p, w = p.setup.peers->rank()] { p.run_worker(w); });
    return;
  }
  for (int w = 0; w < p.most_workers(); ++w) p.workers.emplace_back([&p, w] { p.run_worker(w); });  // joiners wait their turn
}

void asynchronous_workers::applied(const applied_gradient& g) { impl_->applied.put(g); }

worker_figures asynchronous_workers::figures_of(int w) const {
  const auto& f = impl_->figures[impl_->slot(w)];
  return {f.bytes.load(), f.compute.load(), f.communication.load(), f.wait.load()};
}

void asynchronous_workers::set_figures(int w, const worker_figures& f) {
  auto& mine = impl_->figures[impl_->slot(w)];
  mine.bytes = f.bytes;
  mine.compute = f.compute;
  mine.communication = f.communication;
  mine.wait = f.wait;
}

void asynchronous_workers::cross_link(int w, std::size_t bytes, int to) {
  impl& p = *impl_;
  const auto started = clock_type::now();
  const auto took = p.setup.link.wire_time(bytes) + p.setup.link.latency();
  if (took.count() > 0) std::this_thread::sleep_for(took);
  p.count(w, bytes, to);
  impl::add(p.figures[p.slot(w)].communication, seconds_since(started));
}

void asynchronous_workers::count_sent(int w, std::size_t bytes, int to) { impl_->count(w, bytes, to); }

void asynchronous_workers::count_edge(int from, int to, std::size_t bytes) { impl_->count_edge(from, to, bytes); }

std::vector<std::uint64_t> asynchronous_workers::edges_from(int w, int ranks) const {
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(std::max(ranks, 0)), 0);
  std::lock_guard lock(impl_->edge_mutex);
  for (int to = 0; to < ranks; ++to)
    if (const auto found = impl_->edge_bytes.find({w, to}); found != impl_->edge_bytes.end())
      bytes[static_cast<std::size_t>(to)] = found->second;
  return bytes;
}

void asynchronous_workers::set_edges_from(int w, std::span<const std::uint64_t> bytes) {
  std::lock_guard lock(impl_->edge_mutex);
  for (std::size_t to = 0; to < bytes.size(); ++to)
    if (bytes[to] > 0) impl_->edge_bytes[{w, static_cast<int>(to)}] = bytes[to];
}

void asynchronous_workers::stop() {
  impl& p = *impl_;
  if (p.stopping.exchange(true)) return;
  p.clock_changed.notify_all();
  {
    std::lock_guard lock(p.ticket_mutex);  // a waiting claim sees `stopping`
  }
  p.tickets_changed.notify_all();
  p.applied.close();
}

void asynchronous_workers::join() {
  impl& p = *impl_;
  for (auto& w : p.workers)
    if (w.joinable()) w.join();
  p.applied.close();
  if (p.reporter.joinable()) p.reporter.join();
}

bool asynchronous_workers::stopping() const { return impl_->stopping; }
std::uint64_t asynchronous_workers::step_limit() const { return impl_->step_limit; }

void asynchronous_workers::end_after(std::uint64_t steps) {
  impl_->step_limit = std::min(impl_->step_limit.load(), steps);
}
int asynchronous_workers::most_workers() const { return impl_->most_workers(); }
const asynchronous_setup& asynchronous_workers::setup() const { return impl_->setup; }

std::unique_ptr<worker_topology> asynchronous_topology::make_worker(int, std::span<const float>) const {
  throw std::logic_error("an asynchronous topology runs its own workers, not rounds");
}

const asynchronous_topology* as_asynchronous(const topology& t) { return dynamic_cast<const asynchronous_topology*>(&t); }

}  // namespace accord
