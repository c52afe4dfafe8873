// describe (include/accord/config_fields.hpp): the settings structs, field by field, from their
// field lists.
#include <accord/config_fields.hpp>

#include <charconv>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace accord {
namespace {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_function : std::false_type {};
template <class T>
struct is_function<std::function<T>> : std::true_type {};
template <class T>
concept listed = requires { fields_of<T>::list; };

// The shortest text that reads back as the same number.
template <class T>
std::string number(T value) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

template <class T>
std::string value_text(const T& value);

// "{step = 10, workers = 3, crash = false}"
template <listed S>
std::string inline_struct(const S& settings) {
  std::string out;
  for_each_field<S>([&](const auto& f) {
    out += (out.empty() ? "{" : ", ") + std::string(f.name) + " = " + value_text(settings.*(f.member));
  });
  return out + "}";
}

template <class T>
std::string value_text(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    return quoted(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_arithmetic_v<T>) {
    return number(value);
  } else if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
    return number(static_cast<double>(value.count()) / 1000.0) + "s";
  } else if constexpr (is_optional<T>::value) {
    return value ? value_text(*value) : "unset";
  } else if constexpr (is_vector<T>::value) {
    std::string out = "[";
    for (const auto& each : value) out += (out.size() > 1 ? ", " : "") + value_text(each);
    return out + "]";
  } else if constexpr (std::is_pointer_v<T> || is_function<T>::value) {
    return value ? "set" : "unset";
  } else if constexpr (listed<T>) {
    return inline_struct(value);
  } else {
    static_assert(listed<T>, "describe: a settings field of a type it cannot print");
  }
}

// Every registered topology's declared settings, a line each ("topology_settings.local_steps = 4";
// texts quoted, switches true or false), the given value or the default.
void describe_topology_settings(std::string& out, const topology_options& options, const std::string& prefix) {
  std::set<std::string> printed;  // a name two topologies declare, once
  for (const auto& [topology, settings] : declared_topology_settings())
    for (const setting_declaration& s : settings)
      if (printed.insert(s.name).second)
        out += prefix + s.name + " = " +
               std::visit([](const auto& v) { return value_text(v); }, options.value(s.name)) + "\n";
}

template <listed S>
void describe_into(std::string& out, const S& settings, const std::string& prefix) {
  for_each_field<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::value_type;
    const std::string name = prefix + std::string(f.name);
    if constexpr (std::is_same_v<T, topology_options>)
      describe_topology_settings(out, settings.*(f.member), name + ".");
    else if constexpr (listed<T>)
      describe_into(out, settings.*(f.member), name + ".");  // a nested struct: a line per field
    else
      out += name + " = " + value_text(settings.*(f.member)) + "\n";
  });
}

}  // namespace

std::string describe(const job_config& config, std::string_view prefix) {
  std::string out;
  describe_into(out, config, std::string(prefix));
  return out;
}

std::string describe(const process_group& group, std::string_view prefix) {
  std::string out;
  describe_into(out, group, std::string(prefix));
  return out;
}

}  // namespace accord
