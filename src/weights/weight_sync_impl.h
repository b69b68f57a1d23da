// WeightSync's parts (kvfabric/weights.h), shared by its three files by role:
// weight_sync.cc (memory, members, notices, credits), weight_send.cc (the
// sender) and weight_receive.cc (a receiver).
#pragma once

#include <algorithm>
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

// Notices: a bucket's data (to a child), a word written (a doorbell: a
// child's credit, a receiver's request for adoption, see below), a
// member's failure on a bucket (to its parent and children, so that they
// stop at once instead of at their deadline), a bucket the sender writes
// to a receiver it adopted (apart from the data notices, whose pieces the
// dead parent may have left half counted; the version's parity keeps a
// late one out of the next version), and an adoption refused.
inline constexpr uint64_t kNoticeSpan = 0x3fff;
inline constexpr uint16_t kWordNotice = 0x4000;
inline constexpr uint16_t kFailureNotices = 0x8000;  // the first failure notice
inline constexpr uint16_t kAdoptedNotices = 0xc000;  // the first adopted-data notice
inline constexpr uint64_t kAdoptedSpan = 0x1fff;
inline constexpr uint16_t kRefusedNotice = 0xffff;
inline uint16_t DataNotice(uint64_t bucket) { return static_cast<uint16_t>(1 + bucket % kNoticeSpan); }
inline uint16_t FailureNotice(uint64_t bucket) { return static_cast<uint16_t>(kFailureNotices + bucket % kNoticeSpan); }
inline uint16_t AdoptedNotice(uint64_t version, uint64_t bucket) {
  return static_cast<uint16_t>(kAdoptedNotices + (version & 1) * 0x2000 + bucket % kAdoptedSpan);
}
inline bool IsDataNotice(uint16_t notice) { return notice >= 1 && notice <= kNoticeSpan; }
inline bool IsFailureNotice(uint16_t notice) {
  return notice >= kFailureNotices && notice < kFailureNotices + kNoticeSpan;
}
inline bool IsAdoptedNotice(uint16_t notice) { return notice >= kAdoptedNotices && notice < kRefusedNotice; }

// The words members write into each other's tail (after the slots): one
// per member, at kWordsAt + 8 * member, holding (version << 32) | flags |
// count. A receiver's credits to its parent say how many buckets of the
// version it has given back; kRequest asks the sender for adoption from
// bucket `count` on (its parent died). A word is the truth; its doorbell
// only says to look again, so a late or repeated one is harmless.
inline constexpr uint64_t kRequest = uint64_t{1} << 31;
inline constexpr uint64_t kCountMask = (uint64_t{1} << 30) - 1;
inline uint64_t MakeWord(uint64_t version, uint64_t count, uint64_t flags = 0) {
  return (version << 32) | flags | (count & kCountMask);
}
inline bool WordOf(uint64_t word, uint64_t version) { return (word >> 32) == (version & 0xffffffff); }
// The tail: a word neighbours' failure notices land in (unread), this
// member's own words (sources of its WRITEs, where a probe READ lands),
// then the words of every member.
inline constexpr uint64_t kCreditSourceAt = 8, kFailureSourceAt = 16, kProbeAt = 24, kRequestSourceAt = 32,
                          kWordsAt = 64;
inline constexpr uint64_t kTailBytes = 64 << 10;
inline constexpr size_t kMostMembers = (kTailBytes - kWordsAt) / 8;

// The first of the sealed buckets the sender still holds in its `slots`
// slots, having sent `sent` buckets, `open` being the bucket whose slot it
// fills now (none when open < sent): it holds [FirstHeld, sent). A bucket
// leaves its slot when the bucket `slots` later is opened in it.
// Contract: FirstHeld <= sent, sent - FirstHeld <= slots, and less than
// slots while a slot is being filled.
uint64_t FirstHeld(uint64_t sent, int64_t open, uint64_t slots);

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
  uint64_t tail_addr = 0;
  SegmentHandle segment = -1;
  bool gone = false;     // it did not answer (a WRITE or a probe failed): left out from then on
  bool adopted = false;  // a child the sender took over from its dead parent
  uint64_t probed = 0;   // its credit word, as the last probe read it
};

struct WeightSync::Impl {
  Engine* engine = nullptr;
  SyncOptions options;
  uint64_t slot_bytes = 0;
  uint8_t* region = nullptr;  // slots, then the tail (kTailBytes)
  size_t region_bytes = 0;
  std::string host;
  int rails = 1;
  std::vector<Peer> members;
  int me = -1;
  RelayPlan plan;
  int parent = RelayPlan::kNone;
  std::vector<int> children;
  std::multiset<uint16_t> stash;  // notices taken but not yet awaited
  bool adopted = false;           // a receiver whose parent died: the sender writes to it now
  uint64_t version = 0;
  bool unfinished = false;  // a version begun and not completed: the next needs a Connect first
  SyncStats stats;

  // The sender's state.
  std::optional<BucketPacker> packer;
  int64_t open_bucket = -1;  // the bucket whose slot is being filled
  std::vector<PieceEntry> entries;
  struct Writes {
    BatchId batch = 0;
    int to = -1;  // the child its one WRITE goes to
  };
  std::map<int, std::vector<Writes>> slot_writes;  // slot -> the WRITEs that read it
  std::vector<int> orphans;  // the sender: children of its dead children, until adopted or gone
  std::vector<uint64_t> sealed_bytes;              // slot -> the bytes of the bucket sealed in it
  uint64_t sent = 0;                               // buckets sent
  std::function<void(uint64_t, uint8_t*, uint64_t)> seal_hook;

