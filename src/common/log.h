// Logging: spdlog behind a few macros so the sink and format are set in one place.
// Rule (from UCX): the function that decides something is an error logs it;
// callers pass the Status on without logging it again.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace kvfabric::log {

// Sets the level from a name (trace, debug, info, warn, error, off).
// Returns false for an unknown name and leaves the level unchanged.
bool SetLevel(const std::string& level);
spdlog::logger& Get();

}  // namespace kvfabric::log

#define KVF_LOG_TRACE(...) SPDLOG_LOGGER_TRACE(&::kvfabric::log::Get(), __VA_ARGS__)
#define KVF_LOG_DEBUG(...) ::kvfabric::log::Get().debug(__VA_ARGS__)
#define KVF_LOG_INFO(...) ::kvfabric::log::Get().info(__VA_ARGS__)
#define KVF_LOG_WARN(...) ::kvfabric::log::Get().warn(__VA_ARGS__)
#define KVF_LOG_ERROR(...) ::kvfabric::log::Get().error(__VA_ARGS__)
