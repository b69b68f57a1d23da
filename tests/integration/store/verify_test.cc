// Pages that never come back wrong: a node in this process (so a test can
// corrupt its pool) and a client Store over a second engine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kvfabric/store.h"
#include "store/node/node_service.h"
#include "store/wire/shared_pool.h"

namespace kvfabric {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Engine> NewEngine() {
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  cfg.settings.log_level = "error";
  std::unique_ptr<Engine> e;
  EXPECT_TRUE(Engine::Create(cfg, &e).ok());
  return e;
}

class StoreVerifyTest : public ::testing::Test {
 protected:
  void Start(int64_t pool, int64_t deadline_ms, int64_t window_ms) {
    node_engine_ = NewEngine();
    client_engine_ = NewEngine();
    settings_ = client_engine_->settings();
    settings_.store_pool_bytes = pool;
    settings_.store_listen = "127.0.0.1:0";
    settings_.store_deadline_ms = deadline_ms;
    settings_.store_read_window_ms = window_ms;
    ASSERT_TRUE(store::NodeService::Start(node_engine_.get(), settings_, &node_).ok());
    settings_.store_pool_bytes = 0;
    settings_.store_members = node_->address();
    client_ = OpenClient(settings_);
    buf_bytes_ = 16 << 20;
    buf_ = static_cast<uint8_t*>(std::aligned_alloc(4096, buf_bytes_));
    ASSERT_TRUE(client_engine_->RegisterMemory(buf_, buf_bytes_).ok());
  }
  std::unique_ptr<Store> OpenClient(const Settings& s) {
    std::unique_ptr<Store> st;
    EXPECT_TRUE(Store::Create(client_engine_.get(), s, &st).ok());
    return st;
  }
  void TearDown() override {
    client_.reset();
    if (client_engine_) (void)client_engine_->UnregisterMemory(buf_);
    std::free(buf_);
    node_.reset();
    client_engine_.reset();
    node_engine_.reset();
  }

