#pragma once
// Public embedder API: job_config's settings declared once (<accord/settings.hpp>), each with the
// field it lives in. From this list come accord-train's flags, their --help sections and --config
// keys, what the flags set in a job_config (apps/training_options.cpp), the fingerprint every
// process of a job compares (cluster/fingerprint.cpp) and docs/training.md's flag table
// (tests/test_settings.cpp fails when the docs drift). A topology's own settings are declared
// where it is registered (<accord/topology.hpp>). No CAF.
#include <accord/config.hpp>
#include <accord/settings.hpp>

#include <functional>
#include <string>
#include <vector>

namespace accord {

struct job_setting {
  // name: job_config's field; group: accord-train's --help section; fallback: job_config{}'s value
  // (an unset optional: NaN, shown as no default); owner: "job", "algorithm", or the mode that
  // reads it ("algorithm dpu", "schedule cosine").
  setting_declaration declared;
  bool command_line = true;  // accord-train has its flag (else it is only in job_config and the fingerprint)
  std::function<setting_value(const job_config&)> get;
  std::function<void(job_config&, const setting_value&)> set;  // empty where command_line is false
  // The fingerprint's text where it is not the value's: what the job resolves it to
  // ("(the algorithm's)" for an empty optimizer). Empty: the value.
  std::function<std::string(const job_config&)> fingerprint_text = {};
};

// Every declared setting of job_config: in the fingerprint's order, and in --help order within
// each group.
const std::vector<job_setting>& declared_job_settings();

// Refuses, in one line, a job_config whose setting with a flag lies outside its declared range,
// as accord-train's flag would ("micro_batch = 0 is not a whole number in 1..1000000
// (--micro-batch)"). A default means what it says, even outside the range (learning_rate 0: the
// optimizer's); an unset optional is unset.
void require_declared_ranges(const job_config& config);

}  // namespace accord
