#pragma once
// Command-line flags shared by the programs that train (accord-train, the benchmarks):
// the model, the data and the job, parsed once into what run_job needs.
#include "apps/flags.hpp"

#include <accord/job.hpp>
#include <accord/model.hpp>
#include <accord/settings.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accord {

struct seeded_data {
  std::shared_ptr<const dataset> train;
  std::shared_ptr<const dataset> eval;
};

struct training_setup {
  std::unique_ptr<model> net;
  std::shared_ptr<const dataset> train;  // as load_data(job.seed)
  std::shared_ptr<const dataset> eval;
  // The data sets as `--seed seed` loads them: the seed orders them as well as initialising
  // the model, so a run with another seed (a benchmark's repetition) trains on these, as
  // accord-train --seed does.
  std::function<seeded_data(std::uint64_t seed)> load_data;
  job_config job;
  std::string data_description;
  std::string device_description;
};

// The data sets of `seed`: the loaded ones when it is setup.job.seed, else load_data(seed).
seeded_data data_for_seed(const training_setup& setup, std::uint64_t seed);

// The sections --help shows the flags in, in this order, so that ~70 flags read by subject; a
// program adds its own flags to the section they belong to.
struct flag_sections {
  boost::program_options::options_description model{"model"}, data{"data"}, algorithm{"algorithm"},
      topology{"topology"}, precision{"precision"}, distributed{"distributed (between processes)"},
      elastic{"elastic jobs and checkpoints"}, output{"output"};

  // --config into `options`, then each section that has flags, as a group of `options`.
  void add_to(boost::program_options::options_description& options) const;
};

// accord-train's own settings, declared as job_config's are (<accord/settings.hpp>): what builds
// the model and reads the data, each owned by "job" or by the model that reads it ("model gpt"),
// and the lists parsed into the job (--speed, --membership, --replay-membership). The fingerprint
// states the model's signature and the data's description instead. add_training_options adds them.
const std::vector<setting_declaration>& declared_training_settings();
// accord-train's output settings (--log-interval, --show-config, --save-parameters,
// --status-port), which accord-train alone reads; add_output_options adds them to their section.
const std::vector<setting_declaration>& declared_output_settings();
void add_output_options(flag_sections& sections);
// A declared whole-number flag's value: as given (checked as it was parsed) or its default.
std::int64_t whole_flag(const boost::program_options::variables_map& flags, const std::string& flag);

// accord-train's settings of a job between processes (the distributed and elastic sections),
// declared as the others, each with what it sets in the process's place. Owned by "run between
// processes" (read only there), "elastic on" (only in an elastic job) or "job" (--join, which
// makes the place).
struct process_setting {
  setting_declaration declared;  // its default: process_group{}'s
  // What it sets in the place; empty for --join, which process_group_from_environment reads.
  std::function<void(process_group&, const setting_value&)> set;
};
const std::vector<process_setting>& declared_process_settings();
// Adds them to their sections, process_group{}'s values as the defaults.
void add_process_options(flag_sections& sections);
// What the flags set in `place` (as process_group_from_environment read it, --join included):
// --elastic adds to ACCORD_ELASTIC's.
void read_process_options(const boost::program_options::variables_map& flags, process_group& place);

// Where a job runs, once the environment is read (process_group_from_environment): between
// processes or in one, elastic or not. The settings owned by "run between processes", "run in
// one process" or "elastic on" are read or not as it says.
struct job_place {
  bool between_processes = false;
  bool elastic = false;  // --elastic, ACCORD_ELASTIC=1 or a joiner
};

// Adds the model, data and job flags to their sections, with `defaults` shown as the defaults.
void add_training_options(flag_sections& sections, const job_config& defaults);
// The same, added to `options` by flag_sections::add_to.
void add_training_options(boost::program_options::options_description& options,
                          const job_config& defaults);
// The topology flags alone (--topology and each topology's settings; add_training_options
// adds them too), and what they set in `job` (`local_workers` as for make_training_setup).
void add_topology_options(boost::program_options::options_description& options, const job_config& defaults);
void read_topology_options(const boost::program_options::variables_map& flags, job_config& job, int local_workers = 0);
// The flags of the other registered topologies, each with why `topology` ignores it
// ("without --topology gossip"), as warn_ignored takes them.
std::vector<std::pair<std::string, std::string>> topology_flags_ignored_by(const std::string& topology);

// Builds the model and data sets and fills the job from parsed flags. Throws
// std::invalid_argument / std::runtime_error with a one-line message naming the bad flag or file,
// also when the job cannot fit in this machine's memory with `local_workers` of its workers in
// this process (0: all of them, as run_job runs them).
training_setup make_training_setup(const boost::program_options::variables_map& flags, int local_workers = 0);

// The flags that the chosen model, algorithm, topology and schedule, and `place` where it is
// known, leave unread, each with why, as the declarations' owners say: --width, owned by "model
// gpt", with --model mlp is ("width", "without --model gpt"); --transport in one process is
// ("transport", "in one process (it applies between processes)"). A setting whose mode is itself
// unread is unread for the same reason (--keep-interval, owned by "elastic on", in one process).
std::vector<std::pair<std::string, std::string>> training_flags_ignored(const boost::program_options::variables_map& flags,
                                                                        std::optional<job_place> place = std::nullopt);
// One warning line on stderr for each of them that was given ("accord-train: warning: --width
// does nothing without --model gpt; ignored").
void warn_ignored_training_flags(const boost::program_options::variables_map& flags, const std::string& program,
                                 std::optional<job_place> place = std::nullopt);

}  // namespace accord
