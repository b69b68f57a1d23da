// StagingPool: pinned host memory through which GPU memory travels on rails
// that cannot register it (providers without FI_HMEM, such as tcp). It is
// cut into slots of slot_bytes; each slot carries one slice: a WRITE copies
// device -> slot and sends from the slot, a READ lands in the slot and is
// copied slot -> device before its request completes. Slots are registered
// on every rail for local access only: no peer can reach them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "fabric/rail.h"
#include "kvfabric/status.h"

namespace kvfabric::memory {

class StagingPool {
 public:
  // `bytes` in slots of `slot_bytes` (at least 2 slots), pinned with the
  // CUDA driver and registered on `rails`.
  static Status Create(const std::vector<fabric::Rail*>& rails, size_t bytes, size_t slot_bytes,
                       std::unique_ptr<StagingPool>* out);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }
  // Blocks until a slot is free. The caller must hand every slot back.
  uint32_t Acquire();
  void Release(uint32_t slot);
  void* Address(uint32_t slot) const { return base_ + static_cast<size_t>(slot) * slot_bytes_; }
  // fi_mr_desc of the pool on `rail`.
  void* Desc(size_t rail) const { return regions_[rail]->desc(); }

 private:
  StagingPool() = default;
  uint8_t* base_ = nullptr;
  size_t slot_bytes_ = 0;
  bool pinned_ = false;
  std::vector<std::unique_ptr<fabric::MemoryRegion>> regions_;  // by rail index
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint32_t> free_;
};

}  // namespace kvfabric::memory
