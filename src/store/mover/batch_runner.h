// BatchRunner: moves the pages of many keys as one flight and tells each
// key's outcome apart, for the store's GETs (READs of pages into the
// caller's buffers) and PUTs (WRITEs into a home's slots, or a node's READs
// of a writer's buffers). It chooses the way each group of requests moves
// (Movement): copies when every request of the group reaches a pool this
// process maps from the node it names (CopyMovement), else one engine batch
// for all the others (FabricMovement): one batch, not one per page, so the
// engine posts them in one call and the caller wakes once. Its callers ask
// a group's outcome the same way whichever ran.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kvfabric/engine.h"
#include "net/socket.h"
#include "store/mover/copier.h"
#include "store/mover/copy_movement.h"
#include "store/mover/fabric_movement.h"
#include "store/mover/movement.h"
#include "store/mover/pool_maps.h"

namespace kvfabric::store {

class BatchRunner {
 public:
  // `maps`, when given, names the same-host pools this process maps: see Start.
  explicit BatchRunner(Engine* engine, PoolMaps* maps = nullptr) : keeper_(engine), maps_(maps) {}

  // Groups of requests in flight (Start), until Finish.
  struct Flight {
    std::vector<size_t> tasks;  // per group: how many requests it has
    std::vector<int> way;       // per group: its movement in `movements`, or -1 (nothing moves)
    std::vector<std::unique_ptr<Movement>> movements;
    std::vector<bool> copied;   // per group: moved by copies (empty: none)
    // How many groups from `from_group` on are moved by copies.
    size_t Copied(size_t from_group = 0) const;
    // Whether group g lands on another thread while the caller goes on
    // (Movement::LandsMeanwhile), and whether any group does.
    bool LandsMeanwhile(size_t g) const;
    bool AnyLandsMeanwhile() const;
  };

  // Starts `requests`, of which group g is [groups[g].first,
  // groups[g].second), and sets (*outcomes)[g] to the refusal of group g,
  // OK when it started (or is empty). A group whose local memory is host
  // memory, with copyable[g] the epoch of the node its requests reach
  // (kNoCopy otherwise), all of whose requests reach a pool mapped from that
  // node in that epoch (a node restarted under the same segment is another
  // pool) is copied (CopyMovement), `copied(g)` called right after each
  // group copied on this thread; such a group whose pool's node has stopped
  // serving it (PoolMaps::Gone) fails at once with NetworkError, as a READ
  // of a node that died would. The others go as one engine batch
  // (FabricMovement). The last `tail` groups in the order of the requests
  // (a GET's region versions, one group per home) are copied after every
  // other group, or, when one of them cannot be copied (its READ goes
  // through the fabric at once), every group is copied here before
  // anything is submitted.
  void Start(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
             Flight* flight, std::vector<Status>* outcomes, const std::vector<uint64_t>& copyable = {},
             const std::function<void(size_t group)>& copied = {}, size_t tail = 0);
  static constexpr uint64_t kNoCopy = 0;  // an epoch no node has (NodeService never draws it)
  // Waits for the flight until `deadline` and sets (*outcomes)[g] of each
  // group that failed (Movement::Finish). Then frees what it holds.
  void Finish(Flight* flight, net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every request of the flight has ended, or `until`, and
  // says which groups have: (*ended)[g] when every request of group g has
  // (with (*outcomes)[g] its failure, if any, as Finish would set it). The
  // flight stays for Finish; Peek frees nothing.
  void Peek(Flight* flight, net::Deadline until, std::vector<bool>* ended, std::vector<Status>* outcomes);
  // Whether every request of group g has ended, without waiting; when so,
  // *failure is the first failure among them (OK if none). A group with
  // nothing in flight has ended, with OK: its refusal is in outcomes.
  bool GroupEnded(const Flight& flight, size_t g, Status* failure) const;
  // Whether request t (0-based, in the order given to Start) of group g has
  // ended, without waiting; when so, *failure is its failure (OK if none).
  bool RequestEnded(const Flight& flight, size_t g, size_t t, Status* failure) const;
  // Start and Finish.
  void Run(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
           net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every batch that outlived its deadline has ended, or
  // `deadline`: true when none is left, so the memory they target may go.
  bool Drain(net::Deadline deadline) { return keeper_.Drain(deadline); }

 private:
  // The groups whose requests all reach pools mapped from the nodes
  // `copyable` names, and their pieces, in the order of the requests.
  CopyPlan PlanCopies(const std::vector<TransferRequest>& requests,
                      const std::vector<std::pair<size_t, size_t>>& groups, const std::vector<uint64_t>& copyable,
                      size_t tail) const;
  // The pool mapping PiecesOf found last, and for which segment.
  struct MapCursor {
    SegmentHandle segment = -1;
    std::shared_ptr<const PoolMap> map;
  };
  // The pieces of group [begin, end) when every request of it reaches a
  // pool mapped from the node of epoch `epoch`; false if any does not.
  bool PiecesOf(const std::vector<TransferRequest>& requests, std::pair<size_t, size_t> group, uint64_t epoch,
                MapCursor* cursor, std::vector<Copier::Piece>* pieces,
                std::vector<std::shared_ptr<const void>>* keep, bool* writes) const;
  // Marks in *held the groups not held already whose copyable epoch names
  // a same-host pool PoolMaps saw its node stop serving, and fails them in
  // *outcomes (NetworkError).
  void HoldBackGone(const std::vector<TransferRequest>& requests,
                    const std::vector<std::pair<size_t, size_t>>& groups, const std::vector<uint64_t>& copyable,
                    std::vector<bool>* held, std::vector<Status>* outcomes) const;

  BatchKeeper keeper_;
  PoolMaps* const maps_;
  Copier copier_;
};

}  // namespace kvfabric::store
