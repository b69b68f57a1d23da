// BatchTable: the engine's batches by id. A batch freed while slices of it
// are still held by rails (their completions will touch its tasks) waits as
// a zombie until the last one returns.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"

namespace kvfabric::engine {

class BatchTable {
 public:
  // Most requests one batch holds (its tasks are allocated with it).
  static constexpr size_t kMaxCapacity = size_t{1} << 20;

  // A batch in use by a Submit: Free refuses it (Busy) until the guard goes.
  class SubmitGuard {
   public:
    SubmitGuard() = default;
    SubmitGuard(const SubmitGuard&) = delete;
    SubmitGuard& operator=(const SubmitGuard&) = delete;
    ~SubmitGuard();
    Batch* get() const { return batch_.get(); }
    Batch* operator->() const { return batch_.get(); }
    explicit operator bool() const { return batch_ != nullptr; }

   private:
    friend class BatchTable;
    BatchTable* table_ = nullptr;
    std::shared_ptr<Batch> batch_;
  };

  // A new batch of `capacity` requests (1 to kMaxCapacity).
  Status Allocate(size_t capacity, BatchId* out);
  // The batch, or null when `id` is unknown or freed.
  std::shared_ptr<Batch> Find(BatchId id);
  // The batch for a Submit: `guard` holds it until the Submit ends, and
  // Free refuses it meanwhile. NotFound for an unknown or freed id.
  Status AcquireForSubmit(BatchId id, SubmitGuard* guard);
  // Busy while any of its tasks is pending or a Submit is using it;
  // NotFound for an unknown id.
  Status Free(BatchId id);
  // Batch::ExpirePending; Busy while a Submit is using the batch (its
  // tasks are still being started), NotFound for an unknown id.
  Status Expire(BatchId id);
  // Engine shutdown, first step: every Wait on a batch returns false now,
  // also on batches allocated later.
  void CancelWaits();
  // Engine shutdown, once no call is inside: every pending task of every
  // batch (freed ones waiting for their slices too) ends with `error`.
  void AbandonAll(const Status& error);
  // Drops every batch (engine shutdown, after progress has stopped).
  void Clear();

 private:
  void ReapZombiesLocked();
  // NotFound for an unknown `id`, Busy (ending with `then`, what to do)
  // while a Submit uses it, else OK. Caller holds mu_.
  Status NotSubmittingLocked(BatchId id, const char* then) const;

  std::mutex mu_;
  std::unordered_map<BatchId, std::shared_ptr<Batch>> batches_;
  std::unordered_map<BatchId, int> submitting_;  // Submits under way, by batch
  std::vector<std::shared_ptr<Batch>> zombies_;  // freed, slices still out
  BatchId next_ = 1;
  bool waits_cancelled_ = false;
};

}  // namespace kvfabric::engine
