// Shared-memory regions of libfabric's shm provider: one file in /dev/shm
// per endpoint (16 MiB each with libfabric 1.17), unlinked by the provider
// when the endpoint closes, or on SIGTERM, SIGINT, SIGSEGV and SIGBUS. A
// process killed otherwise (SIGKILL, the OOM killer, a container stopped
// hard) leaves its files in /dev/shm, which is memory: a host that restarts
// store nodes or engines loses 16-48 MiB of RAM per kill, and a pod whose
// /dev/shm holds 64 MiB (Kubernetes' default) cannot open an endpoint after
// a few.
//
// kvfabric names its shm endpoints itself (ShmEndpointName) and holds a
// shared lock on each region's file while the endpoint is open
// (ShmRegionHold). A region of that name whose lock nobody holds belongs to
// no live process, in any pid namespace that shares /dev/shm, and is
// removed (RemoveAbandonedShmRegions). Files of other names are never
// touched, apart from the regions of this very pid named the provider's
// way (RemoveShmRegionsOfPid).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvfabric::fabric {

// Removes the entries of directory `dir` whose names start with "<pid>:".
// Returns how many were removed; a missing or unreadable `dir` removes
// nothing. Only safe for a pid whose owner has not opened shm endpoints
// yet (see RemoveStaleShmRegionsOfThisPid).
size_t RemoveShmRegionsOfPid(const std::string& dir, pid_t pid);

// Before this process opens its first shm endpoint no region with its pid
// can be its own, so those in /dev/shm are removed (once per process; an
// info line counts them). Other pids' regions named the provider's way are
// left alone: nothing tells whether a process in another pid namespace that
// shares /dev/shm still uses them.
void RemoveStaleShmRegionsOfThisPid();

// The prefix of the names kvfabric gives its shm endpoints.
inline constexpr const char* kShmNamePrefix = "kvf-";

// A name for a new shm endpoint of this process: kShmNamePrefix, then the
// pid, a count of the names this process made, and 64 random bits, so
// that neither a later process with the same pid nor one in another pid
// namespace can make it again. It is the region's file name in /dev/shm.
std::string ShmEndpointName();

// A shared lock on the file `dir`/`name`, held from Take until the hold is
// destroyed (or the process ends, however it ends). Take after the
// endpoint is enabled, which creates the file.
class ShmRegionHold {
 public:
  ShmRegionHold() = default;
  ~ShmRegionHold();
  ShmRegionHold(ShmRegionHold&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ShmRegionHold& operator=(ShmRegionHold&& other) noexcept;
  ShmRegionHold(const ShmRegionHold&) = delete;
  ShmRegionHold& operator=(const ShmRegionHold&) = delete;

  // False (with errno's text in *why) when the file cannot be opened or
  // locked; the hold is then empty.
  bool Take(const std::string& dir, const std::string& name, std::string* why);
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct ShmSweep {
  size_t removed = 0;
  uint64_t bytes = 0;  // their sizes: the memory given back
};

// Removes the regions of `dir` named kShmNamePrefix... that nobody holds:
// no process has a ShmRegionHold on them (an exclusive lock is granted at
// once) and they changed status at least `min_age` ago (a region that a
// process has just created and not yet locked is younger than that), and
// the pid in their name is not a live process of this pid namespace (a
// guard for a process whose hold could not be taken). Never follows a
// symbolic link; a missing `dir` removes nothing.
ShmSweep RemoveAbandonedShmRegions(const std::string& dir, std::chrono::seconds min_age);

// How old an unheld region must be before it is removed: the time between
// the provider creating a region (fi_enable) and its process locking it is
// microseconds, so this is only a margin.
inline constexpr std::chrono::seconds kAbandonedShmRegionAge{5};

// RemoveAbandonedShmRegions over /dev/shm, once per process, before its
// first shm endpoint; an info line counts what it removed.
void RemoveAbandonedShmRegionsOnce();

}  // namespace kvfabric::fabric
