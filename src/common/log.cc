#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace kvfabric::log {

spdlog::logger& Get() {
  // Logs go to stderr so tools can keep stdout for results (JSON, figures).
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("kvfabric");
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [kvfabric] [%^%l%$] [pid %P] %v");
    l->set_level(spdlog::level::info);
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