  std::unique_ptr<Engine> node_engine_, client_engine_;
  Settings settings_;
  std::unique_ptr<store::NodeService> node_;
  std::unique_ptr<Store> client_;
  uint8_t* buf_ = nullptr;
  size_t buf_bytes_ = 0;
};

// Each client PUTs the pages and so remembers where they are: its GET reads
// them at once, confirms them by their regions' versions (which a flipped
// byte does not move) and must catch the corruption by the checksum alone,
// taken as each page lands or once the batch has (KVF_STORE_VERIFY_OVERLAP).
TEST_F(StoreVerifyTest, ACorruptedPageIsAMissAndCounted) {
  Start(16 << 20, 2000, 5000);
  constexpr size_t kPages = 20, kPage = 64 << 10;
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> src, dst;
  for (size_t i = 0; i < kPages; ++i) {
    keys.push_back("page-" + std::to_string(i));
    src.push_back({{buf_ + i * kPage, kPage}});
    dst.push_back({{buf_ + (8 << 20) + i * kPage, kPage}});
  }
  std::vector<Status> st;
  std::vector<uint64_t> len;
  uint8_t* pool = node_->pool_for_testing();
  // Through the fabric, and copied from the shared pool (KVF_STORE_SHARE_POOLS:
  // the pool is this process's, mapped a second time; half the GET's pages
  // copied by the caller, half by the Copier).
  const std::vector<std::pair<std::string, bool>> configs = {{"on", false}, {"off", false}, {"on", true}};
  for (const auto& [mode, shared] : configs) {
    SCOPED_TRACE("KVF_STORE_VERIFY_OVERLAP=" + mode + (shared ? ", pools shared" : ", pools private"));
    Settings s = settings_;
    s.store_verify_overlap = mode;
    s.store_share_pools = shared;
    auto client = OpenClient(s);
    for (size_t i = 0; i < kPages; ++i) std::memset(buf_ + i * kPage, static_cast<int>(i + 1), kPage);
    ASSERT_TRUE(client->BatchPut(keys, src, &st).ok());
    for (const auto& p : st) ASSERT_TRUE(p.ok()) << p.ToString();
    // Every page starts on a 4 KiB boundary of the pool: flip a byte on each.
    for (size_t off = 0; off < (16u << 20); off += 4096) pool[off] ^= 0x5a;
    ASSERT_TRUE(client->BatchGet(keys, dst, &st, &len).ok());
    for (const auto& p : st) EXPECT_EQ(p.code(), Status::Code::kNotFound) << p.ToString();
    EXPECT_EQ(client->Stats().get_no_lookup, kPages) << "the GET was meant to read remembered locations";
    EXPECT_EQ(client->Stats().misses_checksum, kPages);
    EXPECT_EQ(client->Stats().copied_pages, shared ? 2 * kPages : 0) << "puts and gets copied, or none";
  }
  // Without verification the same READs return the corrupted bytes: the
  // check above is what keeps them out.
  Settings unverified = settings_;
  unverified.store_verify = false;
  auto blind = OpenClient(unverified);
  ASSERT_TRUE(blind->BatchGet(keys, dst, &st, &len).ok());
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_NE(buf_[8 << 20], 1) << "the corruption reached the reader";
}

// A page longer than a GET reads at once (StoreClient::kLandingPiece, 512
// KiB) is read in pieces and verified piece by piece as they land: whole
// pages come back exact, and a byte flipped in the first piece or the last
// is a miss and counted, on remembered locations and after lookups alike.
// The pages land in two buffers each, a piece ending at their edge.
TEST_F(StoreVerifyTest, APageReadInPiecesIsVerifiedWhole) {
  Start(16 << 20, 2000, 5000);
  constexpr size_t kPages = 4, kPage = 1536 << 10, kFirst = 1 << 20;
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> src, dst;
  for (size_t i = 0; i < kPages; ++i) {
    keys.push_back("big-" + std::to_string(i));
    src.push_back({{buf_ + i * kPage, kPage}});
    uint8_t* d = buf_ + (8 << 20) + i * kPage;
    dst.push_back({{d, kFirst}, {d + kFirst, kPage - kFirst}});
    for (size_t k = 0; k < kPage; ++k) buf_[i * kPage + k] = static_cast<uint8_t>(i * 7 + k / 4096);
  }
  Settings s = settings_;
  s.store_verify_overlap = "on";
  auto writer = OpenClient(s);
  std::vector<Status> st;
  std::vector<uint64_t> len;
  ASSERT_TRUE(writer->BatchPut(keys, src, &st).ok());
  for (const auto& p : st) ASSERT_TRUE(p.ok()) << p.ToString();
  auto get_is_exact = [&](Store* client) {
    std::memset(buf_ + (8 << 20), 0, kPages * kPage);
    ASSERT_TRUE(client->BatchGet(keys, dst, &st, &len).ok());
    for (size_t i = 0; i < kPages; ++i) {
      ASSERT_TRUE(st[i].ok()) << st[i].ToString();
      ASSERT_EQ(len[i], kPage);
      EXPECT_EQ(std::memcmp(buf_ + (8 << 20) + i * kPage, buf_ + i * kPage, kPage), 0) << keys[i];
    }
  };
  get_is_exact(writer.get());
  EXPECT_EQ(writer->Stats().get_no_lookup, kPages) << "the writer's GET was meant to read remembered locations";
  auto reader = OpenClient(s);
  get_is_exact(reader.get());
  EXPECT_EQ(reader->Stats().get_no_lookup, 0u) << "the reader's GET was meant to look its pages up";
  EXPECT_EQ(writer->Stats().misses_checksum + reader->Stats().misses_checksum, 0u);

  std::vector<StorePage> where;
  ASSERT_TRUE(writer->BatchLocate(keys, &where, &st).ok());
  for (size_t i = 0; i < kPages; ++i) {
    ASSERT_TRUE(st[i].ok()) << st[i].ToString();
    ASSERT_EQ(where[i].length, kPage);
    reinterpret_cast<uint8_t*>(where[i].addr)[i % 2 ? 100 : kPage - 100] ^= 0x5a;
  }
  auto another = OpenClient(s);  // remembers nothing: looks its pages up
  for (Store* client : {writer.get(), another.get()}) {
    const uint64_t before = client->Stats().misses_checksum;
    ASSERT_TRUE(client->BatchGet(keys, dst, &st, &len).ok());
    for (const auto& p : st) EXPECT_EQ(p.code(), Status::Code::kNotFound) << p.ToString();
    EXPECT_EQ(client->Stats().misses_checksum - before, kPages);
  }
  EXPECT_EQ(writer->Stats().get_no_lookup, 2 * kPages);
  EXPECT_EQ(another->Stats().get_no_lookup, 0u);
}

// One key overwritten over and over while other keys churn through a pool
// of 8 pages (evicting, and reusing slots as soon as the short read window
// allows), and a reader that gets the key all the while: each GET is a
// whole page of one PUT, or a miss, never a mix.
TEST_F(StoreVerifyTest, GetsRacingOverwritesEvictionAndReuseAreWholeOrMisses) {
  Start(8 << 20, 100, 150);
  constexpr size_t kPage = 1 << 20;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> puts{0};
  std::thread writer([&] {
    std::vector<Status> st;
    for (uint64_t i = 0; !stop; ++i) {
      std::memset(buf_, static_cast<int>(1 + i % 251), kPage);
      (void)client_->BatchPut({"hot", "churn-" + std::to_string(i % 24)}, {{{buf_, kPage}}, {{buf_, kPage}}}, &st);
      puts += st[0].ok() ? 1 : 0;
    }
  });
  uint64_t whole = 0, misses = 0, mixed = 0, other = 0;
  uint8_t* dst = buf_ + (8 << 20);
  const auto until = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < until) {
    std::vector<Status> st;
    std::vector<uint64_t> len;
    std::memset(dst, 0, kPage);
    ASSERT_TRUE(client_->BatchGet({"hot"}, {{{dst, kPage}}}, &st, &len).ok());
    if (st[0].code() == Status::Code::kNotFound) { ++misses; continue; }
    if (!st[0].ok()) { ++other; continue; }
    bool same = dst[0] != 0 && len[0] == kPage;
    for (size_t i = 1; same && i < kPage; ++i) same = dst[i] == dst[0];
    (same ? whole : mixed) += 1;
  }
  stop = true;
  writer.join();
  const StoreStats s = client_->Stats();
  const store::NodeStats n = node_->Stats();
  std::printf("  puts %llu, gets whole %llu, misses %llu (checksum %llu), other %llu; evictions %llu\n",
              (unsigned long long)puts.load(), (unsigned long long)whole, (unsigned long long)misses,
              (unsigned long long)s.misses_checksum, (unsigned long long)other, (unsigned long long)n.evictions);
  EXPECT_EQ(mixed, 0u) << "a GET returned bytes of two PUTs";
  EXPECT_GT(whole, 10u);
  EXPECT_GT(puts.load(), 10u);
  EXPECT_GT(n.evictions, 0u) << "the pool was meant to churn";
}

