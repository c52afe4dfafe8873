#include "cluster/membership_log.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace accord {
namespace {

const std::set<std::string> member_events = {"lost", "left", "joined"};

bool is_member_event(const std::string& event) { return member_events.count(event) > 0; }

// Reads `key` of `object` into `out` when present; throws naming it when it has the wrong type.
template <class T>
void read_field(const nlohmann::json& object, const char* key, T& out, bool required) {
  const auto found = object.find(key);
  if (found == object.end()) {
    if (required) throw std::invalid_argument(std::string("no \"") + key + "\"");
    return;
  }
  bool fits = false;
  if constexpr (std::is_same_v<T, bool>)
    fits = found->is_boolean();
  else if constexpr (std::is_same_v<T, std::string>)
    fits = found->is_string();
  else if constexpr (std::is_unsigned_v<T>)
    fits = found->is_number_unsigned();
  else
    fits = found->is_number_integer() && found->template get<long long>() >= std::numeric_limits<T>::min() &&
           found->template get<long long>() <= std::numeric_limits<T>::max();
  if (!fits) throw std::invalid_argument(std::string("\"") + key + "\" has the wrong type or range");
  out = found->template get<T>();
}

membership_record record_of(const nlohmann::json& object) {
  if (!object.is_object()) throw std::invalid_argument("not a JSON object");
  membership_record r;
  read_field(object, "event", r.event, true);
  if (r.event == "job") {
    read_field(object, "workers", r.workers, true);
    read_field(object, "steps", r.step, true);
    if (r.workers < 1) throw std::invalid_argument("\"workers\" must be at least 1");
  } else if (r.event == "epoch") {
    read_field(object, "epoch", r.epoch, true);
    read_field(object, "step", r.step, true);
    read_field(object, "workers", r.workers, true);
    read_field(object, "after_loss", r.after_loss, false);
    if (r.workers < 1) throw std::invalid_argument("\"workers\" must be at least 1");
  } else if (is_member_event(r.event)) {
    read_field(object, "epoch", r.epoch, true);
    read_field(object, "step", r.step, true);
    read_field(object, "rank", r.rank, true);
    read_field(object, "host", r.host, false);
    read_field(object, "role", r.role, false);
    read_field(object, "cause", r.cause, false);
  } else {
    throw std::invalid_argument("unknown event \"" + r.event + "\" (expected job, epoch, lost, left or joined)");
  }
  return r;
}

}  // namespace

membership_record job_record(int workers, std::uint64_t steps) {
  membership_record r;
  r.event = "job";
  r.workers = workers;
  r.step = steps;
  return r;
}

membership_record epoch_record(std::uint64_t epoch, std::uint64_t start_step, int workers, bool after_loss) {
  membership_record r;
  r.event = "epoch";
  r.epoch = epoch;
  r.step = start_step;
  r.workers = workers;
  r.after_loss = after_loss;
  return r;
}

membership_record member_record(std::string event, std::uint64_t epoch, std::uint64_t step, int rank, std::string host,
                                std::string role, std::string cause) {
  membership_record r;
  r.event = std::move(event);
  r.epoch = epoch;
  r.step = step;
  r.rank = rank;
  r.host = std::move(host);
  r.role = std::move(role);
  r.cause = std::move(cause);
  return r;
}

std::string to_json_line(const membership_record& r) {
  nlohmann::ordered_json line;
  line["event"] = r.event;
  if (r.event == "job") {
    line["workers"] = r.workers;
    line["steps"] = r.step;
  } else {
    line["epoch"] = r.epoch;
    line["step"] = r.step;
    if (r.event == "epoch") {
      line["workers"] = r.workers;
      line["after_loss"] = r.after_loss;
    } else {
      line["rank"] = r.rank;
      line["host"] = r.host;
      line["role"] = r.role;
      line["cause"] = r.cause;
    }
  }
  return line.dump();
}

