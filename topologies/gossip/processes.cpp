#include "topologies/gossip/processes.hpp"

#include "topologies/gossip/arithmetic.hpp"
#include "topologies/gossip/rules.hpp"
#include "topologies/asynchronous/gradient_tickets.hpp"
#include "topologies/asynchronous/peer_exchange.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <stdexcept>

namespace accord {
namespace {

// Tags name the kind: an exchange's offer (the initiator's copy) and answer (the neighbour's copy
// before the mean), rank 0's request for every copy and the copies, an applied gradient for
// rank 0's reports, a worker's notice that it is done, the sketch of a changed copy, and an
// elastic job's kept step: each worker's copy and optimizer state to rank 0, and their means back.
constexpr std::uint64_t offer_tag = 1, answer_tag = 2, collect_tag = 3, copy_tag = 4, applied_tag = 5, done_tag = 6,
                        sketch_tag = 7, keep_state_tag = 8, mean_tag = 9;
// Floats of a copy's sketch (1 KiB), which rank 0 gets whenever the copy changed (a gradient's
// step, either side of an exchange): its consensus distance between evaluations.
constexpr std::size_t sketch_size = 256;
struct no_header {
  std::uint64_t unused = 0;
};
// On an offer, an answer and a collection: the job's time (in steps) the copy is mixed up to
// first, A2CiD2's clock (0 without it).
struct timed_header {
  double time = 0;
};
// A copy's sketch: whose, and which change of the copy (rank 0 keeps each worker's latest).
struct sketch_header {
  std::uint64_t worker = 0, version = 0;
};
struct state_header {
  std::uint64_t optimizer_step = 0;
};
struct applied_header {
  std::uint64_t worker = 0;
  double micro_batches = 0, loss_sum = 0, items = 0;
  worker_figures figures;  // the worker's, for rank 0's reports
};

class gossip_processes final : public asynchronous_run, private asynchronous_use {
public:
  gossip_processes(caf::actor_system& system, asynchronous_setup setup, const gossip_options& options,
                   std::uint64_t seed)
      : graph_(options.gossip_graph), rate_(options.gossip_rate), seed_(seed) {
    link_ = setup.peers;
    rank_ = link_->rank();
    world_ = link_->size();
    if (setup.workers != world_)
      throw std::invalid_argument("--topology gossip between processes runs one worker per process");
    setup.max_ahead = ~std::uint64_t{0} / 4;  // nobody waits for anybody
    setup.stop_requested = nullptr;  // the job runs to its last step
    setup.claim_next = [this] {
      const auto ticket = tickets_->claim([this](std::uint64_t boundary) { keep_at(boundary); });
      if (ticket) claimed_ = *ticket;
      return ticket;
    };
    workers_ = std::make_unique<asynchronous_workers>(system, std::move(setup));
    const asynchronous_setup& s = workers_->setup();
    tickets_ = std::make_unique<gradient_tickets>(rank_, *workers_);
    ranks_.resize(static_cast<std::size_t>(world_));
    std::iota(ranks_.begin(), ranks_.end(), std::size_t{0});
    const bool momentum = options.gossip_momentum == "a2cid2";
    // Each of the workers starts `rate_` events per step, as in one process.
    copy_ = process_copy(s.initial, momentum,
                         momentum ? a2cid2_for(neighbour_offsets(graph_, ranks_.size()), ranks_.size(), rate_)
                                  : a2cid2_constants{});
    opt_ = make_optimizer(s.optimizer, s.initial.size());
    if (s.initial_state) restore_full_state(*s.initial_state);
    sketches_.assign(static_cast<std::size_t>(world_), sketch_of(s.initial, sketch_size, seed_));
    sketch_versions_.assign(static_cast<std::size_t>(world_), 0);
    const std::size_t copy_bytes = s.initial.size() * sizeof(float), timed_copy_bytes = sizeof(timed_header) + copy_bytes;
    const std::size_t state_bytes = sizeof(state_header) + (1 + opt_->state().slots) * copy_bytes;
    const auto fixed = [](std::size_t bytes) { return [bytes](int) { return bytes; }; };
    std::vector<peer_exchange::kind> kinds{
        {offer_tag, fixed(timed_copy_bytes), [this](int from, std::span<const std::byte> m) { on_offer(from, m); }},
        {answer_tag, fixed(timed_copy_bytes), [this](int, std::span<const std::byte> m) { on_answer(m); }},
        {collect_tag, fixed(sizeof(timed_header)),
         [this](int from, std::span<const std::byte> m) { on_collect(from, m); }},
        {copy_tag, fixed(sizeof(no_header) + copy_bytes),
         [this](int from, std::span<const std::byte> m) { on_copy(from, m); }},
        {applied_tag, fixed(sizeof(applied_header) + static_cast<std::size_t>(world_) * sizeof(std::uint64_t)),
         [this](int, std::span<const std::byte> m) { on_applied(m); }},
        {done_tag, fixed(sizeof(no_header)), [this](int, std::span<const std::byte>) { on_done(); }},
        {sketch_tag, fixed(sizeof(sketch_header) + sketch_size * sizeof(float)),
         [this](int, std::span<const std::byte> m) {
           keep_sketch(header_of<sketch_header>(m), values_of(m, sizeof(sketch_header)));
         }},
        {keep_state_tag, fixed(state_bytes), [this](int from, std::span<const std::byte> m) { on_keep_state(from, m); }},
        {mean_tag, fixed(state_bytes), [this](int, std::span<const std::byte> m) { on_mean(m); }},
    };
    for (auto& k : tickets_->kinds()) kinds.push_back(std::move(k));
    coordinator_ = s.coordinator;
    exchange_ = std::make_unique<peer_exchange>(link_, std::move(kinds), [this](const std::string& why) {
      caf::anon_send(coordinator_, worker_failure{rank_, why});
      fail(why);
    });
    tickets_->attach(*exchange_);
    exchange_->start();
    workers_->start(*this);
  }