// A client reads the pages whose location it remembers at once, before
// its lookup answers (KVF_STORE_LOCATION_CACHE). Another client overwrites
// and removes the key meanwhile; the old page stays intact in its slot (a
// long read window), so the guessed READ gets whole bytes of the old PUT,
// which verify against the old checksum: only the lookup's answer can tell
// them apart. Every GET must still be the latest PUT, or a miss after the
// removal, with verification on and off (off: nothing but the answer
// stands between the reader and the older page).
TEST_F(StoreVerifyTest, RememberedLocationsNeverReturnAnOlderPage) {
  Start(16 << 20, 2000, 5000);
  for (bool verify : {true, false}) {
    SCOPED_TRACE(verify ? "verified" : "unverified");
    Settings reader_settings = settings_;
    reader_settings.store_verify = verify;
    auto reader = OpenClient(reader_settings);
    auto writer = OpenClient(settings_);
    constexpr size_t kPage = 256 << 10;
    uint8_t* src = buf_;
    uint8_t* dst = buf_ + (8 << 20);
    const std::string key = verify ? "remembered-v" : "remembered-u";
    std::vector<Status> st;
    std::vector<uint64_t> len;
    auto put = [&](int fill, size_t bytes) {
      std::memset(src, fill, bytes);
      ASSERT_TRUE(writer->BatchPut({key}, {{{src, bytes}}}, &st).ok());
      ASSERT_TRUE(st[0].ok()) << st[0].ToString();
    };
    // The whole page must be `fill`, `bytes` long.
    auto get_is = [&](int fill, size_t bytes) {
      std::memset(dst, 0, kPage);
      ASSERT_TRUE(reader->BatchGet({key}, {{{dst, kPage}}}, &st, &len).ok());
      ASSERT_TRUE(st[0].ok()) << st[0].ToString();
      ASSERT_EQ(len[0], bytes);
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(dst[i], fill) << "byte " << i << " is of another PUT";
    };
    put(0x11, kPage);
    get_is(0x11, kPage);  // looked up: the location is remembered
    EXPECT_EQ(reader->Stats().get_cached, 0u);
    // Read at once, and confirmed: by its region's version (no lookup)
    // when the page is checksummed, else by its lookup.
    get_is(0x11, kPage);
    const uint64_t by_version = verify ? 1 : 0;
    EXPECT_EQ(reader->Stats().get_cached, 1u);
    EXPECT_EQ(reader->Stats().get_no_lookup, by_version);
    EXPECT_EQ(reader->Stats().get_cached_stale, 0u);

    put(0x22, kPage);  // the reader still remembers the first page's slot
    get_is(0x22, kPage);
    EXPECT_EQ(reader->Stats().get_cached_stale, 1u) << "the guess was the older page";
    EXPECT_EQ(reader->Stats().get_no_lookup, by_version) << "the overwrite changed its region's version";
    get_is(0x22, kPage);
    EXPECT_EQ(reader->Stats().get_cached, 2u);
    EXPECT_EQ(reader->Stats().get_no_lookup, 2 * by_version);

    put(0x33, kPage / 2);  // shorter: the guess reads more bytes than the new page has
    get_is(0x33, kPage / 2);
    EXPECT_EQ(reader->Stats().get_cached_stale, 2u);

    std::vector<Status> removed;
    ASSERT_TRUE(writer->BatchRemove({key}, &removed).ok());
    ASSERT_TRUE(removed[0].ok()) << removed[0].ToString();
    ASSERT_TRUE(reader->BatchGet({key}, {{{dst, kPage}}}, &st, &len).ok());
    EXPECT_EQ(st[0].code(), Status::Code::kNotFound) << "removed, yet read: " << st[0].ToString();
    EXPECT_EQ(reader->Stats().get_cached_stale, 3u);
    const StoreStats r = reader->Stats();
    EXPECT_EQ(r.get_hits, 5u);
    EXPECT_EQ(r.misses_checksum, 0u) << "an intact older page verifies: the answer alone must refuse it";
  }
}

