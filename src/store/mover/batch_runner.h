// BatchRunner: runs the transfers of many keys as one engine batch and tells
// each key's outcome apart, for the store's GETs (READs of pages into the
// caller's buffers) and PUTs (READs of the writer's buffers into the pool).
// One batch, not one per page: the engine posts them in one call and the
// caller wakes once when they are done (measured: a GET of 32 pages of 128
// KiB as 32 batches spent a tenth of its client's progress thread on the
// extra wake-ups and posts).
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "kvfabric/engine.h"
#include "net/socket.h"
#include "store/mover/copier.h"
#include "store/mover/pool_maps.h"

namespace kvfabric::store {

class BatchRunner {
 public:
  // `maps`, when given, names the same-host pools this process maps: see Start.
  explicit BatchRunner(Engine* engine, PoolMaps* maps = nullptr) : engine_(engine), maps_(maps) {}
  ~BatchRunner();  // frees the batches it still holds that have ended

  // Groups of requests in flight as one engine batch (Start), until Finish.
  struct Flight {
    BatchId batch = 0;
    bool allocated = false;
    std::vector<size_t> first_task;  // per group: its first task in the batch, or kNotSubmitted
    std::vector<size_t> tasks;       // per group: how many requests it has
    std::vector<bool> copied;        // per group: copied to or from a mapped pool (see Start); empty: none
    std::vector<size_t> first_copy;  // per copied group: its first piece in `copies`, or kCopiedHere
    // The copies on the Copier's thread, when they were not made in Start;
    // a flight dropped before they are done waits for them (they write
    // memory its owner is about to let go of).
    struct Copies {
      std::shared_ptr<const Copier::Job> job;
      Copies() = default;
      Copies(const Copies&) = default;
      Copies(Copies&&) = default;
      Copies& operator=(const Copies&) = default;
      Copies& operator=(Copies&& other) {
        if (job) job->Wait();
        job = std::move(other.job);
        return *this;
      }
      ~Copies() {
        if (job) job->Wait();
      }
    } copies;
    size_t Copied(size_t from_group = 0) const {  // how many groups from `from_group` on were
      size_t n = 0;
      for (size_t g = from_group; g < copied.size(); ++g) n += copied[g] ? 1 : 0;
      return n;
    }
  };
  static constexpr size_t kNotSubmitted = static_cast<size_t>(-1);

