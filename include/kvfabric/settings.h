// The engine's tunables, generated from settings.def (the one declaration).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/status.h"

namespace kvfabric {

struct SettingInfo {
  std::string field;    // e.g. "tx_depth"
  std::string env;      // e.g. "KVF_TX_DEPTH"
  std::string type;     // "Int", "Bool" or "String"
  std::string default_value;
  std::string meaning;
};

struct Settings {
#define KVF_TYPE_Int int64_t
#define KVF_TYPE_Bool bool
#define KVF_TYPE_String std::string
#define KVF_SETTING(type, field, env, def, doc) KVF_TYPE_##type field = def;
#include "kvfabric/settings.def"
#undef KVF_SETTING

  // Overlays every KVF_* variable present in the environment. An unparsable
  // value is an InvalidArgument naming the variable; nothing is changed then.
  Status ApplyEnvironment();
  // Sets one setting by field name or variable name ("tx_depth" or "KVF_TX_DEPTH").
  Status Set(const std::string& name, const std::string& value);
  // The same from one "NAME=value" word (--set flags, the C API's list);
  // InvalidArgument without a '='.
  Status Assign(const std::string& name_value);
  std::string Get(const std::string& name) const;

  static const std::vector<SettingInfo>& Table();
  // The documentation table (Markdown), as written to docs/settings.md.
  static std::string MarkdownTable();
};

}  // namespace kvfabric
