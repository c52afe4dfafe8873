#pragma once
// Seeded fault schedules for the membership simulation, the invariants checked after every
// event, and the shrinking of a failing schedule to a short one.
#include "tests/membership_sim/members.hpp"

#include <sstream>

namespace accord::sim {

struct fault {
  enum class kind { kill, stop, partition, flap, slow, join, leave } what = kind::kill;
  duration at{}, length{};  // from the first epoch's start; how long it lasts
  int a = -1, b = -1;       // processes (-1 for a: the coordinator at that time)
  std::vector<int> side;    // a partition's one side
  duration period{};        // a flapping link's
};

inline std::string describe(const fault& f) {
  std::ostringstream out;
  const auto ms = [](duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  const std::string who = f.a < 0 ? "the coordinator" : "p" + std::to_string(f.a);
  out << "at " << ms(f.at) << " ms: ";
  switch (f.what) {
    case fault::kind::kill: out << "kill " << who; break;
    case fault::kind::stop: out << "stop " << who << " for " << ms(f.length) << " ms"; break;
    case fault::kind::partition:
      out << "cut off {";
      for (std::size_t i = 0; i < f.side.size(); ++i) out << (i ? ", p" : "p") << f.side[i];
      out << "} for " << ms(f.length) << " ms";
      break;
    case fault::kind::flap:
      out << "flap " << who << " - p" << f.b << " every " << ms(f.period) << " ms for " << ms(f.length) << " ms";
      break;
    case fault::kind::slow: out << "slow " << who << " - p" << f.b << " by " << ms(f.period) << " ms for " << ms(f.length) << " ms"; break;
    case fault::kind::join: out << "a joiner says hello"; break;
    case fault::kind::leave: out << who << " asks to leave"; break;
  }
  return out.str();
}

inline std::string describe(const std::vector<fault>& schedule) {
  std::string text;
  for (const fault& f : schedule) text += "  " + describe(f) + "\n";
  return text;
}

// `count` faults within `window`, each over before it ends; at most a minority of the starting
// ranks killed or leaving, so that a majority can always go on.
inline std::vector<fault> random_schedule(std::mt19937_64& rng, int members, int count, duration window) {
  std::vector<fault> schedule;
  int departures = 0;
  const auto uniform = [&](duration lo, duration hi) { return lo + duration(rng() % std::max<std::int64_t>(1, (hi - lo).count())); };
  const auto anyone = [&] { return rng() % 4 == 0 ? -1 : static_cast<int>(rng() % members); };
  for (int i = 0; i < count; ++i) {
    fault f;
    f.at = uniform(0ms, window * 2 / 3);
    f.length = uniform(300ms, std::min<duration>(window - f.at, 12s));
    switch (rng() % 8) {
      case 0:
        if (2 * (departures + 1) >= members) continue;
        ++departures;
        f.what = fault::kind::kill;
        f.a = anyone();
        break;
      case 1:
      case 2:
        f.what = fault::kind::stop;
        f.a = anyone();
        break;
      case 3:
        f.what = fault::kind::partition;
        for (int p = 0; p < members; ++p)
          if (rng() % 2) f.side.push_back(p);
        if (f.side.empty() || static_cast<int>(f.side.size()) == members) continue;
        break;
      case 4:
      case 5:
        f.what = fault::kind::flap;
        f.a = anyone();
        f.b = static_cast<int>(rng() % members);
        f.period = uniform(100ms, 2000ms);
        break;
      case 6:
        f.what = fault::kind::slow;
        f.a = anyone();
        f.b = static_cast<int>(rng() % members);
        f.period = uniform(20ms, 1500ms);
        break;
      case 7:
        if (rng() % 2) {
          f.what = fault::kind::join;
        } else {
          if (2 * (departures + 1) >= members) continue;
          ++departures;
          f.what = fault::kind::leave;
          f.a = static_cast<int>(rng() % members);
        }
        break;
    }
    schedule.push_back(f);
  }
  std::sort(schedule.begin(), schedule.end(), [](const fault& x, const fault& y) { return x.at < y.at; });
  return schedule;
}

// `count` flaps of the coordinator's links (to members chosen at random), as in the chaos run that
// split a 4-member job 2-2 (docs/distributed.md, "Why a flapping link split a job 2-2").
inline std::vector<fault> flapping_schedule(std::mt19937_64& rng, int members, int count, duration window) {
  std::vector<fault> schedule;
  const auto uniform = [&](duration lo, duration hi) { return lo + duration(rng() % std::max<std::int64_t>(1, (hi - lo).count())); };
  for (int i = 0; i < count; ++i) {
    fault f;
    f.what = fault::kind::flap;
    f.at = uniform(0ms, window * 2 / 3);
    f.length = uniform(300ms, std::min<duration>(window - f.at, 12s));
    f.a = -1;
    f.b = 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(members - 1));
    f.period = uniform(100ms, 2000ms);
    schedule.push_back(f);
  }
  std::sort(schedule.begin(), schedule.end(), [](const fault& x, const fault& y) { return x.at < y.at; });
  return schedule;
}

// How long after the last fault an epoch must train again.
constexpr auto liveness_bound = 60s;

// Violations the simulation found in the real machine's behaviour (docs/distributed.md, "The
// membership state machine and its simulation") and that are not fixed yet, each told apart so
// that a sweep counts them and fails on any other. A fixed one leaves this list, so that a sweep
// fails where it comes back (a returning member refused as dropped; a joiner without a replica
// that an epoch needed; a stale takeover handed to the members of a newer epoch):
enum class finding {
  none,
  // Liveness: the newest kept step lacks a shard whose holders are alive but not members any
  // more (an epoch formed without them, behind a partition, and lost a member before it kept a
  // step), and the coordinator fails the job. (Holders lost since the last epoch formed are
  // waited for, as for a majority: membership/losses.cpp, wait_for_state_holders.)
  shard_of_suspected_holders,
  // Safety: a coordinator forms an epoch from the epoch requests of members that meanwhile went
  // to another coordinator (it was stopped and reads its mailbox in order, or a partition held
  // its plans): both count those members, and two epochs of one number form. The stale one never
  // trains (its plans reach nobody), but its replicas carry the same epoch number as the live one.
  // (A waiting side that hears of a later epoch gives way to it now, where it stopped: the
  // liveness loss this finding also counted is gone.)
  phantom_epoch,
};

inline const char* name(finding f) {
  switch (f) {
    case finding::none: return "none";
    case finding::shard_of_suspected_holders: return "a shard lost to holders only suspected";
    case finding::phantom_epoch: return "a phantom epoch formed from requests of members gone elsewhere";
  }
  return "";
}

struct run_result {
  std::string violation;  // empty: every invariant held
  finding known = finding::none;  // the violation is one of the findings above
  std::string epochs;     // the formed epochs, to compare replays
  std::size_t events = 0;
};

class invariants {
public:
  explicit invariants(world& w) : w_(w) {}

