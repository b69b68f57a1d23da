#include "memory/staging.h"

#include <cstdlib>

#include "common/log.h"
#include "common/text.h"
#include "memory/cuda.h"

namespace kvfabric::memory {

Status StagingPool::Create(const std::vector<fabric::Rail*>& rails, size_t bytes, size_t slot_bytes,
                           std::unique_ptr<StagingPool>* out) {
  if (slot_bytes == 0 || bytes / slot_bytes < 2)
    return Status::InvalidArgument(
        text::Format("staging pool of {} bytes in slots of {}: needs at least 2 slots (KVF_STAGING_BYTES)", bytes,
                     slot_bytes));
  std::unique_ptr<StagingPool> p(new StagingPool());
  const size_t n = bytes / slot_bytes;
  const size_t total = n * slot_bytes;
  p->slot_bytes_ = slot_bytes;
  void* mem = nullptr;
  if (posix_memalign(&mem, 1 << 21, total) != 0)
    return Status::Unavailable(text::Format("staging pool: cannot allocate {} bytes", total));
  p->base_ = static_cast<uint8_t*>(mem);
  Status pin = cuda::PinHost(mem, total);
  p->pinned_ = pin.ok();
  if (!pin.ok()) KVF_LOG_WARN("staging pool not pinned ({}): device copies will be slower", pin.message());
  p->regions_.resize(rails.size());
  for (fabric::Rail* r : rails)
    KVF_RETURN_IF_ERROR(r->RegisterMemory(mem, total, &p->regions_[r->index()], fabric::PeerAccess::kNone)
                            .Annotate("staging pool"));
  p->free_.reserve(n);
  for (size_t i = n; i-- > 0;) p->free_.push_back(static_cast<uint32_t>(i));
  KVF_LOG_INFO("GPU staging pool: {} slots of {} bytes, pinned host memory registered on {} rail(s)", n, slot_bytes,
               rails.size());
  *out = std::move(p);
  return Status::OK();
}

StagingPool::~StagingPool() {
  regions_.clear();  // MRs close before the memory goes
  if (pinned_) cuda::UnpinHost(base_);
  std::free(base_);
}

uint32_t StagingPool::Acquire() {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [this] { return !free_.empty(); });
  const uint32_t s = free_.back();
  free_.pop_back();
  return s;
}

void StagingPool::Release(uint32_t slot) {
  {
    std::lock_guard<std::mutex> g(mu_);
    free_.push_back(slot);
  }
  cv_.notify_one();
}

}  // namespace kvfabric::memory
