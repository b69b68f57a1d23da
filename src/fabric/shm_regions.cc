#include "fabric/shm_regions.h"

#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "common/log.h"

namespace kvfabric::fabric {

size_t RemoveShmRegionsOfPid(const std::string& dir, pid_t pid) {
  const std::string prefix = std::to_string(pid) + ":";
  std::error_code ec;
  size_t removed = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0 && std::filesystem::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

void RemoveStaleShmRegionsOfThisPid() {
  static std::once_flag once;
  std::call_once(once, [] {
    const size_t removed = RemoveShmRegionsOfPid("/dev/shm", getpid());
    if (removed > 0)
      KVF_LOG_INFO("removed {} stale shm region(s) left in /dev/shm by an exited process with pid {}", removed,
                   getpid());
  });
}

}  // namespace kvfabric::fabric
