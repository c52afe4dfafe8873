#pragma once
// Public embedder API: your own aggregation rule. A rule is what one round does on a worker:
// its gradient sum in, the new parameters out (identical on every worker), talking to the other
// workers through the round's peers (<accord/round.hpp>, as a topology's worker does).
// Registered under a name together with a pipeline it is an algorithm like the built-in ones
// (which sit in the same registry): job_config::algorithm, accord-train's --algo. No CAF.
#include <accord/round.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace accord {

// When rounds start and what compute does meanwhile.
enum class pipeline {
  synchronous,  // accumulate, communicate, wait, apply (DDP)
  delayed,      // communicate round k while computing round k+1; apply one round late (DPU)
  acco,         // overlapped, with ACCO's estimate round correcting the one-step delay
};

class aggregation_rule {
public:
  virtual ~aggregation_rule() = default;
  // `buffer`: this worker's gradient sum on entry, the new parameters on exit — the same on
  // every worker (replica checks compare them and stop a job whose workers disagree). `peers`:
  // the round's collectives; `round`: its step, learning rate and micro-batch counts.
  virtual void apply(round_peers& peers, std::span<float> buffer, const round_view& round) = 0;
  // Bytes of state this worker keeps (for the memory report).
  virtual std::size_t state_bytes() const { return 0; }
};

// What a worker's rule starts from.
struct rule_setup {
  std::span<const float> initial;  // the job's starting parameters
  int rank = 0;
  int world = 1;
  // The job's optimizer settings (job_config, or the defaults of the algorithm's
  // default_optimizer where it leaves them unset).
  float learning_rate = 0;
  float beta1 = 0, beta2 = 0, epsilon = 0, weight_decay = 0;
};

using rule_factory = std::function<std::unique_ptr<aggregation_rule>(const rule_setup&)>;

// Adds the algorithm `name` (job_config::algorithm): `pipe` with the rule `make_rule` makes
// on every worker; `default_optimizer` (adamw | lion | sgd) supplies the rule_setup settings the
// job leaves unset. For every job of this process that starts afterwards (between processes,
// every process registers it). Throws std::invalid_argument for an empty or taken name, an
// unknown optimizer or no factory. The rule keeps no checkpointable state: jobs with
// checkpoints, resumes or membership changes refuse it.
void register_algorithm(const std::string& name, pipeline pipe, rule_factory make_rule,
                        const std::string& default_optimizer = "sgd", const std::string& summary = "");

// Every registered algorithm's name, built-in ones first.
std::vector<std::string> algorithm_names();

}  // namespace accord