std::vector<membership_record> parse_membership_log(const std::string& text, const std::string& name) {
  std::vector<membership_record> records;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      records.push_back(record_of(nlohmann::json::parse(line)));
      records.back().line = number;
    } catch (const std::exception& e) {  // nlohmann's parse errors and the fields' own
      throw std::invalid_argument(name + ":" + std::to_string(number) + ": not a membership event (" + e.what() + ")");
    }
  }
  return records;
}

std::vector<membership_record> read_membership_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(path + ": cannot read the membership log");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_membership_log(text.str(), path);
}

namespace {

// The worker sets of the log's epochs (replay_of without who departs).
membership_replay worker_sets_of(const std::vector<membership_record>& records, const std::string& name, int workers,
                                 std::uint64_t steps) {
  auto fail = [&](std::size_t index, const std::string& why) {
    const int line = index < records.size() ? records[index].line : 0;
    throw std::invalid_argument(name + ":" + std::to_string(line ? line : 1) + ": " + why);
  };
  if (records.empty() || records.front().event != "job") fail(0, "the log does not start with a \"job\" line");
  membership_replay replay;
  replay.workers = records.front().workers;
  if (replay.workers != workers)
    fail(0, "the log is of a job of " + std::to_string(replay.workers) + " workers, this one has " +
                std::to_string(workers));
  std::uint64_t last_epoch = 0;
  for (std::size_t i = 1; i < records.size(); ++i) {
    const membership_record& r = records[i];
    if (r.event == "job") fail(i, "a second \"job\" line");
    if (r.event != "epoch") continue;
    if (r.epoch <= last_epoch) fail(i, "epoch " + std::to_string(r.epoch) + " comes after epoch " +
                                           std::to_string(last_epoch));
    last_epoch = r.epoch;
    if (r.step >= steps)
      fail(i, "epoch " + std::to_string(r.epoch) + " starts after step " + std::to_string(r.step) +
                  ", at or beyond --steps " + std::to_string(steps));
    // An epoch restarting from an earlier step undoes the changes after it.
    while (!replay.changes.empty() && replay.changes.back().step >= r.step) replay.changes.pop_back();
    const int current = replay.changes.empty() ? replay.workers : replay.changes.back().workers;
    // The first epoch, or one re-formed before any step was kept: the job starts with this set.
    if (r.epoch == 1 || r.step == 0) {
      replay.workers = r.workers;
      continue;
    }
    membership_change change;
    change.step = r.step;
    change.workers = r.workers;
    change.crash = r.after_loss && r.workers < current;
    replay.changes.push_back(change);
  }
  return replay;
}

// Sets `replay`'s departing positions from the members the processes' replay makes depart.
void place_departures(membership_replay& replay, const process_replay& departures, const std::string& name) {
  epoch_order order(departures.workers);
  for (const replayed_change& change : departures.changes) {
    std::vector<int> positions;
    for (const replayed_departure& d : change.departures) {
      const int position = order.position_of(d.rank, positions);
      if (position < 0)
        throw std::invalid_argument(name + ": " + (d.rank >= 0 ? "rank " + std::to_string(d.rank) : std::string("a joiner")) +
                                    " departs after step " + std::to_string(change.step) + " but is no member then");
      positions.push_back(position);
    }
    order.change(positions, change.joiners);
    if (change.step == 0) continue;  // it shapes the first epoch: no state to carry yet
    const auto in_process = std::find_if(replay.changes.begin(), replay.changes.end(),
                                         [&](const membership_change& c) { return c.step == change.step; });
    std::sort(positions.begin(), positions.end());
    if (in_process != replay.changes.end()) in_process->departing = std::move(positions);
  }
}

}  // namespace

membership_replay replay_of(const std::vector<membership_record>& records, const std::string& name, int workers,
                            std::uint64_t steps) {
  membership_replay replay = worker_sets_of(records, name, workers, steps);
  const bool names_members = std::any_of(records.begin(), records.end(), [](const membership_record& r) {
    return r.event == "lost" || r.event == "left" || r.event == "joined";
  });
  if (names_members) place_departures(replay, process_replay_of(records, name, workers, steps), name);
  return replay;
}

