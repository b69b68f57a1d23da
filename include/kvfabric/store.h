// kvfabric::Store: a KV-cache store over the engine, with no master. Nodes
// give pools of registered host memory; every process (node or client)
// places a key itself on the member whose pool holds it, asks that member
// once per batch where the pages are, and reads them straight into its own
// registered buffers with one-sided READ. A PUT asks the member for slots
// in its pool and WRITEs the caller's registered buffers into them, then
// commits them (KVF_STORE_PUT_MODE=pull: the member READs them instead): no
// copy on either side. A GET returns exactly what the matching PUT stored,
// or a miss: every page read into host memory is checked against the
// checksum taken when it was stored.
//
//   Settings s = engine->settings();
//   s.store_pool_bytes = 4 * Settings::GiB;   // 0: a client only
//   std::unique_ptr<Store> store;
//   Store::Create(engine.get(), s, &store);
//   std::vector<Status> st;
//   store->BatchPut({"k1"}, {{{page, 131072}}}, &st);   // page: registered memory
//
// Members come from the engine's metadata backend (etcd or
// kvfabric-metadata-server) or, with p2p metadata, from KVF_STORE_MEMBERS.
// docs/design/store.md says how it works and what it guarantees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/settings.h"
#include "kvfabric/stats.h"
#include "kvfabric/status.h"
#include "kvfabric/store_stats.h"

namespace kvfabric {

// A piece of a page in memory registered with the store's engine.
struct StoreBuffer {
  void* addr = nullptr;
  size_t length = 0;
};

// How a PUT stores its pages (Store::BatchPut).
struct StorePutOptions {
  // Copies of each page, on the members placement ranks first for its key
  // (1: its home alone); at most KVF_STORE_MAX_COPIES, at most the members
  // with a pool. A key is OK once every copy is stored.
  uint32_t copies = 1;
};

// Where a page is (Store::BatchLocate): its member's engine segment, the
// page's address there, its length, and how long from the call the member
// keeps the page's slot for it (the member's KVF_STORE_READ_WINDOW_MS).
struct StorePage {
  std::string segment;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t valid_ms = 0;
};

// A field per row of KVF_STORE_STATS (kvfabric/store_stats.h).
struct StoreStats {
#define KVF_STORE_STAT_FIELD_(name, meaning) uint64_t name = 0;
  KVF_STORE_STATS(KVF_STORE_STAT_FIELD_)
#undef KVF_STORE_STAT_FIELD_
};

// Threads: every method may be called from any thread at once.
class Store {
 public:
  // A node over `engine`, which must outlive it (Close the store first).
  // `settings` gives the KVF_STORE_* values (pass engine->settings(), maybe
  // changed): a pool of store_pool_bytes is allocated, registered with the
  // engine and offered to the others; the control service listens on
  // store_listen. Members come from the engine's metadata backend, or
  // store_members with p2p metadata.
  static Status Create(Engine* engine, const Settings& settings, std::unique_ptr<Store>* out);
  ~Store();  // Close()
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  // Leaves the membership, stops serving (peers' calls to this node fail
  // from then on, their keys placed elsewhere once the membership drops it)
  // and unregisters the pool. Calls under way finish first. Idempotent.
  //
  // After fork(), the child's copy of a store is inert, like its engine's:
  // every call returns Closed ("create a new Engine and Store in the
  // child"), Stats and Members are empty, and Close and the destructor
  // leave the parent's threads, connections, membership record and pool
  // alone (the copy's memory is leaked on purpose).
  void Close();

  // Batch calls. keys[i] goes with buffers[i]: a page is its buffers' bytes
  // in order (several buffers, e.g. a layer's k and v, make one page). The
  // call returns OK with a Status per key in `results`, or, when the call
  // itself is wrong (keys and buffers of different counts, the store
  // closed), that error and no results. A batch costs one control message
  // per member involved. No call waits longer than KVF_STORE_DEADLINE_MS
  // for a member: the keys of one that is dead or slow fail with
  // NetworkError or Timeout and the others complete.

