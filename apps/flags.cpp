#include "apps/flags.hpp"

#include <accord/version.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace po = boost::program_options;

namespace accord {

std::vector<std::string> list_items(const std::string& flag, const std::string& list, const std::string& expected) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  if (!list.empty() && list.back() == ',') items.emplace_back();
  if (items.empty()) throw std::invalid_argument(flag + ": empty list (expected " + expected + ")");
  for (const auto& item : items)
    if (item.empty()) throw std::invalid_argument(flag + ": '" + list + "' has an empty item (expected " + expected + ")");
  return items;
}

namespace {

void store_flags(int argc, char** argv, const po::options_description& options, po::variables_map& flags) {
  const po::parsed_options parsed = po::command_line_parser(argc, argv).options(options).run();
  // Without a positional description Boost keeps stray words as nameless options and store()
  // drops them: a mistyped command line would run with defaults.
  for (const auto& option : parsed.options)
    if (option.string_key.empty())
      throw std::invalid_argument("unexpected argument '" +
                                  (option.original_tokens.empty() ? std::string() : option.original_tokens.front()) +
                                  "' (every setting is a --flag; see --help)");
  po::store(parsed, flags);
  po::notify(flags);
}

}  // namespace

std::string version_line(const char* argv0) {
  const std::string program = argv0 && *argv0 ? std::filesystem::path(argv0).filename().string() : "accord";
  return program + " " + std::string(version());
}

std::optional<po::variables_map> parse_flags(int argc, char** argv, const po::options_description& program_options,
                                             const std::string& usage, std::ostream& help_out) {
  po::options_description every_program;
  every_program.add_options()("version", "print the version and exit");
  po::options_description options;  // groups print in order: the program's, then --version
  options.add(program_options).add(every_program);
  po::variables_map flags;
  try {
    store_flags(argc, argv, options, flags);
  } catch (const po::error&) {
    // Boost's message never ends for an argument holding its own placeholder ("--steps %value%"
    // substitutes itself forever), so the message comes from the same arguments with '%' shown as '?'.
    std::vector<std::string> shown(argv, argv + argc);
    for (auto& arg : shown) std::replace(arg.begin(), arg.end(), '%', '?');
    std::vector<char*> shown_argv;
    for (auto& arg : shown) shown_argv.push_back(arg.data());
    try {
      po::variables_map ignored;
      store_flags(argc, shown_argv.data(), options, ignored);
    } catch (const po::error& e) {
      throw std::invalid_argument(e.what());
    }
    throw std::invalid_argument("malformed command line");
  }
  if (flags.count("help")) {
    help_out << usage << "\n\n" << options << std::endl;
    return std::nullopt;
  }
  if (flags.count("version")) {
    help_out << version_line(argc > 0 ? argv[0] : nullptr) << std::endl;
    return std::nullopt;
  }
  return flags;
}

void warn_ignored(const po::variables_map& flags, const std::string& program,
                  const std::vector<std::pair<std::string, std::string>>& ignored) {
  for (const auto& [flag, why] : ignored)
    if (flags.count(flag) && !flags[flag].defaulted())
      std::fprintf(stderr, "%s: warning: --%s does nothing %s; ignored\n", program.c_str(), flag.c_str(), why.c_str());
}

}  // namespace accord
