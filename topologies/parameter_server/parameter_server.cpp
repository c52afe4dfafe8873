#include "topologies/parameter_server/parameter_server.hpp"

#include "topologies/asynchronous/workers.hpp"

#include "topologies/parameter_server/processes.hpp"
#include "topologies/parameter_server/server_shard.hpp"
#include "topologies/builtins.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
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

struct server_state {
  std::unique_ptr<server_shard> own;
  std::vector<std::pair<std::uint64_t, caf::typed_response_promise<shard_values>>> waiting;
  std::shared_ptr<asynchronous_workers> applied;    // shard 0 only: records what it applies
  bool stopped = false;
};

shard_values values_of(const server_state& s) { return {s.own->version(), s.own->values()}; }

void answer_waiting(server_state& s) {
  std::erase_if(s.waiting, [&](auto& entry) {
    if (entry.first > s.own->version()) return false;
    entry.second.deliver(values_of(s));
    return true;
  });
}

caf::behavior server_behavior(caf::stateful_actor<server_state>* self, std::shared_ptr<server_state> setup) {
  self->state = std::move(*setup);
  return {
      [self](gradient_push& push) {
        auto& s = self->state;
        if (s.stopped) return;
        const shard own = s.own->own();
        const push_summary summary{push.worker, push.pulled_version, push.micro_batches, push.loss_sum, push.items};
        for (const applied_gradient& g : s.own->push(summary, {push.gradient->data() + own.begin, own.size()}))
          if (s.applied) s.applied->applied(g);
        answer_waiting(s);
      },
      [self](const shard_pull& pull) -> caf::result<shard_values> {
        auto& s = self->state;
        if (s.stopped) return caf::make_error(caf::sec::runtime_error, "the parameter server stopped");
        if (pull.at_least <= s.own->version()) return values_of(s);
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

// The servers around the shared worker loop: a worker pulls, computes, pushes.
class parameter_server_run final : public asynchronous_run, private asynchronous_use {
public:
  parameter_server_run(caf::actor_system& system, asynchronous_setup setup, std::uint64_t max_staleness)
      : system_(system), synchronous_(max_staleness == 0) {
    setup.max_ahead = max_staleness;
    workers_ = std::make_shared<asynchronous_workers>(system, std::move(setup));
    const asynchronous_setup& s = workers_->setup();
    const int shards = s.workers;  // one server shard per worker
    for (int k = 0; k < shards; ++k) {
      auto state = std::make_shared<server_state>();
      state->own = std::make_unique<server_shard>(shard_of(s.initial.size(), shards, k), s.workers, synchronous_,
                                                  s.initial, s.optimizer, s.schedule);
      if (k == 0) state->applied = workers_;
      state_bytes_ += state->own->state_bytes();
      shards_.push_back(state->own->own());
      servers_.push_back(system.spawn(server_behavior, std::move(state)));
    }
    versions_.resize(static_cast<std::size_t>(workers_->most_workers()), std::vector<std::uint64_t>(servers_.size()));
    workers_->start(*this);
  }
  ~parameter_server_run() override {
    stop();
    workers_->join();
  }

  void stop() override {
    if (stopped_.exchange(true)) return;
    for (auto& server : servers_) caf::anon_send(server, stop_atom::value);
    workers_->stop();
  }

  std::vector<float> finish() override {
    workers_->join();
    caf::scoped_actor self{system_};
    // Every shard has applied every push: one update per round, or one per gradient.
    const std::uint64_t steps = workers_->step_limit();
    auto parameters = pull(self, synchronous_ ? steps : steps * static_cast<std::uint64_t>(workers_->setup().workers));
    stop();
    if (!parameters) throw std::runtime_error("the parameter server stopped before the last update");
    return std::move(*parameters);
  }

  std::size_t state_bytes() const override { return state_bytes_; }

private:
  std::optional<std::vector<float>> fetch(int w, std::uint64_t k, caf::scoped_actor& self) override {
    // Lockstep: the parameters after round k; otherwise whatever the shards hold now.
    auto parameters = pull(self, synchronous_ ? k : 0, &versions_[static_cast<std::size_t>(w)]);
    if (parameters) {
      workers_->cross_link(w, parameters->size() * sizeof(float));
      for (std::size_t s = 0; s < shards_.size(); ++s)  // server s: hosted beside worker s
        workers_->count_edge(static_cast<int>(s), w, shards_[s].size() * sizeof(float));
    }
    return parameters;
  }

  void deliver(int w, computed_gradient g, caf::scoped_actor& self) override {
    gradient_push push;
    push.worker = w;
    push.micro_batches = g.micro_batches;
    push.loss_sum = g.loss_sum;
    push.items = g.items;
    push.gradient = std::move(g.sum);
    workers_->cross_link(w, push.gradient->size() * sizeof(float));
    for (std::size_t s = 0; s < servers_.size(); ++s) {
      workers_->count_edge(w, static_cast<int>(s), shards_[s].size() * sizeof(float));
      push.pulled_version = versions_[static_cast<std::size_t>(w)][s];
      self->send(servers_[s], push);
    }
  }

  bool measures_staleness() const override { return true; }

  asynchronous_view observe(std::uint64_t step, bool with_parameters, caf::scoped_actor& self) override {
    asynchronous_view view;
    if (!with_parameters) return view;
    // Lockstep: every shard at this step's update; otherwise what they hold now.
    auto now = pull(self, synchronous_ ? step + 1 : 0);
    if (!now) view.stopped = true;
    else view.parameters = std::make_shared<std::vector<float>>(std::move(*now));
    return view;
  }

  // The parameters, each shard at `at_least` updates or more; nothing once the servers stopped.
  std::optional<std::vector<float>> pull(caf::scoped_actor& self, std::uint64_t at_least,
                                         std::vector<std::uint64_t>* versions = nullptr) {
    std::vector<float> parameters(workers_->setup().initial.size());
    for (std::size_t k = 0; k < servers_.size(); ++k) {
      bool ok = true;
      self->request(servers_[k], caf::infinite, shard_pull{at_least})
          .receive(
              [&](shard_values& v) {
                std::copy(v.values.begin(), v.values.end(), parameters.begin() + static_cast<std::ptrdiff_t>(shards_[k].begin));
                if (versions) (*versions)[k] = v.version;
              },
              [&](caf::error&) { ok = false; });
      if (!ok) return std::nullopt;
    }
    return parameters;
  }

  caf::actor_system& system_;
  bool synchronous_;
  std::shared_ptr<asynchronous_workers> workers_;  // shared with shard 0, which records into it
  std::vector<caf::actor> servers_;
  std::vector<shard> shards_;
  std::vector<std::vector<std::uint64_t>> versions_;  // per worker: each shard's version at its pull
  std::size_t state_bytes_ = 0;
  std::atomic<bool> stopped_{false};
};

class parameter_server final : public asynchronous_topology {
public:
  explicit parameter_server(std::uint64_t max_staleness) : max_staleness_(max_staleness) {}
  std::unique_ptr<asynchronous_run> start(caf::actor_system& system, asynchronous_setup setup) const override {
    if (setup.peers) return start_parameter_server_processes(system, std::move(setup), max_staleness_);
    return std::make_unique<parameter_server_run>(system, std::move(setup), max_staleness_);
  }
  bool follows_membership() const override { return true; }
  bool runs_between_processes() const override { return true; }
  // S = 0's rounds need every worker of the epoch; S >= 1 stops only at kept steps.
  bool elastic_between_processes() const override { return max_staleness_ > 0; }

private:
  std::uint64_t max_staleness_;
};

void refuse(const std::string& why) { throw std::invalid_argument("--topology parameter-server: " + why); }

}  // namespace

topology_factory parameter_server_topology() {
  return [](const topology_job& job) -> std::unique_ptr<topology> {
    if (!job.synchronous || !job.sharded_optimizer)
      refuse("servers step a sharded optimizer on pushed gradients (--algo ddp or lion), not --algo " + job.algorithm);
    if (job.checkpoints) refuse("checkpoints are not supported");
    const std::int64_t max_staleness = job.options.whole("max_staleness");
    if (max_staleness < 0) refuse("--max-staleness must be at least 0");
    if (job.membership_changes && max_staleness == 0)
      refuse("workers coming and going need --max-staleness >= 1 (synchronous rounds wait for every worker)");
    return std::make_unique<parameter_server>(static_cast<std::uint64_t>(max_staleness));
  };
}

std::vector<setting_declaration> parameter_server_settings() {
  return {{.name = "max_staleness", .flag = "max-staleness", .kind = setting_kind::whole,
           .fallback = std::int64_t{0}, .low = 0, .high = 1e9, .unit = "pushes",
           .help = "pushes a worker may run ahead of the slowest (0: synchronous rounds, as ddp)",
           .fingerprint = false}};
}

}  // namespace accord
