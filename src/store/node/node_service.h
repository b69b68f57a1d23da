// NodeService: the serving side of a store node. It owns the node's pool
// (host memory registered with the engine), the index of the pages in it
// (PageTable) and the control server that answers other processes:
//
//   hello, lookup, exists, remove, remove all, pin, unpin, touch, stats
//       answered on the control server's thread, under the table's lock;
//   reserve (a PUT by WRITE, KVF_STORE_PUT_MODE=push)
//       slots reserved on the control server's thread and kept under a
//       ticket (Reservations) until the writer's commit, or abandoned when
//       the writer's budget has passed;
//   commit
//       the slots the writer says it wrote committed with the checksums it
//       took, the others abandoned, on the control server's thread; handed
//       to a put thread instead when pages need the node's checksum (the
//       writer's bytes were GPU memory);
//   put (a PUT by READ, KVF_STORE_PUT_MODE=pull)
//       slots reserved and the READs of the pages from the writer's
//       registered buffers started on the control server's thread (when the
//       writer's segment is open already: no handshake ever blocks that
//       thread), then handed to one of KVF_STORE_PUT_THREADS threads, which
//       wait for the READs, take the checksums, commit the pages and reply
//       with a status per key. The hand-over costs no time on the way of
//       the bytes: they move while the put thread wakes up.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/settings.h"
#include "store/mover/batch_runner.h"
#include "store/wire/control_server.h"
#include "store/wire/messages.h"
#include "store/node/page_table.h"
#include "store/node/tombstones.h"
#include "store/node/pin_ledger.h"
#include "store/node/put_queue.h"
#include "store/wire/region_versions.h"
#include "store/node/reservations.h"
#include "store/wire/shared_pool.h"
#include "store/node/writer_segments.h"

namespace kvfabric::store {

class NodeService {
 public:
  // Allocates and registers a pool of settings.store_pool_bytes (> 0) and
  // starts serving on settings.store_listen (empty: the engine's host, any
  // port). `engine` outlives the service.
  static Status Start(Engine* engine, const Settings& settings, std::unique_ptr<NodeService>* out);
  ~NodeService();  // Stop()
  // Stops serving (puts under way finish or fail first), unregisters and
  // frees the pool. Idempotent.
  void Stop();

  const std::string& address() const { return address_; }
  const NodeInfo& info() const { return info_; }
  NodeStats Stats();

  // The request handler, with the control connection that carried the
  // request; also called directly for this node's own keys (kLocal).
  static constexpr uint64_t kLocal = 0;
  void Handle(uint64_t connection, std::string payload, ControlServer::Reply reply);
  // A control connection closed: the pins it took and did not end are
  // released (its process died, or closed its store).
  void ConnectionClosed(uint64_t connection);
  // A page copied out to be handed over to its key's home (Handoff): its
  // bytes at [at, at + length) of the caller's memory.
  struct CopiedPage {
    std::string key;
    uint64_t generation = 0;  // the page copied: RemoveCopied removes no newer one
    uint64_t at = 0, length = 0;
  };
  // Copies into `into` (`capacity` bytes) unpinned pages whose keys
  // `elsewhere` says home on another member now, as many as fit, and
  // returns them. Pinned pages stay (a caller is using them).
  std::vector<CopiedPage> CopyPagesHomedElsewhere(const std::function<bool(std::string_view key)>& elsewhere,
                                                  uint8_t* into, uint64_t capacity);
  // Removes each of `pages` that is still the page copied (not overwritten
  // nor pinned since); returns how many.
  size_t RemoveCopied(const std::vector<CopiedPage>& pages);

  // Test hook: the pool's bytes (to corrupt a page on purpose).
  uint8_t* pool_for_testing() { return pool_; }

 private:
  struct PutJob {
    // A commit of a PUT by WRITE: the reserved slots and which were written.
    bool commit = false;
    Reservations::Entry reservation;
    std::vector<CommitItem> commit_items;
    std::vector<uint64_t> grant;  // lengths of the slots the writer asks for its next PUT
    // A PUT by READ:
    PutRequest request;
    net::Deadline deadline;  // from its arrival: the writer's budget, at most KVF_STORE_DEADLINE_MS
    ControlServer::Reply reply;
    // Set by StartPut:
    bool started = false;
    std::vector<Status> results;  // per item: OK, or why it was refused
    std::vector<uint64_t> offsets, lengths;
    std::vector<bool> reserved;
    BatchRunner::Flight flight;
    std::vector<Status> outcomes;  // per item: its READs' refusal, then (FinishPut) their end
  };
  // The pool's alignment (its allocator's) and the mapping that holds the
  // region versions.
  static constexpr uint64_t kPoolAlignment = 4096;
  // Keys removed lately that a node remembers at most (Tombstones).
  static constexpr size_t kMaxTombstones = 1 << 16;
  static constexpr size_t kVersionsMapBytes = SharedPool::kVersionsBytes;
  static_assert(RegionVersions::kBytes + sizeof(uint64_t) <= kVersionsMapBytes);  // the versions, then the epoch

