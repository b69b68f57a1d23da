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
  Mapped m;
  KVF_RETURN_IF_ERROR(MapMemory(settings, &m));
  std::unique_ptr<NodeService> node(new NodeService(engine, settings, static_cast<uint64_t*>(m.words), m.keys));
  node->version_words_ = m.words;
  node->keys_memory_ = m.keys_memory;
  node->keys_bytes_ = m.keys_memory == nullptr ? 0 : m.keys_bytes;
  node->shared_ = std::move(m.shared);
  node->pool_bytes_ = pool_bytes;
  node->pool_ = static_cast<uint8_t*>(m.pool);
  KVF_RETURN_IF_ERROR(node->RegisterMemory());
  node->Describe(m.share);
  KVF_RETURN_IF_ERROR(node->Serve());
  *out = std::move(node);
  return Status::OK();
}

Status NodeService::MapMemory(const Settings& settings, Mapped* m) {
  const auto pool_bytes = static_cast<size_t>(settings.store_pool_bytes);
  // The pool, its region versions and the table of the keys it holds
  // (SharedKeys: same-host processes answer `exists` from it) in one memfd
  // that same-host processes map (KVF_STORE_SHARE_POOLS), or private memory.
  m->keys_bytes = SharedKeys::BytesFor(pool_bytes);
  if (settings.store_share_pools) {
    if (Status s = SharedPool::Create(pool_bytes, m->keys_bytes, &m->shared, &m->share); s.ok()) {
      m->words = m->shared.versions();
      m->pool = m->shared.pool();
      m->keys_memory = m->shared.keys();
      m->keys = SharedKeys::Format(m->keys_memory, m->keys_bytes);
      m->shared.Release();
    } else {
      KVF_LOG_WARN("{}; the pool stays private to this process", s.ToString());
      m->share = PoolShare{};
    }
  }
  // The region versions peers READ: a page of their own, registered like the pool.
  if (m->words == nullptr) {
    m->words = mmap(nullptr, kVersionsMapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->words == MAP_FAILED) {
      m->words = nullptr;
      return Status::Unavailable("store: cannot map the pool's region versions");
    }
  }
  if (m->pool == nullptr) {
    m->pool = mmap(nullptr, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->pool == MAP_FAILED) {
      munmap(m->words, kVersionsMapBytes);
      return Status::InvalidArgument("store: cannot map a pool of " + std::to_string(pool_bytes) +
                                     " bytes (KVF_STORE_POOL_BYTES); lower it or free memory");
    }
  }
  return Status::OK();
}

Status NodeService::RegisterMemory() {
  // Peers READ the versions and never WRITE them: a peer that wrote back
  // older versions would make readers trust an overwritten page.
  if (Status s = engine_->RegisterMemoryBatch({{version_words_, kVersionsMapBytes, "*", /*read_only=*/true}});
      !s.ok()) {
    munmap(pool_, pool_bytes_);
    pool_ = nullptr;
    munmap(version_words_, kVersionsMapBytes);
    version_words_ = nullptr;
    return s.Annotate("store: registering the pool's region versions");
  }
  KVF_RETURN_IF_ERROR(PreparePool());
  if (Status s = engine_->RegisterMemory(pool_, pool_bytes_, "*"); !s.ok()) {
    munmap(pool_, pool_bytes_);
    pool_ = nullptr;
    return s.Annotate("store: registering the pool");
  }
  return Status::OK();
}

Status NodeService::PreparePool() {
  // Huge pages where the kernel gives them (fewer TLB misses for the
  // provider's copies, fewer pages for a NIC to map; a shared pool has them
  // only where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows),
  // then the whole pool faulted in, unless KVF_STORE_POOL_PREFAULT says not to.
  (void)madvise(pool_, pool_bytes_, MADV_HUGEPAGE);
  if (!settings_.store_pool_prefault) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
#ifdef MADV_POPULATE_WRITE
  const bool populated = madvise(pool_, pool_bytes_, MADV_POPULATE_WRITE) == 0;
  const int why = errno;
#else
  const bool populated = false;
  const int why = EINVAL;
#endif
  if (!populated) {
    if (why == ENOMEM) {
      munmap(pool_, pool_bytes_);
      pool_ = nullptr;
      return Status::Unavailable("store: cannot fault in a pool of " + std::to_string(pool_bytes_) +
                                 " bytes (KVF_STORE_POOL_BYTES): not enough memory; lower it or free memory");
    }
    // A kernel before 5.14: touch one byte a page.
    const long page = sysconf(_SC_PAGESIZE);
    for (size_t at = 0; at < pool_bytes_; at += static_cast<size_t>(page)) pool_[at] = 0;
  }
  KVF_LOG_INFO("store node: faulted in a pool of {} in {} ms", text::Bytes(pool_bytes_),
               std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  return Status::OK();
}

void NodeService::Describe(const PoolShare& share) {
  NodeInfo& info = info_;
  info.segment = engine_->name();
  info.pool_addr = reinterpret_cast<uintptr_t>(pool_);
  info.pool_bytes = pool_bytes_;
  info.max_page_bytes = static_cast<uint64_t>(settings_.store_max_page_bytes);
  info.read_window_ms = static_cast<uint64_t>(settings_.store_read_window_ms);
  do info.epoch = crypto::RandomU64();
  while (info.epoch == 0);  // 0 names no node (BatchRunner::kNoCopy)
  // After the versions, the epoch: a client reading them knows they are this node's.
  static_cast<uint64_t*>(version_words_)[RegionVersions::kRegions] = info.epoch;
  info.versions_addr = reinterpret_cast<uintptr_t>(version_words_);
  info.region_bytes = versions_.region_bytes();
  info.share = share;
}

Status NodeService::Serve() {
  std::string listen;
  KVF_RETURN_IF_ERROR(ListenAddress(*engine_, settings_, &listen));
  KVF_RETURN_IF_ERROR(ControlServer::Start(
      listen, settings_,
      [this](uint64_t connection, std::string payload, ControlServer::Reply reply) {
        Handle(connection, std::move(payload), std::move(reply));
      },
      &server_, [this](uint64_t connection) { ConnectionClosed(connection); }));
  address_ = server_->address();
  if (log::Get().should_log(spdlog::level::debug)) {
    // A line per page stored and per page gone, and why: where each page
    // was, for a soak or a user to account for every page.
    std::lock_guard<std::mutex> g(table_mu_);
    table_.set_observer([address = address_](PageEvent e, std::string_view key, const PageEntry& p) {
      KVF_LOG_DEBUG("store node {}: page {}: key {:?}, generation {}, {} bytes", address, PageEventName(e), key,
                    p.generation, p.length);
    });
  }
  for (int64_t i = 0; i < settings_.store_put_threads; ++i) workers_.emplace_back([this] { PutLoop(); });
  KVF_LOG_INFO("store node {} serving a pool of {} (segment {})", address_, text::Bytes(pool_bytes_), info_.segment);
  return Status::OK();
}

NodeService::~NodeService() { Stop(); }

void NodeService::Stop() {
  // The epoch after the versions goes first: a client that maps the pool
  // (its process lives on) or READs the versions no longer takes pages
  // from it for this node's (PoolMap::Serving, GetCall::ConfirmByVersions).
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