  ~gossip_processes() override {
    stop();
    workers_->join();
    exchange_.reset();
  }

  void stop() override {
    fail("gossip stopped");
    exchange_->stop("gossip stopped");
    workers_->stop();
  }

  // Rank 0 waits for every other worker's notice, collects the final mean, then says it is done
  // too; the others answer its collection until then. Rank 0 returns the mean, the others their copies.
  std::vector<float> finish() override {
    workers_->join();
    std::vector<float> result;
    if (rank_ != 0) notify_done();
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return failure_ || dones_ >= world_ - 1; });
    }
    if (rank_ == 0) {
      auto copies = collect(static_cast<double>(workers_->setup().steps));
      if (copies) result = mean_and_spread(*copies, true).first;
      notify_done();
    } else {
      std::lock_guard lock(mutex_);
      result = copy_.theta();
    }
    if (const auto failed = exchange_->finish()) throw std::runtime_error(*failed);
    std::lock_guard lock(mutex_);
    if (failure_ || result.empty()) throw std::runtime_error("gossip stopped before the end: " + failure_.value_or("?"));
    return result;
  }

  std::size_t state_bytes() const override {
    return (copy_.theta().size() + copy_.tilde().size() + opt_->state().values.size()) * sizeof(float);
  }

private:
  // The job's time (in steps) of gradient `ticket`: the step it belongs to, and how far into it
  // (A2CiD2's clock: every process mixes on it, as the workers of one process on their count).
  double time_of(std::uint64_t ticket) const {
    return static_cast<double>(workers_->setup().first_step) + static_cast<double>(ticket) / world_;
  }

  // The worker loop's side.
  std::optional<std::vector<float>> fetch(int, std::uint64_t, caf::scoped_actor&) override {
    std::lock_guard lock(mutex_);
    if (failure_) return std::nullopt;
    copy_.catch_up(time_of(claimed_));
    return copy_.theta();
  }

  void deliver(int w, computed_gradient g, caf::scoped_actor&) override {
    const double now = time_of(g.ticket);
    {
      std::lock_guard lock(mutex_);
      copy_.catch_up(now);
      step_own_copy(*opt_, copy_.theta(), g, workers_->setup(), copy_.tilde());
      copy_.changed();
    }
    report_sketch();
    const applied_gradient applied{w, 0, g.micro_batches, g.loss_sum, g.items};
    if (rank_ == 0)
      workers_->applied(applied);
    else
      exchange_->send(0, applied_tag,  // with its bytes to each rank, for the step's edge_bytes
                      message_of(applied_header{static_cast<std::uint64_t>(w), g.micro_batches, g.loss_sum, g.items,
                                                workers_->figures_of(w)},
                                 std::span<const std::uint64_t>(workers_->edges_from(w, world_))));
    std::mt19937_64 draw = gossip_draw(seed_, g.ticket);
    const int events = gossip_events(rate_, draw);
    for (int e = 0; e < events && !workers_->stopping(); ++e) {
      const std::size_t peer = gossip_neighbour(graph_, ranks_, static_cast<std::size_t>(rank_), draw);
      if (peer != static_cast<std::size_t>(rank_)) exchange_with(static_cast<int>(peer), now);
    }
  }

  // The consensus distance every step: exact where the model is evaluated (every copy
  // collected, mixed up to the step's end), else estimated from each worker's latest sketch.
  asynchronous_view observe(std::uint64_t step, bool with_parameters, caf::scoped_actor&) override {
    asynchronous_view view;
    const asynchronous_setup& s = workers_->setup();
    if (s.keep) view.kept = tickets_->kept_at((step + 1 - s.first_step) * static_cast<std::uint64_t>(world_));
    if (!with_parameters) {
      std::lock_guard lock(mutex_);
      view.consensus_distance = mean_and_spread(sketches_, false).second;
      return view;
    }
    auto copies = collect(static_cast<double>(step + 1));
    if (!copies) {
      view.stopped = true;
      return view;
    }
    auto [mean, distance] = mean_and_spread(*copies, true);
    view.consensus_distance = distance;
    view.parameters = std::make_shared<std::vector<float>>(std::move(mean));
    return view;
  }

  // An elastic job's kept step (the worker's thread; every worker stopped at `boundary`, no
  // exchange in flight): every copy, mixed up to the boundary's time, and optimizer state become
  // their means, which every process keeps as a ZeRO-1 worker would (its shard of the state, and
  // its buddies' copies). A2CiD2's θ̃ settles at the mean too (process_copy::settle), so a new epoch's
  // workers, survivors and joiners alike, start it from the kept parameters.
  void keep_at(std::uint64_t boundary) {
    const asynchronous_setup& s = workers_->setup();
    std::vector<float> mine;
    {
      std::lock_guard lock(mutex_);
      copy_.catch_up(time_of(boundary));
      mine = copy_.theta();
    }
    const optimizer_state& state = opt_->state();
    mine.insert(mine.end(), state.values.begin(), state.values.end());
    exchange_->send(0, keep_state_tag, message_of(state_header{state.step}, mine));
    std::vector<std::byte> mean;
    {
      std::unique_lock lock(mutex_);
      if (rank_ == 0) {
        changed_.wait(lock, [&] { return kept_states_ == world_ || failure_; });
        if (!failure_) mean = mean_of_kept_states();
      } else {
        changed_.wait(lock, [&] { return mean_ || failure_; });
        if (mean_) mean = std::move(*mean_);
        mean_.reset();
      }
      if (failure_) throw std::runtime_error("gossip stopped while keeping its state: " + *failure_);
    }
    if (rank_ == 0)
      for (int r = 1; r < world_; ++r) exchange_->send(r, mean_tag, mean);
    const std::size_t n = s.initial.size();
    const auto values = values_of(mean, sizeof(state_header));
    optimizer_state averaged = opt_->state();
    averaged.step = header_of<state_header>(mean).optimizer_step;
    averaged.values.assign(values.begin() + static_cast<std::ptrdiff_t>(n), values.end());
    opt_->restore(averaged);
    kept_state kept;
    kept.layout = s.keep->layout;
    kept.world = world_;
    kept.rank = rank_;
    kept.steps = s.first_step + boundary / static_cast<std::uint64_t>(world_);
    kept.parameters.assign(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n));
    {
      std::lock_guard lock(mutex_);
      copy_.settle(kept.parameters);
    }
    report_sketch();
    const auto slots = static_cast<std::uint32_t>(averaged.slots);
    kept.own = slice_optimizer_state(averaged.values, slots, averaged.step, n, world_, rank_);
    for (const int index : copies_kept_by(rank_, world_))
      kept.copies.push_back(slice_optimizer_state(averaged.values, slots, averaged.step, n, world_, index));
    s.keep->keeper->keep(std::move(kept));
  }

  // Rank 0, with mutex_ held: the means of the copies and states kept, as one message; the
  // optimizer step is the most any worker took.
  std::vector<std::byte> mean_of_kept_states() {
    kept_states_ = 0;
    std::uint64_t step = 0;
    std::vector<std::span<const float>> all;
    for (const auto& message : kept_messages_) {
      step = std::max(step, header_of<state_header>(message).optimizer_step);
      all.push_back(values_of(message, sizeof(state_header)));
    }
    const std::vector<double> mean = mean_in_double(all);
    return message_of(state_header{step}, std::vector<float>(mean.begin(), mean.end()));
  }

  // A new epoch's start: this rank's restored shard of the averaged state, gathered into the
  // whole state every worker holds (before the exchange owns the transport).
  void restore_full_state(const rule_state& own) {
    optimizer_state full = opt_->state();
    const std::size_t n = workers_->setup().initial.size();
    const shard part = shard_of(n, world_, rank_);
    if (own.slots != full.slots || own.begin != part.begin || own.values.size() != full.slots * part.size())
      throw std::invalid_argument("restored optimizer state does not fit rank " + std::to_string(rank_) + "'s shard");
    for (std::size_t slot = 0; slot < full.slots; ++slot) {
      std::span<float> whole(full.values.data() + slot * n, n);
      std::copy_n(own.values.begin() + static_cast<std::ptrdiff_t>(slot * part.size()), part.size(),
                  whole.begin() + static_cast<std::ptrdiff_t>(part.begin));
      link_->all_gather(whole);
    }
    full.step = own.optimizer_step;
    opt_->restore(std::move(full));
  }

  void on_keep_state(int from, std::span<const std::byte> message) {
    std::lock_guard lock(mutex_);
    kept_messages_.resize(static_cast<std::size_t>(world_));
    kept_messages_[static_cast<std::size_t>(from)].assign(message.begin(), message.end());
    if (++kept_states_ == world_) changed_.notify_all();
  }

  void on_mean(std::span<const std::byte> message) {
    std::lock_guard lock(mutex_);
    mean_.emplace(message.begin(), message.end());
    changed_.notify_all();
  }

  // One exchange with `peer` at the job's time `now`: both end with the mean of the two copies
  // (and, with A2CiD2, each θ̃ pulled towards the other's θ: process_copy).
  void exchange_with(int peer, double now) {
    std::vector<float> sent;
    std::uint64_t at = 0;
    {
      std::lock_guard lock(mutex_);
      copy_.catch_up(now);
      sent = copy_.theta();
      at = copy_.version();
      answer_.reset();
    }
    exchange_->send(peer, offer_tag, message_of(timed_header{now}, sent));
    workers_->cross_link(rank_, sent.size() * sizeof(float), peer);
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return answer_ || failure_; });
    if (!answer_) return;
    copy_.take_answer(sent, at, *answer_, answer_time_);
    answer_.reset();
    lock.unlock();
    report_sketch();
  }

  // After a change of the copy: its sketch, and which change it is, to rank 0.
  void report_sketch() {
    sketch_header h{static_cast<std::uint64_t>(rank_), 0};
    std::vector<float> sketch;
    {
      std::lock_guard lock(mutex_);
      h.version = copy_.version();
      sketch = sketch_of(copy_.theta(), sketch_size, seed_);
    }
    if (rank_ == 0)
      keep_sketch(h, sketch);
    else
      exchange_->send(0, sketch_tag, message_of(h, sketch));
  }

  // Rank 0: a worker's sketch, unless a later one came first (the worker's and the exchange
  // thread's reports may be queued out of order).
  void keep_sketch(const sketch_header& h, std::span<const float> sketch) {
    if (h.worker >= static_cast<std::uint64_t>(world_))
      throw std::runtime_error("a sketch names worker " + std::to_string(h.worker) + " of " + std::to_string(world_));
    std::lock_guard lock(mutex_);
    const auto w = static_cast<std::size_t>(h.worker);
    if (h.version < sketch_versions_[w]) return;
    sketch_versions_[w] = h.version;
    sketches_[w].assign(sketch.begin(), sketch.end());
  }

  // The exchange thread's side.
  void on_offer(int from, std::span<const std::byte> message) {
    const auto theirs = values_of(message, sizeof(timed_header));
    std::vector<float> before;
    double event_time = 0;
    {
      std::lock_guard lock(mutex_);
      before = copy_.answer(theirs, header_of<timed_header>(message).time);
      event_time = copy_.time();
    }
    exchange_->send(from, answer_tag, message_of(timed_header{event_time}, before));
    workers_->count_sent(rank_, before.size() * sizeof(float), from);
    report_sketch();
  }

  void on_answer(std::span<const std::byte> message) {
    const auto theirs = values_of(message, sizeof(timed_header));
    std::lock_guard lock(mutex_);
    answer_.emplace(theirs.begin(), theirs.end());
    answer_time_ = header_of<timed_header>(message).time;
    changed_.notify_all();
  }

  void on_collect(int from, std::span<const std::byte> message) {
    std::vector<float> mine;
    {
      std::lock_guard lock(mutex_);
      copy_.catch_up(header_of<timed_header>(message).time);
      mine = copy_.theta();
    }
    exchange_->send(from, copy_tag, message_of(no_header{}, mine));
  }

  void on_copy(int from, std::span<const std::byte> message) {
    const auto theirs = values_of(message, sizeof(no_header));
    std::lock_guard lock(mutex_);
    collected_[static_cast<std::size_t>(from)].assign(theirs.begin(), theirs.end());
    if (--collecting_ == 0) changed_.notify_all();
  }

  void on_applied(std::span<const std::byte> message) {
    const auto h = header_of<applied_header>(message);
    if (h.worker >= static_cast<std::uint64_t>(world_))
      throw std::runtime_error("an applied gradient names worker " + std::to_string(h.worker) + " of " +
                               std::to_string(world_));
    const int worker = static_cast<int>(h.worker);
    workers_->set_figures(worker, h.figures);
    workers_->set_edges_from(worker, counts_of(message, sizeof(applied_header)));
    workers_->applied({worker, 0, h.micro_batches, h.loss_sum, h.items});
  }

  void on_done() {
    std::lock_guard lock(mutex_);
    ++dones_;
    changed_.notify_all();
  }

  // Rank 0: every worker's copy now, mixed up to the job's time `time`; nothing once failed.
  std::optional<std::vector<std::vector<float>>> collect(double time) {
    {
      std::lock_guard lock(mutex_);
      collected_.assign(static_cast<std::size_t>(world_), {});
      collecting_ = world_;
    }
    for (int r = 0; r < world_; ++r) exchange_->send(r, collect_tag, message_of(timed_header{time}));
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return collecting_ == 0 || failure_; });
    if (collecting_ != 0) return std::nullopt;
    return std::move(collected_);
  }

  void notify_done() {
    for (int r = 0; r < world_; ++r)
      if (r != rank_) exchange_->send(r, done_tag, message_of(no_header{}));
  }

  void fail(const std::string& why) {
    {
      std::lock_guard lock(mutex_);
      if (!failure_) failure_ = why;
    }
    changed_.notify_all();
    tickets_->fail();
  }

  std::string graph_;
  double rate_;
  std::uint64_t seed_;
  std::shared_ptr<transport> link_;
  int rank_ = 0, world_ = 1;
  coordinator_actor coordinator_;
  std::vector<std::size_t> ranks_;
  std::unique_ptr<gradient_tickets> tickets_;
  std::unique_ptr<asynchronous_workers> workers_;
  std::unique_ptr<optimizer> opt_;  // the worker's own state (its thread only)
  std::uint64_t claimed_ = 0;       // the gradient its worker computes (its thread only)
  // Guarded by mutex_: the copy (worker and exchange threads), the exchange in flight, the
  // collection, the notices.
  std::mutex mutex_;
  std::condition_variable changed_;
  process_copy copy_;  // θ (and A2CiD2's θ̃), the worker's and the exchange thread's
  std::optional<std::vector<float>> answer_;
  double answer_time_ = 0;  // the neighbour's time of the event it answered
  std::vector<std::vector<float>> sketches_;  // rank 0: each worker's latest sketch
  std::vector<std::uint64_t> sketch_versions_;  // and which change of its copy it is
  std::vector<std::vector<float>> collected_;
  int collecting_ = 0;
  int dones_ = 0;
  std::vector<std::vector<std::byte>> kept_messages_;  // rank 0, at a kept step: by rank
  int kept_states_ = 0;
  std::optional<std::vector<std::byte>> mean_;          // from rank 0, at a kept step
  std::optional<std::string> failure_;
  std::unique_ptr<peer_exchange> exchange_;  // last: its thread calls into everything above
};

}  // namespace

std::unique_ptr<asynchronous_run> start_gossip_processes(caf::actor_system& system, asynchronous_setup setup,
                                                         const gossip_options& options, std::uint64_t seed) {
  return std::make_unique<gossip_processes>(system, std::move(setup), options, seed);
}

}  // namespace accord
