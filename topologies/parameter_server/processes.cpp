#include "topologies/parameter_server/processes.hpp"

#include "topologies/asynchronous/gradient_tickets.hpp"
#include "topologies/asynchronous/peer_exchange.hpp"
#include "topologies/parameter_server/server_shard.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>

namespace accord {
namespace {

// Wire messages: a fixed header, then floats. Tags name the kind.
constexpr std::uint64_t push_tag = 1, pull_tag = 2, reply_tag = 3, retire_tag = 4, buddy_tag = 5;
struct no_header {
  std::uint64_t unused = 0;
};
// A retired worker's clock: it holds nobody back any more.
constexpr std::uint64_t retired = ~std::uint64_t{0} / 2;
struct push_header {
  std::uint64_t worker = 0;
  std::uint64_t pulled_version = 0;
  double micro_batches = 0, loss_sum = 0, items = 0;
  worker_figures figures;  // the pushing worker's, for the reports shard 0's process sends
};
struct pull_request {
  std::uint64_t id = 0;
  std::uint64_t at_least_version = 0;  // updates the shard applied
  std::uint64_t at_least_clock = 0;    // pushes every worker made to the shard
  std::uint64_t last = 0;              // the worker's last pull: the shard's work for it is done
};
struct reply_header {
  std::uint64_t id = 0;
  std::uint64_t version = 0;
};

class parameter_server_processes final : public asynchronous_run, private asynchronous_use {
public:
  parameter_server_processes(caf::actor_system& system, asynchronous_setup setup, std::uint64_t max_staleness)
      : max_staleness_(max_staleness) {
    link_ = setup.peers;
    rank_ = link_->rank();
    world_ = link_->size();
    if (setup.workers != world_)
      throw std::invalid_argument("--topology parameter-server between processes runs one worker per process");
    setup.stop_requested = nullptr;  // the job runs to its last step
    if (max_staleness == 0) {
      setup.max_ahead = 0;  // lockstep: worker r computes gradients r, r + N, ... (round k's after round k - 1)
    } else {
      // Workers claim the job's gradients (fast ones compute more); the servers keep them within
      // S of each other, and a worker left without gradients retires from that bound.
      setup.max_ahead = ~std::uint64_t{0} / 4;
      setup.claim_next = [this] {
        auto t = tickets_->claim([this](std::uint64_t boundary) { keep_at(boundary); });
        if (!t)
          for (int s = 0; s < world_; ++s) exchange_->send(s, retire_tag, message_of(no_header{}));
        return t;
      };
    }
    workers_ = std::make_unique<asynchronous_workers>(system, std::move(setup));
    const asynchronous_setup& s = workers_->setup();
    if (max_staleness != 0) tickets_ = std::make_unique<gradient_tickets>(rank_, *workers_);
    for (int k = 0; k < world_; ++k) shards_.push_back(shard_of(s.initial.size(), world_, k));
    server_ = std::make_unique<server_shard>(shards_[static_cast<std::size_t>(rank_)], world_, max_staleness == 0,
                                             s.initial, s.optimizer, s.schedule, s.first_step,
                                             s.initial_state ? &*s.initial_state : nullptr);
    state_slots_ = server_->state().slots;
    pushes_from_.resize(static_cast<std::size_t>(world_));
    versions_.resize(static_cast<std::size_t>(world_));
    const std::size_t own_bytes = shards_[static_cast<std::size_t>(rank_)].size() * sizeof(float);
    std::vector<peer_exchange::kind> kinds{
        {push_tag, [own_bytes](int) { return sizeof(push_header) + own_bytes; },
         [this](int, std::span<const std::byte> m) { on_push(m); }},
        {pull_tag, [](int) { return sizeof(pull_request); },
         [this](int from, std::span<const std::byte> m) { on_pull(from, header_of<pull_request>(m)); }},
        {reply_tag, [this](int from) { return sizeof(reply_header) + shards_[static_cast<std::size_t>(from)].size() * sizeof(float); },
         [this](int from, std::span<const std::byte> m) { on_reply(from, m); }},
    };
    if (tickets_) {
      kinds.push_back({retire_tag, [](int) { return sizeof(no_header); },
                       [this](int from, std::span<const std::byte>) { on_retire(from); }});
      kinds.push_back({buddy_tag, [this](int from) { return buddy_bytes(from); },
                       [this](int from, std::span<const std::byte> m) { on_buddy(from, m); }});
      for (auto& k : tickets_->kinds()) kinds.push_back(std::move(k));
    }
    coordinator_ = s.coordinator;
    exchange_ = std::make_unique<peer_exchange>(link_, std::move(kinds), [this](const std::string& why) {
      caf::anon_send(coordinator_, worker_failure{rank_, why});
      fail(why);
    });
    if (tickets_) tickets_->attach(*exchange_);
    exchange_->start();
    workers_->start(*this);
  }

