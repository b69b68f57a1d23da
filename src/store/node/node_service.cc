#include "store/node/node_service.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/crypto.h"
#include "common/log.h"
#include "common/text.h"
#include "net/address.h"
#include "store/wire/checksum.h"
#include "store/node/pool_memory.h"

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

// The node's control address: KVF_STORE_LISTEN, or its engine's host with
// a free port. A control address other hosts can reach beside an engine
// they cannot (loopback) is refused: clients there would find the node
// and fail every transfer with it.
Status ListenAddress(const Engine& engine, const Settings& settings, std::string* out) {
  std::string host, listen_host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(net::ParseHostPort(engine.name(), &host, &port).Annotate("store: the engine's name"));
  if (settings.store_listen.empty()) {
    *out = net::FormatHostPort(host, 0);
    return Status::OK();
  }
  KVF_RETURN_IF_ERROR(net::ParseHostPort(settings.store_listen, &listen_host, &port).Annotate("KVF_STORE_LISTEN"));
  if (net::IsLoopbackName(host) && !net::IsLoopbackName(listen_host)) {
    const std::string engine_name = net::FormatHostPort(listen_host, 0);
    return Status::InvalidArgument(text::Format(
        "store: this node listens on {} but its engine advertises {}, a loopback address other hosts cannot reach; "
        "give the engine this host's address (local_server_name {}; kvfabric store-node: --local_server_name {})",
        settings.store_listen, engine.name(), engine_name, engine_name));
  }
  *out = settings.store_listen;
  return Status::OK();
}

}  // namespace

NodeService::NodeService(Engine* engine, const Settings& settings, uint64_t* version_words, SharedKeys keys)
    : engine_(engine),
      settings_(settings),
      versions_(version_words,
                RegionVersions::RegionBytes(static_cast<uint64_t>(settings.store_pool_bytes), kPoolAlignment)),
      keys_(keys),
      table_(static_cast<uint64_t>(settings.store_pool_bytes), std::chrono::milliseconds(settings.store_read_window_ms),
             kPoolAlignment, &versions_, keys_.valid() ? &keys_ : nullptr),
      removed_(std::chrono::milliseconds(settings.store_handoff_ms), kMaxTombstones),
      reservations_(crypto::RandomU64()),
      pins_({static_cast<uint64_t>(settings.store_max_pins),
             static_cast<uint64_t>(settings.store_pool_bytes) / 100 *
                 static_cast<uint64_t>(settings.store_max_pinned_share)}),
      writers_(engine, std::chrono::milliseconds(settings.store_down_retry_ms)),
      puts_(static_cast<size_t>(settings.store_put_queue_bytes),
            static_cast<size_t>(std::max<int64_t>(1, settings.store_put_threads - 1))),
      runner_(engine) {}

