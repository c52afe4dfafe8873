#pragma once
// Command-line parsing shared by every program in apps/ (Boost.Program_options): numbers are
// parsed strictly and checked against their flag's range as they are parsed, so `--steps -1`
// never wraps to 2^64-1, `--lr nan` is no learning rate and every refusal names its flag;
// defaults show in --help as written (0.1, not 0.100000001); stray arguments are refused.
#include <boost/program_options.hpp>

#include <charconv>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace accord {

// Shortest text that reads back as `value` ("0.1" for 0.1f, "300", "1e+06").
template <class T>
std::string number_text(T value) {
  char text[64];
  return {text, std::to_chars(text, text + sizeof text, value).ptr};
}

// What a number flag accepts: [low, high], or (low, high] with `above_low`.
template <class T>
struct number_range {
  T low, high;
  bool above_low = false;

  bool contains(T value) const {
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(value)) return false;
    return value >= low && value <= high && !(above_low && value == low);
  }
  // "a whole number in 1..1000", "a number in (0, 1000]"
  std::string describe() const {
    if constexpr (std::is_floating_point_v<T>)
      return "a number in " + std::string(above_low ? "(" : "[") + number_text(low) + ", " + number_text(high) + "]";
    else
      return "a whole number in " + number_text(low) + ".." + number_text(high);
  }
  // All of `text` as a number inside the range: digits only for whole numbers (no sign for
  // unsigned types, no exponent), finite numbers only for floating types.
  std::optional<T> parse(const std::string& text) const {
    T value{};
    const char* end = text.data() + text.size();
    const auto [stop, error] = std::from_chars(text.data(), end, value);
    if (text.empty() || error != std::errc{} || stop != end || !contains(value)) return std::nullopt;
    return value;
  }
};

// The value semantic of a number flag: refuses anything outside `range` with one line
// "--flag: 'text' is not a whole number in 1..1000".
template <class T>
class number_value final : public boost::program_options::typed_value<T> {
public:
  explicit number_value(number_range<T> range)
      : boost::program_options::typed_value<T>(nullptr), range_(range) {}

  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    namespace po = boost::program_options;
    po::validators::check_first_occurrence(store);
    const std::string& text = po::validators::get_single_string(tokens);
    const std::optional<T> value = range_.parse(text);
    if (!value) throw po::error_with_option_name("%canonical_option%: '" + text + "' is not " + range_.describe());
    store = *value;
  }

private:
  number_range<T> range_;
};

// A number flag accepting `range`, or [low, high], optionally with a default.
template <class T>
number_value<T>* number_flag(number_range<T> range) {
  return new number_value<T>(range);
}
template <class T>
number_value<T>* number_flag(number_range<T> range, T fallback) {
  auto* value = number_flag(range);
  value->default_value(fallback, number_text(fallback));
  return value;
}
template <class T>
number_value<T>* number_flag(T low, T high) {
  return number_flag(number_range<T>{low, high});
}
template <class T>
number_value<T>* number_flag(T low, T high, T fallback) {
  return number_flag(number_range<T>{low, high}, fallback);
}

// The items of the comma-separated `list` given to `flag`; an empty list or item is refused
// naming the flag and what an item should be (`expected`).
std::vector<std::string> list_items(const std::string& flag, const std::string& list, const std::string& expected);

// "accord-train 0.1.0 (git df03db9)": the program's name (from argv[0]) and accord::version().
std::string version_line(const char* argv0);

// Parses argv against `options` and --version, which every program has. On --help (or any
// spelling Boost takes for it, "--hel", "---h") prints `usage` + options to `help_out`, on
// --version version_line(), and returns nullopt: the program exits 0, and
// callers that embed the parser (the fuzz target) are never exited under. Throws
// std::invalid_argument with a one-line message on an unknown, malformed, repeated or
// out-of-range flag, or a stray argument. When `options` has "config" and it is given, that
// file's "name = value" lines fill in what the command line did not set (the command line
// wins; every value of the file is still checked, and a bad one is refused naming the file).
std::optional<boost::program_options::variables_map> parse_flags(
    int argc, char** argv, const boost::program_options::options_description& options, const std::string& usage,
    std::ostream& help_out = std::cout);

// For each (flag, why) whose flag was given on the command line, one line on stderr:
// "program: warning: --flag does nothing why; ignored".
void warn_ignored(const boost::program_options::variables_map& flags, const std::string& program,
                  const std::vector<std::pair<std::string, std::string>>& ignored);

}  // namespace accord