  // A receiver's state.
  int64_t loaded = -1;  // the bucket handed out now
  uint64_t released = 0;  // buckets given back
  BucketHeader header;
  std::vector<PieceEntry> pieces;
  size_t cursor = 0;
  std::vector<uint8_t> joined;  // a tensor spanning buckets, gathered
  bool finished = false;

  uint8_t* slot(uint64_t bucket) { return region + (bucket % options.slots) * slot_bytes; }
  uint64_t tail() const { return reinterpret_cast<uint64_t>(region) + options.slots * slot_bytes; }
  uint64_t* own(uint64_t at) const { return reinterpret_cast<uint64_t*>(tail() + at); }
  // The word member `i` last wrote here.
  uint64_t word(int i) const { return __atomic_load_n(own(kWordsAt + 8 * i), __ATOMIC_ACQUIRE); }
  const char* role() const { return me == 0 ? "the sender" : "a receiver"; }

  // A receiver: waits until `deadline` for bucket `bucket` to land, from
  // its parent (its data notice) or, once adopted, from the sender (its
  // adopted-data notice); other notices taken meanwhile wait in the stash.
  // A parent that does not answer a probe while this waits is dead: the
  // sender is asked to adopt this member. Timeout names the member waited
  // for; a failure notice from a neighbour ends the wait (ProtocolError),
  // so does a refused adoption (Unavailable).
  Status AwaitBucket(uint64_t bucket, std::chrono::steady_clock::time_point deadline);
  // WRITEs `bytes` of slot `bucket` to every child not gone among `to`
  // (all children when empty), with the bucket's notice (data, or adopted
  // data for an adopted child), as one batch (kept in slot_writes).
  Status WriteToChildren(uint64_t bucket, uint64_t bytes, const std::vector<int>& to = {});
  // Waits for the WRITEs that read slot `bucket` (children whose WRITE
  // failed are left out from then on) and for each child's credit for it.
  Status AwaitSlotFree(uint64_t bucket);
  // AwaitSlotFree for every bucket before `end` still in a slot (the last
  // `slots` of them): a version's end.
  Status AwaitSlotsFree(uint64_t end);
  // Waits for the WRITEs that read slot `bucket` and frees their batch;
  // children whose WRITE failed are left out from then on.
  void FinishWrites(uint64_t bucket);
  // Waits for `w`'s WRITE within the sync's deadline. One that moved
  // nothing for ProbeMs to a child that does not answer a probe is given
  // up (NetworkError): the child died (over tcp;ofi_rxm the WRITE would
  // wait, refused, to its deadline). A slow one keeps landing slices.
  Status AwaitWrite(const Writes& w);
  // Tells the parent this member's slot of `bucket` is free again. A
  // parent that cannot be reached is dead: the sender is asked to adopt
  // this member instead. For the version's `last` bucket such a failure is
  // no error: this member has the whole version, and a parent that read
  // the credit's word may have ended before the WRITE's end came back (its
  // notice sent as a message, KVF_NOTICE_PATH, comes later still); a parent
  // really gone fails the next version's wait.
  Status GiveCredit(uint64_t bucket, bool last);
  // Waits until every child not gone has given back `bucket`'s slot (its
  // word), and each of the sender's orphans is adopted, gone, or has given
  // `bucket` back to its dead parent already (a probe reads it), within the
  // sync's deadline. Meanwhile the sender serves requests for adoption, and a
  // member it waits for is probed: one that does not answer is left out
  // (its own children ask the sender).
  Status AwaitCredits(uint64_t bucket);
  // One slice of a wait for `what` until `deadline`: a neighbour's failure
  // notice (ProtocolError) or the deadline (Timeout, naming `what`) ends
  // the wait; else, unless notices are waiting already, they are awaited
  // for up to 200 ms, into the stash (doorbells dropped), and *quiet says
  // whether none came.
  Status WaitSlice(std::chrono::steady_clock::time_point deadline, const std::string& what, bool* quiet);
  // Leaves member `i` out from now on (it did not answer), saying `why`.
  // The sender waits for the children of its own dead child to ask for
  // adoption before it fills a slot again (orphans), so that it still
  // holds every bucket they lack.
  void LeaveOut(int i, const std::string& why);
  // A READ of member `i`'s credit word (what it last gave back; into its
  // Peer::probed): whether it answered within ProbeMs.
  bool Probe(int i);
  // How long a member may leave a probe, or a credit, unanswered before it
  // counts as dead: a quarter of the sync's deadline, from 100 ms to 1 s.
  // A process gone is not refused at once by every provider (over
  // tcp;ofi_rxm its connection is refused, and posts wait).
  int64_t ProbeMs() const { return std::clamp<int64_t>(options.timeout_ms / 4, 100, 1000); }
  // The sender: adopts every receiver whose word asks for it (adoption.cc).
  void ServeAdoptions();
  // A receiver whose parent died: asks the sender to adopt it, from bucket
  // `next` on (adoption.cc).
  Status RequestAdoption(uint64_t next, const Status& why);
  // WRITEs one 8-byte word from this member's tail at `from` into member
  // `to`'s word of this member, with `notice`, within `deadline_ms` (the
  // sync's deadline when negative); errors say `what`.
  Status WriteWord(int to, uint64_t from, uint16_t notice, const std::string& what, int64_t deadline_ms = -1);
  // Waits for the one WRITE of `batch` within `deadline_ms`, in slices of
  // 100 ms: a neighbour's failure notice ends the wait (ProtocolError); a
  // WRITE still pending at the deadline is expired (Timeout); one that
  // failed gives its error. Frees nothing.
  Status AwaitOwnWrite(BatchId batch, const std::string& what, int64_t deadline_ms);
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