Status NodeService::Start(Engine* engine, const Settings& settings, std::unique_ptr<NodeService>* out) {
  if (settings.store_pool_bytes <= 0) return Status::InvalidArgument("store: a node's pool needs store_pool_bytes > 0");
  const auto pool_bytes = static_cast<size_t>(settings.store_pool_bytes);
  if (Status s = CheckPoolFits(pool_bytes, AvailableMemory()); !s.ok()) {
    if (settings.store_pool_prefault) return s;
    KVF_LOG_WARN("{}; the node starts since KVF_STORE_POOL_PREFAULT is off, and the kernel may kill it once its "
                 "pool fills", s.message());
  }
  // The pool, its region versions and the table of the keys it holds
  // (SharedKeys: same-host processes answer `exists` from it) in one memfd
  // that same-host processes map (KVF_STORE_SHARE_POOLS), or private memory.
  SharedPool shared;
  PoolShare share;
  void* words = nullptr;
  void* pool = nullptr;
  void* keys_memory = nullptr;
  const size_t keys_bytes = SharedKeys::BytesFor(pool_bytes);
  SharedKeys keys;
  if (settings.store_share_pools) {
    if (Status s = SharedPool::Create(pool_bytes, keys_bytes, &shared, &share); s.ok()) {
      words = shared.versions();
      pool = shared.pool();
      keys_memory = shared.keys();
      keys = SharedKeys::Format(keys_memory, keys_bytes);
      shared.Release();
    } else {
      KVF_LOG_WARN("{}; the pool stays private to this process", s.ToString());
      share = PoolShare{};
    }
  }
  // The region versions peers READ: a page of their own, registered like the pool.
  if (words == nullptr) {
    words = mmap(nullptr, kVersionsMapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (words == MAP_FAILED) return Status::Unavailable("store: cannot map the pool's region versions");
  }
  std::unique_ptr<NodeService> node(new NodeService(engine, settings, static_cast<uint64_t*>(words), keys));
  node->version_words_ = words;
  node->keys_memory_ = keys_memory;
  node->keys_bytes_ = keys_memory == nullptr ? 0 : keys_bytes;
  node->shared_ = std::move(shared);
  node->pool_bytes_ = pool_bytes;
  if (pool == nullptr) {
    pool = mmap(nullptr, node->pool_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pool == MAP_FAILED)
      return Status::InvalidArgument("store: cannot map a pool of " + std::to_string(node->pool_bytes_) +
                                     " bytes (KVF_STORE_POOL_BYTES); lower it or free memory");
  }
  node->pool_ = static_cast<uint8_t*>(pool);
  // Peers READ the versions and never WRITE them: a peer that wrote back
  // older versions would make readers trust an overwritten page.
  if (Status s = engine->RegisterMemoryBatch({{words, kVersionsMapBytes, "*", /*read_only=*/true}}); !s.ok()) {
    munmap(pool, node->pool_bytes_);
    node->pool_ = nullptr;
    munmap(words, kVersionsMapBytes);
    node->version_words_ = nullptr;
    return s.Annotate("store: registering the pool's region versions");
  }
  // Huge pages where the kernel gives them (fewer TLB misses for the
  // provider's copies, fewer pages for a NIC to map; a shared pool has them
  // only where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows),
  // then the whole pool faulted in, unless KVF_STORE_POOL_PREFAULT says not to.
  (void)madvise(pool, node->pool_bytes_, MADV_HUGEPAGE);
  if (settings.store_pool_prefault) {
    const auto t0 = std::chrono::steady_clock::now();
#ifdef MADV_POPULATE_WRITE
    const bool populated = madvise(pool, node->pool_bytes_, MADV_POPULATE_WRITE) == 0;
    const int why = errno;
#else
    const bool populated = false;
    const int why = EINVAL;
#endif
    if (!populated) {
      if (why == ENOMEM) {
        munmap(pool, node->pool_bytes_);
        node->pool_ = nullptr;
        return Status::Unavailable("store: cannot fault in a pool of " + std::to_string(node->pool_bytes_) +
                                   " bytes (KVF_STORE_POOL_BYTES): not enough memory; lower it or free memory");
      }
      // A kernel before 5.14: touch one byte a page.
      const long page = sysconf(_SC_PAGESIZE);
      for (size_t at = 0; at < node->pool_bytes_; at += static_cast<size_t>(page)) node->pool_[at] = 0;
    }
    KVF_LOG_INFO("store node: faulted in a pool of {} in {} ms", text::Bytes(node->pool_bytes_),
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  }
  if (Status s = engine->RegisterMemory(pool, node->pool_bytes_, "*"); !s.ok()) {
    munmap(pool, node->pool_bytes_);
    node->pool_ = nullptr;
    return s.Annotate("store: registering the pool");
  }
  NodeInfo& info = node->info_;
  info.segment = engine->name();
  info.pool_addr = reinterpret_cast<uintptr_t>(pool);
  info.pool_bytes = node->pool_bytes_;
  info.max_page_bytes = static_cast<uint64_t>(settings.store_max_page_bytes);
  info.read_window_ms = static_cast<uint64_t>(settings.store_read_window_ms);
  do info.epoch = crypto::RandomU64();
  while (info.epoch == 0);  // 0 names no node (BatchRunner::kNoCopy)
  // After the versions, the epoch: a client reading them knows they are this node's.
  static_cast<uint64_t*>(node->version_words_)[RegionVersions::kRegions] = info.epoch;
  info.versions_addr = reinterpret_cast<uintptr_t>(node->version_words_);
  info.region_bytes = node->versions_.region_bytes();
  info.share = share;
  std::string listen;
  KVF_RETURN_IF_ERROR(ListenAddress(*engine, settings, &listen));
  NodeService* self = node.get();
  KVF_RETURN_IF_ERROR(ControlServer::Start(
      listen, settings,
      [self](uint64_t connection, std::string payload, ControlServer::Reply reply) {
        self->Handle(connection, std::move(payload), std::move(reply));
      },
      &node->server_, [self](uint64_t connection) { self->ConnectionClosed(connection); }));
  node->address_ = node->server_->address();
  if (log::Get().should_log(spdlog::level::debug)) {
    // A line per page stored and per page gone, and why: where each page
    // was, for a soak or a user to account for every page.
    std::lock_guard<std::mutex> g(node->table_mu_);
    node->table_.set_observer([address = node->address_](PageEvent e, std::string_view key, const PageEntry& p) {
      KVF_LOG_DEBUG("store node {}: page {}: key {:?}, generation {}, {} bytes", address, PageEventName(e), key,
                    p.generation, p.length);
    });
  }
  for (int64_t i = 0; i < settings.store_put_threads; ++i) node->workers_.emplace_back([self] { self->PutLoop(); });
  KVF_LOG_INFO("store node {} serving a pool of {} (segment {})", node->address_, text::Bytes(node->pool_bytes_),
               info.segment);
  *out = std::move(node);
  return Status::OK();
}

NodeService::~NodeService() { Stop(); }

void NodeService::Stop() {
  // The epoch after the versions goes first: a client that maps the pool
  // (its process lives on) or READs the versions no longer takes pages
  // from it for this node's (PoolMap::Serving, ConfirmByVersions).
  if (version_words_ != nullptr)
    std::atomic_ref<uint64_t>(static_cast<uint64_t*>(version_words_)[RegionVersions::kRegions])
        .store(0, std::memory_order_release);
  if (server_) server_->Stop();  // no new requests; replies still held become no-ops
  puts_.Stop();                  // the put threads finish what is queued, then end
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  if (pool_ != nullptr) {
    // A PUT's READ that outlived its deadline may still land in the pool:
    // the memory stays mapped (leaked, with a warning) rather than let it.
    const bool drained = runner_.Drain(net::DeadlineIn(settings_.transfer_timeout_ms + 1000));
    (void)engine_->UnregisterMemory(pool_);  // the engine may be closed already: the memory goes either way
    if (drained) munmap(pool_, pool_bytes_);
    else KVF_LOG_WARN("store node {}: transfers into the pool still pending at stop; its {} bytes stay mapped",
                      address_, pool_bytes_);
    pool_ = nullptr;
  }
  if (version_words_ != nullptr) {
    // READs of the versions are a few words and end within the transfer
    // timeout the pool's drain waited for above.
    (void)engine_->UnregisterMemory(version_words_);
    munmap(version_words_, kVersionsMapBytes);
    version_words_ = nullptr;
  }
  if (keys_memory_ != nullptr) {  // read by same-host processes only, which check the epoch cleared above
    munmap(keys_memory_, keys_bytes_);
    keys_memory_ = nullptr;
  }
}

void NodeService::Handle(uint64_t connection, std::string payload, ControlServer::Reply reply) {
  Op op;
  if (Status s = PeekOp(payload, &op); !s.ok()) return reply(s, {});
  if (op == Op::kPut) {
    // Refused before it is decoded: a decoded request takes several times
    // its bytes.
    if (!puts_.Admits(payload.size()))
      return reply(Status::Busy(text::Format(
                       "store node {}: {} bytes of PUTs by READ wait for its put threads already, the most it holds "
                       "(KVF_STORE_PUT_QUEUE_BYTES); retry later, or give the node more KVF_STORE_PUT_THREADS",
                       address_, puts_.bytes())),
                   {});
    PutJob job;
    if (Status s = DecodePut(payload, &job.request); !s.ok()) return reply(s, {});
    if (Status s = writers_.Unreachable(job.request.writer); !s.ok()) return reply(s, {});
    job.reply = std::move(reply);
    job.deadline = net::DeadlineIn(std::min<int64_t>(job.request.budget_ms, settings_.store_deadline_ms));
    // The bytes start moving now when the writer is known; a put thread
    // opens a new writer's segment first (a handshake: never on this thread).
    SegmentHandle writer;
    const bool known = writers_.Known(job.request.writer, &writer);
    if (known) StartPut(&job, Status::OK(), writer);
    return Queue(std::move(job), payload.size(), !known);
  }
  if (op == Op::kCommit) return TakeCommit(connection, payload, std::move(reply));
  Status status;
  std::string answer = Answer(connection, op, payload, &status);
  reply(status, std::move(answer));
}

void NodeService::Queue(PutJob job, size_t bytes, bool needs_open) {
  if (!puts_.Push(std::move(job), bytes, needs_open)) DropPut(&job);  // stopping: Push took nothing
}

std::chrono::steady_clock::duration NodeService::PushHold() const {
  return std::chrono::milliseconds(settings_.transfer_timeout_ms + settings_.store_deadline_ms);
}

void NodeService::AbandonExpired(Clock::time_point now) {
  for (const Reservations::Entry& e : reservations_.TakeExpired(now)) {
    for (const Reservations::Slot& slot : e.slots) {
      if (!slot.reserved) continue;
      table_.Abandon(slot.offset, now, PushHold());
      if (!slot.key.empty()) ++counters_.put_failures;  // a granted slot left unused is no failed put
    }
  }
}

std::string NodeService::ReserveSlots(uint64_t connection, std::string_view payload, Status* status) {
  ReserveRequest request;
  *status = DecodeReserve(payload, &request);
  if (!status->ok()) return {};
  const size_t n = request.items.size();
  Slots slots;
  slots.epoch = info_.epoch;
  slots.statuses.assign(n, Status::OK());
  slots.addrs.assign(n, 0);
  std::vector<Reservations::Slot> held(n);
  bool any = false;
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(table_mu_);
  AbandonExpired(now);
  counters_.puts += n;
  for (size_t i = 0; i < n; ++i) {
    const ReserveItem& item = request.items[i];
    Reservations::Slot& slot = held[i];
    Status& r = slots.statuses[i];
    r = CheckKey(item.key);
    if (r.ok()) r = CheckPageLength(item.key, item.length);
    if (r.ok()) r = table_.Reserve(item.length, now, &slot.offset);
    if (!r.ok()) {
      ++counters_.put_failures;
      continue;
    }
    slot.key = item.key;
    slot.length = item.length;
    slot.reserved = true;
    slots.addrs[i] = info_.pool_addr + slot.offset;
    any = true;
  }
  // The writer gives up on the commit's reply at its budget; the slots are
  // abandoned a little after that (a commit on its way is not cut short).
  const auto budget = std::chrono::milliseconds(std::min<int64_t>(request.budget_ms, settings_.store_deadline_ms));
  if (any) slots.ticket = reservations_.Open(std::move(held), now + budget + std::chrono::seconds(1), connection);
  return EncodeSlots(slots);
}

void NodeService::TakeCommit(uint64_t connection, std::string_view payload, ControlServer::Reply reply) {
  CommitRequest request;
  if (Status s = DecodeCommit(payload, &request); !s.ok()) return reply(s, {});
  PutJob job;
  job.commit = true;
  {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> g(table_mu_);
    AbandonExpired(now);
    // Only the connection that reserved the slots commits them: another
    // one's ticket is answered as if there were none, and stays its owner's.
    if (!reservations_.Take(request.ticket, connection, &job.reservation))
      // NotFound, not Timeout: the node answered, and must not be taken
      // for unreachable.
      return reply(Status::NotFound("store node " + address_ + ": no reservation " + std::to_string(request.ticket) +
                                    " on this connection (its writer's budget passed, its connection broke, or the "
                                    "node restarted): the put failed"),
                   {});
    if (request.items.size() != job.reservation.slots.size()) {
      for (const Reservations::Slot& slot : job.reservation.slots)
        if (slot.reserved) table_.Abandon(slot.offset, now, PushHold());
      return reply(Status::ProtocolError("store: a commit of " + std::to_string(request.items.size()) +
                                         " items for a reservation of " +
                                         std::to_string(job.reservation.slots.size())),
                   {});
    }
  }
  job.commit_items = std::move(request.items);
  job.grant = std::move(request.grant);
  job.reply = std::move(reply);
  const bool sums_needed = std::any_of(job.commit_items.begin(), job.commit_items.end(),
                                       [](const CommitItem& item) { return item.written() && !item.has_checksum; });
  if (sums_needed) return Queue(std::move(job), 0, false);
  job.reply(Status::OK(), EncodeCommitReply(FinishCommit(&job)));
}

CommitReply NodeService::FinishCommit(PutJob* job) {
  std::vector<Reservations::Slot>& slots = job->reservation.slots;
  const size_t n = slots.size();
  CommitReply reply;
  reply.statuses.assign(n, Status::OK());
  reply.pages.assign(n, Location{});
  // A granted slot's page is named by the commit; its key is checked as a
  // reserve checks one.
  const bool granted = job->reservation.granted;
  for (size_t i = 0; granted && i < n; ++i) {
    CommitItem& item = job->commit_items[i];
    if (!slots[i].reserved) continue;
    if (Status s = item.written() ? CheckKey(item.key) : Status::OK(); !s.ok()) {
      reply.statuses[i] = s;
      item.state = CommitState::kNotWritten;  // its slot is held back like any page not committed
    }
    slots[i].key = std::move(item.key);
  }
  std::vector<Checksum> sums(n);
  for (size_t i = 0; i < n; ++i) {
    const CommitItem& item = job->commit_items[i];
    if (!slots[i].reserved || !item.written()) continue;
    sums[i] = item.has_checksum ? item.checksum : ChecksumOfBytes(pool_ + slots[i].offset, slots[i].length);
  }
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(table_mu_);
  const uint64_t first_committed = table_.next_generation();
  for (size_t i = 0; i < n; ++i) {
    const CommitState state = job->commit_items[i].state;
    if (granted && !slots[i].key.empty()) ++counters_.puts;  // a reserve counts its puts as it reserves
    if (!slots[i].reserved) {
      reply.statuses[i] = Status::Unavailable("store: no slot was reserved for '" + slots[i].key + "'");
    } else if (state == CommitState::kWritten) {
      const PageEntry e = table_.Commit(slots[i].key, slots[i].offset, slots[i].length, sums[i], now);
      // Read after the commit's own bumps (the key's older page leaving).
      if (e.generation != 0) {
        reply.pages[i] = Location{true, info_.pool_addr + e.offset, e.length, e.generation, e.checksum,
                                  versions_.VersionAt(e.offset)};
        counters_.stored_bytes += e.length;
      }
    } else if (state == CommitState::kUnused) {
      // The writer never started a WRITE into it: nothing can land there.
      table_.Unreserve(slots[i].offset, now);
      if (!slots[i].key.empty()) {
        reply.statuses[i] = Status::Unavailable("store: the writer did not write the page of '" + slots[i].key + "'");
        ++counters_.put_failures;
      }
    } else {
      table_.Abandon(slots[i].offset, now, PushHold());
      if (reply.statuses[i].ok())
        reply.statuses[i] = Status::Unavailable("store: the writer did not write the page of '" + slots[i].key + "'");
      if (!slots[i].key.empty()) ++counters_.put_failures;
    }
  }
  // The grant never evicts the pages this commit just stored.
  if (!job->grant.empty()) reply.granted = GrantSlots(job->grant, now, first_committed, job->reservation.owner);
  return reply;
}

Slots NodeService::GrantSlots(const std::vector<uint64_t>& lengths, Clock::time_point now, uint64_t keep_from,
                              uint64_t owner) {
  Slots granted;
  granted.epoch = info_.epoch;
  std::vector<Reservations::Slot> held;
  uint64_t bytes = 0;
  const uint64_t all_grants = info_.pool_bytes / kGrantsPoolShare;
  for (uint64_t length : lengths) {
    if (held.size() == kMaxGrantSlots || bytes + length > info_.pool_bytes / kGrantPoolShare ||
        reservations_.granted_bytes() + bytes + length > all_grants)
      break;
    Reservations::Slot slot;
    if (!CheckPageLength("(granted)", length).ok() || !table_.Reserve(length, now, &slot.offset, keep_from).ok())
      break;
    slot.length = length;
    slot.reserved = true;
    bytes += length;
    granted.statuses.push_back(Status::OK());
    granted.addrs.push_back(info_.pool_addr + slot.offset);
    held.push_back(std::move(slot));
  }
  if (held.empty()) return granted;
  const auto hold = std::chrono::milliseconds(kGrantUsableMs + settings_.store_deadline_ms) + std::chrono::seconds(1);
  granted.ticket = reservations_.Open(std::move(held), now + hold, owner, /*granted=*/true);
  return granted;
}

std::string NodeService::Answer(uint64_t connection, Op op, std::string_view payload, Status* status) {
  const auto now = Clock::now();
  if (op == Op::kHello) {
    NodeInfo info = info_;
    info.age_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - started_).count());
    return EncodeNodeInfo(info);
  }
  if (op == Op::kReserve) return ReserveSlots(connection, payload, status);
  if (op == Op::kStats) return EncodeNodeStats(Stats());
  if (op == Op::kRemoveAll) {
    std::lock_guard<std::mutex> g(table_mu_);
    pins_.Clear();  // the pins went with the pages
    return EncodeCount(table_.RemoveAll(now));
  }
  std::vector<std::string_view> keys;
  *status = DecodeKeys(payload, &keys);
  if (!status->ok()) return {};
  std::lock_guard<std::mutex> g(table_mu_);
  if (op == Op::kPin) {
    std::vector<bool> pinned;
    *status = pins_.PinAll(connection, keys, &table_, &pinned);
    return status->ok() ? EncodeBits(pinned) : std::string();
  }
  if (op == Op::kLookup) {
    std::vector<Location> out(keys.size());
    counters_.lookups += keys.size();
    for (size_t i = 0; i < keys.size(); ++i) {
      PageEntry e;
      if (!table_.Lookup(keys[i], now, &e)) continue;
      out[i] = Location{true, info_.pool_addr + e.offset, e.length, e.generation, e.checksum,
                        versions_.VersionAt(e.offset)};
      ++counters_.lookup_hits;
      counters_.located_bytes += e.length;
    }
    return EncodeLocations(out);
  }
  std::vector<bool> bits(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    switch (op) {
      case Op::kExists: bits[i] = table_.Contains(keys[i], now); break;
      case Op::kRemove:
        bits[i] = table_.Remove(keys[i], now);
        removed_.Add(keys[i], now);
        if (bits[i]) pins_.Forget(keys[i]);  // the key's pins went with its page
        break;
      // Only a pin this connection took: after a reconnect, or from another
      // client, an unpin must not end someone else's pin.
      case Op::kUnpin: bits[i] = pins_.Unpin(connection, keys[i], &table_); break;
      case Op::kTouch: {
        uint64_t length = 0;
        bits[i] = table_.Contains(keys[i], now, &length);
        counters_.touched_bytes += length;
        break;
      }
      default: break;
    }
  }
  if (op == Op::kExists) counters_.exists += keys.size();
  return EncodeBits(bits);
}

