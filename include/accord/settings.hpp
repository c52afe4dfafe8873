#pragma once
// Public embedder API: settings declared once. A declaration names a setting (its key, its flag),
// its kind, default, unit, accepted range or check, one-line help, the --help group it shows in,
// whether it enters a job's fingerprint, and its owner. Everything that must cover every setting
// is made from the declarations: accord-train's flags, their grouped --help and config-file keys
// (apps/training_options.cpp), the fingerprint processes compare (cluster/fingerprint.cpp),
// describe (<accord/config_fields.hpp>), Python's TopologyOptions (python/bind_settings.cpp) and
// the flag tables of docs/ (tests/test_settings.cpp fails when the docs drift).
//
// A topology declares its own settings when it is registered (<accord/topology.hpp>'s
// register_topology), the built-ins exactly as an app's; a job holds them in
// job_config::topology_settings, an open bag by name. No CAF.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace accord {

enum class setting_kind { boolean, whole, number, text };

// A setting's value: a switch, a whole number, a number or a text, as its kind says.
using setting_value = std::variant<bool, std::int64_t, double, std::string>;

struct setting_declaration {
  std::string name = {};  // the key (C++, Python, describe): "local_steps"
  std::string flag = {};  // accord-train's flag and config-file key, without "--": "local-steps"
  setting_kind kind = setting_kind::whole;
  setting_value fallback = std::int64_t{0};  // the default; one outside [low, high] means unset
  double low = 0, high = 0;  // whole and number: the accepted range [low, high]
  bool above_low = false;    // (low, high] instead
  std::string unit = {};     // "steps", "MB", ... (empty: none)
  std::string help = {};     // one line
  std::string group = {};    // the --help section: model | data | algorithm | topology | precision | ...
  bool fingerprint = true;   // every process of a job must agree on it
  // Who reads it: "job", "algorithm", or a mode "WORD VALUE", read only where the setting WORD (by
  // key or flag) is VALUE: "topology gossip" (register_topology fills it in), "algorithm dpu",
  // "model gpt", "elastic on"; or where the job runs: "run between processes", "run in one
  // process". accord-train warns of a flag given where its mode is not chosen.
  std::string owner = {};
  // Checks a value in range further (a link spec, say): throws std::invalid_argument naming the
  // problem in one line. May be empty.
  std::function<void(const setting_value&)> check = {};
  // A text taking one of these values, as they are when asked (the registered topologies): another
  // is refused "--topology: 'star' (expected gossip|ring)". Empty: any text its check takes.
  std::function<std::vector<std::string>()> choices = {};
  // What a text its check decides takes, as --help and the docs show it ("cpu | cuda | cuda:N").
  // Empty: its choices, or "a text".
  std::string accepts = {};
};

// "a whole number in 1..1000000000", "a number in (0, 1e+06]", "on or off", "a text", "gossip | ring"
// (the choices), or what the declaration says it accepts. A whole number's range ends at 2^63-1 at most.
std::string accepted(const setting_declaration& setting);
// `text` as `setting` takes it (whole numbers digits only, numbers finite, switches on|off|true|
// false|1|0, texts among the choices), in range and passing its check; else std::invalid_argument
// with one line "--flag: 'text' is not a whole number in 1..1000".
setting_value parse_setting(const setting_declaration& setting, const std::string& text);
// The value as a flag takes it: "4", "0.7", "on", "ring".
std::string setting_text(const setting_value& value);
// The default as a flag shows it; nullopt where there is none (unset, an empty text).
std::optional<std::string> default_text(const setting_declaration& setting);

// The settings a topology declared, by topology name (sorted), as register_topology recorded them.
std::map<std::string, std::vector<setting_declaration>> declared_topology_settings();
// Records `settings` as topology `topology`'s (register_topology does; a later call replaces).
void declare_topology_settings(const std::string& topology, std::vector<setting_declaration> settings);
// The declaration of a topology setting `name` (the first topology's, by name, that declares it).
std::optional<setting_declaration> topology_setting(const std::string& name);

// A job's topology settings (job_config::topology_settings): values by name, each declared by
// a registered topology; a setting not given reads as its declared default.
class topology_options {
public:
  topology_options() = default;
  // Sets `name`; its kind is checked when the job is planned (check_topology_options).
  topology_options& set(const std::string& name, setting_value value);
  topology_options& set(const std::string& name, const char* text) { return set(name, std::string(text)); }
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  topology_options& set(const std::string& name, T whole) {
    return set(name, setting_value(static_cast<std::int64_t>(whole)));
  }
  bool given(const std::string& name) const { return values_.count(name) > 0; }
  const std::map<std::string, setting_value>& values() const { return values_; }
  // The value of `name` (given, else its declared default); std::invalid_argument when no
  // registered topology declares it, or (whole) when it holds a number that is not whole.
  bool boolean(const std::string& name) const;
  std::int64_t whole(const std::string& name) const;
  double number(const std::string& name) const;
  std::string text(const std::string& name) const;
  setting_value value(const std::string& name) const;

  friend bool operator==(const topology_options&, const topology_options&) = default;

private:
  std::map<std::string, setting_value> values_;
};

// Refuses, in one line, a given setting that no registered topology declares or a value of
// another kind: "topology_settings.nope: no registered topology declares it (...)".
void check_topology_options(const topology_options& options);

}  // namespace accord