  // `keys`: the table in the shared pool's file (not valid when the pool is private).
  NodeService(Engine* engine, const Settings& settings, uint64_t* version_words, SharedKeys keys);
  std::string Answer(uint64_t connection, Op op, std::string_view payload, Status* status);
  void PutLoop();
  // Queues `job`, of `bytes` on the wire, for a put thread (or replies
  // Closed when stopping); `needs_open`: its writer's segment is not open.
  void Queue(PutJob job, size_t bytes, bool needs_open);
  // kReserve: the slots, under a ticket that only `connection` commits.
  std::string ReserveSlots(uint64_t connection, std::string_view payload, Status* status);
  // kCommit: takes `connection`'s reservation and queues its commit, or replies.
  void TakeCommit(uint64_t connection, std::string_view payload, ControlServer::Reply reply);
  // Checksums and commits the written slots of a reservation, frees the
  // unused and holds back the others; the per-item statuses, and the slots
  // granted for the writer's next PUT.
  CommitReply FinishCommit(PutJob* job);
  // Reserves slots of `lengths` for `owner`'s next PUT (table_mu_ held):
  // as many as the pool gives without evicting a page of generation
  // `keep_from` or later (the commit's own), at most kMaxGrantSlots and
  // 1/kGrantPoolShare of the pool, with every grant open at most
  // 1/kGrantsPoolShare of it (messages.h), held for kGrantUsableMs, the
  // deadline and a second of grace (the writer starts its WRITEs within
  // kGrantUsableMs of receiving them, and commits within its deadline).
  Slots GrantSlots(const std::vector<uint64_t>& lengths, std::chrono::steady_clock::time_point now, uint64_t keep_from,
                   uint64_t owner);
  // The memory a node serves from, before the node exists: its pool, region
  // versions and table of keys, in one shared file (KVF_STORE_SHARE_POOLS)
  // or private.
  struct Mapped {
    SharedPool shared;
    PoolShare share;
    void* words = nullptr;
    void* pool = nullptr;
    void* keys_memory = nullptr;
    size_t keys_bytes = 0;
    SharedKeys keys;
  };
  // Start's steps: maps the memory; registers the versions (read-only to
  // peers) and the pool, faulted in first (PreparePool); describes the
  // node (NodeInfo, a new epoch); serves its control channel and starts
  // the put threads.
  static Status MapMemory(const Settings& settings, Mapped* m);
  Status RegisterMemory();
  Status PreparePool();
  void Describe(const PoolShare& share);
  Status Serve();
  // Abandons the slots of reservations whose writer's budget has passed
  // (under table_mu_).
  void AbandonExpired(std::chrono::steady_clock::time_point now);
  // How long a pushed slot that was abandoned stays quarantined: a WRITE
  // the writer gave up on may still land until its engine ends it.
  std::chrono::steady_clock::duration PushHold() const;
  // Reserves the items' slots and starts their READs from `writer`'s
  // buffers (one engine batch; `open` is OpenSegment's outcome for it).
  void StartPut(PutJob* job, const Status& open, SegmentHandle writer);
  // Waits for the READs, checksums and commits the pages read whole,
  // gives back the slots of the others; the per-item statuses.
  std::vector<Status> FinishPut(PutJob* job);
  // Replies Closed to a put the node will not finish (it stops).
  void DropPut(PutJob* job);
  // Whether a page of `length` bytes may be stored (1 to max_page_bytes):
  // OK, or InvalidArgument naming `key` and why.
  Status CheckPageLength(const std::string& key, uint64_t length) const;
  // The page's length, or why the item is refused (nothing reserved).
  Status CheckItem(const PutItem& item, uint64_t* length) const;

  Engine* const engine_;
  const Settings settings_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  uint8_t* pool_ = nullptr;
  size_t pool_bytes_ = 0;
  NodeInfo info_;
  std::string address_;

  void* version_words_ = nullptr;  // kVersionsMapBytes, mapped and registered
  SharedPool shared_;  // the memfd holding both when the pool is shared (KVF_STORE_SHARE_POOLS)
  RegionVersions versions_;        // over version_words_, bumped by table_ under table_mu_
  SharedKeys keys_;  // in shared_'s file, kept by table_ under table_mu_ (not valid: the pool is private)
  void* keys_memory_ = nullptr;  // its mapping, and its bytes
  size_t keys_bytes_ = 0;
  std::mutex table_mu_;
  PageTable table_;
  Tombstones removed_;  // keys removed lately: a hand-over of one is refused (under table_mu_)
  Reservations reservations_;  // under table_mu_
  NodeStats counters_;  // the request counters (under table_mu_); the table's own come from table_.stats()
  PinLedger pins_;  // the pins each control connection holds (under table_mu_)

  std::unique_ptr<ControlServer> server_;

  WriterSegments writers_;  // opened by the put threads

  // With two put threads or more, one is always free of handshakes with new writers.
  PutQueue<PutJob> puts_;
  std::vector<std::thread> workers_;
  BatchRunner runner_;
};

}  // namespace kvfabric::store
