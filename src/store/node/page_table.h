// PageTable: a node's index of the pages in its pool, key -> where the page
// is, over the PoolAllocator that places them. It decides which pages are
// evicted (least recently used, unpinned) and when a freed slot may be
// written again: a GET may still be reading a slot for read_window after the
// Lookup that returned it, so until then the slot is quarantined.
//
// A pure data structure: one thread at a time (the caller locks), and the
// time is always passed in (`now`, never read from a clock), so it is a
// function of its calls. Calls are expected with `now` not going backwards.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvfabric/status.h"
#include "store/wire/checksum.h"
#include "store/node/pool_allocator.h"
#include "store/wire/region_versions.h"
#include "store/wire/shared_keys.h"

namespace kvfabric::store {

struct PageEntry {
  uint64_t offset = 0;      // in the pool
  uint64_t length = 0;      // the page's bytes (its slot: rounded up to the alignment)
  uint64_t generation = 0;  // unique per Commit on the table, from 1; 0: no page
  Checksum checksum;
  bool operator==(const PageEntry&) const = default;
};

// Every byte of the pool is in exactly one of used, reserved, quarantined and
// free: their sum is pool_bytes.
struct PageTableStats {
  uint64_t pool_bytes = 0;         // the allocator's pool (rounded down to the alignment)
  uint64_t used_bytes = 0;         // the slots of committed pages
  uint64_t reserved_bytes = 0;     // the slots of puts in progress (reserved, not committed nor abandoned)
  uint64_t quarantined_bytes = 0;  // freed slots awaiting reuse
  uint64_t free_bytes = 0;         // the allocator's free extents
  uint64_t pages = 0, pinned_pages = 0;
  uint64_t evictions = 0;  // pages Reserve evicted
  uint64_t removals = 0;   // pages Remove and RemoveAll removed
  uint64_t overwrites = 0;  // pages a Commit of the same key replaced
  uint64_t refusals = 0;   // Reserve calls that failed with Busy
  bool operator==(const PageTableStats&) const = default;
};

// What happened to a page: stored under its key by a Commit, or gone from
// it, and why (RemoveIf's says kHandedOver unless its caller says otherwise).
enum class PageEvent { kStored, kEvicted, kRemoved, kOverwritten, kHandedOver };
const char* PageEventName(PageEvent e);

class PageTable {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Told every PageEvent as it happens, inside the table's call (so under
  // the caller's lock): the page's key and entry.
  using Observer = std::function<void(PageEvent, std::string_view key, const PageEntry&)>;

  // A pool of `pool_bytes` placed by a PoolAllocator with `alignment`.
  // The reuse rule: a freed slot (evicted, removed, overwritten) is not
  // handed out again until `read_window` (>= 0) after the last Lookup that
  // returned its page; a slot whose page was never looked up is reusable at
  // once. An abandoned slot waits read_window from the Abandon.
  // With `versions` (may be null; it outlives the table), every page that
  // leaves its key (evicted, removed, overwritten, RemoveAll) bumps the
  // version of its region first. With `keys` (may be null; it outlives the
  // table), a key is entered there when its first page is committed and
  // erased when it has none left.
  PageTable(uint64_t pool_bytes, std::chrono::milliseconds read_window, uint64_t alignment = 4096,
            RegionVersions* versions = nullptr, SharedKeys* keys = nullptr);
  // The index views keys stored in the pages: moved, never copied.
  PageTable(PageTable&&) = default;
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  // A slot of at least `length` bytes for a PUT to fill, then Commit or
  // Abandon. First returns the quarantined slots whose wait is over to the
  // allocator, then allocates (best fit). When nothing fits, evicts
  // unpinned pages, least recently used first, until their freed slots make
  // room: only pages whose slots are free at once (not read within their
  // read window: evicting those would lose them and give no room now) and
  // whose generation is below `keep_from` (a caller's own newest pages,
  // see next_generation()). Evicted pages free their slots at once.
  //  - Busy when even evicting every such page would not make room now:
  //    the rest of the pool is pinned, reserved, quarantined, held by pages
  //    read within the read window or kept, or free only in pieces too
  //    small. Then no page is evicted and nothing changes but
  //    stats().refusals (and the expired quarantine returned first). The
  //    message says how much of each, when the first quarantined slot comes
  //    back, and what to do.
  //  - InvalidArgument when `length` is 0 or larger than the pool.
  // A refusal costs a walk over every unpinned page (unless the free and
  // unpinned bytes together are too few, which is seen at once).
  Status Reserve(uint64_t length, TimePoint now, uint64_t* offset, uint64_t keep_from = UINT64_MAX);
  // The generation the next Commit gives its page: pages committed from
  // now on have this generation or a higher one.
  uint64_t next_generation() const { return next_generation_; }

  // Gives back the reserved slot at `offset` of a PUT that failed. A late
  // transfer may still write it, so it is quarantined until the longer of
  // read_window and `hold` after `now` (a writer's WRITE that the writer
  // gave up on may land later than a READ this node gave up on). Anything
  // but a reserved slot is ignored.
  void Abandon(uint64_t offset, TimePoint now, std::chrono::steady_clock::duration hold = {});
  // Gives back the reserved slot at `offset` that no transfer was ever
  // started into (a granted slot its writer did not use): free at once.
  // Anything but a reserved slot is ignored.
  void Unreserve(uint64_t offset, TimePoint now);

  // Makes the reserved slot at `offset` the page of `key` and returns its
  // entry. `length` is the one given to Reserve (any length with the same
  // slot size is taken). The page is most recently used and has not been
  // looked up. A page the key had is replaced (an overwrite): its slot is
  // freed under the reuse rule. Pins belong to the key: they stay with the
  // new page. An `offset` that is not reserved, or a `length` that does not
  // match its slot, changes nothing and returns an entry of generation 0.
  PageEntry Commit(std::string_view key, uint64_t offset, uint64_t length, Checksum checksum, TimePoint now);

