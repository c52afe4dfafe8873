#include "apps/flags.hpp"

#include <cstdio>
#include <cstdlib>
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

po::variables_map parse_flags(int argc, char** argv, const po::options_description& options,
                              const std::string& usage) {
  po::variables_map flags;
  try {
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
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
  if (flags.count("help")) {
    std::cout << usage << "\n\n" << options << std::endl;
    std::exit(0);
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