void NodeService::PutLoop() {
  PutJob job;
  bool opening = false;
  while (puts_.Pop(&job, &opening)) {
    if (job.commit) {
      job.reply(Status::OK(), EncodeCommitReply(FinishCommit(&job)));
      continue;
    }
    if (!job.started) {
      if (Clock::now() >= job.deadline) {  // waited for a thread longer than the writer waits for the reply
        if (opening) puts_.DoneOpening();
        job.reply(Status::Timeout("store node " + address_ +
                                  ": the put waited past its deadline for a thread (KVF_STORE_PUT_THREADS)"),
                  {});
        continue;
      }
      SegmentHandle writer = -1;
      const Status open = writers_.Open(job.request.writer, &writer);
      if (opening) puts_.DoneOpening();
      StartPut(&job, open, writer);
    }
    job.reply(Status::OK(), EncodeStatuses(FinishPut(&job)));
  }
}

Status NodeService::CheckPageLength(const std::string& key, uint64_t length) const {
  if (length == 0) return Status::InvalidArgument("store: key '" + key + "' has no bytes");
  if (length > info_.max_page_bytes)
    return Status::InvalidArgument("store: the page of key '" + key + "' is larger than the largest page, " +
                                   std::to_string(info_.max_page_bytes) + " bytes (KVF_STORE_MAX_PAGE_BYTES)");
  return Status::OK();
}

Status NodeService::CheckItem(const PutItem& item, uint64_t* length) const {
  KVF_RETURN_IF_ERROR(CheckKey(item.key));
  uint64_t total = 0;
  for (const Extent& e : item.sources) {
    if (e.length == 0) return Status::InvalidArgument("store: key '" + item.key + "' has an empty buffer");
    total += e.length;
    if (total < e.length) total = UINT64_MAX;  // overflowed: larger than any page
    if (total > info_.max_page_bytes) return CheckPageLength(item.key, total);
  }
  KVF_RETURN_IF_ERROR(CheckPageLength(item.key, total));
  *length = total;
  return Status::OK();
}

void NodeService::DropPut(PutJob* job) {
  // READs already started are not waited for: their batch is kept until
  // they end, and Stop drains it before the pool goes.
  if (job->started) runner_.Finish(&job->flight, Clock::now(), &job->outcomes);
  // A commit's slots stay reserved: the pool is about to go with them.
  job->reply(Status::Closed("store node " + address_ + " stopped"), {});
}

void NodeService::StartPut(PutJob* job, const Status& open, SegmentHandle writer) {
  const PutRequest& put = job->request;
  const size_t n = put.items.size();
  job->started = true;
  job->results.assign(n, Status::OK());
  job->offsets.assign(n, 0);
  job->lengths.assign(n, 0);
  job->reserved.assign(n, false);
  {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> g(table_mu_);
    counters_.puts += n;
    for (size_t i = 0; i < n; ++i) {
      Status& r = job->results[i];
      r = open.ok() ? CheckItem(put.items[i], &job->lengths[i]) : open.Annotate("store: the writer's segment");
      if (r.ok()) r = table_.Reserve(job->lengths[i], now, &job->offsets[i]);
      job->reserved[i] = r.ok();
    }
  }
  // Every page's READs go in one engine batch (a group each).
  std::vector<TransferRequest> requests;
  std::vector<std::pair<size_t, size_t>> groups(n, {0, 0});
  for (size_t i = 0; i < n; ++i) {
    if (!job->reserved[i]) continue;
    groups[i].first = requests.size();
    uint64_t at = job->offsets[i];
    for (const Extent& e : put.items[i].sources) {
      requests.push_back({OpCode::kRead, pool_ + at, writer, e.addr, static_cast<size_t>(e.length)});
      at += e.length;
    }
    groups[i].second = requests.size();
  }
  runner_.Start(requests, groups, &job->flight, &job->outcomes);
}

std::vector<Status> NodeService::FinishPut(PutJob* job) {
  const PutRequest& put = job->request;
  const size_t n = put.items.size();
  runner_.Finish(&job->flight, job->deadline, &job->outcomes);
  std::vector<Checksum> sums(n);
  for (size_t i = 0; i < n; ++i)
    if (job->reserved[i] && job->outcomes[i].ok()) sums[i] = ChecksumOfBytes(pool_ + job->offsets[i], job->lengths[i]);
  const auto now = Clock::now();
  std::lock_guard<std::mutex> g(table_mu_);
  for (size_t i = 0; i < n; ++i) {
    if (!job->reserved[i]) continue;
    if (job->outcomes[i].ok()) {
      if (put.if_absent && removed_.Has(put.items[i].key, now)) {
        table_.Unreserve(job->offsets[i], now);
        job->results[i] = Status::Unavailable("store: '" + put.items[i].key +
                                              "' was removed on its home during the hand-over: the older copy "
                                              "stays where it was");
      } else if (put.if_absent && table_.Contains(put.items[i].key, now)) {
        table_.Unreserve(job->offsets[i], now);
      } else if (table_.Commit(put.items[i].key, job->offsets[i], job->lengths[i], sums[i], now).generation != 0)
        counters_.stored_bytes += job->lengths[i];
    } else {
      table_.Abandon(job->offsets[i], now);
      job->results[i] =
          job->outcomes[i].Annotate("store: reading the page of '" + put.items[i].key + "' from " + put.writer);
    }
  }
  for (const Status& s : job->results) counters_.put_failures += s.ok() ? 0 : 1;
  return std::move(job->results);
}

