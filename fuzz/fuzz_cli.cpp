// accord-train's training flags (apps/training_options.hpp): the input is argv, NUL-separated,
// after `--data` naming a small text file (so each run loads little). Anything gives a setup or
// one std::exception with a message, never a crash (--help, in any spelling, returns).
#include "apps/training_options.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string& small_corpus() {
  static const std::string path = [] {
    std::string name = "/tmp/accord-fuzz-cli-corpus.txt";
    if (FILE* f = std::fopen(name.c_str(), "w")) {
      for (int i = 0; i < 64; ++i) std::fputs("the quick brown fox jumps over the lazy dog\n", f);
      std::fclose(f);
    }
    return name;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args = {"accord-train", "--data", small_corpus()};
  std::string current;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  if (args.size() > 64) return 0;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  namespace po = boost::program_options;
  po::options_description options("accord-train options");
  options.add_options()("help,h", "show this help");
  accord::add_training_options(options, accord::job_config{});
  try {
    std::ostringstream help;
    const auto flags = accord::parse_flags(static_cast<int>(args.size()), argv.data(), options, "usage", help);
    if (flags) (void)accord::make_training_setup(*flags);
  } catch (const std::exception& e) {
    if (std::string(e.what()).empty()) std::abort();  // every refusal says why
  }
  return 0;
}
