// Inputs libFuzzer found (fuzz/): each one that crashed, leaked or allocated what its file could
// not back is kept here with the one-line refusal it now gets.
#include <doctest/doctest.h>

#include "recovery/checkpoint.hpp"
#include "apps/training_options.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::string written(const std::string& name, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return name;
}

}  // namespace

TEST_CASE("an 89-byte checkpoint whose sizes claim 12 GB is refused before anything is allocated") {
  // fuzz_checkpoint: ASan saw a 0xc00000000-byte allocation for it (found as a version 1 file;
  // here with version 2: its crc, checked over the file's own bytes first, refuses it).
  const std::vector<std::uint8_t> input = {
      0x41, 0x43, 0x43, 0x4f, 0x52, 0x44, 0x43, 0x4b, 0x2,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x11, 0x27, 0x0,
      0x0,  0x5,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x28, 0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x3,  0x0,
      0x0,  0x0,  0x0,  0x0,  0x0,  0x0,  0x6,  0x0,  0x0,  0x0,  0x6d, 0x6c, 0x70, 0x28, 0x34, 0x29, 0x4,  0x0,  0x0,
      0x0,  0x10, 0x0,  0x0,  0x40, 0x0,  0x0,  0x40, 0x40, 0x5,  0x0,  0x0,  0x0,  0x0,  0x0,  0x80, 0x3f, 0x0,  0x0,
      0x0,  0x40, 0x0,  0x0,  0x40, 0x40, 0x5,  0x0,  0x0,  0x0,  0x0,  0x0,  0x0};
  const std::string path = written("fuzz_finding_checkpoint.ck", input);
  CHECK_THROWS_WITH_AS(accord::read_checkpoint(path), doctest::Contains((path + ": corrupt checkpoint").c_str()),
                       std::runtime_error);
  std::remove(path.c_str());
}

TEST_CASE("a flag value holding Boost's own placeholder is refused instead of hanging") {
  // fuzz_cli: "--steps %value%" made Boost's error message substitute itself forever.
  namespace po = boost::program_options;
  po::options_description options("options");
  accord::add_training_options(options, accord::job_config{});
  for (std::vector<std::string> args : {std::vector<std::string>{"x", "--steps", "%value%"},
                                        std::vector<std::string>{"x", "--%canonical_option%"},
                                        std::vector<std::string>{"x", "--lr", "1%prefix%"}}) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    CAPTURE(args.back());
    CHECK_THROWS_AS(accord::parse_flags(static_cast<int>(argv.size()), argv.data(), options, "usage"),
                    std::invalid_argument);
  }
  std::vector<std::string> args = {"x", "--steps", "%value%"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  CHECK_THROWS_WITH_AS(accord::parse_flags(3, argv.data(), options, "usage"),
                       doctest::Contains("?value?"), std::invalid_argument);
}

TEST_CASE("every spelling Boost takes for --help returns the help instead of exiting") {
  // fuzz_cli: "---h" reached --help, whose std::exit ended the fuzzer; the parser now returns.
  namespace po = boost::program_options;
  po::options_description options("options");
  options.add_options()("help,h", "show this help");
  accord::add_training_options(options, accord::job_config{});
  for (std::string spelling : {"--help", "-h", "--hel", "---h"}) {
    std::vector<std::string> args = {"x", spelling};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    CAPTURE(spelling);
    std::ostringstream help;
    CHECK_FALSE(accord::parse_flags(2, argv.data(), options, "usage: x", help).has_value());
    CHECK(help.str().rfind("usage: x", 0) == 0);
  }
}
