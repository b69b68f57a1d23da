#include "common/log.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "kvfabric/settings.h"

namespace kvfabric::log {

spdlog::logger& Get() {
  // Logs go to stderr so tools can keep stdout for results (JSON, figures).
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("kvfabric");
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [kvfabric] [%^%l%$] [pid %P] %v");
    // Until an engine sets it from its settings, KVF_LOG_LEVEL as the
    // environment gives it, so lines logged before then obey it too.
    // (Set, not ApplyEnvironment: that one logs, through this logger.)
    Settings env;
    const char* level = std::getenv("KVF_LOG_LEVEL");
    const bool given = level != nullptr && env.Set("KVF_LOG_LEVEL", level).ok();
    l->set_level(given ? spdlog::level::from_str(env.log_level) : spdlog::level::info);
    return l;
  }();
  return *logger;
}

bool SetLevel(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  // from_str maps unknown names to off; accept "off" only when asked for.
  if (lvl == spdlog::level::off && level != "off") return false;
  Get().set_level(lvl);
  return true;
}

}  // namespace kvfabric::log