  // The page of `key` in `out` (true), or false. The page becomes most
  // recently used and `now` its last lookup: its slot is not reused before
  // now + read_window.
  bool Lookup(std::string_view key, TimePoint now, PageEntry* out);
  // Whether `key` has a page (its length in `length`, when given). It
  // becomes most recently used; its read window is not extended (the caller
  // reads nothing). A hash lookup and a list splice.
  bool Contains(std::string_view key, TimePoint now, uint64_t* length = nullptr);

  // Removes the page of `key` (true when there was one), its slot freed
  // under the reuse rule; the key's pins go with it.
  bool Remove(std::string_view key, TimePoint now);
  // Removes every page, as Remove does; returns how many. Reserved slots of
  // puts in progress stay reserved.
  size_t RemoveAll(TimePoint now);
  // The unpinned pages whose key `pick` says, with their entries, taken
  // in no set order until the next would pass `max_bytes` of page bytes
  // (a page over it alone is passed over). Changes nothing: no page
  // becomes more recently used.
  std::vector<std::pair<std::string, PageEntry>> Select(const std::function<bool(std::string_view key)>& pick,
                                                        uint64_t max_bytes) const;
  // Removes, as Remove does, the page of `key` if it is the one of
  // `generation` and unpinned (true); a page overwritten or pinned since
  // stays. The observer is told `why`.
  bool RemoveIf(std::string_view key, uint64_t generation, TimePoint now, PageEvent why = PageEvent::kHandedOver);

  // Every page event from now on goes to `observer` (null: none), a trace
  // of where each page was: a debugging aid, off by default.
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // A pinned page is never evicted; Remove and an overwrite still apply.
  // Pins are counted (n Pins need n Unpins) and belong to the key. Pin of a
  // key without a page: false, nothing changes. Unpin of a key that is not
  // pinned: false. A page whose last pin goes becomes most recently used.
  bool Pin(std::string_view key);
  bool Unpin(std::string_view key);
  // Pins every key of `keys` that has a page ((*pinned)[i]: whether key i
  // had one), or none: Busy, with nothing changed, when the slots of the
  // pages it would newly pin (each counted once) would take the pinned
  // bytes past `max_pinned_bytes`, so pins never hold the whole pool.
  Status PinAll(const std::vector<std::string_view>& keys, uint64_t max_pinned_bytes, std::vector<bool>* pinned);

  PageTableStats stats() const;

 private:
  struct Page {
    std::string key;  // the index's keys view this string
    PageEntry entry;
    TimePoint last_lookup;  // kNever: never looked up
    uint32_t pins = 0;
  };
  // Most recently used first. Splicing between them keeps nodes in place.
  using Pages = std::list<Page>;
  struct Quarantined {
    TimePoint reusable_at;
    uint64_t offset, bytes;
    bool operator>(const Quarantined& o) const { return reusable_at > o.reusable_at; }
  };
  static constexpr TimePoint kNever = TimePoint::min();

  uint64_t SlotBytes(const Page& p) const { return allocator_.ExtentBytes(p.entry.length); }
  TimePoint ReusableAt(const Page& p) const { return p.last_lookup + read_window_; }
  Pages& ListOf(const Page& p) { return p.pins > 0 ? pinned_ : unpinned_; }
  // The page of `key`; unpinned_.end() when there is none.
  Pages::iterator Find(std::string_view key);
  void Touch(Pages::iterator page);
  void Count(const Page& p, bool add);

  // Frees the slot at `offset` once `reusable_at` has come: at once when it
  // has, else through the quarantine.
  void Release(uint64_t offset, uint64_t bytes, TimePoint reusable_at, TimePoint now);
  void ReleaseSlot(const Page& p, TimePoint now) { Release(p.entry.offset, SlotBytes(p), ReusableAt(p), now); }
  // The page leaves its key: its region's version goes up.
  void Retire(const Page& p);
  // Takes the page out of the table (its slot: the caller's business),
  // telling the observer `why`.
  void Forget(Pages::iterator page, PageEvent why);
  // Removes `page` as Remove does, telling the observer `why`.
  void RemovePage(Pages::iterator page, PageEvent why, TimePoint now);
  void Tell(PageEvent e, const Page& p) const {
    if (observer_) observer_(e, p.key, p.entry);
  }
  // Returns the quarantined slots whose wait is over to the allocator.
  void ReleaseExpired(TimePoint now);
  // Evicts as Reserve says until a free extent of `bytes` exists (true), or
  // changes nothing (false).
  bool EvictFor(uint64_t bytes, TimePoint now, uint64_t keep_from);
  Status NoRoom(uint64_t length, TimePoint now) const;

  PoolAllocator allocator_;
  const std::chrono::steady_clock::duration read_window_;
  std::unordered_map<std::string_view, Pages::iterator> index_;  // key -> its page
  Pages unpinned_;  // the eviction order, oldest at the back
  Pages pinned_;
  std::unordered_map<uint64_t, uint64_t> reserved_;  // offset -> slot bytes
  std::priority_queue<Quarantined, std::vector<Quarantined>, std::greater<>> quarantine_;  // soonest on top
  RegionVersions* const versions_;
  SharedKeys* const keys_;
  Observer observer_;
  uint64_t next_generation_ = 1;
  uint64_t used_bytes_ = 0, pinned_bytes_ = 0, reserved_bytes_ = 0, quarantined_bytes_ = 0;
  uint64_t evictions_ = 0, removals_ = 0, overwrites_ = 0, refusals_ = 0;
};

}  // namespace kvfabric::store
