// The engine's tunables, generated from settings.def (the one declaration).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "kvfabric/status.h"

namespace kvfabric {

// The values a numeric setting accepts, in its unit: minimum..maximum, and 0
// as well when zero_allowed (a special value such as "off" or "provider's").
struct SettingRange {
  int64_t minimum = std::numeric_limits<int64_t>::min();
  int64_t maximum = std::numeric_limits<int64_t>::max();
  bool zero_allowed = false;

  constexpr bool Contains(int64_t v) const { return (zero_allowed && v == 0) || (v >= minimum && v <= maximum); }
  constexpr bool has_maximum() const { return maximum != std::numeric_limits<int64_t>::max(); }
};

struct SettingInfo {
  std::string field;    // e.g. "tx_depth"
  std::string env;      // e.g. "KVF_TX_DEPTH"
  std::string type;     // "Int", "Bool", "String", "Choice", "Bytes" or "Duration"
  std::string default_value;  // as Get() shows it
  std::string meaning;
  std::vector<std::string> choices;  // Choice: the allowed values, lower case
  std::string unit;     // Bytes: "bytes"; Duration: "microseconds", "milliseconds" or "seconds"
  std::optional<SettingRange> range;  // Int, Bytes and Duration
  std::string values;   // what is accepted, in words (the Values column of docs/settings.md)
};

struct Settings {
  // For byte sizes in settings.def and in code.
  static constexpr int64_t KiB = int64_t{1} << 10;
  static constexpr int64_t MiB = int64_t{1} << 20;
  static constexpr int64_t GiB = int64_t{1} << 30;

  // A choice is a std::string holding one of its lower-case words; byte sizes
  // and durations are int64_t in the unit their name says (bytes, _us, _ms, _s).
#define KVF_SETTING_BOOL(field, env, def, doc) bool field = def;
#define KVF_SETTING_STRING(field, env, def, doc) std::string field = def;
#define KVF_SETTING_CHOICE(field, env, def, choices, doc) std::string field = def;
#define KVF_SETTING_INT(field, env, def, range, doc) int64_t field = def;
#define KVF_SETTING_BYTES(field, env, def, range, doc) int64_t field = def;
#define KVF_SETTING_DURATION(field, env, def, unit, range, doc) int64_t field = def;
#include "kvfabric/settings.def"

  // Overlays every KVF_* variable present in the environment. A value that
  // does not parse or is not allowed (a choice not listed, a number out of
  // range) is an InvalidArgument naming the variable, the value and what is
  // allowed; nothing is changed then. A KVF_* variable that is no setting
  // but near one (NearestSetting) is logged at warning, once per process.
  Status ApplyEnvironment();
  // Sets one setting by field name or variable name ("tx_depth" or
  // "KVF_TX_DEPTH"), checked as ApplyEnvironment checks it; unchanged on error.
  Status Set(const std::string& name, const std::string& value);
  // The same from one "NAME=value" word (--set flags, the C API's list);
  // InvalidArgument without a '='.
  Status Assign(const std::string& name_value);
  // The value as Set reads it back: byte sizes with a binary suffix where
  // exact ("64MiB"), durations with their unit ("30000ms"); "" for an unknown
  // name. A set auth_token shows as "(set)".
  std::string Get(const std::string& name) const;
  // Whether every field holds a value its declaration allows (fields assigned
  // in code skip Set's checks); the first offender as Set would name it.
  Status Validate() const;

  static const std::vector<SettingInfo>& Table();
  // The declared variable `name` most likely misspells: the nearest by
  // edit distance within 4, else one whose words contain `name`'s after
  // "KVF_" ("KVF_TOKEN" -> "KVF_AUTH_TOKEN"); "" when none is near (a
  // variable of another tool) or `name` is declared.
  static std::string NearestSetting(const std::string& name);
  // The documentation table (Markdown), as written to docs/settings.md.
  static std::string MarkdownTable();
};

}  // namespace kvfabric
