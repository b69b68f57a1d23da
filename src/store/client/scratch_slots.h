// ScratchSlots: small pieces of host memory registered with the engine, for
// the few bytes a call READs besides its pages (a node's region versions).
// One arena, registered once at the first use, cut into slots of one size
// that calls take and give back; when every slot is taken, Take fails and
// the call does without (a lookup instead).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kvfabric/engine.h"

namespace kvfabric::store {

class ScratchSlots {
 public:
  // `count` slots of `slot_bytes` (a multiple of 64) over `engine`.
  ScratchSlots(Engine* engine, size_t slot_bytes, size_t count);
  ~ScratchSlots();  // unregisters the arena (every slot must be back)
  ScratchSlots(const ScratchSlots&) = delete;
  ScratchSlots& operator=(const ScratchSlots&) = delete;

  // A free slot, or null when all are taken or the arena cannot be
  // registered (the first call registers it).
  uint8_t* Take();
  void Give(uint8_t* slot);
  // Gives `slot` back at `when`: a READ into it that did not end may still
  // write it until then (the engine ends every transfer by then).
  void GiveLater(uint8_t* slot, std::chrono::steady_clock::time_point when);
  // The arena stays allocated and registered for good (a READ may still
  // write it at destruction).
  void Leak();
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  Engine* const engine_;
  const size_t slot_bytes_;
  const size_t count_;
  std::mutex mu_;
  std::unique_ptr<uint8_t[]> arena_;  // null until registered
  bool failed_ = false;               // registering failed: no slots, ever
  std::vector<uint8_t*> free_;
  std::vector<std::pair<std::chrono::steady_clock::time_point, uint8_t*>> later_;
};

}  // namespace kvfabric::store