epoch_order::epoch_order(int workers) : workers_(workers), members_(static_cast<std::size_t>(workers)), next_joiner_(workers) {
  for (int rank = 0; rank < workers; ++rank) members_[static_cast<std::size_t>(rank)] = rank;
}

int epoch_order::starting_rank(int position) const {
  const int member = members_.at(static_cast<std::size_t>(position));
  return member < workers_ ? member : -1;
}

int epoch_order::position_of(int rank, const std::vector<int>& taken) const {
  int found = -1;
  for (int p = 0; p < size(); ++p) {
    const int member = members_[static_cast<std::size_t>(p)];
    if ((rank >= 0 ? member == rank : member >= workers_) && std::find(taken.begin(), taken.end(), p) == taken.end())
      found = p;  // the last match: for a joiner, the newest
  }
  return found;
}

void epoch_order::change(const std::vector<int>& departing, int joiners) {
  std::vector<int> gone = departing;
  std::sort(gone.begin(), gone.end(), std::greater<>());
  for (const int p : gone) members_.erase(members_.begin() + p);
  for (int j = 0; j < joiners; ++j) members_.push_back(next_joiner_++);
}

int process_replay::joiners() const {
  int total = 0;
  for (const replayed_change& change : changes) total += change.joiners;
  return total;
}

const replayed_change* process_replay::first_from(std::uint64_t step) const {
  for (const replayed_change& change : changes)
    if (change.step >= step) return &change;
  return nullptr;
}

process_replay process_replay_of(const std::vector<membership_record>& records, const std::string& name, int workers,
                                 std::uint64_t steps) {
  worker_sets_of(records, name, workers, steps);  // a "job" line of this world size, epochs in order, within --steps
  process_replay replay;
  replay.workers = workers;
  replayed_change since;  // the member events since the last epoch
  for (std::size_t i = 1; i < records.size(); ++i) {
    const membership_record& r = records[i];
    if (r.event == "joined") {
      ++since.joiners;
    } else if (r.event != "epoch") {
      // A joiner lost before its first epoch never trained: the replay starts neither.
      if (r.rank < 0 && since.joiners > 0)
        --since.joiners;
      else
        since.departures.push_back({r.rank, r.role == "coordinator"});
    } else {
      // An epoch restarting at or before the last change's step undoes the epoch that change
      // started: its events happen at this step, with this epoch's.
      while (!replay.changes.empty() && replay.changes.back().step >= r.step) {
        replayed_change& undone = replay.changes.back();
        since.departures.insert(since.departures.begin(), undone.departures.begin(), undone.departures.end());
        since.joiners += undone.joiners;
        replay.changes.pop_back();
      }
      const int before = replay.changes.empty() ? replay.workers : replay.changes.back().workers;
      // Fewer departures than recorded: a leaver whose shard nobody else held stayed one more
      // epoch, and departs with the next.
      const int departing = before + since.joiners - r.workers;
      if (departing < 0 || departing > static_cast<int>(since.departures.size()))
        throw std::invalid_argument(name + ":" + std::to_string(r.line) + ": epoch " + std::to_string(r.epoch) +
                                    " has " + std::to_string(r.workers) + " workers, but the epoch before had " +
                                    std::to_string(before) + ", and since then " + std::to_string(since.joiners) +
                                    " joined and " + std::to_string(since.departures.size()) + " went");
      replayed_change change;
      change.step = r.step;
      change.workers = r.workers;
      change.joiners = std::exchange(since.joiners, 0);
      change.departures.assign(since.departures.begin(), since.departures.begin() + departing);
      since.departures.erase(since.departures.begin(), since.departures.begin() + departing);
      // The first epoch, or one re-formed with the same members, changes nothing to replay.
      if (!change.departures.empty() || change.joiners > 0) replay.changes.push_back(std::move(change));
    }
  }
  return replay;
}

membership_log_writer::membership_log_writer(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw std::runtime_error("cannot write the membership log " + path);
}

void membership_log_writer::write(const membership_record& record) {
  out_ << to_json_line(record) << '\n';
  out_.flush();
}

}  // namespace accord
