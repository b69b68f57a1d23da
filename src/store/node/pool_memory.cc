#include "store/node/pool_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/text.h"

namespace kvfabric::store {
namespace {

// The first number of the file at `path`; false when it has none ("max").
bool ReadNumber(const std::string& path, uint64_t* out) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *out);
}

uint64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name;
    uint64_t kib = 0;
    if (words >> name >> kib && name == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// What is left under this process's cgroup's memory limit; 0 when it has
// none, or it cannot be read.
uint64_t CgroupLeft() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return 0;
  for (const std::string& dir : {"/sys/fs/cgroup" + path, std::string("/sys/fs/cgroup")}) {
    uint64_t max = 0, current = 0;
    if (!ReadNumber(dir + "/memory.max", &max)) continue;
    if (!ReadNumber(dir + "/memory.current", &current)) return 0;
    return max > current ? max - current : 1;
  }
  return 0;
}

}  // namespace

uint64_t AvailableMemory() {
  const uint64_t host = MemAvailable(), cgroup = CgroupLeft();
  if (host == 0 || cgroup == 0) return std::max(host, cgroup);
  return std::min(host, cgroup);
}

Status CheckPoolFits(uint64_t pool_bytes, uint64_t available) {
  if (available == 0 || pool_bytes <= available) return Status::OK();
  return Status::InvalidArgument(text::Format(
      "store: a pool of {} bytes does not fit in the {} bytes of memory this host (or its container's memory "
      "limit) has available; lower KVF_STORE_POOL_BYTES (--pool) or free memory",
      pool_bytes, available));
}

}  // namespace kvfabric::store
