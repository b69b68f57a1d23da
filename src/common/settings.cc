#include "kvfabric/settings.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace kvfabric {
namespace {

Status Parse(const std::string& name, const std::string& v, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 0);
  if (v.empty() || errno != 0 || *end != '\0')
    return Status::InvalidArgument(name + "='" + v + "' is not an integer");
  *out = x;
  return Status::OK();
}

Status Parse(const std::string& name, const std::string& v, bool* out) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") { *out = true; return Status::OK(); }
  if (v == "0" || v == "false" || v == "no" || v == "off") { *out = false; return Status::OK(); }
  return Status::InvalidArgument(name + "='" + v + "' is not a boolean (use 1/0, true/false)");
}

Status Parse(const std::string&, const std::string& v, std::string* out) {
  *out = v;
  return Status::OK();
}

std::string Show(int64_t v) { return std::to_string(v); }
std::string Show(bool v) { return v ? "true" : "false"; }
std::string Show(const std::string& v) { return v; }

}  // namespace

const std::vector<SettingInfo>& Settings::Table() {
  static const std::vector<SettingInfo> table = [] {
    std::vector<SettingInfo> t;
    Settings d;
#define KVF_SETTING(type, field, env, def, doc) t.push_back({#field, #env, #type, Show(d.field), doc});
#include "kvfabric/settings.def"
#undef KVF_SETTING
    return t;
  }();
  return table;
}

Status Settings::Set(const std::string& name, const std::string& value) {
#define KVF_SETTING(type, field, env, def, doc)            \
  if (name == #field || name == #env) {                    \
    auto tmp = field;                                      \
    KVF_RETURN_IF_ERROR(Parse(#env, value, &tmp));         \
    field = tmp;                                           \
    return Status::OK();                                   \
  }
#include "kvfabric/settings.def"
#undef KVF_SETTING
  return Status::NotFound("no setting named '" + name + "' (see docs/settings.md)");
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
#define KVF_SETTING(type, field, env, def, doc) \
  if (name == #field || name == #env) return Show(field);
#include "kvfabric/settings.def"
#undef KVF_SETTING
  return "";
}

Status Settings::ApplyEnvironment() {
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
  os << "| Variable | Type | Default | Meaning |\n|---|---|---|---|\n";
  for (const auto& s : Table())
    os << "| `" << s.env << "` | " << s.type << " | `" << s.default_value << "` | " << s.meaning << " |\n";
  return os.str();
}

}  // namespace kvfabric
