// Poster: turns checked requests (Plan) into slices on rails, and moves
// them again when a rail fails them. One object, three roles, each in the
// file named after it:
//   poster.cc       striped posting of registered memory: pieces by
//                   PlanPieces, a rail for each by PickRail or in turn, slices by
//                   CutAtChunks; and the engine's own segment as a copy.
//   staged_post.cc  GPU memory the rails cannot register (no FI_HMEM):
//                   slices through pinned staging slots.
//   reroute.cc      a slice that failed or stalled goes to another rail of
//                   the same peer, and a task past its deadline has its
//                   peer's connections cut (engine::Rerouter).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/batch.h"
#include "engine/notice_board.h"
#include "engine/notice_mailer.h"
#include "engine/rail_set.h"
#include "engine/request_check.h"
#include "engine/slicing.h"
#include "fabric/slice.h"
#include "memory/staging.h"

namespace kvfabric::engine {

// How a WRITE's notice reaches its target (KVF_NOTICE_PATH).
enum class NoticePath {
  kAuto,    // remote CQ data where every piece's rail carries it, else a message
  kCqData,  // remote CQ data only: a WRITE that cannot carry it is refused
  kMessage, // a message once every piece was delivered (NoticeMailer)
};

// The pieces of a request not posted yet (PiecePlan::up_front): rails
// take them one by one as their pieces complete.
struct PieceFeed {
  std::atomic<uint64_t> next{0};  // the next piece's offset in the request
  uint64_t end = 0;               // the request's length
  uint64_t piece = 0;
  bool write = true;
};

// What a task needs to cut its bytes into slices again on another rail.
struct Route {
  std::shared_ptr<const memory::Buffer> local;
  std::shared_ptr<const metadata::SegmentDesc> desc;
  const metadata::BufferDesc* remote = nullptr;  // inside *desc
  uintptr_t request_local = 0;                   // the request's own addresses,
  uint64_t request_remote = 0;                   // for staged slices' device bytes
  std::shared_ptr<PieceFeed> feed;               // null: every piece was posted at once
};

class Poster final : public Rerouter {
 public:
  struct Options {
    int64_t transfer_timeout_ms = 30000;  // KVF_TRANSFER_TIMEOUT_MS
    size_t stripe_threshold = 0;          // KVF_STRIPE_THRESHOLD (0: never stripe)
    RailPolicy rail_policy = RailPolicy::kAuto;  // KVF_RAIL_POLICY
    int64_t rail_retry_ms = 5000;         // KVF_RAIL_RETRY_MS
    size_t staging_bytes = 64 << 20;      // KVF_STAGING_BYTES
    NoticePath notice_path = NoticePath::kAuto;  // KVF_NOTICE_PATH
  };
  // `rails` must outlive the poster; the poster's staging pool must be
  // destroyed (with the poster) before the rails close. `counters` (null:
  // nothing counted) count requests and reroutes.
  Poster(const RailSet* rails, const Options& options, Counters* counters = nullptr)
      : rails_(rails), options_(options), counters_(counters) {}
  ~Poster() override;

  // Queues request `plan` as `task` of `batch` (a peer's segment). Errors
  // before anything was queued are returned; the caller fails the task.
  Status Post(Batch* batch, Task* task, const Plan& plan, std::vector<fabric::Slice>* scratch);
  // The engine's own segment: a memmove (or a device copy for GPU memory)
  // on the calling thread; the task ends here, and a WRITE's notice goes
  // to `own_notices` (set_own_notices).
  void CopyLocal(Batch* batch, Task* task, const Plan& plan);
  // Marks every slice of a WRITE to `peer` with `notice` and their count
  // (EncodeNotice), or, where the notice goes as a message (`*by_message`,
  // NoticePath), delivery-complete. An error when the path is kCqData and
  // the slices are too many or a rail carries no remote CQ data.
  Status CarryNotice(uint16_t notice, const std::string& peer, std::vector<fabric::Slice>* slices,
                     bool* by_message) const;
  // Where the notices of WRITEs to the engine's own segment go.
  void set_own_notices(NoticeBoard* board) { own_notices_ = board; }
  // Who sends the notices that go as messages (none: such WRITEs are refused).
  void set_notice_mailer(NoticeMailer* mailer) { mailer_ = mailer; }

  // What a task counts when it ends: a request of `plan` to its peer (or
  // to the engine's own segment); nothing when the engine counts nothing.
  TaskTally TallyOf(const Plan& plan) const;

  // engine::Rerouter
  uint32_t Reroute(Task* task, const fabric::Slice& slice, bool failed) override;
  bool CanReroute(Task* task, const fabric::Slice& slice) override;
  Status Unstage(Task* task, const fabric::Slice& slice, bool copy_back) override;
  void CutConnections(Task* task) override;
  std::string Whereabouts(Task* task) override;
  Status PostNextPiece(Task* task, const fabric::Slice& slice) override;

 private:
  // Reroute's work (reroute.cc): the slices queued on another rail, or 0.
  uint32_t MoveSlice(Task* task, const fabric::Slice& slice, bool failed);
  // The rail a slice of `task` would move to now (`*to`), with the peer's
  // rail it pairs with (`*peer_rail`); false when none can take it (it
  // cannot move, or every rail had its chance).
  bool MoveTarget(Task* task, const fabric::Slice& slice, int64_t now, size_t* to, int* peer_rail);

  // Through staging slots (staged_post.cc).
  Status PostStaged(Batch* batch, Task* task, const Plan& plan, std::shared_ptr<Route> route, const size_t* cand,
                    size_t ncand, const RailView* views);
  Status EnsureStaging();
  // Arms `task` for `slices` slices of `plan` and counts them in the batch.
  void StartTask(Batch* batch, Task* task, const Plan& plan, std::shared_ptr<Route> route, size_t slices);
  // Slices for [l, +len) <-> [ra, +len) on local rail `rail`, appended to
  // `out`: cut at the rail's max_msg_size and at chunk edges on both sides.
  Status MakeSlices(const Route& route, bool write, Peer* peer, size_t rail, uintptr_t l, uint64_t ra, size_t len,
                    uint32_t attempts, Task* task, std::vector<fabric::Slice>* out) const;

  // The rails of the peer on which `route`'s memory can move, written to
  // `out` (room for kMaxLocalRails): the usable rails, or when none of them
  // can, the fallback ones (PairedRails decides each).
  size_t RailsFor(const Route& route, const Peer& peer, size_t* out) const;
  // Why no rail pair can move `route`'s memory to or from `peer`.
  Status NoRailPair(const Route& route, const Peer& peer) const;

  // Where PickRail's ties start for the next request: rotating, from a
  // random start in each process (rail_choice.h says why).
  size_t NextRotation() { return rotation_.fetch_add(1, std::memory_order_relaxed); }

  const RailSet* rails_;
  const Options options_;
  Counters* const counters_;
  NoticeBoard* own_notices_ = nullptr;
  NoticeMailer* mailer_ = nullptr;
  std::atomic<size_t> rotation_{static_cast<size_t>(std::random_device{}())};
  std::mutex staging_mu_;
  std::unique_ptr<memory::StagingPool> staging_;  // created on the first staged transfer
};

// Points `s` at remote address `ra`, inside chunk `rc` of the route's
// remote buffer, through peer rail `peer_rail` (which has a key there).
void AimSlice(const Route& route, int peer_rail, uint64_t ra, const metadata::ChunkDesc& rc, fabric::Slice* s);

}  // namespace kvfabric::engine