  // Submits `requests`, of which group g is [groups[g].first,
  // groups[g].second), as one engine batch: in one call, or one call per
  // group when the engine refuses the whole (unregistered or out-of-range
  // memory: a bad group never stops the others). Sets (*outcomes)[g] to the
  // engine's refusal of group g, OK when it was submitted (or is empty).
  // A flight that submitted nothing needs no Finish.
  // A group g whose local memory is host memory, with copyable[g] the epoch
  // of the node its requests reach (kNoCopy otherwise), all of whose
  // requests reach a pool mapped from that node in that epoch (PoolMaps: a
  // node restarted under the same segment is another pool) is copied
  // instead, in the order of the requests, and not submitted: on the
  // Copier's thread when CopyOnThread says so, where it ends as its pieces
  // are copied; else here, each group followed at once by `copied(g)` (its
  // bytes still in cache), with the Copier taking part (HereShare). Copies
  // never fail. Such a group whose pool's node has stopped serving it
  // (PoolMaps::Gone) is not submitted either: it fails at once, with
  // NetworkError, as a READ of a node that died would.
  // The last `tail` groups in the order of the requests (a GET's region
  // versions, one group per home) are copied after every other group, or,
  // when one of them cannot be copied (its READ goes through the fabric at
  // once), every group is copied here before anything is submitted.
  void Start(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
             Flight* flight, std::vector<Status>* outcomes, const std::vector<uint64_t>& copyable = {},
             const std::function<void(size_t group)>& copied = {}, size_t tail = 0);
  static constexpr uint64_t kNoCopy = 0;  // an epoch no node has (NodeService never draws it)
  // Whether a flight's copies to and from mapped pools, `bytes` in all and
  // `largest` in its largest group, go to the Copier's thread (true) or are
  // made in Start on the caller's, when the Copier is free (busy with
  // another thread's flight, the caller makes them all). Measured on shm,
  // 2 vCPUs:
  //  - WRITEs of kCopyHereBytes or more (a PUT) go: the caller checksums
  //    its sources meanwhile, on the other core (PUT 3.4-3.6 -> 4.5-4.9 GB/s);
  //  - READs (a GET) go when a group (a page) is longer than
  //    kCopyHereGroupBytes, which StoreClient reads in pieces and checksums
  //    piece by piece as they land (8 MiB pages: 3.7 GB/s copied here, the
  //    pages checksummed after; 5.0-5.4 through the fabric, whose copies
  //    are another thread's);
  //  - READs of shorter pages stay here (see HereShare: the Copier may
  //    still take part): all on the Copier, each page checksummed on the
  //    caller's core as it landed, the GET was slower (0.58-0.98 of the
  //    bare READ, against 0.84-1.09 all here), the copied lines crossing
  //    between the cores;
  //  - fewer bytes stay here: the Copier's wake-up costs more than it saves.
  static bool CopyOnThread(bool writes, size_t bytes, size_t largest) {
    return bytes >= kCopyHereBytes && (writes || largest > kCopyHereGroupBytes);
  }
  // Of a flight's `bytes` that CopyOnThread keeps here, how many the
  // caller's thread copies itself (whole groups, in order, until that many
  // are copied, each checksummed right after its copy); the Copier copies
  // the rest at the same time, and the caller checksums those as they
  // land. All of a flight under kSplitBytes; half of a larger one.
  // Measured (shm, three nodes, batch 32 of 128 KiB): 0.84-1.09 of the
  // bare READ all here (median 0.96), 1.11-1.28 halved. The Copier copies
  // the last group (a GET's region versions) once the caller has copied
  // its own: a version read before a page's bytes would confirm the page
  // only as of that read (its checksum would still catch a slot reused
  // since, as a miss).
  static size_t HereShare(size_t bytes) { return bytes < kSplitBytes ? bytes : bytes / 2; }
  static constexpr size_t kSplitBytes = 1 << 20;
  // Waits for the flight until `deadline` and sets (*outcomes)[g] of each
  // submitted group: OK when every request of the group completed, else
  // the first failure among them (Timeout for one not done by then: it is
  // ended with Engine::ExpireBatch, its connection closed where the
  // provider allows). Then frees the batch, or, when a transfer the
  // provider still holds outlives the deadline, keeps it until it ends
  // (later calls free it).
  void Finish(Flight* flight, net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every request of the flight has ended, or `until`, and
  // says which groups have: (*ended)[g] when every request of group g has
  // (with (*outcomes)[g] its failure, if any, as Finish would set it). The
  // flight stays for Finish, which frees it; Peek frees nothing.
  void Peek(Flight* flight, net::Deadline until, std::vector<bool>* ended, std::vector<Status>* outcomes);
  // Whether every request of group g has ended, without waiting; when so,
  // *failure is the first failure among them (OK if none). Frees nothing.
  bool GroupEnded(const Flight& flight, size_t g, Status* failure) const;
  // Whether request t (0-based, in the order given to Start) of group g has
  // ended, without waiting; when so, *failure is its failure (OK if none).
  // A group not submitted has ended, with OK: its refusal is in outcomes.
  bool RequestEnded(const Flight& flight, size_t g, size_t t, Status* failure) const;
  // Start and Finish.
  void Run(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
           net::Deadline deadline, std::vector<Status>* outcomes);
  // Waits until every batch that outlived its deadline has ended (their
  // transfers end by KVF_TRANSFER_TIMEOUT_MS at the latest), or `deadline`:
  // true when none is left, so the memory they target may go.
  bool Drain(net::Deadline deadline);

  static constexpr size_t kCopyHereBytes = 256 << 10;
  static constexpr size_t kCopyHereGroupBytes = 512 << 10;  // StoreClient::kLandingPiece
  static constexpr size_t kCopiedHere = static_cast<size_t>(-1);  // Flight::first_copy of a group copied in Start

 private:
  void FreeOrKeep(BatchId batch);
  void FreeEnded();
  // Marks in *held (empty: none yet) the groups, not held already, whose
  // copyable epoch names a same-host pool PoolMaps saw its node stop
  // serving, and fails them in *outcomes (NetworkError).
  void HoldBackGone(const std::vector<TransferRequest>& requests,
                    const std::vector<std::pair<size_t, size_t>>& groups, const std::vector<uint64_t>& copyable,
                    std::vector<bool>* held, std::vector<Status>* outcomes) const;
  // Copies the groups that reach mapped pools, or starts their copies (see
  // Start), and sets flight->copied, first_copy and copies.
  void CopyMapped(const std::vector<TransferRequest>& requests, const std::vector<std::pair<size_t, size_t>>& groups,
                  const std::vector<uint64_t>& copyable, Flight* flight, const std::function<void(size_t)>& copied,
                  size_t tail);
  // Whether group g of the flight is copied and its copies have ended.
  static bool CopiedGroupEnded(const Flight& flight, size_t g, size_t pieces);

  Engine* const engine_;
  PoolMaps* const maps_;
  Copier copier_;
  std::mutex mu_;
  std::vector<BatchId> unfinished_;
};

}  // namespace kvfabric::store
