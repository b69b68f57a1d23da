// WeightSync's parts (kvfabric/weights.h), shared by its three files by role:
// weight_sync.cc (memory, members, notices, credits), weight_send.cc (the
// sender) and weight_receive.cc (a receiver).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kvfabric/weights.h"
#include "weights/bucket_manifest.h"
#include "weights/bucket_packer.h"
#include "weights/relay_plan.h"

namespace kvfabric::weights {

// Notices: a bucket's data (to a child), a slot given back (to a parent),
// and a member's failure on a bucket (to its parent and children, so that
// they stop at once instead of at their deadline), numbered by bucket
// within a version.
inline constexpr uint64_t kNoticeSpan = 0x3fff;
inline constexpr uint16_t kFailureNotices = 0x8000;  // the first failure notice
inline uint16_t DataNotice(uint64_t bucket) { return static_cast<uint16_t>(1 + bucket % kNoticeSpan); }
inline uint16_t CreditNotice(uint64_t bucket) { return static_cast<uint16_t>(0x4000 + bucket % kNoticeSpan); }
inline uint16_t FailureNotice(uint64_t bucket) { return static_cast<uint16_t>(kFailureNotices + bucket % kNoticeSpan); }
inline bool IsFailureNotice(uint16_t notice) {
  return notice >= kFailureNotices && notice < kFailureNotices + kNoticeSpan;
}

// Nanoseconds since `start` (for SyncStats).
inline int64_t NsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
}

// Where a bucket's parts sit in a slot: the header, then the payload, then
// the manifest right after the payload (one WRITE covers all three).
inline constexpr uint64_t kPayloadAt = kHeaderBytes;

struct WeightSync::Peer {
  std::string name;  // engine segment name
  std::string host;
  int rails = 1;
  uint64_t slots_addr = 0;
  uint64_t credit_addr = 0;
  SegmentHandle segment = -1;
  bool gone = false;  // a WRITE to it failed: left out from then on
};

struct WeightSync::Impl {
  Engine* engine = nullptr;
  SyncOptions options;
  uint64_t slot_bytes = 0;
  uint8_t* region = nullptr;  // slots, then the credit words
  size_t region_bytes = 0;
  std::string host;
  int rails = 1;
  std::vector<Peer> members;
  int me = -1;
  RelayPlan plan;
  int parent = RelayPlan::kNone;
  std::vector<int> children;
  std::multiset<uint16_t> stash;  // notices taken but not yet awaited
  uint64_t version = 0;
  bool unfinished = false;  // a version begun and not completed: the next needs a Connect first
  SyncStats stats;

  // The sender's state.
  std::optional<BucketPacker> packer;
  int64_t open_bucket = -1;  // the bucket whose slot is being filled
  std::vector<PieceEntry> entries;
  struct Writes {
    BatchId batch = 0;
    std::vector<int> to;  // the child of each task
  };
  std::map<int, Writes> slot_writes;  // slot -> the WRITEs that read it
  uint64_t sent = 0;                  // buckets sent
  std::function<void(uint64_t, uint8_t*, uint64_t)> seal_hook;

  // A receiver's state.
  int64_t loaded = -1;  // the bucket handed out now
  BucketHeader header;
  std::vector<PieceEntry> pieces;
  size_t cursor = 0;
  std::vector<uint8_t> joined;  // a tensor spanning buckets, gathered
  bool finished = false;

  uint8_t* slot(uint64_t bucket) { return region + (bucket % options.slots) * slot_bytes; }
  uint64_t credit_word() const { return reinterpret_cast<uint64_t>(region) + options.slots * slot_bytes; }
  const char* role() const { return me == 0 ? "the sender" : "a receiver"; }

  // Waits for `notice` until `deadline`; other notices taken meanwhile wait
  // in the stash. Timeout names `what`; a failure notice from a neighbour
  // ends the wait with ProtocolError.
  Status AwaitNotice(uint16_t notice, std::chrono::steady_clock::time_point deadline, const std::string& what);
  // WRITEs `bytes` of slot `bucket` to every child not gone, with the
  // bucket's data notice, as one batch (kept in slot_writes).
  Status WriteToChildren(uint64_t bucket, uint64_t bytes);
  // Waits for the WRITEs that read slot `bucket` (children whose WRITE
  // failed are left out from then on) and for each child's credit for it.
  Status AwaitSlotFree(uint64_t bucket);
  // AwaitSlotFree for every bucket before `end` still in a slot (the last
  // `slots` of them): a version's end.
  Status AwaitSlotsFree(uint64_t end);
  // Waits for the WRITEs that read slot `bucket` and frees their batch;
  // children whose WRITE failed are left out from then on.
  void FinishWrites(uint64_t bucket);
  // Tells the parent this member's slot of `bucket` is free again.
  Status GiveCredit(uint64_t bucket);
  // Waits for the one WRITE of `batch` within the sync's deadline, in
  // slices of 100 ms: a neighbour's failure notice ends the wait
  // (ProtocolError); a WRITE still pending at the deadline is expired
  // (Timeout); one that failed gives its error. Frees nothing.
  Status AwaitOwnWrite(BatchId batch, const std::string& what);
  // ProtocolError naming `what` when a neighbour's failure notice has come
  // (notices taken meanwhile go to the stash); OK otherwise.
  Status FailureReported(const std::string& what);
  // Tells the parent and the children that this member failed on `bucket`
  // (best effort, within a short deadline): they stop waiting for it.
  void TellFailure(uint64_t bucket);
  // Waits for the WRITEs still reading slots (within the sync's deadline)
  // and frees their batches.
  void DropWrites();
  // The packing and handing-out state of a version, cleared.
  void ClearVersion();
  // Drops what a version left behind: its WRITEs, its state, and, when it
  // did not complete, the notices taken or waiting (Connect).
  void Forget();
  // Starts version `next` with its state cleared; InvalidArgument while
  // the last one begun did not complete (Connect clears it).
  Status Begin(uint64_t next);
};

}  // namespace kvfabric::weights