// A node's region versions are registered for peers to READ only: a
// client engine sees the page read-only in the node's descriptor, and a
// WRITE of older versions over it is refused, the versions unchanged, so
// no reader is made to trust an overwritten page.
TEST_F(StoreVerifyTest, PeersCannotWriteANodesRegionVersions) {
  ASSERT_NO_FATAL_FAILURE(Start(16 << 20, 2000, 5000));
  SegmentHandle h;
  ASSERT_TRUE(client_engine_->OpenSegment(node_engine_->name(), &h).ok());
  std::vector<RemoteBuffer> bufs;
  ASSERT_TRUE(client_engine_->GetSegmentBuffers(h, &bufs).ok());
  const RemoteBuffer* versions = nullptr;
  for (const RemoteBuffer& b : bufs)
    if (b.length == store::SharedPool::kVersionsBytes) versions = &b;
  ASSERT_NE(versions, nullptr) << "no buffer of the versions' size";
  EXPECT_TRUE(versions->read_only);
  for (const RemoteBuffer& b : bufs)
    if (&b != versions) {
      EXPECT_FALSE(b.read_only) << "the pool is written by PUTs";
    }

  ASSERT_TRUE(client_engine_->Transfer({{OpCode::kRead, buf_, h, versions->addr, 4096}}).ok());
  std::vector<uint8_t> before(buf_, buf_ + 4096);
  std::memset(buf_, 0, 4096);  // all versions back to zero
  Status s = client_engine_->Transfer({{OpCode::kWrite, buf_, h, versions->addr, 4096}});
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << s.ToString();
  ASSERT_TRUE(client_engine_->Transfer({{OpCode::kRead, buf_, h, versions->addr, 4096}}).ok());
  EXPECT_EQ(std::memcmp(buf_, before.data(), 4096), 0) << "the versions changed";
}

