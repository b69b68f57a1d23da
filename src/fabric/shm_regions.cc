#include "fabric/shm_regions.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <random>

#include "common/log.h"
#include "common/text.h"
#include "fabric/peer_table.h"

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

std::string ShmEndpointName() {
  static std::atomic<uint64_t> made{0};
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  // The nonce is drawn once per process; the count tells its names apart.
  return text::Format("{}{}-{}-{:016x}", kShmNamePrefix, getpid(), made.fetch_add(1), nonce);
}

ShmRegionHold::~ShmRegionHold() {
  if (fd_ >= 0) close(fd_);
}

ShmRegionHold& ShmRegionHold::operator=(ShmRegionHold&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

bool ShmRegionHold::Take(const std::string& dir, const std::string& name, std::string* why) {
  const std::string path = dir + "/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = text::Format("opening {}: {}", path, std::strerror(errno));
    return false;
  }
  if (flock(fd, LOCK_SH) != 0) {
    *why = text::Format("locking {}: {}", path, std::strerror(errno));
    close(fd);
    return false;
  }
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  return true;
}

namespace {

// The pid in a name made by ShmEndpointName, or 0.
pid_t PidOfName(const std::string& name) {
  const size_t start = std::strlen(kShmNamePrefix);
  const size_t end = name.find('-', start);
  if (end == std::string::npos || end == start) return 0;
  pid_t pid = 0;
  for (size_t i = start; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return 0;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

}  // namespace

ShmSweep RemoveAbandonedShmRegions(const std::string& dir, std::chrono::seconds min_age) {
  ShmSweep sweep;
  std::error_code ec;
  const time_t now = time(nullptr);
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kShmNamePrefix, 0) != 0) continue;
    const pid_t pid = PidOfName(name);
    if (pid == 0 || pid == getpid() || ProcessExists(pid)) continue;
    const int fd = open(e.path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;  // gone meanwhile, a link, or not ours to read
    struct stat st {};
    // The exclusive lock, kept while the file is unlinked, shuts out a
    // process that would take its hold now (it cannot: the name is unique
    // to a process that has exited, but the rule costs nothing).
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_ctime >= min_age.count() &&
        flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(e.path().c_str()) == 0) {
      ++sweep.removed;
      sweep.bytes += static_cast<uint64_t>(st.st_size);
    }
    close(fd);
  }
  return sweep;
}

void RemoveAbandonedShmRegionsOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const ShmSweep sweep = RemoveAbandonedShmRegions("/dev/shm", kAbandonedShmRegionAge);
    if (sweep.removed > 0)
      KVF_LOG_INFO("removed {} shm region(s) of exited kvfabric processes from /dev/shm ({} MiB given back)",
                   sweep.removed, sweep.bytes >> 20);
  });
}

}  // namespace kvfabric::fabric
