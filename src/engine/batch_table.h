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
  // A new batch of `capacity` requests (1 to 16M).
  Status Allocate(size_t capacity, BatchId* out);
  // The batch, or null when `id` is unknown or freed.
  std::shared_ptr<Batch> Find(BatchId id);
  // Busy while any of its tasks is pending; NotFound for an unknown id.
  Status Free(BatchId id);
  // Drops every batch (engine shutdown, after progress has stopped).
  void Clear();

 private:
  void ReapZombiesLocked();

  std::mutex mu_;
  std::unordered_map<BatchId, std::shared_ptr<Batch>> batches_;
  std::vector<std::shared_ptr<Batch>> zombies_;  // freed, slices still out
  BatchId next_ = 1;
};

}  // namespace kvfabric::engine