  // Stores each page (replacing an older page of the key). The buffers must
  // not change until the call returns. Per key: OK; InvalidArgument (empty
  // key, no bytes, larger than KVF_STORE_MAX_PAGE_BYTES, unregistered
  // memory, GPU memory no rail exposes larger than KVF_STORE_BOUNCE_BYTES,
  // which such pages are copied through); Busy (the member's pool is full of pages in use: pinned, or
  // read moments ago); Unavailable (no member has a pool); NetworkError,
  // Timeout. With options.copies > 1, each copy is stored on its member
  // (the key's next-ranked members hold the others): the key is OK once
  // all are, else it has the first copy's failure that occurred; the call
  // is InvalidArgument for copies of 0 or past KVF_STORE_MAX_COPIES, and a
  // key whose copies outnumber the members with a pool is Unavailable.
  Status BatchPut(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                  std::vector<Status>* results, const StorePutOptions& options = {});
  // Reads each page into its buffers (their total must be at least the
  // page's length; the page fills them in order). Per key: OK with
  // (*lengths)[i] the page's length; NotFound, a miss (absent, evicted, or
  // read but not verified: the message says which); InvalidArgument
  // (buffers too small or unregistered); NetworkError, Timeout. The bytes
  // of a key that is not OK are unspecified. After a Timeout its READs
  // are ended (Engine::ExpireBatch): over tcp and verbs their connection is
  // closed before the call returns, so a node that hung and goes on writes
  // nothing later; over shm none is left in flight. Over efa a READ the
  // device still holds may complete later (until it ends or the engine is
  // closed): there, do not give those buffers to other data meanwhile.
  // Pages read into host memory
  // are checksummed; into GPU memory they are not (counted in
  // get_unverified): the read window alone keeps them whole.
  Status BatchGet(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                  std::vector<Status>* results, std::vector<uint64_t>* lengths);
  // Whether each key has a page, and the number of keys from the first
  // that all do (the prefix a cache can reuse). An unreachable member's
  // keys count as absent.
  Status BatchExists(const std::vector<std::string>& keys, std::vector<bool>* found, size_t* leading_hits);
  // Where each key's page is now, for READs of parts of it (a layer-wise
  // load reads each layer's range of every page): (*pages)[i], to read with
  // the engine (OpenSegment(segment), then READs within [addr, addr +
  // length)). The member keeps the page's slot for valid_ms (its
  // KVF_STORE_READ_WINDOW_MS) from this call: READs that end within it see
  // the page whole, even if
  // the key is overwritten, evicted or removed meanwhile; later ones may
  // see another page. Parts are not checksummed (only a whole page can be).
  // Per key: OK, NotFound, or the member's failure.
  Status BatchLocate(const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                     std::vector<Status>* results);
  // Per key: OK (removed) or NotFound (there was none), or the member's failure.
  Status BatchRemove(const std::vector<std::string>& keys, std::vector<Status>* results);
  // Pins keep pages from eviction while a caller uses them; n pins need n
  // unpins. An unpin goes to the member this Store's pin went to, even if
  // the key's home has moved since. Per key: OK, NotFound (no page, or for
  // Unpin not pinned: a member that restarted since the pin has none).
  Status BatchPin(const std::vector<std::string>& keys, std::vector<Status>* results);
  Status BatchUnpin(const std::vector<std::string>& keys, std::vector<Status>* results);
  // Removes every page of every member; `removed` counts them. A member
  // that could not be reached makes the call fail (naming it) after the
  // others were emptied.
  Status RemoveAll(uint64_t* removed);

  StoreStats Stats() const;
  // Latency of this process's batch calls, one histogram per call that ran
  // ("put", "get", "exists"; size_class is "batch"): from the call to its
  // return, whatever its keys' results.
  std::vector<LatencyStats> Latency() const;
  // This node's control address ("host:port"): its name among the members.
  const std::string& name() const;
  // The members now in placement, by name.
  std::vector<std::string> Members() const;

  struct Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfabric
