// FabricMovement: groups of requests moved by the engine as one batch, in
// one call, so the caller wakes once when they are done; a group whose
// memory the engine refuses (unregistered, out of range) fails alone.
// BatchKeeper frees the batches, keeping those whose transfers outlive
// their deadline until they end.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kvfabric/engine.h"
#include "store/mover/movement.h"

namespace kvfabric::store {

class BatchKeeper {
 public:
  explicit BatchKeeper(Engine* engine) : engine_(engine) {}
  ~BatchKeeper() { FreeEnded(); }
  Engine* engine() const { return engine_; }
  // Frees `batch`, or keeps it when a transfer the provider still holds
  // outlives it (FreeEnded frees it later).
  void FreeOrKeep(BatchId batch);
  // Frees the kept batches that have ended.
  void FreeEnded();
  // Waits until every kept batch has ended (their transfers end by
  // KVF_TRANSFER_TIMEOUT_MS at the latest), or `deadline`: true when none
  // is left, so the memory they target may go.
  bool Drain(net::Deadline deadline);

 private:
  Engine* const engine_;
  std::mutex mu_;
  std::vector<BatchId> unfinished_;
};

class FabricMovement : public Movement {
 public:
  // Submits the requests of every group g of `groups` (requests
  // [groups[g].first, groups[g].second)) that `skip` does not mark (empty:
  // none) as one engine batch: in one call, or one call per group when the
  // engine refuses the whole (a bad group never stops the others). Sets
  // (*outcomes)[g] to the engine's refusal of group g. Null when there was
  // nothing to submit, or no batch (every group's outcome then says why).
  static std::unique_ptr<FabricMovement> Start(BatchKeeper* keeper, const std::vector<TransferRequest>& requests,
                                               const std::vector<std::pair<size_t, size_t>>& groups,
                                               const std::vector<bool>& skip, std::vector<Status>* outcomes);
  ~FabricMovement() override;  // a batch not finished is freed or kept

  bool RequestEnded(size_t g, size_t t, Status* failure) const override;
  bool GroupEnded(size_t g, Status* failure) const override;
  bool WaitUntil(net::Deadline until) override;
  void Finish(net::Deadline deadline, std::vector<Status>* outcomes) override;
  bool LandsMeanwhile(size_t) const override { return false; }

 private:
  static constexpr size_t kNotSubmitted = static_cast<size_t>(-1);
  FabricMovement(BatchKeeper* keeper, BatchId batch, size_t groups);
  // Submits `batch_requests` (group g's at sent[g]), or each group alone
  // when the whole is refused.
  void Submit(const std::vector<TransferRequest>& batch_requests, const std::vector<std::pair<size_t, size_t>>& sent,
              std::vector<Status>* outcomes);

  BatchKeeper* const keeper_;
  Engine* const engine_;
  const BatchId batch_;
  bool allocated_ = true;
  std::vector<size_t> first_task_;  // per group: its first task in the batch, or kNotSubmitted
  std::vector<size_t> tasks_;       // per group: how many requests it has
};

}  // namespace kvfabric::store
