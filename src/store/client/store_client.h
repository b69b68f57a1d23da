// StoreClient: the store's batch calls as any process makes them. It places
// each key on its home (MemberView's snapshot), sends each home one message
// for the whole batch, at once to all homes, and moves the pages with the
// engine: a GET READs them from the homes' pools into the caller's
// buffers and verifies their checksums; a PUT lets the homes READ them from
// the caller's buffers. The calls' contracts are kvfabric::Store's.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/store.h"
#include "store/mover/batch_runner.h"
#include "store/wire/checksum.h"
#include "store/wire/control_client.h"
#include "store/client/location_cache.h"
#include "store/client/scratch_slots.h"
#include "store/members/member_view.h"
#include "store/wire/region_versions.h"

namespace kvfabric::store {

// This process's own node, as its client reaches it: the address the node
// serves under, and its request handler, called directly for that node's
// keys instead of sending a message.
struct LocalNode {
  std::string address;
  std::function<void(std::string request, ControlClient::Done done)> handle;
};

class StoreClient {
 public:
  // `self`: this process's node, or null for a client.
  StoreClient(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
              const LocalNode* self);
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
  // copy left there would be handed over to the new one).
  void KeyOp(Op op, const std::vector<std::string>& keys, std::vector<Status>* results);
  // The miss of a key its home holds no page of, and whether `s` is one
  // (not a miss for a checksum or a late lookup: that page was there).
  static Status Absent(const std::string& key);
  static bool IsAbsent(const Status& s);
  // A hand-over's PUT: each page is stored on its home unless the key has
  // one there when its bytes have arrived (then OK all the same); always
  // by READ (PutRequest::if_absent). Keys whose home is the member
  // `except` fail with Unavailable, unsent.
  void PutIfAbsent(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                   const std::string& except, std::vector<Status>* results);
  // Exists, asked of the homes only: what a home holds, for a hand-over.
  // Keys whose home is the member `except` answer false, unasked.
  void ExistsAtHomes(const std::vector<std::string>& keys, const std::string& except, std::vector<bool>* found);
  Status RemoveAll(uint64_t* removed);
  // The client's counters, into `out`.
  void AddStats(StoreStats* out) const;
  // Gives the slots homes granted for this process's next PUTs back (at
  // close: they are free at once instead of when their time is up).
  void GiveBackCredits();

  // One message to one member, for the keys `keys` (indices into the batch).
  struct NodeCall {
    std::shared_ptr<const NodeView> node;
    std::vector<size_t> keys;
    std::string request;
    Status status;
    std::string reply;
  };

