// PoolMaps: this process's mappings of the shared pools (SharedPool) of the
// store's nodes on its host, found by the engine segment their pages are
// otherwise READ and WRITten through. A transfer between host memory here
// and such a pool is a copy this process makes itself (BatchRunner), not a
// trip through the fabric's same-host provider.
//
// A mapped node's keys' table (SharedKeys) answers `exists` here.
//
// A node is mapped when its hello says it shares its pool, from this host
// key (SharedPoolHostKey: same kernel, pid and network namespaces), and
// this process may open its memfd through
// /proc/<pid>/fd (the same permission shm's CMA needs); the file must be
// the one named (inode and length) and hold the node's epoch after its
// region versions. A node that refused once is not tried again in the same
// epoch. A mapping is used only while its node serves (its process lives,
// by a pidfd, and the file holds its epoch): a dead or stopped node's
// pages are read through the fabric, which fails them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvfabric/engine.h"
#include "store/wire/messages.h"
#include "store/wire/shared_keys.h"

namespace kvfabric::store {

class PoolMap {
 public:
  ~PoolMap();  // unmaps
  PoolMap(const PoolMap&) = delete;
  PoolMap& operator=(const PoolMap&) = delete;

  // Where the bytes [addr, addr + length) of the node's segment are in this
  // process: inside the pool or inside the region versions' page, or
  // nullptr when not wholly inside one of them.
  uint8_t* Local(uint64_t addr, uint64_t length) const;
  // Whether the node still serves this pool: its process runs and the
  // file still holds its epoch (a node that stopped in a process that
  // goes on clears it: NodeService::Stop).
  bool Serving() const;
  uint64_t epoch() const { return epoch_; }
  // The node's table of the keys it holds, or nullptr when its file has
  // none. Its answers hold while Serving().
  const SharedKeys* keys() const { return keys_.valid() ? &keys_ : nullptr; }

 private:
  friend class PoolMaps;
  PoolMap() = default;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  int pidfd_ = -1;
  uint64_t epoch_ = 0;
  uint64_t pool_addr_ = 0, pool_bytes_ = 0, versions_addr_ = 0;
  SharedKeys keys_;
};

class PoolMaps {
 public:
  // `enabled` false: Attach maps nothing (KVF_STORE_SHARE_POOLS off).
  explicit PoolMaps(bool enabled) : enabled_(enabled) {}

  // Maps the pool of the node `name` (its hello `info`, its segment opened
  // as `segment` here) if it can (see above); cheap when it is mapped.
  void Attach(const std::string& name, const NodeInfo& info, SegmentHandle segment);
  // The mapping reached through `segment`, or nullptr when there is none or
  // its node no longer serves it (then forgotten, and Gone from then on).
  std::shared_ptr<const PoolMap> Find(SegmentHandle segment);
  // Whether Find saw the node that served `segment` in `epoch` stop serving
  // its pool (its process ended, or it stopped): its pages are gone, and a
  // READ through the fabric would only wait (a dead shm peer never answers).
  bool Gone(SegmentHandle segment, uint64_t epoch) const;
  // Forgets the mappings of segments not in `live` (their nodes left).
  void Keep(const std::vector<SegmentHandle>& live);
  size_t mapped() const;

 private:
  const bool enabled_;
  mutable std::mutex mu_;
  std::unordered_map<SegmentHandle, std::shared_ptr<const PoolMap>> maps_;
  std::set<std::pair<std::string, uint64_t>> refused_;  // (name, epoch)
  std::set<std::pair<SegmentHandle, uint64_t>> gone_;   // (segment, epoch) no longer served
};

}  // namespace kvfabric::store
