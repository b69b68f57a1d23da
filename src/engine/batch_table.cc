#include "engine/batch_table.h"

#include <algorithm>

#include "common/text.h"

namespace kvfabric::engine {

Status BatchTable::Allocate(size_t capacity, BatchId* out) {
  if (capacity == 0 || capacity > kMaxCapacity)
    return Status::InvalidArgument(text::Format(
        "batch capacity {} is outside 1 to {} requests; submit larger jobs in several batches", capacity, kMaxCapacity));
  std::lock_guard<std::mutex> g(mu_);
  ReapZombiesLocked();
  const BatchId id = next_++;
  auto batch = std::make_shared<Batch>(id, capacity);
  if (waits_cancelled_) batch->CancelWaits();
  batches_[id] = std::move(batch);
  *out = id;
  return Status::OK();
}

std::shared_ptr<Batch> BatchTable::Find(BatchId id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : it->second;
}

Status BatchTable::AcquireForSubmit(BatchId id, SubmitGuard* guard) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return Status::NotFound(text::Format("unknown batch {}", id));
  ++submitting_[id];
  guard->table_ = this;
  guard->batch_ = it->second;
  return Status::OK();
}

BatchTable::SubmitGuard::~SubmitGuard() {
  if (table_ == nullptr) return;
  std::lock_guard<std::mutex> g(table_->mu_);
  auto it = table_->submitting_.find(batch_->id());
  if (--it->second == 0) table_->submitting_.erase(it);
}

Status BatchTable::NotSubmittingLocked(BatchId id, const char* then) const {
  if (batches_.find(id) == batches_.end()) return Status::NotFound(text::Format("unknown batch {}", id));
  if (submitting_.count(id) != 0)
    return Status::Busy(text::Format("batch {} is being submitted to on another thread; {}", id, then));
  return Status::OK();
}

Status BatchTable::Free(BatchId id) {
  std::lock_guard<std::mutex> g(mu_);
  KVF_RETURN_IF_ERROR(NotSubmittingLocked(id, "free it after that Submit returns and its requests end"));
  auto it = batches_.find(id);
  if (!it->second->AllDone())
    return Status::Busy(text::Format("batch {} still has requests in flight; wait for them first", id));
  if (it->second->outstanding_slices().load() > 0) zombies_.push_back(it->second);
  batches_.erase(it);
  ReapZombiesLocked();
  return Status::OK();
}

Status BatchTable::Expire(BatchId id) {
  std::shared_ptr<Batch> batch;
  {
    std::lock_guard<std::mutex> g(mu_);
    KVF_RETURN_IF_ERROR(NotSubmittingLocked(id, "expire it after that Submit returns"));
    batch = batches_.at(id);
  }
  // Submits of this batch after the check start their tasks with their own
  // deadline: only the tasks started before it are expired.
  batch->ExpirePending();
  return Status::OK();
}

void BatchTable::CancelWaits() {
  std::lock_guard<std::mutex> g(mu_);
  waits_cancelled_ = true;
  for (auto& [id, batch] : batches_) batch->CancelWaits();
}

void BatchTable::AbandonAll(const Status& error) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [id, batch] : batches_) batch->AbandonPending(error);
  for (auto& batch : zombies_) batch->AbandonPending(error);
}

void BatchTable::Clear() {
  std::lock_guard<std::mutex> g(mu_);
  batches_.clear();
  zombies_.clear();
}

void BatchTable::ReapZombiesLocked() {
  zombies_.erase(std::remove_if(zombies_.begin(), zombies_.end(),
                                [](const std::shared_ptr<Batch>& b) { return b->outstanding_slices().load() == 0; }),
                 zombies_.end());
}

}  // namespace kvfabric::engine