std::vector<NodeService::CopiedPage> NodeService::CopyPagesHomedElsewhere(
    const std::function<bool(std::string_view key)>& elsewhere, uint8_t* into, uint64_t capacity) {
  std::vector<CopiedPage> out;
  std::lock_guard<std::mutex> g(table_mu_);
  uint64_t at = 0;
  for (auto& [key, entry] : table_.Select(elsewhere, capacity)) {
    std::memcpy(into + at, pool_ + entry.offset, entry.length);
    out.push_back({std::move(key), entry.generation, at, entry.length});
    at += entry.length;
  }
  return out;
}

size_t NodeService::RemoveCopied(const std::vector<CopiedPage>& pages) {
  const auto now = Clock::now();
  size_t n = 0;
  std::lock_guard<std::mutex> g(table_mu_);
  for (const CopiedPage& p : pages) n += table_.RemoveIf(p.key, p.generation, now) ? 1 : 0;
  return n;
}

void NodeService::ConnectionClosed(uint64_t connection) {
  uint64_t released = 0;
  size_t abandoned = 0;
  {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> g(table_mu_);
    // Its reservations and grants: no one else may commit them. A WRITE of
    // its process may still land, so their slots are held back.
    for (const Reservations::Entry& e : reservations_.TakeOwnedBy(connection))
      for (const Reservations::Slot& slot : e.slots) {
        if (!slot.reserved) continue;
        table_.Abandon(slot.offset, now, PushHold());
        ++abandoned;
      }
    released = pins_.Release(connection, &table_);
    counters_.pins_released += released;
  }
  if (released > 0)
    KVF_LOG_INFO("store node {}: released {} pin(s) of a client whose control connection closed (it exited, "
                 "closed its store, or lost the connection)", address_, released);
  if (abandoned > 0)
    KVF_LOG_DEBUG("store node {}: {} slot(s) reserved by a closed control connection held back", address_, abandoned);
}

NodeStats NodeService::Stats() {
  std::lock_guard<std::mutex> g(table_mu_);
  AbandonExpired(Clock::now());
  NodeStats s = counters_;
  const PageTableStats t = table_.stats();
  s.pool_bytes = t.pool_bytes;
  s.used_bytes = t.used_bytes;
  s.reserved_bytes = t.reserved_bytes;
  s.quarantined_bytes = t.quarantined_bytes;
  s.pages = t.pages;
  s.pinned_pages = t.pinned_pages;
  s.evictions = t.evictions;
  s.removals = t.removals;
  s.overwrites = t.overwrites;
  s.refusals = t.refusals;
  return s;
}

}  // namespace kvfabric::store
