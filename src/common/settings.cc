#include "kvfabric/settings.h"

#include <unistd.h>  // environ

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/environment.h"
#include "common/log.h"
#include "common/text.h"

namespace kvfabric {
namespace {

// What settings.def may use in defaults and ranges (inside Settings' members
// the class's own KiB, MiB and GiB are found first; they are the same).
constexpr int64_t KiB = Settings::KiB;
constexpr int64_t MiB = Settings::MiB;
constexpr int64_t GiB = Settings::GiB;
constexpr int64_t TiB = GiB << 10;
constexpr int64_t kNoMaximum = std::numeric_limits<int64_t>::max();

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

constexpr SettingRange AtLeast(int64_t min) { return {min, kNoMaximum, false}; }
constexpr SettingRange Between(int64_t min, int64_t max) { return {min, max, false}; }
constexpr SettingRange ZeroOrAtLeast(int64_t min) { return {min, kNoMaximum, true}; }
constexpr SettingRange ZeroOrBetween(int64_t min, int64_t max) { return {min, max, true}; }

// Microseconds per duration unit, by the token settings.def names it with.
constexpr int64_t kUnit_us = 1;
constexpr int64_t kUnit_ms = 1000;
constexpr int64_t kUnit_s = 1000 * 1000;

// A choice list "a|b|c": non-empty lower-case words without spaces.
constexpr bool ChoicesWellFormed(std::string_view list) {
  bool empty_word = true;
  for (char c : list) {
    if (c == '|') {
      if (empty_word) return false;
      empty_word = true;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.') {
      empty_word = false;
    } else {
      return false;
    }
  }
  return !empty_word;
}

constexpr bool Listed(std::string_view list, std::string_view word) {
  while (true) {
    const size_t bar = list.find('|');
    if (list.substr(0, bar) == word) return true;
    if (bar == std::string_view::npos) return false;
    list.remove_prefix(bar + 1);
  }
}

constexpr bool RangeWellFormed(const SettingRange& r) {
  return r.minimum <= r.maximum && (!r.zero_allowed || r.minimum > 0);
}

// Every declaration is checked when this file compiles: a default its own
// range or choice list refuses is a build error, not a surprise at run time.
#define KVF_SETTING_BOOL(field, env, def, doc)
#define KVF_SETTING_STRING(field, env, def, doc)
#define KVF_SETTING_CHOICE(field, env, def, choices, doc)                                      \
  static_assert(ChoicesWellFormed(choices), #env ": choices must be lower-case words a|b|c"); \
  static_assert(Listed(choices, def), #env ": the default is not one of its choices");
#define KVF_SETTING_INT(field, env, def, range, doc)                        \
  static_assert(RangeWellFormed(range), #env ": malformed range");          \
  static_assert(range.Contains(def), #env ": the default is outside its range");
#define KVF_SETTING_BYTES(field, env, def, range, doc) KVF_SETTING_INT(field, env, def, range, doc)
#define KVF_SETTING_DURATION(field, env, def, unit, range, doc)                                 \
  static_assert(RangeWellFormed(range) && range.minimum >= 0, #env ": malformed range");       \
  static_assert(range.Contains(def), #env ": the default is outside its range");               \
  static_assert(range.maximum <= kNoMaximum / kUnit_##unit, #env ": maximum too large to convert");
#include "kvfabric/settings.def"

std::vector<std::string> SplitChoices(std::string_view list) {
  std::vector<std::string> out;
  while (true) {
    const size_t bar = list.find('|');
    out.emplace_back(list.substr(0, bar));
    if (bar == std::string_view::npos) return out;
    list.remove_prefix(bar + 1);
  }
}

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string Join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

const char* UnitSuffix(int64_t unit_us) { return unit_us == kUnit_s ? "s" : unit_us == kUnit_ms ? "ms" : "us"; }
const char* UnitName(int64_t unit_us) {
  return unit_us == kUnit_s ? "seconds" : unit_us == kUnit_ms ? "milliseconds" : "microseconds";
}

constexpr std::pair<int64_t, const char*> kBinarySuffixes[] = {{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}};

// How values read back (Get, defaults): parsable again by Set.
std::string ShowBytes(int64_t v) {
  for (auto [size, suffix] : kBinarySuffixes)
    if (v != 0 && v % size == 0) return std::to_string(v / size) + suffix;
  return std::to_string(v);
}
std::string ShowDuration(int64_t v, int64_t unit_us) { return std::to_string(v) + UnitSuffix(unit_us); }

// How bounds read in messages and docs/settings.md.
std::string HumanBytes(int64_t v) { return v <= 0 ? std::to_string(v) : text::Bytes(static_cast<uint64_t>(v)); }
std::string HumanDuration(int64_t v, int64_t unit_us) {
  if (v == 0) return "0";
  // Bounds are checked at compile time not to overflow in microseconds.
  const int64_t us = v * unit_us;
  for (int64_t u : {kUnit_s, kUnit_ms, kUnit_us})
    if (u >= unit_us && us % u == 0) return std::to_string(us / u) + " " + UnitSuffix(u);
  return std::to_string(v) + " " + UnitSuffix(unit_us);
}

template <typename Format>
std::string RangeWords(const SettingRange& r, Format fmt) {
  const std::string zero = r.zero_allowed ? "0 or " : "";
  if (r.has_maximum()) return zero + fmt(r.minimum) + " to " + fmt(r.maximum);
  return zero + "≥ " + fmt(r.minimum);
}

template <typename Format>
Status OutOfRange(const std::string& name, const std::string& v, const SettingRange& r, Format fmt) {
  std::string allowed = r.zero_allowed ? "0 or " : "";
  if (r.has_maximum()) allowed += "between " + fmt(r.minimum) + " and " + fmt(r.maximum);
  else allowed += "at least " + fmt(r.minimum);
  return Status::InvalidArgument(name + "='" + v + "': must be " + allowed);
}

template <typename Format>
Status TooLarge(const std::string& name, const std::string& v, const SettingRange& r, Format fmt) {
  return Status::InvalidArgument(name + "='" + v + "' is too large" +
                                 (r.has_maximum() ? ": must be at most " + fmt(r.maximum) : std::string()));
}

// An integer at the start of s: an optional sign, then decimal digits or 0x
// and hex digits; *rest is what follows. kOverflow: digits beyond int64_t.
enum class Scan { kOk, kNotANumber, kOverflow };
Scan ScanInteger(std::string_view s, int64_t* out, std::string_view* rest) {
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude, base);
  if (ec == std::errc::invalid_argument) return Scan::kNotANumber;
  if (ec == std::errc::result_out_of_range) return Scan::kOverflow;
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  if (magnitude > limit) return Scan::kOverflow;
  *out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  *rest = s.substr(static_cast<size_t>(end - s.data()));
  return Scan::kOk;
}

Status ParseBool(const std::string& name, const std::string& v, bool* out) {
  const std::string w = Lower(Trim(v));
  if (w == "1" || w == "true" || w == "yes" || w == "on") { *out = true; return Status::OK(); }
  if (w == "0" || w == "false" || w == "no" || w == "off") { *out = false; return Status::OK(); }
  return Status::InvalidArgument(name + "='" + v + "' is not a boolean (use 1/0, true/false, yes/no or on/off)");
}

Status ParseString(const std::string&, const std::string& v, std::string* out) {
  *out = v;
  return Status::OK();
}

Status ParseChoice(const std::string& name, const std::string& v, std::string_view choices, std::string* out) {
  const std::string w = Lower(Trim(v));
  if (Listed(choices, w)) {  // words are non-empty and hold no '|'
    *out = w;
    return Status::OK();
  }
  return Status::InvalidArgument(name + "='" + v + "': allowed values are " + Join(SplitChoices(choices), ", "));
}

Status ParseInt(const std::string& name, const std::string& v, const SettingRange& r, int64_t* out) {
  const auto fmt = [](int64_t x) { return std::to_string(x); };
  int64_t x = 0;
  std::string_view rest;
  const Scan scan = ScanInteger(Trim(v), &x, &rest);
  if (scan == Scan::kOverflow) return TooLarge(name, v, r, fmt);
  if (scan != Scan::kOk || !rest.empty()) return Status::InvalidArgument(name + "='" + v + "' is not an integer");
  if (!r.Contains(x)) return OutOfRange(name, v, r, fmt);
  *out = x;
  return Status::OK();
}

Status ParseBytes(const std::string& name, const std::string& v, const SettingRange& r, int64_t* out) {
  int64_t x = 0;
  std::string_view rest;
  const Scan scan = ScanInteger(Trim(v), &x, &rest);
  if (scan == Scan::kOverflow) return TooLarge(name, v, r, HumanBytes);
  const std::string suffix = Lower(Trim(rest));
  int64_t scale = 0;
  if (suffix.empty() || suffix == "b") scale = 1;
  else if (suffix == "k" || suffix == "kb" || suffix == "ki" || suffix == "kib") scale = KiB;
  else if (suffix == "m" || suffix == "mb" || suffix == "mi" || suffix == "mib") scale = MiB;
  else if (suffix == "g" || suffix == "gb" || suffix == "gi" || suffix == "gib") scale = GiB;
  else if (suffix == "t" || suffix == "tb" || suffix == "ti" || suffix == "tib") scale = TiB;
  if (scan != Scan::kOk || scale == 0)
    return Status::InvalidArgument(name + "='" + v +
                                   "' is not a byte size: use an integer with an optional suffix K, M, G or T "
                                   "(or KB, MB, GB, TB, or KiB, MiB, GiB, TiB; all powers of 1024, any case)");
  int64_t bytes = 0;
  if (__builtin_mul_overflow(x, scale, &bytes)) return TooLarge(name, v, r, HumanBytes);
  if (!r.Contains(bytes)) return OutOfRange(name, v, r, HumanBytes);
  *out = bytes;
  return Status::OK();
}

Status ParseDuration(const std::string& name, const std::string& v, int64_t unit_us, const SettingRange& r,
                     int64_t* out) {
  const auto fmt = [unit_us](int64_t x) { return HumanDuration(x, unit_us); };
  int64_t x = 0;
  std::string_view rest;
  const Scan scan = ScanInteger(Trim(v), &x, &rest);
  if (scan == Scan::kOverflow) return TooLarge(name, v, r, fmt);
  const std::string suffix = Lower(Trim(rest));
  int64_t given_us = 0;
  if (suffix.empty()) given_us = unit_us;
  else if (suffix == "us" || suffix == "\xc2\xb5s" /* µs */) given_us = kUnit_us;
  else if (suffix == "ms") given_us = kUnit_ms;
  else if (suffix == "s") given_us = kUnit_s;
  if (scan != Scan::kOk || given_us == 0)
    return Status::InvalidArgument(name + "='" + v + "' is not a duration: use an integer of " +
                                   UnitName(unit_us) + ", or one with a unit us, ms or s");
  // Units are powers of 1000 apart: one always divides the other.
  int64_t value = 0;
  if (given_us >= unit_us) {
    if (__builtin_mul_overflow(x, given_us / unit_us, &value)) return TooLarge(name, v, r, fmt);
  } else {
    const int64_t ratio = unit_us / given_us;
    if (x % ratio != 0)
      return Status::InvalidArgument(name + "='" + v + "' is not a whole number of " + UnitName(unit_us));
    value = x / ratio;
  }
  if (!r.Contains(value)) return OutOfRange(name, v, r, fmt);
  *out = value;
  return Status::OK();
}

std::string Show(bool v) { return v ? "true" : "false"; }

}  // namespace

const std::vector<SettingInfo>& Settings::Table() {
  static const std::vector<SettingInfo> table = [] {
    std::vector<SettingInfo> t;
    const Settings d;
#define KVF_SETTING_BOOL(field, env, def, doc)                             \
  t.push_back({#field, #env, "Bool", Show(d.field), doc, {}, "", std::nullopt, \
               "`true` or `false` (also 1/0, yes/no, on/off)"});
#define KVF_SETTING_STRING(field, env, def, doc) \
  t.push_back({#field, #env, "String", d.field, doc, {}, "", std::nullopt, "any text"});
#define KVF_SETTING_CHOICE(field, env, def, choices, doc)                                       \
  t.push_back({#field, #env, "Choice", d.field, doc, SplitChoices(choices), "", std::nullopt, \
               "`" + Join(SplitChoices(choices), "`, `") + "`"});
#define KVF_SETTING_INT(field, env, def, range, doc)                             \
  t.push_back({#field, #env, "Int", std::to_string(d.field), doc, {}, "", range, \
               "integer, " + RangeWords(range, [](int64_t x) { return std::to_string(x); })});
#define KVF_SETTING_BYTES(field, env, def, range, doc)                             \
  t.push_back({#field, #env, "Bytes", ShowBytes(d.field), doc, {}, "bytes", range, \
               "bytes, " + RangeWords(range, HumanBytes)});
#define KVF_SETTING_DURATION(field, env, def, unit, range, doc)                                  \
  t.push_back({#field, #env, "Duration", ShowDuration(d.field, kUnit_##unit), doc, {},           \
               UnitName(kUnit_##unit), range,                                                    \
               std::string(UnitName(kUnit_##unit)) + ", " +                                      \
                   RangeWords(range, [](int64_t x) { return HumanDuration(x, kUnit_##unit); })});
#include "kvfabric/settings.def"
    return t;
  }();
  return table;
}

Status Settings::Set(const std::string& name, const std::string& value) {
  // Each parser writes the field only when the value is allowed.
#define KVF_MATCH(field, env) if (name == #field || name == #env)
#define KVF_SETTING_BOOL(field, env, def, doc) KVF_MATCH(field, env) return ParseBool(#env, value, &field);
#define KVF_SETTING_STRING(field, env, def, doc) KVF_MATCH(field, env) return ParseString(#env, value, &field);
#define KVF_SETTING_CHOICE(field, env, def, choices, doc) \
  KVF_MATCH(field, env) return ParseChoice(#env, value, choices, &field);
#define KVF_SETTING_INT(field, env, def, range, doc) KVF_MATCH(field, env) return ParseInt(#env, value, range, &field);
#define KVF_SETTING_BYTES(field, env, def, range, doc) \
  KVF_MATCH(field, env) return ParseBytes(#env, value, range, &field);
#define KVF_SETTING_DURATION(field, env, def, unit, range, doc) \
  KVF_MATCH(field, env) return ParseDuration(#env, value, kUnit_##unit, range, &field);
#include "kvfabric/settings.def"
#undef KVF_MATCH
  const std::string near = NearestSetting(name.rfind("KVF_", 0) == 0 ? name : "KVF_" + Upper(name));
  return Status::NotFound("no setting named '" + name + "'" + (near.empty() ? "" : "; did you mean " + near + "?") +
                          " (see docs/settings.md)");
}

std::string Settings::NearestSetting(const std::string& name) {
  std::string best;
  size_t best_distance = 5;  // within 4
  const std::string words = "_" + name.substr(std::min<size_t>(name.size(), 4)) + "_";
  for (const SettingInfo& s : Table()) {
    if (s.env == name) return "";
    const std::string theirs = "_" + s.env.substr(4) + "_";
    const size_t d = text::EditDistance(name, s.env);
    const bool contained = words.size() > 2 && theirs.find(words) != std::string::npos;
    if (d < best_distance || (contained && best.empty())) {
      best = s.env;
      best_distance = std::min(d, best_distance);
    }
  }
  return best;
}

Status Settings::Assign(const std::string& name_value) {
  const size_t eq = name_value.find('=');
  if (eq == std::string::npos)
    return Status::InvalidArgument("setting '" + name_value + "' is not of the form NAME=value");
  return Set(name_value.substr(0, eq), name_value.substr(eq + 1));
}

std::string Settings::Get(const std::string& name) const {
  // The secret never shows in listings or logs.
  if ((name == "auth_token" || name == "KVF_AUTH_TOKEN") && !auth_token.empty()) return "(set)";
#define KVF_MATCH(field, env) if (name == #field || name == #env)
#define KVF_SETTING_BOOL(field, env, def, doc) KVF_MATCH(field, env) return Show(field);
#define KVF_SETTING_STRING(field, env, def, doc) KVF_MATCH(field, env) return field;
#define KVF_SETTING_CHOICE(field, env, def, choices, doc) KVF_MATCH(field, env) return field;
#define KVF_SETTING_INT(field, env, def, range, doc) KVF_MATCH(field, env) return std::to_string(field);
#define KVF_SETTING_BYTES(field, env, def, range, doc) KVF_MATCH(field, env) return ShowBytes(field);
#define KVF_SETTING_DURATION(field, env, def, unit, range, doc) \
  KVF_MATCH(field, env) return ShowDuration(field, kUnit_##unit);
#include "kvfabric/settings.def"
#undef KVF_MATCH
  return "";
}

Status Settings::Validate() const {
#define KVF_SETTING_BOOL(field, env, def, doc)
#define KVF_SETTING_STRING(field, env, def, doc)
#define KVF_SETTING_CHOICE(field, env, def, choices, doc)                                           \
  if (!Listed(choices, field))                                                                       \
    return Status::InvalidArgument(#env "='" + field + "': allowed values are " +                   \
                                   Join(SplitChoices(choices), ", "));
#define KVF_SETTING_INT(field, env, def, range, doc)                                   \
  if (!SettingRange(range).Contains(field))                                            \
    return OutOfRange(#env, std::to_string(field), range, [](int64_t x) { return std::to_string(x); });
#define KVF_SETTING_BYTES(field, env, def, range, doc)                                   \
  if (!SettingRange(range).Contains(field))                                              \
    return OutOfRange(#env, ShowBytes(field), range, HumanBytes);
#define KVF_SETTING_DURATION(field, env, def, unit, range, doc)                            \
  if (!SettingRange(range).Contains(field))                                                \
    return OutOfRange(#env, ShowDuration(field, kUnit_##unit), range,                      \
                      [](int64_t x) { return HumanDuration(x, kUnit_##unit); });
#include "kvfabric/settings.def"
  return Status::OK();
}

namespace {
// Warns of each KVF_* variable of the environment that is no setting but
// near one, once per process (EnvironmentLock held).
void WarnOfMisspelledVariables() {
  static std::set<std::string> warned;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("KVF_")) continue;
    const std::string name(entry.substr(0, entry.find('=')));
    if (warned.contains(name)) continue;
    const std::string near = Settings::NearestSetting(name);
    if (near.empty()) continue;
    warned.insert(name);
    KVF_LOG_WARN("{} is set in the environment but is no kvfabric setting, so it is ignored; did you mean {}? "
                 "(docs/settings.md lists them)", name, near);
  }
}
}  // namespace

Status Settings::ApplyEnvironment() {
  std::lock_guard<std::recursive_mutex> env(EnvironmentLock());
  WarnOfMisspelledVariables();
  Settings next = *this;
  for (const auto& s : Table()) {
    const char* v = std::getenv(s.env.c_str());  // the only getenv of KVF_* variables
    if (v != nullptr) KVF_RETURN_IF_ERROR(next.Set(s.env, v));
  }
  *this = std::move(next);
  return Status::OK();
}

std::string Settings::MarkdownTable() {
  std::ostringstream os;
  os << "| Variable | Type | Default | Values | Meaning |\n|---|---|---|---|---|\n";
  for (const auto& s : Table())
    os << "| `" << s.env << "` | " << s.type << " | `" << s.default_value << "` | " << s.values << " | "
       << s.meaning << " |\n";
  return os.str();
}

}  // namespace kvfabric