// A commit's reply says where each page lies, so the writer remembers it:
// its own GETs of the pages read at once, confirmed by the region versions
// with no lookup (HiCache reads back the pages it wrote). Its own
// overwrite moves what it remembers; another writer's overwrite and a
// removal are found as with any remembered location.
TEST_F(StoreVerifyTest, AWritersOwnPagesAreReadBackWithNoLookup) {
  Start(16 << 20, 2000, 5000);
  auto writer = OpenClient(settings_);
  auto other = OpenClient(settings_);
  constexpr size_t kPage = 128 << 10;
  constexpr size_t kKeys = 8;
  uint8_t* src = buf_;
  uint8_t* dst = buf_ + (8 << 20);
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> from, into;
  for (size_t k = 0; k < kKeys; ++k) {
    keys.push_back("own-" + std::to_string(k));
    from.push_back({{src + k * kPage, kPage}});
    into.push_back({{dst + k * kPage, kPage}});
  }
  std::vector<Status> st;
  std::vector<uint64_t> len;
  auto put = [&](const std::unique_ptr<Store>& by, int fill) {
    for (size_t k = 0; k < kKeys; ++k) std::memset(src + k * kPage, fill + static_cast<int>(k), kPage);
    ASSERT_TRUE(by->BatchPut(keys, from, &st).ok());
    for (size_t k = 0; k < kKeys; ++k) ASSERT_TRUE(st[k].ok()) << keys[k] << ": " << st[k].ToString();
  };
  auto get_is = [&](int fill) {
    std::memset(dst, 0, kKeys * kPage);
    ASSERT_TRUE(writer->BatchGet(keys, into, &st, &len).ok());
    for (size_t k = 0; k < kKeys; ++k) {
      ASSERT_TRUE(st[k].ok()) << keys[k] << ": " << st[k].ToString();
      ASSERT_EQ(len[k], kPage);
      for (size_t i = 0; i < kPage; ++i)
        ASSERT_EQ(dst[k * kPage + i], static_cast<uint8_t>(fill + static_cast<int>(k))) << keys[k] << " byte " << i;
    }
  };
  put(writer, 0x10);
  get_is(0x10);
  EXPECT_EQ(writer->Stats().get_no_lookup, kKeys) << "the writer knew where its pages lie";
  EXPECT_EQ(writer->Stats().get_cached_stale, 0u);
  put(writer, 0x40);  // its own overwrite: it remembers the new pages
  get_is(0x40);
  EXPECT_EQ(writer->Stats().get_no_lookup, 2 * kKeys);
  EXPECT_EQ(writer->Stats().get_cached_stale, 0u);
  put(other, 0x70);  // another writer's: the remembered pages are stale
  get_is(0x70);
  EXPECT_EQ(writer->Stats().get_cached_stale, kKeys) << "each guess was the older page";
  std::vector<Status> removed;
  ASSERT_TRUE(other->BatchRemove(keys, &removed).ok());
  ASSERT_TRUE(writer->BatchGet(keys, into, &st, &len).ok());
  for (size_t k = 0; k < kKeys; ++k)
    EXPECT_EQ(st[k].code(), Status::Code::kNotFound) << "removed, yet read: " << st[k].ToString();
  EXPECT_EQ(writer->Stats().misses_checksum, 0u);
}