  ~parameter_server_processes() override {
    stop();
    workers_->join();
    exchange_.reset();
  }

  void stop() override {
    fail("the parameter server stopped");
    exchange_->stop("the parameter server stopped");
    workers_->stop();
  }

  std::vector<float> finish() override {
    workers_->join();
    const std::uint64_t steps = workers_->step_limit() - workers_->setup().first_step;
    // Every shard has applied every push: one update per round, or one per gradient.
    auto parameters = pull(max_staleness_ == 0 ? steps : steps * static_cast<std::uint64_t>(world_), 0, true);
    std::optional<std::string> failed;
    {
      // Every worker's last pull answered here: nothing more comes to this process.
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return last_pulls_ == world_ || failure_; });
      failed = failure_;
    }
    if (const auto broken = exchange_->finish()) throw std::runtime_error(*broken);
    if (!parameters || failed)
      throw std::runtime_error("the parameter server stopped before the last update: " + failed.value_or("?"));
    return std::move(*parameters);
  }

  std::size_t state_bytes() const override { return server_->state_bytes(); }

private:
  // The worker loop's side (asynchronous_use).
  std::optional<std::vector<float>> fetch(int w, std::uint64_t k, caf::scoped_actor&) override {
    // S = 0: the parameters after round k; else once every worker pushed k - S gradients.
    auto parameters = max_staleness_ == 0 ? pull(k, 0, false, &versions_)
                                          : pull(0, k > max_staleness_ ? k - max_staleness_ : 0, false, &versions_);
    if (parameters) workers_->cross_link(w, parameters->size() * sizeof(float));
    return parameters;
  }

  void deliver(int w, computed_gradient g, caf::scoped_actor&) override {
    workers_->cross_link(w, g.sum->size() * sizeof(float));
    push_header header{static_cast<std::uint64_t>(w), 0, g.micro_batches, g.loss_sum, g.items, workers_->figures_of(w)};
    for (int s = 0; s < world_; ++s) {
      const shard& own = shards_[static_cast<std::size_t>(s)];
      header.pulled_version = versions_[static_cast<std::size_t>(s)];
      exchange_->send(s, push_tag, message_of(header, std::span<const float>(g.sum->data() + own.begin, own.size())));
    }
  }

  bool measures_staleness() const override { return true; }

  asynchronous_view observe(std::uint64_t step, bool with_parameters, caf::scoped_actor&) override {
    asynchronous_view view;
    const asynchronous_setup& s = workers_->setup();
    if (s.keep) view.kept = tickets_->kept_at((step + 1 - s.first_step) * static_cast<std::uint64_t>(world_));
    if (!with_parameters) return view;
    auto now = pull(max_staleness_ == 0 ? step + 1 - s.first_step : 0, 0, false);
    if (!now) view.stopped = true;
    else view.parameters = std::make_shared<std::vector<float>>(std::move(*now));
    return view;
  }

