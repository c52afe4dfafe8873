// accord-launch: starts N worker processes on this machine with torchrun's rendezvous variables,
// forwards their output line by line with a rank prefix, and fails fast: the first worker that
// fails stops all the others, and its status becomes the launcher's. With --elastic none fails
// fast: the job goes on without a worker that fails (RANK 0's included: the survivors elect a new
// coordinator), or with --max-restarts starts one other than RANK 0 again as a joiner (without
// --elastic, --max-restarts restarts the whole group, as torchrun). With --join the workers join
// a running elastic job instead: they get no rank. With --replay-membership it starts a recorded
// churned job again, its joiners too. Takes torchrun's flags (--nnodes, --standalone,
// --rdzv-backend, -m, --no-python, --tee...); a .py script runs with Python.
//
// The pieces, by concept, are in apps/launch/: the command line (options), the rendezvous
// variables (rendezvous), starting a worker (process), forwarding its output (output) and
// supervising them all (supervisor).
#include "apps/launch/options.hpp"
#include "apps/launch/output.hpp"
#include "apps/launch/process.hpp"
#include "apps/launch/supervisor.hpp"

#include <exception>
#include <optional>
#include <string>

using namespace accord::launch;

int main(int argc, char** argv) {
  try {
    const std::optional<launch_options> options = parse_command_line(argc, argv);
    if (!options) return 0;
    const std::string program = find_program(options->command.front());
    return run_workers(*options, program);
  } catch (const usage_error& error) {
    say(error.what());
    return usage_exit;
  } catch (const cannot_run_error& error) {
    say(error.what());
    return cannot_run_exit;
  } catch (const std::exception& error) {
    say(error.what());
    return 1;
  }
}
