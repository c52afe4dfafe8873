#include "apps/flags.hpp"

#include <accord/version.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
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

// The largest --config file read: options, not data.
constexpr std::uintmax_t most_config_bytes = 1 << 20;

std::string read_config_file(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_type type = std::filesystem::status(path, error).type();
  if (type != std::filesystem::file_type::regular)
    throw std::invalid_argument("--config: " + path + ": " +
                                (type == std::filesystem::file_type::not_found ? "no such file"
                                 : error                                      ? error.message()
                                                                              : "not a regular file"));
  if (std::filesystem::file_size(path, error) > most_config_bytes)
    throw std::invalid_argument("--config: " + path + ": larger than 1 MiB (it holds options, one per line)");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw std::invalid_argument("--config: " + path + ": cannot be read");
  return text.str();
}

// Stores the options of a config file ("name = value" lines, names as the long flags without
// "--") under those from the command line, which po::store keeps: the command line wins.
void store_config(const std::string& text, const po::options_description& options,
                  po::variables_map& flags) {
  std::istringstream in(text);
  po::store(po::parse_config_file(in, options, false), flags);
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
  if (options.find_nothrow("config", false) && flags.count("config")) {
    const std::string path = flags["config"].as<std::string>();
    const std::string text = read_config_file(path);
    try {
      po::variables_map whole_file;  // every value of the file is checked, also those the command line overrides
      store_config(text, options, whole_file);
      store_config(text, options, flags);
    } catch (const po::error&) {
      // As above: Boost's message is built from text shown with '%' as '?'.
      std::string shown = text;
      std::replace(shown.begin(), shown.end(), '%', '?');
      try {
        po::variables_map ignored;
        store_config(shown, options, ignored);
      } catch (const po::error& e) {
        throw std::invalid_argument("--config: " + path + ": " + e.what());
      }
      throw std::invalid_argument("--config: " + path + ": malformed");
    }
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
