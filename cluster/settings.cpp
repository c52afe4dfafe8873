// Declared settings (include/accord/settings.hpp): parsing a value as its declaration takes it,
// and the topologies' declarations, which register_topology records here.
#include <accord/settings.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>

namespace accord {
namespace {

struct declarations {
  std::mutex mutex;
  std::map<std::string, std::vector<setting_declaration>> by_topology;
};

declarations& topology_declarations() {
  static declarations* const instance = new declarations;  // never destroyed: used from static initializers
  return *instance;
}

template <class T>
std::string shortest(T value) {
  char text[64];
  return {text, std::to_chars(text, text + sizeof text, value).ptr};
}

// A whole number's bound as it reads: a range up to 2^63 (a double) ends at the largest int64.
std::int64_t whole_bound(double bound) {
  return bound >= 0x1p63 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(bound);
}

// "a|b|c" or "a | b | c".
std::string joined(const std::vector<std::string>& items, const std::string& between) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : between) + item;
  return text;
}

bool in_range(const setting_declaration& s, double value) {
  return std::isfinite(value) && value >= s.low && value <= s.high && !(s.above_low && value == s.low);
}

const char* kind_name(setting_kind kind) {
  switch (kind) {
    case setting_kind::boolean: return "a switch";
    case setting_kind::whole: return "a whole number";
    case setting_kind::number: return "a number";
    case setting_kind::text: return "a text";
  }
  return "";
}

// Whether `value` can be read as `kind` (a whole number is a number too).
bool fits(const setting_value& value, setting_kind kind) {
  switch (kind) {
    case setting_kind::boolean: return std::holds_alternative<bool>(value);
    case setting_kind::whole: return std::holds_alternative<std::int64_t>(value);
    case setting_kind::number: return std::holds_alternative<double>(value) || std::holds_alternative<std::int64_t>(value);
    case setting_kind::text: return std::holds_alternative<std::string>(value);
  }
  return false;
}

}  // namespace

std::string accepted(const setting_declaration& s) {
  if (!s.accepts.empty()) return s.accepts;
  switch (s.kind) {
    case setting_kind::boolean: return "on or off";
    case setting_kind::whole:
      return "a whole number in " + shortest(whole_bound(s.low)) + ".." + shortest(whole_bound(s.high));
    case setting_kind::number:
      return "a number in " + std::string(s.above_low ? "(" : "[") + shortest(s.low) + ", " + shortest(s.high) + "]";
    case setting_kind::text: return s.choices ? joined(s.choices(), " | ") : "a text";
  }
  return "";
}

setting_value parse_setting(const setting_declaration& s, const std::string& text) {
  const auto refuse = [&] {
    return std::invalid_argument("--" + s.flag + ": '" + text + "' is not " + accepted(s));
  };
  setting_value value;
  const char* end = text.data() + text.size();
  switch (s.kind) {
    case setting_kind::boolean:
      if (text == "on" || text == "true" || text == "1") value = true;
      else if (text == "off" || text == "false" || text == "0") value = false;
      else throw refuse();
      break;
    case setting_kind::whole: {
      std::int64_t whole = 0;
      const auto [stop, error] = std::from_chars(text.data(), end, whole);
      if (text.empty() || error != std::errc{} || stop != end || !in_range(s, static_cast<double>(whole))) throw refuse();
      value = whole;
      break;
    }
    case setting_kind::number: {
      double number = 0;
      const auto [stop, error] = std::from_chars(text.data(), end, number);
      if (text.empty() || error != std::errc{} || stop != end || !in_range(s, number)) throw refuse();
      value = number;
      break;
    }
    case setting_kind::text:
      if (s.choices) {
        const std::vector<std::string> choices = s.choices();
        if (std::find(choices.begin(), choices.end(), text) == choices.end())
          throw std::invalid_argument("--" + s.flag + ": '" + text + "' (expected " + joined(choices, "|") + ")");
      }
      value = text;
      break;
  }
  if (s.check) s.check(value);
  return value;
}

std::string setting_text(const setting_value& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) return v ? "on" : "off";
        else if constexpr (std::is_same_v<T, std::string>) return v;
        // A float setting's value as the float reads it: 0.1, not 0.10000000149011612.
        else if constexpr (std::is_same_v<T, double>)
          return static_cast<double>(static_cast<float>(v)) == v ? shortest(static_cast<float>(v)) : shortest(v);
        else return shortest(v);
      },
      value);
}

std::optional<std::string> default_text(const setting_declaration& s) {
  if (const auto* text = std::get_if<std::string>(&s.fallback); text && text->empty()) return std::nullopt;
  if (s.kind == setting_kind::whole || s.kind == setting_kind::number) {
    const double value = std::holds_alternative<double>(s.fallback)
                             ? std::get<double>(s.fallback)
                             : static_cast<double>(std::get<std::int64_t>(s.fallback));
    if (!in_range(s, value)) return std::nullopt;
  }
  return setting_text(s.fallback);
}

std::map<std::string, std::vector<setting_declaration>> declared_topology_settings() {
  declarations& d = topology_declarations();
  std::lock_guard lock(d.mutex);
  return d.by_topology;
}

void declare_topology_settings(const std::string& topology, std::vector<setting_declaration> settings) {
  for (setting_declaration& s : settings) {
    if (!fits(s.fallback, s.kind))
      throw std::invalid_argument("topology " + topology + ": setting " + s.name + "'s default is not " +
                                  kind_name(s.kind));
    s.owner = "topology " + topology;
    if (s.group.empty()) s.group = "topology";
  }
  declarations& d = topology_declarations();
  std::lock_guard lock(d.mutex);
  d.by_topology[topology] = std::move(settings);
}

std::optional<setting_declaration> topology_setting(const std::string& name) {
  declarations& d = topology_declarations();
  std::lock_guard lock(d.mutex);
  for (const auto& [topology, settings] : d.by_topology)
    for (const setting_declaration& s : settings)
      if (s.name == name) return s;
  return std::nullopt;
}

topology_options& topology_options::set(const std::string& name, setting_value value) {
  values_[name] = std::move(value);
  return *this;
}

setting_value topology_options::value(const std::string& name) const {
  const auto declared = topology_setting(name);
  if (!declared)
    throw std::invalid_argument("topology_settings." + name + ": no registered topology declares it");
  const auto found = values_.find(name);
  const setting_value& value = found != values_.end() ? found->second : declared->fallback;
  if (!fits(value, declared->kind))
    throw std::invalid_argument("topology_settings." + name + " = " + setting_text(value) + " is not " +
                                kind_name(declared->kind));
  if (declared->kind == setting_kind::number && std::holds_alternative<std::int64_t>(value))
    return static_cast<double>(std::get<std::int64_t>(value));
  return value;
}

bool topology_options::boolean(const std::string& name) const { return std::get<bool>(value(name)); }
std::int64_t topology_options::whole(const std::string& name) const { return std::get<std::int64_t>(value(name)); }
double topology_options::number(const std::string& name) const { return std::get<double>(value(name)); }
std::string topology_options::text(const std::string& name) const { return std::get<std::string>(value(name)); }

void check_topology_options(const topology_options& options) {
  for (const auto& [name, given] : options.values()) {
    if (!topology_setting(name)) {
      std::string known;
      for (const auto& [topology, settings] : declared_topology_settings())
        for (const setting_declaration& s : settings) known += (known.empty() ? "" : ", ") + s.name;
      throw std::invalid_argument("topology_settings." + name + ": no registered topology declares it (declared: " +
                                  known + ")");
    }
    options.value(name);  // refuses a value of another kind
  }
}

}  // namespace accord