  void check() {
    for (; checked_ < w_.formed.size(); ++checked_) check_formed(w_.formed[checked_]);
  }

private:
  void fail(const formed_epoch& f, const std::string& why) {
    if (w_.violation.empty())
      w_.violation = "epoch " + std::to_string(f.epoch) + " formed by p" + std::to_string(f.coordinator) + ": " + why;
  }

  void check_formed(const formed_epoch& f) {
    // At most one coordinator forms each epoch, each the successor of the newest formed.
    for (std::size_t i = 0; i < checked_; ++i)
      if (w_.formed[i].epoch >= f.epoch)
        return fail(f, "epoch " + std::to_string(w_.formed[i].epoch) + " was formed already by p" +
                           std::to_string(w_.formed[i].coordinator) + " (two coordinators)");
    if (f.epoch == 1) return;
    const formed_epoch* last = nullptr;
    for (std::size_t i = 0; i < checked_; ++i)
      if (w_.formed[i].epoch + 1 == f.epoch) last = &w_.formed[i];
    if (!last) return fail(f, "the epoch before it never formed");
    // A strict majority of the last epoch's members not dead took part (or left at its forming).
    int took_part = 0, dead = 0;
    for (const int p : last->members) {
      const bool in = std::count(f.members.begin(), f.members.end(), p) + std::count(f.released.begin(), f.released.end(), p);
      took_part += in ? 1 : 0;
      dead += w_.procs[p].killed && !in ? 1 : 0;
    }
    const int alive = static_cast<int>(last->members.size()) - dead;
    if (2 * took_part <= alive)
      return fail(f, std::to_string(took_part) + " of the last epoch's " + std::to_string(alive) +
                         " members not dead took part: no majority");
    // It starts from the newest kept step its members hold whole that its coordinator knows kept.
    const process& c = w_.procs[f.coordinator];
    std::optional<std::pair<std::uint64_t, std::uint64_t>> best;  // (steps, layout)
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::set<int>> shards;
    std::map<std::pair<std::uint64_t, std::uint64_t>, int> worlds;
    for (const int p : f.members)
      for (const auto& [key, k] : w_.procs[p].kept) {
        shards[{k.steps, k.layout}].insert(k.rank);
        for (const int s : k.copies) shards[{k.steps, k.layout}].insert(s);
        worlds[{k.steps, k.layout}] = k.world;
      }
    for (const auto& [key, held] : shards)
      if (static_cast<int>(held.size()) == worlds[key] && c.known_kept.has(key.second, key.first)) best = key;
    const std::uint64_t expected = best ? best->first : 0;
    if (!best && !c.known_kept.empty()) return fail(f, "formed though no kept step is whole among its members");
    if (f.start_steps != expected)
      return fail(f, "starts from step " + std::to_string(f.start_steps) + ", but its members hold step " +
                         std::to_string(expected) + " whole");
  }

