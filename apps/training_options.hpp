#pragma once
// Command-line flags shared by the programs that train (accord-train, accord-bench-algorithms):
// the model, the data and the job, parsed once into what run_job needs.
#include <accord/job.hpp>
#include <accord/model.hpp>

#include <boost/program_options.hpp>

#include <memory>
#include <string>

namespace accord {

struct training_setup {
  std::unique_ptr<model> net;
  std::shared_ptr<const dataset> train;
  std::shared_ptr<const dataset> eval;
  job_config job;
  std::string data_description;
  std::string device_description;
};

// Adds the model, data and job flags, with `defaults` shown as the defaults.
void add_training_options(boost::program_options::options_description& options,
                          const job_config& defaults);
// Builds the model and data sets and fills the job from parsed flags. Throws
// std::invalid_argument / std::runtime_error with a one-line message naming the bad flag or file.
training_setup make_training_setup(const boost::program_options::variables_map& flags);

// Parses argv against `options`; prints `usage` + options and exits 0 on --help; throws
// std::invalid_argument with a one-line message on an unknown or malformed flag.
boost::program_options::variables_map parse_flags(int argc, char** argv,
                                                  const boost::program_options::options_description& options,
                                                  const std::string& usage);

}  // namespace accord
