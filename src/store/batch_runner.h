// BatchRunner: runs the transfers of many keys as one engine batch and tells
// each key's outcome apart, for the store's GETs (READs of pages into the
// caller's buffers) and PUTs (READs of the writer's buffers into the pool).
// One batch, not one per page: the engine posts them in one call and the
// caller wakes once when they are done (measured: a GET of 32 pages of 128
// KiB as 32 batches spent a tenth of its client's progress thread on the
// extra wake-ups and posts).
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

  // Groups of requests in flight as one engine batch (Start), until Finish.
  struct Flight {
    BatchId batch = 0;
    bool allocated = false;
    std::vector<size_t> first_task;  // per group: its first task in the batch, or kNotSubmitted
    std::vector<size_t> tasks;       // per group: how many requests it has
  };
  static constexpr size_t kNotSubmitted = static_cast<size_t>(-1);

  // Submits `requests`, of which group g is [groups[g].first,
  // groups[g].second), as one engine batch: in one call, or one call per
  // group when the engine refuses the whole (unregistered or out-of-range
  // memory: a bad group never stops the others). Sets (*outcomes)[g] to the
  // engine's refusal of group g, OK when it was submitted (or is empty).
  // A flight that submitted nothing needs no Finish.
  void Start(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
             Flight* flight, std::vector<Status>* outcomes);
  // Waits for the flight until `deadline` and sets (*outcomes)[g] of each
  // submitted group: OK when every request of the group completed, else
  // the first failure among them (Timeout for one not done by then: it is
  // ended with Engine::ExpireBatch, its connection closed where the
  // provider allows). Then frees the batch, or, when a transfer the
  // provider still holds outlives the deadline, keeps it until it ends
  // (later calls free it).
  void Finish(Flight* flight, net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every request of the flight has ended, or `until`, and
  // says which groups have: (*ended)[g] when every request of group g has
  // (with (*outcomes)[g] its failure, if any, as Finish would set it). The
  // flight stays for Finish, which frees it; Peek frees nothing.
  void Peek(Flight* flight, net::Deadline until, std::vector<bool>* ended, std::vector<Status>* outcomes);
  // Whether every request of group g has ended, without waiting; when so,
  // *failure is the first failure among them (OK if none). Frees nothing.
  bool GroupEnded(const Flight& flight, size_t g, Status* failure) const;
  // Whether request t (0-based, in the order given to Start) of group g has
  // ended, without waiting; when so, *failure is its failure (OK if none).
  // A group not submitted has ended, with OK: its refusal is in outcomes.
  bool RequestEnded(const Flight& flight, size_t g, size_t t, Status* failure) const;
  // Start and Finish.
  void Run(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
           net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every batch that outlived its deadline has ended (their
  // transfers end by KVF_TRANSFER_TIMEOUT_MS at the latest), or `deadline`:
  // true when none is left, so the memory they target may go.
  bool Drain(net::Deadline deadline);

 private:
  void FreeOrKeep(BatchId batch);
  void FreeEnded();

  Engine* const engine_;
  std::mutex mu_;
  std::vector<BatchId> unfinished_;
};

}  // namespace kvfabric::store
