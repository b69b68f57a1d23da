// Whether a node's pool fits in the memory of its host, checked before the
// pool is faulted in: a pool larger than the memory left would have the
// kernel kill the node without a word, at start or at its first PUTs.
#pragma once

#include <cstdint>
#include <string>

#include "kvfabric/status.h"

namespace kvfabric::store {

// The memory a new pool may take now: the kernel's MemAvailable
// (/proc/meminfo) or, in a memory cgroup with a limit (a container), what is
// left under it (memory.max less memory.current, cgroup v2), whichever is
// less. 0 when neither can be read (then nothing is checked).
uint64_t AvailableMemory();

// OK when a pool of `pool_bytes` fits in `available` bytes (0: unknown,
// always OK); else InvalidArgument saying both and what to do.
Status CheckPoolFits(uint64_t pool_bytes, uint64_t available);

}  // namespace kvfabric::store
