// StoreClient: the store's batch calls as any process makes them. It places
// each key on its home (MemberView's snapshot, Router), sends each home one
// message for the whole batch, at once to all homes (NodeCaller), and moves
// the pages with the engine: a GET READs them from the homes' pools into
// the caller's buffers and verifies their checksums (GetCall); a PUT WRITEs
// them into slots its homes reserved or granted ahead (PutCall), or lets
// the homes READ them from the caller's buffers. The calls' contracts are
// kvfabric::Store's. The facade over those parts; its calls that reach a
// key's previous home or its other copies are in previous_homes.cc and
// copies.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/store.h"
#include "kvfabric/store_stats.h"
#include "store/client/client_parts.h"
#include "store/client/node_calls.h"
#include "store/client/pin_book.h"
#include "store/client/routing.h"
#include "store/members/member_view.h"
#include "store/wire/control_client.h"
#include "store/wire/messages.h"

namespace kvfabric::store {

class StoreClient {
 public:
  // `self`: this process's node, or none for a client.
  StoreClient(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
              std::optional<LocalNode> self);
  ~StoreClient();  // unregisters and frees the bounce buffer

  // `copies` (1 to KVF_STORE_MAX_COPIES, checked by Store): the home's copy
  // as below, the others PUT to the key's next-ranked members at the same
  // time (PutCopies).
  void Put(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
           std::vector<Status>* results, uint32_t copies = 1);
  // Get, Locate, Exists and KeyOp look for a key on its home; one that
  // misses there while its home is new to the store (MemberSnapshot::
  // Recent) is looked for on its previous home, then, still absent, on its
  // home once more (previous_homes.cc).
  void Get(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
           std::vector<Status>* results, std::vector<uint64_t>* lengths);
  // Store::BatchLocate: a lookup per home; the pages' places.
  void Locate(const std::vector<std::string>& keys, std::vector<StorePage>* pages, std::vector<Status>* results);
  void Exists(const std::vector<std::string>& keys, std::vector<bool>* found);
  // kRemove, kPin or kUnpin: per key OK, or NotFound when the node said no.
  // A remove of a key whose home is new also goes to its previous home (a
  // copy left there would be handed over to the new one). An unpin goes
  // where this process's pin of the key went (PinBook).
  void KeyOp(Op op, const std::vector<std::string>& keys, std::vector<Status>* results);
  // A hand-over's PUT (Handoff), always by READ: with kIfAbsent each page
  // is stored on its home unless the key has one there when its bytes
  // have arrived (then OK all the same); with kOver it replaces the home's
  // page (a page written on the previous home after that node handed an
  // older one over). Either way a key removed on its home within the
  // window is refused (PutRequest::hand_over). Keys whose home is the
  // member `except` fail with Unavailable, unsent.
  void HandOverPut(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                   const std::string& except, PutRequest::HandOver hand_over, std::vector<Status>* results);
  // Exists, asked of the homes only: what a home holds, for a hand-over.
  // Keys whose home is the member `except` answer false, unasked.
  void ExistsAtHomes(const std::vector<std::string>& keys, const std::string& except, std::vector<bool>* found);
  Status RemoveAll(uint64_t* removed);
  // The client's counters, into `out`.
  void AddStats(StoreStats* out) const { parts_.counters.CopyTo(out); }
  // Gives the slots homes granted for this process's next PUTs back (at
  // close: they are free at once instead of when their time is up).
  void GiveBackCredits();

