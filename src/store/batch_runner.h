// BatchRunner: runs the transfers of many keys as one engine batch and tells
// each key's outcome apart, for the store's GETs (READs of pages into the
// caller's buffers) and PUTs (READs of the writer's buffers into the pool).
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "kvfabric/engine.h"
#include "net/socket.h"

namespace kvfabric::store {

class BatchRunner {
 public:
  explicit BatchRunner(Engine* engine) : engine_(engine) {}
  ~BatchRunner();  // frees the batches it still holds that have ended

  // Runs `requests`, of which group g is [groups[g].first, groups[g].second),
  // and sets (*outcomes)[g]: OK when every request of the group completed,
  // else the first failure among them: the engine's refusal of the group
  // (unregistered or out-of-range memory: a bad group never stops the
  // others), the failure of a transfer, or Timeout for one not done by
  // `deadline`. An empty group is OK. A transfer that outlives the deadline
  // keeps its batch until it ends; later calls free it.
  void Run(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
           net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every batch that outlived its deadline has ended (their
  // transfers end by KVF_TRANSFER_TIMEOUT_MS at the latest), or `deadline`:
  // true when none is left, so the memory they target may go.
  bool Drain(net::Deadline deadline);

  // One batch in two steps, so the caller works while it is in flight (a
  // GET verifies one page while the next are read). Start allocates and
  // submits `requests` as one batch: not OK is the engine's refusal, with
  // nothing submitted. Finish waits for it until `deadline` and returns OK
  // when every request completed, else the first failure (Timeout for one
  // not done); then frees it, or keeps it until it ends (as Run does).
  Status Start(const std::vector<TransferRequest>& requests, BatchId* batch);
  Status Finish(BatchId batch, size_t count, net::Deadline deadline);

 private:
  // Submits the groups: all in one call, or one call each when the engine
  // refuses the whole. Sets first_task[g] (the group's first task number)
  // or the group's refusal in outcomes.
  void SubmitGroups(BatchId batch, const std::vector<TransferRequest>& requests,
                    const std::vector<std::pair<size_t, size_t>>& groups, std::vector<size_t>* first_task,
                    std::vector<Status>* outcomes);
  void FreeOrKeep(BatchId batch);
  void FreeEnded();

  Engine* const engine_;
  std::mutex mu_;
  std::vector<BatchId> unfinished_;
};

}  // namespace kvfabric::store