 private:
  // Where a call sends a key: its home, the home it had before its home
  // entered the store, the member placement ranks `rank` for it (0: its
  // home; 1..: the members that hold its other copies), or (kNamed) the
  // member (*named)[i] for keys[i], wherever it ranks now.
  struct Route {
    enum class Kind : uint8_t { kHome, kPreviousHome, kRanked, kNamed };
    Kind kind = Kind::kHome;
    uint32_t rank = 0;
    const std::vector<std::string>* named = nullptr;
    static constexpr Route Home() { return {}; }
    static constexpr Route PreviousHome() { return {Kind::kPreviousHome, 0, nullptr}; }
    static constexpr Route Ranked(uint32_t rank) { return {Kind::kRanked, rank, nullptr}; }
    static constexpr Route Named(const std::vector<std::string>* named) { return {Kind::kNamed, 0, named}; }
    bool operator==(const Route&) const = default;
  };
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
  // KVF_STORE_MAX_COPIES: the first copy that answers OK stands.
  void TryOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                      std::vector<Status>* results, const CopyAttempt& attempt);
  // TryOtherCopies of a GET (the first copy that comes back whole) and of a Locate.
  void ReadOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                       const std::vector<std::vector<StoreBuffer>>& buffers, std::vector<Status>* results,
                       std::vector<uint64_t>* lengths);
  void LocateOtherCopies(const MemberSnapshot& asked, const std::vector<std::string>& keys,
                         std::vector<StorePage>* pages, std::vector<Status>* results);
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
  void ExistsVia(Route route, const std::vector<std::string>& keys, std::vector<bool>* found, uint64_t* local,
                 const std::string* except = nullptr);
  void KeyOpVia(Route route, Op op, const std::vector<std::string>& keys, std::vector<Status>* results);

  // Where a key's buffers are, as far as the store cares.
  enum class Memory : uint8_t {
    kHost,          // host memory: peers reach it, GETs verify it
    kDevice,        // GPU memory peers reach (FI_HMEM): not verified (no checksum on device memory)
    kDeviceLocal,   // GPU memory no rail registered: a PUT copies it through the bounce buffer
  };
  // The PUT of the keys `which` with `copies` copies: each by PutFrom, to
  // the key's home and its next-ranked members (Route::Ranked), all at the
  // same time. A key keeps the failure of the first of its copies that
  // failed, annotated with the copy.
  void PutCopies(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                 const std::vector<Memory>& memory, const std::vector<size_t>& which, uint32_t copies,
                 std::vector<Status>* results);
  // The keys of the batch grouped by home. A key whose results[i] is not
  // OK already is left out; a key with no home (no member has a pool) gets
  // Unavailable in `results` and is left out too.
  std::vector<NodeCall> GroupByHome(const std::vector<std::string>& keys, std::vector<Status>* results,
                                    Route route = Route::Home()) const;
  // The same for the keys `which` only (those whose results are OK). With
  // kPreviousHome, each key goes to the home it had before its home
  // entered (MemberSnapshot::PreviousHome).
  std::vector<NodeCall> GroupByHome(const std::vector<std::string>& keys, const std::vector<size_t>& which,
                                    std::vector<Status>* results, Route route = Route::Home()) const;
  // Takes the call to `member` (none when null) out of `calls`; the keys it had.
  static std::vector<size_t> TakeCallTo(std::vector<NodeCall>* calls, const std::string* member);
  // The replies of one fan-out, in the order they arrive (store_client.cc).
  struct Fanout;
  // How a caller waits for replies: polling first (KVF_STORE_SPIN_US), for
  // calls whose replies come within a round trip, or asleep at once, for
  // calls whose replies wait for bytes to move (PUTs, GETs with READs under
  // way), where polling would take a core from the transfer. Only a lone
  // call polls: with 4 threads calling exists at once, polling halved
  // their keys/s on 2 vCPUs (it doubled one thread's).
  enum class Wait : uint8_t { kPollFirst, kSleep };
  // How long a wait of kind `wait` polls now.
  std::chrono::microseconds PollTime(Wait wait) const;
  // Sends every call at once and waits for all replies (or the deadline).
  // A member whose call failed for the network or its deadline is marked down.
  void CallNodes(std::vector<NodeCall>* calls, net::Deadline deadline, Wait wait);
  // CallNodes in steps: Send, then Next for each reply as it arrives (false
  // when none came by `until`: the calls not taken yet are then settled
  // with Timeout, and `unanswered` lists them).
  std::shared_ptr<Fanout> Send(std::vector<NodeCall>* calls, net::Deadline deadline);
  // Whether a reply of `fanout` waits to be taken by Next (never blocks).
  static bool Answered(Fanout* fanout);
  bool Next(Fanout* fanout, std::vector<NodeCall>* calls, net::Deadline until, Wait wait, size_t* which,
            std::vector<size_t>* unanswered);
  // A call's end: its status named after the member, the counters, and the
  // member marked down when it could not be reached.
  void Settle(NodeCall* call, Status status, std::string reply);
  // Leaves `member` out of placement for KVF_STORE_DOWN_RETRY_MS when
  // `failure` says it could not be reached: the network, a deadline, or the
  // fabric (its engine did not serve a READ). A control call never fails
  // with the fabric's error, so calls and READs share this one rule.
  void MarkDownIfUnreachable(const std::string& member, const Status& failure);

  // The largest READ of a page verified as it lands (PageRead::Pieces):
  // half this host's 1 MiB L2. Measured on one core: 32 pages of 8 MiB
  // copied, then hashed whole, took 71-73 ms; each 512 KiB piece hashed
  // right after its copy, 55-57 ms; the copy alone 43-46 ms.
  static constexpr uint64_t kLandingPiece = 512 << 10;
  // A GET's READs of one page: started as soon as its home answered, or
  // before, from the location this process remembers (a guess, kept only
  // when the home's answer names the same page).
  struct PageRead {
    enum class Check : uint8_t {
      kConfirmed,    // the home's answer names this page: its bytes are the key's (once verified)
      kUnconfirmed,  // a guess with no answer yet, or whose answer was a miss or a failure (in results)
      kMoved,        // a guess whose answer names another page (`where` now): read again once it ends
    };
    // Whether its bytes match where.checksum, once that is known: taken as
    // soon as its READs land (ChecksumLanded) or else when it is finished.
    enum class Sum : uint8_t { kNotTaken, kMatches, kDiffers };
    size_t key = 0;
    Location where;
    std::shared_ptr<const NodeView> home;
    bool verify = true;
    Check check = Check::kConfirmed;
    Sum sum = Sum::kNotTaken;  // Launch resets it: a page read again has new bytes
    size_t flight = 0;         // its READs: group `group` of flights[flight]
    size_t group = 0;
    // A page longer than kLandingPiece, verified as it lands, is read in
    // pieces of at most that, and its checksum fed each piece as soon as
    // the piece lands (ChecksumLanded), while it is still in cache: hashing
    // a whole large page once it has landed reads it back from memory.
    struct Pieces {
      std::vector<ByteRange> ranges;  // where each READ of the group lands, in order
      size_t fed = 0;                 // how many of them `sum` has taken
      ChecksumStream sum;
    };
    std::shared_ptr<Pieces> pieces = nullptr;  // Launch sets it (or null: the page is checksummed whole)
    // Takes `sum` of the whole page as it lies in `buffers` (its READs ended).
    void TakeSum(const std::vector<StoreBuffer>& buffers);
  };
  // The pages of one home started together: one engine batch.
  struct ReadFlight {
    BatchRunner::Flight flight;
    net::Deadline by;               // no later than the read window of the lookup
    std::vector<Status> outcomes;   // per page (group), once landed
    bool landed = false;
  };
  struct Reads {
    std::vector<PageRead> pages;
    std::vector<ReadFlight> flights;
  };
  // Starts the READs of `pages` (key, where, home, check set) into their
  // keys' buffers as one flight that must end by `by`, appending them to
  // reads->pages. A page the engine refuses is left out and listed in
  // `refused` with the refusal (a flight of refusals only is not kept).
  // `first` requests go in the same flight, as groups 0..k-1 (the pages
  // are groups k..), into host memory of the nodes in epochs `first_epochs`.
  void Launch(std::vector<PageRead> pages, net::Deadline by, const std::vector<std::vector<StoreBuffer>>& buffers,
              const std::vector<Memory>& memory, Reads* reads, std::vector<std::pair<PageRead, Status>>* refused,
              const std::vector<TransferRequest>& first = {}, const std::vector<uint64_t>& first_epochs = {});
  // Checksums the verified pages of flight `flight` that are checksummed
  // as they land (VerifiesAsItLands) and whose READs alone have ended well
  // (PageRead::sum), a page read in pieces piece by piece (FeedPieces), in
  // order from reads->pages[*next], which it advances: a pass stops at the
  // first page still out. True when it took a page or a piece.
  bool ChecksumLanded(const std::vector<std::vector<StoreBuffer>>& buffers, Reads* reads, size_t flight,
                      size_t* next);
  // Adds to the checksum of `read` (read in pieces) each piece that has
  // landed since, in order, and sets read->sum once all have: true when it
  // added any. *failed: a piece's READ failed (the page is not checksummed;
  // its outcome fails it). Nothing once the flight is finished (freed).
  bool FeedPieces(const Reads& reads, PageRead* read, bool* failed);
  // The outcome of `page`'s READs, waiting for its flight the first time.
  const Status& Land(Reads* reads, const PageRead& page);
  // Without waiting: true, with the outcome of `page`'s READs in *outcome,
  // once they alone have ended (the flight stays for Land, which frees it)
  // or its flight's deadline has passed (Land's outcome then); false while
  // they are still out.
  bool PageLanded(Reads* reads, const PageRead& page, const Status** outcome);
  // The region versions READ for the guesses: a scratch slot per home,
  // in flights[flight] (group: its READ there).
  struct Probe {
    struct Home {
      std::string name;
      uint8_t* slot = nullptr;
      size_t group = 0;
    };
    std::vector<Home> homes;
    size_t flight = 0;
    bool Covers(const std::string& home) const;
  };
  // What a node's region versions READ takes: the kRegions versions, then
  // the node's epoch (NodeService writes it after them).
  static constexpr size_t kVersionsReadBytes = RegionVersions::kBytes + sizeof(uint64_t);
  // How long a GET waits for its homes' versions, at least, before it
  // looks up the guesses of the homes whose versions have not come (at
  // most a quarter of the time left: see ConfirmByVersions).
  static constexpr auto kVersionsWait = std::chrono::milliseconds(2);
  // Starts reading every key of `calls` whose location this process
  // remembers from the same member (guessed[i]: key i's read in
  // reads->pages), in one flight that also READs the region versions of
  // the homes whose guesses will be checksummed (`probe`).
  void StartGuesses(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                    const std::vector<Memory>& memory, const std::vector<NodeCall>& calls, net::Deadline deadline,
                    const std::function<net::Deadline(const NodeCall&)>& read_by, Reads* reads,
                    std::vector<size_t>* guessed, Probe* probe);
  // Waits for the guesses' flight (kVersionsWait, or a quarter of the time
  // left when longer), checksumming its pages as they land meanwhile, and
  // confirms each
  // checksummed guess of `later` (a call per probed home) whose region's
  // version is the one its location was answered with, on the node of the
  // epoch this view knows: the key's latest page. Those keys leave `later`
  // (no lookup) and are listed per home in `unasked`; the others stay, to
  // be looked up. Gives the scratch slots back.
  void ConfirmByVersions(const std::vector<std::vector<StoreBuffer>>& buffers, Probe* probe,
                         const std::vector<size_t>& guessed, net::Deadline deadline, std::vector<NodeCall>* later,
                         Reads* reads,
                         std::vector<std::pair<std::string, std::vector<size_t>>>* unasked);
  // Sends the lookups of the keys of `calls` (one message per home, all at
  // once); null when there are none. With less than LateMargin() left
  // before `deadline`, sends nothing: the keys are misses, no home blamed.
  using Asked = std::shared_ptr<Fanout>;
  Asked Ask(const std::vector<std::string>& keys, std::vector<NodeCall>* calls, net::Deadline deadline,
            std::vector<Status>* results);
  // Takes the answers of `asked` as they come (StartReads); the keys of a
  // home that does not answer get its failure.
  void Collect(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
               const std::vector<Memory>& memory, std::vector<NodeCall>* calls, Asked* asked, net::Deadline deadline,
               const std::function<net::Deadline(const NodeCall&)>& read_by, const std::vector<size_t>& guessed,
               std::vector<Status>* results, Reads* reads);
  // Time a READ or a lookup needs left before its deadline to be started:
  // a twentieth of KVF_STORE_DEADLINE_MS, at least 1 ms (later, it would
  // time out and blame a home that is fine).
  net::Deadline::duration LateMargin() const;
  // Pages read without a lookup are not seen by their home's LRU: their
  // keys are sent to it in a touch message, at most every kTouchEvery per
  // home (fire and forget).
  void QueueTouches(const std::string& home, const std::vector<std::string>& keys, const std::vector<size_t>& which);
  // Takes the answer of `call`: starts the READs of the keys it found (one
  // flight), confirms or moves the guesses, remembers the locations, or sets
  // the keys' results (a miss, too small buffers, a refusal).
  void StartReads(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                  const std::vector<Memory>& memory, const NodeCall& call, net::Deadline by,
                  const std::vector<size_t>& guessed, std::vector<Status>* results, Reads* reads);
  // A page's READs failed (refused or ended in error): the key's status,
  // and the home out of placement when its engine did not serve them.
  Status ReadFailed(const Status& failure, const std::string& key, const NodeView& home);
  // A confirmed page whose READs ended with `ended`: its key's result, its
  // bytes verified.
  void FinishRead(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                  const PageRead& read, const Status& ended, std::vector<Status>* results,
                  std::vector<uint64_t>* lengths);
  // The batch's shape, and each key's buffers (unregistered memory
  // included): InvalidArgument in results; `memory` says where each key's are.
  void CheckBuffers(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                    std::vector<Status>* results, std::vector<Memory>* memory) const;
  // The PUT of the keys `which`, their bytes in `sources`, as
  // KVF_STORE_PUT_MODE says: by WRITE (a reserve per home, the pages'
  // WRITEs in one engine batch, a commit per home) or by PullFrom.
  // `memory` says where each key's sources are: the writer checksums the
  // pages in host memory itself.
  // `grants`: whether slots homes granted ahead (KVF_STORE_PUT_GRANTS) may
  // be used; a retry of keys whose grant failed passes false.
  // `route`: where each key goes (its home, or Route::Ranked for a copy).
  void PutFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
               const std::vector<Memory>& memory, const std::vector<size_t>& which, std::vector<Status>* results,
               bool grants = true, Route route = Route::Home());
  // A home's part of a PUT by WRITE.
  struct Push {
    Slots slots;                     // its reserve's reply, or the slots it granted ahead
    bool granted = false;            // slots from a Credit: the commit names each page's key
    std::vector<size_t> slot_of;     // per key of its call: its slot in `slots`
    std::vector<size_t> group_of;    // per key of its call: the key's group in the flight, or SIZE_MAX
    BatchRunner::Flight flight;      // its pages' WRITEs
    std::vector<Status> wrote;       // per group
    CommitRequest commit;
    uint64_t losses = 0;             // ControlClient::Losses of the home as the commit went
  };
  // Reads the home's reserve reply in `call` (renewing, by `writes_by`, the
  // view of a home that restarted) and StartWrites. Whether the home holds
  // a reservation, which a commit must then end.
  bool StartPush(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                 const std::vector<Memory>& memory, net::Deadline writes_by, NodeCall* call, Push* push,
                 std::vector<Status>* results);
  // Starts the WRITEs of the call's pages into the slots of `push` (one
  // engine batch, a group per page); keys whose slot was refused get their
  // results. Pages in host memory to a pool this process maps are copied
  // into it at once (BatchRunner::Start).
  void StartWrites(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                   const std::vector<Memory>& memory, const NodeCall& call, Push* push, std::vector<Status>* results);

  // Slots a home granted this process for its next PUT there, asked for
  // in the commit of the last one (KVF_STORE_PUT_GRANTS): a PUT whose pages
  // all fit a credit WRITEs at once, and costs one round trip, not two.
  struct Credit {
    std::shared_ptr<const NodeView> node;
    uint64_t ticket = 0, epoch = 0;
    // ControlClient::Losses of the home when the commit that asked went:
    // the grant is used only while that connection lasts, so never one of
    // a home that restarted since.
    uint64_t losses = 0;
    std::vector<uint64_t> addrs, lengths;
    std::chrono::steady_clock::time_point usable_until;  // kGrantUsableMs (at most the deadline) after it came
  };
  static constexpr size_t kCreditsPerHome = 4;
  // Takes the credits `stale` marks out of `held` (credits_mu_ held); those
  // granted over a connection to `home` that still lasts go into `back`,
  // to be given back (the home holds them still).
  void TakeStaleLocked(const std::string& home, std::vector<Credit>* held,
                       const std::function<bool(const Credit&)>& stale, std::vector<Credit>* back);
  // Takes a credit of the call's home (of its epoch, still usable) whose
  // slots fit every page of the call, one each by length, into `push`
  // (true); credits no PUT may use any more are taken out, and given back
  // when their connection lasts.
  bool TakeCredit(const NodeCall& call, const std::vector<std::vector<StoreBuffer>>& sources, Push* push);
  // Keeps a credit for the next PUT; the oldest of its home is given back
  // when the home has kCreditsPerHome.
  void KeepCredit(Credit credit);
  // Gives back, at most every kCreditSweep, the credits past use whose
  // connection lasts (their homes would hold the slots a while longer, then
  // quarantine them): an idle writer holds no pool space for long. Each
  // public call runs it first.
  void SweepCredits();
  static constexpr auto kCreditSweep = std::chrono::milliseconds(100);
  std::atomic<int64_t> next_sweep_ns_{0};
  // Gives credits back to their homes (a commit of nothing), so their slots
  // are free at once; waits for the answers up to `by`.
  void ReleaseCredits(std::vector<Credit> credits, net::Deadline by);
  // The slots a commit asks for the next PUT to the home of `call`: its
  // pages' lengths, and half again as many of the first, since the next
  // batch may send more pages there; none when its pages are more than the
  // home grants at once (kMaxGrantSlots, 1/kGrantPoolShare of its pool).
  std::vector<uint64_t> GrantFor(const NodeCall& call, const std::vector<std::vector<StoreBuffer>>& sources) const;
  // One PUT exchange per home, which READs the pages from `sources`.
  // `if_absent`: PutRequest::if_absent; keys whose home is the member
  // `except` (when not null) fail with Unavailable, unsent.
  void PullFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                const std::vector<size_t>& which, std::vector<Status>* results, bool if_absent = false,
                const std::string* except = nullptr, Route route = Route::Home());
  // The keys `which` (GPU memory peers cannot reach) copied into the bounce
  // buffer and put from there, as many at a time as it holds.
  void PutBounced(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                  const std::vector<size_t>& which, std::vector<Status>* results);
  // Allocates and registers the bounce buffer at first use; bounce_mu_ held.
  Status EnsureBounce();

  Engine* const engine_;
  const Settings settings_;
  ControlClient* const control_;
  MemberView* const members_;
  const std::optional<LocalNode> self_;
  // The pools of same-host members this process maps (KVF_STORE_SHARE_POOLS),
  // attached as GroupByHome meets their nodes, forgotten as they leave.
  mutable PoolMaps maps_;
  mutable std::atomic<const MemberSnapshot*> maps_for_{nullptr};  // the snapshot maps_ was last kept for
  BatchRunner runner_;
  LocationCache locations_;  // KVF_STORE_LOCATION_CACHE
  // Where the region versions of a call's homes are READ to.
  static constexpr size_t kScratchSlots = 64;
  ScratchSlots scratch_;
  // KVF_STORE_VERIFY_OVERLAP as this engine's rails decide it (with
  // verification on), for pages of at most kLandingPiece and for longer
  // ones (VerifyAsPageLands): ConfirmByVersions checksums those pages as
  // they land, and Launch reads the longer ones in pieces.
  const bool verify_short_as_they_land_;
  const bool verify_long_as_they_land_;
  bool VerifiesAsItLands(uint64_t length) const {
    return length > kLandingPiece ? verify_long_as_they_land_ : verify_short_as_they_land_;
  }
  // Keys read without a lookup, per home, until their touch message goes.
  static constexpr auto kTouchEvery = std::chrono::milliseconds(200);
  static constexpr size_t kMaxTouches = 8192;
  static constexpr size_t kMaxTouchBytes = 1 << 20;  // well under a control frame
  struct Touches {
    std::unordered_set<std::string> keys;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point sent{};
  };
  std::mutex touch_mu_;
  std::unordered_map<std::string, Touches> touches_;

  // The pins this process holds: per key, the members that hold them and
  // how many. An unpin goes where its pin went, even when the key's home
  // has moved since (a member marked down and back, one joining): sent to
  // the new home it would leave the old one's page pinned for good, and
  // take another process's pin.
  struct HeldPin {
    std::string home;
    uint32_t count = 0;
  };
  std::mutex pins_mu_;
  std::unordered_map<std::string, std::vector<HeldPin>> pins_;
  // Records the pins `calls` made (their replies in `results`).
  void RecordPins(const std::vector<std::string>& keys, const std::vector<NodeCall>& calls,
                  const std::vector<Status>& results);
  // Where the unpin of each key goes: the member its pin went to, else its
  // home.
  std::vector<NodeCall> UnpinCalls(const std::vector<std::string>& keys, std::vector<Status>* results, Route route);
  // Forgets one pin of key i at the member of `call` (it was released, or
  // the member says there is none).
  void ForgetPin(const std::string& key, const NodeCall& call);

  // Host memory GPU pages go through on their way to a home that cannot
  // READ them where they are (KVF_STORE_BOUNCE_BYTES); one PUT at a time uses it.
  std::mutex bounce_mu_;
  std::unique_ptr<uint8_t[]> bounce_;
  SegmentHandle self_segment_ = -1;

  std::mutex credits_mu_;
  std::unordered_map<std::string, std::vector<Credit>> credits_;  // by home, oldest first

  struct Counters {
    std::atomic<uint64_t> put_keys{0}, put_bytes{0}, put_failures{0};
    std::atomic<uint64_t> get_keys{0}, get_hits{0}, get_bytes{0};
    std::atomic<uint64_t> misses_absent{0}, misses_checksum{0}, misses_late{0}, get_failures{0};
    std::atomic<uint64_t> get_unverified{0}, get_cached{0}, get_cached_stale{0}, get_no_lookup{0}, put_bounced{0};
    std::atomic<uint64_t> put_granted{0};
    std::atomic<uint64_t> exists_keys{0}, exists_hits{0}, exists_local{0};
    std::atomic<uint64_t> control_calls{0}, control_failures{0}, copied_pages{0};
  };
  mutable Counters counters_;
  static void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }

  // Calls of this client under way (CallScope counts them).
  std::atomic<int> active_calls_{0};
  struct CallScope {
    explicit CallScope(std::atomic<int>* n) : n_(n) { n_->fetch_add(1, std::memory_order_relaxed); }
    ~CallScope() { n_->fetch_sub(1, std::memory_order_relaxed); }
    std::atomic<int>* n_;
  };
};

}  // namespace kvfabric::store
