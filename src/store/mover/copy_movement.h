// CopyMovement: groups of requests that reach a pool this process maps
// (a same-host node's, PoolMaps) moved by memcpy instead of the fabric, in
// the order of the requests, as a rail would post them. The copies are
// made on the caller's thread (each group handed to the caller right after
// its copy, its bytes still in cache), on the Copier's thread (the caller
// takes each group as it lands, beside the copies of the next), or split
// between the two, as CopyOnThread and HereShare say. Copies never fail.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "store/mover/copier.h"
#include "store/mover/movement.h"

namespace kvfabric::store {

// Whether a flight's copies, `bytes` in all and `largest` in its largest
// group, go to the Copier's thread (true) or stay on the caller's (where
// the Copier may still take a share, HereShare): WRITEs (a PUT) of
// kCopyHereBytes or more go, so the caller checksums its sources
// meanwhile on another core; READs (a GET) go when a group is longer than
// kCopyHereGroupBytes, which the caller checksums piece by piece as the
// pieces land; shorter READs stay, each page checksummed right after its
// copy; and fewer bytes than kCopyHereBytes stay, since the Copier's
// wake-up costs more than it saves. Measured: docs/results/store-same-host-2026-11-28.md, "Who copies".
bool CopyOnThread(bool writes, size_t bytes, size_t largest);
constexpr size_t kCopyHereBytes = 256 << 10;
constexpr size_t kCopyHereGroupBytes = 512 << 10;  // ClientParts::kLandingPiece
// Of a flight's `bytes` that stay on the caller's thread, how many it
// copies itself (whole groups, in order, until that many are copied); the
// Copier copies the rest at the same time. All of a flight under
// kSplitBytes; half of a larger one.
size_t HereShare(size_t bytes);
constexpr size_t kSplitBytes = 1 << 20;

// The copies of a flight, group by group in the order of the requests.
struct CopyPlan {
  std::vector<Copier::Piece> pieces;
  std::vector<std::shared_ptr<const void>> keep;  // the mappings the pieces are in
  std::vector<size_t> in_order;  // the groups copied, in the order of their pieces
  std::vector<size_t> first;     // per group of the flight: its first piece
  std::vector<size_t> count;     // per group: how many pieces (0: not copied)
  std::vector<bool> tail;        // per group: copied after every other (a GET's region versions)
  bool tail_through_fabric = false;  // a tail group is not copied: every copy is made here first
  size_t bytes = 0, largest = 0;
  bool writes = false;

  explicit CopyPlan(size_t groups) : first(groups, 0), count(groups, 0), tail(groups, false) {}
  bool empty() const { return in_order.empty(); }
  bool Copies(size_t g) const { return count[g] > 0; }
  // Appends group g's pieces (in order); `writes`: they write the pool.
  void Add(size_t g, const std::vector<Copier::Piece>& group, bool group_writes);
};

class CopyMovement : public Movement {
 public:
  // Makes the copies of `plan`: those the caller's thread makes are made
  // here, `copied(g)` called right after each of their groups; the others
  // start on `copier` (with the tail groups after the caller's copies, at
  // a gate it opens). A Copier busy with another thread's flight would make
  // this one wait behind it: the caller then makes every copy itself.
  CopyMovement(Copier* copier, CopyPlan plan, const std::function<void(size_t group)>& copied);
  ~CopyMovement() override;  // waits for the Copier's copies: they write memory its owner is about to let go of

  bool RequestEnded(size_t g, size_t t, Status* failure) const override;
  bool GroupEnded(size_t g, Status* failure) const override;
  bool WaitUntil(net::Deadline until) override;
  void Finish(net::Deadline deadline, std::vector<Status>* outcomes) override;
  bool LandsMeanwhile(size_t g) const override { return job_ != nullptr && first_[g] != kCopiedHere; }

 private:
  static constexpr size_t kCopiedHere = static_cast<size_t>(-1);
  // Whether the first `pieces` pieces of group g are copied.
  bool Copied(size_t g, size_t pieces) const;
  // Copies the first `split` groups of plan.in_order here (opening the
  // Copier's gate after the last), then calls `copied` for each.
  void CopyHere(const CopyPlan& plan, size_t split, const std::function<void(size_t)>& copied);

  std::shared_ptr<const Copier::Job> job_;
  std::vector<size_t> first_;  // per group: its first piece in job_, or kCopiedHere
  std::vector<size_t> count_;  // per group: how many pieces
};

}  // namespace kvfabric::store
