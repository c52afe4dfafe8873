// What the training programs build from their flags (apps/training_options): the data a seed
// selects, which every benchmark repetition with another seed must train on.
#include <doctest/doctest.h>

#include "apps/training_options.hpp"

#include <string>
#include <vector>

using namespace accord;

namespace {

training_setup setup_from(std::vector<std::string> args) {
  namespace po = boost::program_options;
  po::options_description options("options");
  add_training_options(options, job_config{});
  args.insert(args.begin(), "test");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return make_training_setup(*parse_flags(static_cast<int>(argv.size()), argv.data(), options, "usage"));
}

bool same_examples(const dataset& a, const dataset& b) {
  const batch x = a.examples(0, 8), y = b.examples(0, 8);
  return x.tokens == y.tokens && x.features == y.features && x.targets == y.targets;
}

}  // namespace

TEST_CASE("load_data(S) gives the data sets that --seed S gives, for either model") {
  for (const std::string model : {"gpt", "mlp"}) {
    CAPTURE(model);
    const training_setup first = setup_from({"--model", model, "--seed", "1"});
    const training_setup second = setup_from({"--model", model, "--seed", "2"});
    const seeded_data reloaded = first.load_data(2);
    CHECK(same_examples(*reloaded.train, *second.train));
    CHECK(same_examples(*reloaded.eval, *second.eval));
    // The seed does order the data: otherwise this test could not fail.
    CHECK_FALSE(same_examples(*first.train, *second.train));
    CHECK(same_examples(*first.load_data(1).train, *first.train));
    CHECK(data_for_seed(first, 1).train == first.train);  // the loaded sets, not a second load
    CHECK(same_examples(*data_for_seed(first, 2).train, *second.train));
  }
}