  world& w_;
  std::size_t checked_ = 0;
};

inline finding classify(const world& w, const std::string& violation) {
  if (violation.find("(two coordinators)") != std::string::npos) {
    const formed_epoch& second = w.formed.back();
    for (const formed_epoch& f : w.formed)
      if (f.epoch == second.epoch)
        for (const int p : f.members)
          if (w.procs[p].coordinator != f.coordinator) return finding::phantom_epoch;
    return finding::none;
  }
  if (violation.rfind("no epoch trains", 0) != 0) return finding::none;
  for (const process& p : w.procs)
    if (p.ended.find("the training state cannot be rebuilt") != std::string::npos)
      return finding::shard_of_suspected_holders;
  return finding::none;
}

// How long a settled job must train on before a run ends early: longer than any work still
// pending from before it settled (an election's late answer after takeover_confirm_wait and a
// probe, a wait for a majority's next try, the reconnection and loss graces).
constexpr auto settle_window = 10s;

// Faults over and nothing left to decide: one coordination, running an epoch that every process
// still alive trains in, none stopped, cut off, asking, electing or about to change the epoch.
inline bool settled(const world& w) {
  if (!w.all_reachable()) return false;
  const process* host = nullptr;
  for (const process& p : w.procs) {
    if (p.killed) continue;
    if (p.stopped || (p.hosts() && std::exchange(host, &p))) return false;
  }
  if (!host || !host->epoch_active || host->machine->phase() != membership_phase::running) return false;
  return std::none_of(w.procs.begin(), w.procs.end(), [host](const process& p) {
    return !p.killed && (!p.admitted || p.master_lost || p.asking || p.coordinator != host->index ||
                         p.running != host->epoch || p.change_epoch >= host->epoch);
  });
}

inline void apply(world& w, const fault& f, time_point start) {
  const auto coordinator = [&w] { return w.formed.empty() ? 0 : w.formed.back().coordinator; };
  w.after(start + f.at - w.now(), [&w, f, coordinator] {
    const int a = f.a < 0 ? coordinator() : f.a;
    switch (f.what) {
      case fault::kind::kill:
        w.procs[a].killed_by_fault = w.procs[a].killed_by_fault || !w.procs[a].killed;
        return w.kill(a);
      case fault::kind::stop:
        w.stop(a);
        return w.after(f.length, [&w, a] { w.resume(a); });
      case fault::kind::partition: {
        std::vector<bool> on_side(static_cast<std::size_t>(w.initial), false);
        for (const int p : f.side) on_side[p] = true;
        const auto each = [&w, on_side](bool on) {
          for (int x = 0; x < w.initial; ++x)
            for (int y = 0; y < w.initial; ++y)
              if (on_side[x] && !on_side[y]) w.cut(x, y, on);
        };
        each(true);
        return w.after(f.length, [each] { each(false); });
      }
      case fault::kind::flap:
        if (a == f.b) return;
        for (duration t = 0ms; t < f.length; t += f.period)
          w.after(t, [&w, a, b = f.b, on = (t / f.period) % 2 == 0] { w.cut(a, b, on); });
        return w.after(f.length, [&w, a, b = f.b] { w.cut(a, b, false); });
      case fault::kind::slow:
        if (a == f.b) return;
        w.slow(a, f.b, f.period);
        return w.after(f.length, [&w, a, b = f.b] { w.slow(a, b, 0ms); });
      case fault::kind::join: return w.start_joiner();
      case fault::kind::leave: return w.ask_to_leave(a);
    }
  });
}

// Runs the job of `members` under `schedule` (network randomness from `seed`), checking the
// invariants after every event and, once the faults are over, that an epoch trains again.
inline run_result run_schedule(int members, std::uint64_t seed, const std::vector<fault>& schedule,
                               const sim_options& options = {}) {
  world w(members, seed, options);
  invariants checks(w);
  start_job(w);
  const time_point start = w.origin() + 2s;
  time_point quiet = start;
  for (const fault& f : schedule) {
    apply(w, f, start);
    quiet = std::max(quiet, start + f.at + f.length);
  }
  const auto check = [&checks] { checks.check(); };
  const auto training = [&w]() -> std::pair<std::uint64_t, std::uint64_t> {  // (epoch, steps) of the newest running
    std::pair<std::uint64_t, std::uint64_t> best{0, 0};
    for (const process& p : w.procs)
      if (p.epoch_active && !p.killed && !p.stopped) best = std::max(best, std::make_pair(p.epoch, p.steps->load()));
    return best;
  };
  // Once the job has settled and trained on for settle_window, the run ends early (liveness
  // holds); otherwise it runs to the bound and an epoch must train in its last 5 s.
  std::optional<std::pair<time_point, std::pair<std::uint64_t, std::uint64_t>>> calm;  // since, and the training then
  std::pair<std::uint64_t, std::uint64_t> before, after;
  for (time_point t = quiet; t < quiet + liveness_bound - 5s && w.violation.empty(); t += 1s) {
    w.run_until(t, check);
    if (!settled(w)) {
      calm.reset();
    } else if (!calm) {
      calm.emplace(t, training());
    } else if (t - calm->first >= settle_window && training() > calm->second) {
      before = calm->second;
      after = training();
      break;
    }
  }
  if (!(after > before)) {
    w.run_until(quiet + liveness_bound - 5s, check);
    before = training();
    w.run_until(quiet + liveness_bound, check);
    after = training();
  }
  run_result result;
  result.violation = w.violation;
  // A side that can still rejoin never stops before --majority-wait.
  for (const process& p : w.procs)
    if (const auto at = p.ended.find("(it waited "); result.violation.empty() && at != std::string::npos)
      if (const double waited = std::stod(p.ended.substr(at + 11));
          waited < std::chrono::duration<double>(options.majority_wait).count() - 0.1)
        result.violation = "p" + std::to_string(p.index) + " stopped after waiting " + std::to_string(waited) +
                           " s for a majority, before --majority-wait";
  // Liveness is owed while a strict majority of the last epoch's members was not killed.
  int last_alive = 0, last_size = 0;
  if (!w.formed.empty())
    for (const int p : w.formed.back().members) {
      ++last_size;
      last_alive += w.procs[p].killed_by_fault ? 0 : 1;
    }
  if (result.violation.empty() && 2 * last_alive > last_size && !(after > before))
    result.violation = "no epoch trains " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(liveness_bound).count()) +
                       " s after the last fault (newest epoch " + std::to_string(after.first) + " at step " +
                       std::to_string(after.second) + ")";
  for (const formed_epoch& f : w.formed) {
    result.epochs += std::to_string(f.epoch) + "@p" + std::to_string(f.coordinator) + " from " +
                     std::to_string(f.start_steps) + ":";
    for (const int p : f.members) result.epochs += " p" + std::to_string(p);
    result.epochs += "\n";
  }
  if (!result.violation.empty()) result.known = classify(w, result.violation);
  if (!result.violation.empty()) {
    result.epochs += "what happened:\n";
    for (const std::string& line : w.lines) result.epochs += "  " + line + "\n";
    for (const process& p : w.procs)
      if (!p.ended.empty()) result.epochs += "  p" + std::to_string(p.index) + " ended: " + p.ended + "\n";
  }
  result.events = w.events();
  return result;
}

// The shortest schedule found, by dropping one fault at a time, that still breaks an invariant
// the same way (a known liveness failure stays one, another violation stays another).
inline std::vector<fault> shrink(int members, std::uint64_t seed, std::vector<fault> schedule, finding known) {
  for (bool smaller = true; smaller;) {
    smaller = false;
    for (std::size_t i = 0; i < schedule.size(); ++i) {
      std::vector<fault> without = schedule;
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
      const run_result r = run_schedule(members, seed, without);
      if (!r.violation.empty() && r.known == known) {
        schedule = std::move(without);
        smaller = true;
        break;
      }
    }
  }
  return schedule;
}

}  // namespace accord::sim
