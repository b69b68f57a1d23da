#include "store/mover/pool_maps.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/text.h"
#include "store/wire/region_versions.h"
#include "store/wire/shared_keys.h"
#include "store/wire/shared_pool.h"

namespace kvfabric::store {

PoolMap::~PoolMap() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (pidfd_ >= 0) close(pidfd_);
}

uint8_t* PoolMap::Local(uint64_t addr, uint64_t length) const {
  if (addr >= pool_addr_ && addr - pool_addr_ <= pool_bytes_ && length <= pool_bytes_ - (addr - pool_addr_))
    return base_ + (addr - pool_addr_);
  const uint64_t at = SharedPool::VersionsOffset(pool_bytes_), versions_bytes = SharedPool::kVersionsBytes;
  if (addr >= versions_addr_ && addr - versions_addr_ <= versions_bytes &&
      length <= versions_bytes - (addr - versions_addr_))
    return base_ + at + (addr - versions_addr_);
  return nullptr;
}

bool PoolMap::Serving() const {
  auto* epoch = reinterpret_cast<uint64_t*>(base_ + SharedPool::VersionsOffset(pool_bytes_)) + RegionVersions::kRegions;
  if (std::atomic_ref<uint64_t>(*epoch).load(std::memory_order_acquire) != epoch_) return false;
  pollfd p{pidfd_, POLLIN, 0};
  return poll(&p, 1, 0) == 0;  // a pidfd turns readable when its process ends
}

void PoolMaps::Attach(const std::string& name, const NodeInfo& info, SegmentHandle segment) {
  const PoolShare& share = info.share;
  if (!enabled_ || share.host.empty() || share.host != SharedPoolHostKey()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = maps_.find(segment); it != maps_.end() && it->second->epoch() == info.epoch) return;
    if (refused_.count({name, info.epoch}) != 0) return;
  }
  auto refuse = [&](const std::string& why) {
    KVF_LOG_INFO("store: the pool of member {} is on this host but is read through the fabric: {}", name, why);
    std::lock_guard<std::mutex> g(mu_);
    refused_.insert({name, info.epoch});
  };
  const uint64_t keys_at = SharedPool::KeysOffset(info.pool_bytes);
  if (keys_at < info.pool_bytes || share.bytes < keys_at)
    return refuse("its hello describes a file too short for its pool and versions");
  std::unique_ptr<PoolMap> map(new PoolMap());
  map->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(share.pid), 0));
  if (map->pidfd_ < 0) return refuse(std::string("pidfd_open: ") + std::strerror(errno));
  const std::string path = "/proc/" + std::to_string(share.pid) + "/fd/" + std::to_string(share.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return refuse("opening " + path + ": " + std::strerror(errno) +
                  " (another user's process, or ptrace restricted: /proc/sys/kernel/yama/ptrace_scope)");
  struct stat st{};
  const bool same = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_ino) == share.inode &&
                    static_cast<uint64_t>(st.st_size) == share.bytes;
  void* base = same ? mmap(nullptr, share.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int why = errno;
  close(fd);
  if (!same) return refuse(path + " is not the file its hello names (its process restarted?)");
  if (base == MAP_FAILED) return refuse(std::string("mmap: ") + std::strerror(why));
  // The region versions and the table of keys are the node's alone to
  // write: read-only here, so a stray write of this process can neither
  // hang the node (a table with no empty entry) nor make an older page
  // pass for the current one (versions written back).
  const uint64_t node_only = SharedPool::VersionsOffset(info.pool_bytes);
  if (mprotect(static_cast<uint8_t*>(base) + node_only, share.bytes - node_only, PROT_READ) != 0) {
    const std::string error = std::strerror(errno);
    munmap(base, share.bytes);
    return refuse("mprotect of its versions and keys: " + error);
  }
  map->base_ = static_cast<uint8_t*>(base);
  map->bytes_ = share.bytes;
  map->epoch_ = info.epoch;
  map->pool_addr_ = info.pool_addr;
  map->pool_bytes_ = info.pool_bytes;
  map->versions_addr_ = info.versions_addr;
  if (!map->Serving()) return refuse("the file holds another epoch, or its process has ended");
  // Its keys' table, when the file has one (else `exists` asks the node).
  if (share.bytes > keys_at) (void)SharedKeys::Attach(map->base_ + keys_at, share.bytes - keys_at, &map->keys_);
  KVF_LOG_INFO("store: mapped the pool of member {} ({}, same host): its pages are copied, not sent", name,
               text::Bytes(info.pool_bytes));
  std::shared_ptr<const PoolMap> mapped(std::move(map));
  {
    std::lock_guard<std::mutex> g(mu_);
    maps_[segment] = mapped;
  }
  // Page tables for the whole file, on a thread of its own (the node
  // faulted the pages in already): a PUT's copy into slots this mapping
  // never touched took a fault per 4 KiB page, and HiCache's PUTs of fresh
  // 2 MiB pages ran at 1.4 GB/s instead of 4.5-4.8 with the tables made.
  // Made here, they held up the call that first met the node: 370 ms per
  // GiB of pool in 4 KiB pages on this host. The thread holds the mapping,
  // and stops early once no one else does (the node left); it logs nothing
  // (it may outlive the logger at exit). The cost stays: 2 MiB of page
  // tables per GiB of pool in 4 KiB pages (4 KiB per GiB in huge pages).
#ifdef MADV_POPULATE_WRITE
  std::thread([m = mapped] {
    constexpr size_t kChunk = 64 << 20;
    const size_t writable = SharedPool::VersionsOffset(m->pool_bytes_);  // the rest is read-only
    for (size_t at = 0; at < writable && m.use_count() > 1; at += kChunk)
      (void)madvise(m->base_ + at, std::min(kChunk, writable - at), MADV_POPULATE_WRITE);
  }).detach();
#endif
}

std::shared_ptr<const PoolMap> PoolMaps::Find(SegmentHandle segment) {
  std::shared_ptr<const PoolMap> map;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (maps_.empty()) return nullptr;
    auto it = maps_.find(segment);
    if (it == maps_.end()) return nullptr;
    map = it->second;
  }
  if (map->Serving()) return map;
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = maps_.find(segment); it != maps_.end() && it->second == map) maps_.erase(it);
  gone_.insert({segment, map->epoch()});
  return nullptr;
}

bool PoolMaps::Gone(SegmentHandle segment, uint64_t epoch) const {
  std::lock_guard<std::mutex> g(mu_);
  return !gone_.empty() && gone_.count({segment, epoch}) != 0;
}

void PoolMaps::Keep(const std::vector<SegmentHandle>& live) {
  std::lock_guard<std::mutex> g(mu_);
  std::erase_if(maps_, [&](const auto& m) { return std::find(live.begin(), live.end(), m.first) == live.end(); });
  std::erase_if(gone_, [&](const auto& m) { return std::find(live.begin(), live.end(), m.first) == live.end(); });
}

size_t PoolMaps::mapped() const {
  std::lock_guard<std::mutex> g(mu_);
  return maps_.size();
}

}  // namespace kvfabric::store
