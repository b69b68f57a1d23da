// Shared-memory regions libfabric's shm provider leaves behind. It names a
// region /dev/shm/<pid>:<domain>:<endpoint>, and a killed process leaves it
// there; a later process that gets the same pid then fails fi_enable with
// EBUSY (libfabric 1.17).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace kvfabric::fabric {

// Removes the entries of directory `dir` whose names start with "<pid>:".
// Returns how many were removed; a missing or unreadable `dir` removes
// nothing. Only safe for a pid whose owner has not opened shm endpoints
// yet (see RemoveStaleShmRegionsOfThisPid).
size_t RemoveShmRegionsOfPid(const std::string& dir, pid_t pid);

// Before this process opens its first shm endpoint no region with its pid
// can be its own, so those in /dev/shm are removed (once per process; an
// info line counts them). Other pids' regions are left alone: a process in
// another pid namespace may share /dev/shm.
void RemoveStaleShmRegionsOfThisPid();

}  // namespace kvfabric::fabric
