#include "store/client/scratch_slots.h"

#include <new>

#include "common/log.h"

namespace kvfabric::store {

ScratchSlots::ScratchSlots(Engine* engine, size_t slot_bytes, size_t count)
    : engine_(engine), slot_bytes_(slot_bytes), count_(count) {}

ScratchSlots::~ScratchSlots() {
  if (arena_) (void)engine_->UnregisterMemory(arena_.get());
}

uint8_t* ScratchSlots::Take() {
  std::lock_guard<std::mutex> g(mu_);
  if (!arena_ && !failed_) {
    std::unique_ptr<uint8_t[]> arena(new (std::nothrow) uint8_t[slot_bytes_ * count_]);
    Status s = arena ? engine_->RegisterMemory(arena.get(), slot_bytes_ * count_, "cpu")
                     : Status::Unavailable("out of memory");
    if (!s.ok()) {
      failed_ = true;
      KVF_LOG_WARN("store: no scratch memory for reading region versions ({}): every GET asks its homes instead",
                   s.ToString());
      return nullptr;
    }
    arena_ = std::move(arena);
    for (size_t i = count_; i > 0; --i) free_.push_back(arena_.get() + (i - 1) * slot_bytes_);
  }
  if (free_.empty() && !later_.empty()) {
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(later_, [&](const auto& w) {
      if (w.first > now) return false;
      free_.push_back(w.second);
      return true;
    });
  }
  if (free_.empty()) return nullptr;
  uint8_t* slot = free_.back();
  free_.pop_back();
  return slot;
}

void ScratchSlots::GiveLater(uint8_t* slot, std::chrono::steady_clock::time_point when) {
  if (slot == nullptr) return;
  std::lock_guard<std::mutex> g(mu_);
  later_.push_back({when, slot});
}

void ScratchSlots::Leak() {
  std::lock_guard<std::mutex> g(mu_);
  (void)arena_.release();
}

void ScratchSlots::Give(uint8_t* slot) {
  if (slot == nullptr) return;
  std::lock_guard<std::mutex> g(mu_);
  free_.push_back(slot);
}

}  // namespace kvfabric::store