  // An elastic job's kept step (the worker's thread, every worker at the same boundary): the
  // parameters once every shard applied the epoch's gradients before `boundary`, this shard's
  // optimizer state, and the copies it keeps of others' (copies_kept_by), as a ZeRO-1 worker
  // keeps them.
  void keep_at(std::uint64_t boundary) {
    const asynchronous_setup& s = workers_->setup();
    auto parameters = pull(boundary, 0, false, &versions_);
    if (!parameters) throw std::runtime_error("the parameter server stopped while keeping its state");
    kept_state kept;
    kept.layout = s.keep->layout;
    kept.world = world_;
    kept.rank = rank_;
    kept.steps = s.first_step + boundary / static_cast<std::uint64_t>(world_);
    kept.parameters = std::move(*parameters);
    {
      std::lock_guard lock(server_mutex_);
      kept.own = server_->state();
    }
    for (const int to : copy_holders(rank_, world_))
      exchange_->send(to, buddy_tag, message_of(no_header{}, kept.own.values));
    const std::vector<int> sources = copies_kept_by(rank_, world_);
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return copies_.size() == sources.size() || failure_; });
    if (copies_.size() != sources.size())
      throw std::runtime_error("the parameter server stopped while keeping its state");
    for (const int from : sources) {
      rule_state& copy = kept.copies.emplace_back(kept.own);
      copy.begin = shards_[static_cast<std::size_t>(from)].begin;
      copy.values = std::move(copies_.at(from));
    }
    copies_.clear();
    lock.unlock();
    s.keep->keeper->keep(std::move(kept));
  }

  std::size_t buddy_bytes(int from) const {
    return sizeof(no_header) + state_slots_ * shards_[static_cast<std::size_t>(from)].size() * sizeof(float);
  }

  void on_buddy(int from, std::span<const std::byte> message) {
    const auto values = values_of(message, sizeof(no_header));
    std::lock_guard lock(mutex_);
    copies_[from].assign(values.begin(), values.end());
    changed_.notify_all();
  }

  // The parameters from every shard's owner; nothing once failed. `versions`: each shard's.
  std::optional<std::vector<float>> pull(std::uint64_t at_least_version, std::uint64_t at_least_clock, bool last,
                                         std::vector<std::uint64_t>* versions = nullptr) {
    pending_pull pending;
    pending.parameters.resize(workers_->setup().initial.size());
    pending.versions.resize(static_cast<std::size_t>(world_));
    pending.remaining = world_;
    std::uint64_t id = 0;
    {
      std::lock_guard lock(mutex_);
      if (failure_) return std::nullopt;
      id = next_pull_++;
      pulls_.emplace(id, &pending);
    }
    for (int s = 0; s < world_; ++s)
      exchange_->send(s, pull_tag, message_of(pull_request{id, at_least_version, at_least_clock, last ? 1u : 0u}));
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return pending.remaining == 0 || failure_; });
    pulls_.erase(id);
    if (pending.remaining != 0) return std::nullopt;
    if (versions) *versions = std::move(pending.versions);
    return std::move(pending.parameters);
  }

  void on_reply(int from, std::span<const std::byte> message) {
    const auto header = header_of<reply_header>(message);
    const auto values = values_of(message, sizeof(reply_header));
    std::lock_guard lock(mutex_);
    const auto found = pulls_.find(header.id);
    if (found == pulls_.end()) return;  // given up after a failure
    pending_pull& p = *found->second;
    std::copy(values.begin(), values.end(),
              p.parameters.begin() + static_cast<std::ptrdiff_t>(shards_[static_cast<std::size_t>(from)].begin));
    p.versions[static_cast<std::size_t>(from)] = header.version;
    if (--p.remaining == 0) changed_.notify_all();
  }

  // The server's side, on the exchange's thread.
  void on_push(std::span<const std::byte> message) {
    const auto header = header_of<push_header>(message);
    if (header.worker >= static_cast<std::uint64_t>(world_))
      throw std::runtime_error("a push names worker " + std::to_string(header.worker) + " of " + std::to_string(world_));
    const int worker = static_cast<int>(header.worker);
    const push_summary summary{worker, header.pulled_version, header.micro_batches, header.loss_sum, header.items};
    std::vector<applied_gradient> applied;
    {
      std::lock_guard lock(server_mutex_);
      applied = server_->push(summary, values_of(message, sizeof(push_header)));
    }
    ++pushes_from_[static_cast<std::size_t>(worker)];
    if (rank_ == 0) {  // shard 0 records, for the reports
      if (worker != rank_) workers_->set_figures(worker, header.figures);
      for (const applied_gradient& g : applied) {
        count_edges_of(g.worker);
        workers_->applied(g);
      }
    }
    answer_waiting();
  }

  // An applied gradient was one pull of every shard and one push to every shard: the reports'
  // edge_bytes, counted where gradients are recorded (no process sees every transfer), with
  // the worker's own shard as in one process.
  void count_edges_of(int worker) {
    for (int s = 0; s < world_; ++s) {
      const std::size_t bytes = shards_[static_cast<std::size_t>(s)].size() * sizeof(float);
      workers_->count_edge(worker, s, bytes);
      workers_->count_edge(s, worker, bytes);
    }
  }

  void on_retire(int worker) {
    pushes_from_[static_cast<std::size_t>(worker)] = retired;
    answer_waiting();
  }

  void on_pull(int from, const pull_request& request) {
    waiting_.push_back({from, request});
    answer_waiting();
  }

  void answer_waiting() {
    const std::uint64_t slowest = *std::min_element(pushes_from_.begin(), pushes_from_.end());
    std::erase_if(waiting_, [&](const waiting_pull& w) {
      if (w.request.at_least_version > server_->version() || w.request.at_least_clock > slowest) return false;
      exchange_->send(w.from, reply_tag, message_of(reply_header{w.request.id, server_->version()}, server_->values()));
      if (w.request.last) {
        std::lock_guard lock(mutex_);
        ++last_pulls_;
        changed_.notify_all();
      }
      return true;
    });
  }

  void fail(const std::string& why) {
    {
      std::lock_guard lock(mutex_);
      if (!failure_) failure_ = why;
    }
    changed_.notify_all();
    if (tickets_) tickets_->fail();
  }

  struct pending_pull {
    std::vector<float> parameters;
    std::vector<std::uint64_t> versions;
    int remaining = 0;
  };
  struct waiting_pull {
    int from;
    pull_request request;
  };

  std::uint64_t max_staleness_;
  std::shared_ptr<transport> link_;
  int rank_ = 0, world_ = 1;
  coordinator_actor coordinator_;
  std::vector<shard> shards_;
  std::unique_ptr<gradient_tickets> tickets_;  // S >= 1
  std::unique_ptr<asynchronous_workers> workers_;
  // The server (the exchange thread's; a keep reads its state under server_mutex_).
  std::unique_ptr<server_shard> server_;
  std::mutex server_mutex_;  // the exchange thread's server, read by a keep
  std::size_t state_slots_ = 0;  // of the optimizer: a buddy's shard is as many slices
  std::vector<std::uint64_t> pushes_from_;
  std::vector<waiting_pull> waiting_;
  // The worker's (its thread only): each shard's version at its last pull.
  std::vector<std::uint64_t> versions_;
  // Pulls in flight (worker, reporter and finish threads) and the end, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::uint64_t, pending_pull*> pulls_;
  std::map<int, std::vector<float>> copies_;  // at a keep: the optimizer shards of copies_kept_by, by rank
  std::uint64_t next_pull_ = 0;
  int last_pulls_ = 0;
  std::optional<std::string> failure_;
  std::unique_ptr<peer_exchange> exchange_;  // last: its thread calls into everything above
};

}  // namespace

std::unique_ptr<asynchronous_run> start_parameter_server_processes(caf::actor_system& system, asynchronous_setup setup,
                                                                   std::uint64_t max_staleness) {
  return std::make_unique<parameter_server_processes>(system, std::move(setup), max_staleness);
}

}  // namespace accord