// A page read from its remembered location with no lookup is not seen by
// its node's LRU, so the client tells the node in a touch message (at most
// every 200 ms per node). A hot page read that way while other pages churn
// through a pool of 7 slots, one every 50 ms, stays in the pool; without the
// touches it would be the least recently used page after 7 puts.
TEST_F(StoreVerifyTest, HotPagesReadWithoutLookupsStayInThePool) {
  Start(7 << 20, 2000, 2500);
  constexpr size_t kPage = 1 << 20;
  uint8_t* src = buf_;
  uint8_t* dst = buf_ + (8 << 20);
  std::vector<Status> st;
  std::vector<uint64_t> len;
  std::memset(src, 0x5a, kPage);
  ASSERT_TRUE(client_->BatchPut({"hot"}, {{{src, kPage}}}, &st).ok());
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  uint64_t misses = 0;
  const auto until = Clock::now() + std::chrono::seconds(3);
  for (int i = 0; Clock::now() < until; ++i) {
    std::memset(src + kPage, i, kPage);
    ASSERT_TRUE(client_->BatchPut({"churn-" + std::to_string(i % 20)}, {{{src + kPage, kPage}}}, &st).ok());
    ASSERT_TRUE(client_->BatchGet({"hot"}, {{{dst, kPage}}}, &st, &len).ok());
    if (!st[0].ok()) {
      ++misses;
      break;
    }
    ASSERT_EQ(dst[kPage - 1], 0x5a);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const StoreStats s = client_->Stats();
  EXPECT_EQ(misses, 0u) << "the hot page was evicted";
  EXPECT_GT(node_->Stats().evictions, 20u) << "the pool was meant to churn";
  EXPECT_GT(s.get_no_lookup, s.get_hits / 2) << "most reads of the hot page should need no lookup";
}

// Another page of the same region leaving its key moves the region's
// version, so a remembered page there is looked up; the answer names the
// very same page (same place, length, generation, checksum) and confirms
// the bytes already read: no second READ. (The version is not compared: it
// moved, so comparing it would read every such guess twice.)
TEST_F(StoreVerifyTest, ALookupNamingTheSamePageConfirmsItsGuess) {
  Start(16 << 20, 2000, 5000);
  constexpr size_t kPage = 4096;  // two pages in one region (64 KiB)
  std::vector<Status> st;
  std::vector<uint64_t> len;
  std::memset(buf_, 0xa, kPage);
  std::memset(buf_ + kPage, 0xb, kPage);
  ASSERT_TRUE(client_->BatchPut({"a", "b"}, {{{buf_, kPage}}, {{buf_ + kPage, kPage}}}, &st).ok());
  auto reader = OpenClient(settings_);
  uint8_t* dst = buf_ + (8 << 20);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(reader->BatchGet({"a"}, {{{dst, kPage}}}, &st, &len).ok());
    ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  }
  EXPECT_EQ(reader->Stats().get_no_lookup, 1u);
  std::vector<Status> removed;
  ASSERT_TRUE(client_->BatchRemove({"b"}, &removed).ok());
  std::memset(dst, 0, kPage);
  ASSERT_TRUE(reader->BatchGet({"a"}, {{{dst, kPage}}}, &st, &len).ok());
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_EQ(dst[kPage - 1], 0xa);
  const StoreStats r = reader->Stats();
  EXPECT_EQ(r.get_cached, 2u) << "confirmed by the version, then by the lookup";
  EXPECT_EQ(r.get_no_lookup, 1u);
  EXPECT_EQ(r.get_cached_stale, 0u) << "the lookup named the same page";
}

}  // namespace
}  // namespace kvfabric
