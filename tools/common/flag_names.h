// One vocabulary for the tools' flags: the names of kvfabric.Engine's
// arguments (local_server_name, metadata, nic_filter), the peer a bench
// opens (segment_id) and a setting (--set NAME=VALUE). Old names still work:
// each is rewritten to its new name before parsing, with a warning.
// python/kvfabric/cli.py keeps the same table for the kvfabric command
// (python/tests/test_cli.py checks that the two agree).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace kvfabric::tools {

struct RenamedFlag {
  std::string_view old_name;
  std::string_view new_name;
};

inline constexpr RenamedFlag kRenamedFlags[] = {
    {"--device_name", "--nic_filter"},
    {"--nics", "--nic_filter"},
    {"--engine_name", "--local_server_name"},
    {"--engine_address", "--local_server_name"},
    {"--metadata_server", "--metadata"},
    {"--target", "--segment_id"},
    {"--setting", "--set"},
};

// Rewrites each old flag name in `args` ("--old" or "--old=VALUE") to its
// new name, in place, leaving every other word (values included) as it is.
// Returns one warning per old name used, in the order met.
inline std::vector<std::string> RenameFlags(std::vector<std::string>& args) {
  std::vector<std::string> warnings;
  for (std::string& arg : args) {
    for (const RenamedFlag& r : kRenamedFlags) {
      const std::string_view a = arg;
      if (!a.starts_with(r.old_name)) continue;
      const std::string_view rest = a.substr(r.old_name.size());
      if (!rest.empty() && rest.front() != '=') continue;
      warnings.push_back(std::string(r.old_name) + " is now " + std::string(r.new_name) +
                         " (the old name still works)");
      arg = std::string(r.new_name) + std::string(rest);
      break;
    }
  }
  return warnings;
}

// RenameFlags over a tool's argv[1..argc), each warning printed to stderr
// as "TOOL: WARNING". Rewritten words live until the process exits.
inline void UseCurrentFlagNames(int argc, char** argv, std::string_view tool) {
  static std::vector<std::string> words;
  words.assign(argv + 1, argv + argc);
  for (const std::string& w : RenameFlags(words))
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(tool.size()), tool.data(), w.c_str());
  for (int i = 1; i < argc; ++i) argv[i] = words[i - 1].data();
}

}  // namespace kvfabric::tools