 private:
  // After a PUT of `copies` copies, removes the keys put (results OK) from
  // their members ranked `copies` to KVF_STORE_MAX_COPIES - 1: an older PUT
  // with more copies left pages there that a GET reads if the first fail.
  void RemoveCopiesPast(const std::vector<std::string>& keys, const std::vector<Status>& results, uint32_t copies);
  // One try of a call on the keys `which` at `route`: a status per key of
  // `which`, the outputs of those that are OK written where they belong.
  using CopyAttempt = std::function<std::vector<Status>(Route route, const std::vector<size_t>& which)>;
  // Tries the keys whose home failed them (unreachable, late, a page that
  // did not verify: not a miss, not a caller's error) on the members
  // `asked` ranked next for them, one rank at a time up to
  // KVF_STORE_MAX_COPIES: the first copy that answers OK stands. With one
  // copy, the keys whose home was unreachable are tried on the member
  // ranked next, their home while the first is out of the view.
  void TryOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                      std::vector<Status>* results, const CopyAttempt& attempt);
  // TryOtherCopies of a GET (the first copy that comes back whole) and of a Locate.
  void ReadOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                       const std::vector<std::vector<StoreBuffer>>& buffers, std::vector<Status>* results,
                       std::vector<uint64_t>* lengths);
  void LocateOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                         std::vector<StorePage>* pages, std::vector<Status>* results);
  // The same for Exists: `failed` says which keys' homes failed (from
  // ExistsVia); a key found on another copy becomes true in `found`.
  void ExistsOnOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                           std::vector<Status>* failed, std::vector<bool>* found, uint64_t* local);
  // The keys among `which` whose home entered the store within
  // KVF_STORE_HANDOFF_MS and that have a previous home: a miss on the
  // home may still lie there.
  std::vector<size_t> HomedOnNewMembers(const std::vector<std::string>& keys, const std::vector<size_t>& which) const;
  // The same, by the snapshot `snap`.
  std::vector<size_t> HomedOnNewMembers(const std::vector<std::string>& keys, const std::vector<size_t>& which,
                                        const MemberSnapshot& snap) const;
  // Removes the keys put (results OK) whose home is new from their previous
  // home: an older page left there would be read, or handed over, once the
  // new page is evicted. `routed`: the snapshot the PUT was placed with,
  // taken before it started; nothing is removed when it is not current.
  // Keys whose previous home now holds one of their `copies` are left there.
  void RemoveFromPreviousHomes(const std::vector<std::string>& keys, const std::vector<Status>& results,
                               const std::shared_ptr<const MemberSnapshot>& routed, uint32_t copies);
  // The calls' bodies, to the homes `route` names; GetVia and ExistsVia
  // count nothing (their callers count each key once).
  void GetVia(Route route, const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
              std::vector<Status>* results, std::vector<uint64_t>* lengths);
  void LocateVia(Route route, const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                 std::vector<Status>* results);
  // `local`: keys answered from a mapped pool's table of keys; keys whose
  // home is the member `except` (when not null) answer false, unasked.
  // `failed` (when not null): OK per key, or why its home did not answer.
  void ExistsVia(Route route, const std::vector<std::string>& keys, std::vector<bool>* found, uint64_t* local,
                 const std::string* except = nullptr, std::vector<Status>* failed = nullptr);
  // Answers from the tables of keys of the mapped pools of the calls'
  // homes the keys those tables know (into `found`), and takes them out of
  // the calls; how many.
  uint64_t ExistsFromMappedPools(const std::vector<std::string>& keys, std::vector<NodeCall>* calls,
                                 std::vector<bool>* found);
  void KeyOpVia(Route route, Op op, const std::vector<std::string>& keys, std::vector<Status>* results);

  // The PUT of the keys `which` with `copies` copies: each by PutFrom, to
  // the key's home and its next-ranked members (Route::Ranked), all at the
  // same time. A key keeps the failure of the first of its copies that
  // failed, annotated with the copy.
  void PutCopies(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                 const std::vector<Memory>& memory, const std::vector<size_t>& which, uint32_t copies,
                 std::vector<Status>* results);
  // The batch's shape, and each key's buffers (unregistered memory
  // included): InvalidArgument in results; `memory` says where each key's are.
  void CheckBuffers(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                    std::vector<Status>* results, std::vector<Memory>* memory) const;
  // The PUT of the keys `which`, their bytes in `sources`, as
  // KVF_STORE_PUT_MODE says: by WRITE (PutCall; keys whose granted slots
  // were gone are put again by reserve) or by PullFrom. `grants`: whether
  // slots homes granted ahead (KVF_STORE_PUT_GRANTS) may be used.
  // `route`: where each key goes (its home, or Route::Ranked for a copy).
  void PutFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
               const std::vector<Memory>& memory, const std::vector<size_t>& which, std::vector<Status>* results,
               bool grants = true, Route route = Route::Home());
  // One PUT exchange per home, which READs the pages from `sources`.
  // `hand_over`: PutRequest::hand_over; keys whose home is the member
  // `except` (when not null) fail with Unavailable, unsent.
  void PullFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                const std::vector<size_t>& which, std::vector<Status>* results,
                PutRequest::HandOver hand_over = PutRequest::HandOver::kNo,
                const std::string* except = nullptr, Route route = Route::Home());
  // The keys `which` (GPU memory peers cannot reach) copied into the bounce
  // buffer and put from there, as many at a time as it holds.
  void PutBounced(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                  const std::vector<size_t>& which, std::vector<Status>* results);
  // Allocates and registers the bounce buffer at first use; bounce_mu_ held.
  Status EnsureBounce();
  // Where the unpin of each key goes: the member its pin went to
  // (PinBook), else the member `route` names.
  std::vector<NodeCall> UnpinCalls(const std::vector<std::string>& keys, std::vector<Status>* results, Route route);
  // Gives back the grants past use, at most every GrantBook::kSweepEvery.
  // Each public call runs it first.
  void SweepCredits();

  mutable ClientParts parts_;
  PinBook pins_;
  // Host memory GPU pages go through on their way to a home that cannot
  // READ them where they are (KVF_STORE_BOUNCE_BYTES); one PUT at a time uses it.
  std::mutex bounce_mu_;
  std::unique_ptr<uint8_t[]> bounce_;
  SegmentHandle self_segment_ = -1;
};

}  // namespace kvfabric::store
