// The store across processes: nodes are `kvfabric-store-bench serve`
// processes, the client is a Store without a pool in this process. Every
// page is checked byte for byte.
#include "kvfabric/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "store/node_service.h"
#include "tests/support/process.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

#ifndef KVF_STORE_BENCH_PATH
#error "KVF_STORE_BENCH_PATH must name the kvfabric-store-bench binary"
#endif

namespace kvfabric {
namespace {

using Clock = std::chrono::steady_clock;
using test::Child;
constexpr int64_t kPool = 64 << 20;

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// A node process serving on a fixed port (so it can restart under its name).
struct Node {
  std::unique_ptr<Child> child;
  std::string name;  // control address
  std::vector<std::string> args;  // kvfabric-store-bench serve's

  bool Start(std::string* error) {
    child = std::make_unique<Child>();
    std::vector<std::string> argv = {KVF_STORE_BENCH_PATH, "serve", "--listen", name, "--pool", std::to_string(kPool)};
    argv.insert(argv.end(), args.begin(), args.end());
    if (!child->Start(argv)) {
      *error = "cannot start the store node";
      return false;
    }
    const std::string line = child->FirstLine(30000);
    std::istringstream in(line);
    std::string word, got_name;
    in >> word >> got_name;
    if (word != "READY") {
      *error = "store node did not start: '" + line + "'";
      return false;
    }
    return true;
  }
  void Kill() {
    kill(child->pid(), SIGKILL);
    waitpid(child->pid(), nullptr, 0);
  }
};

// Memory registered with the client's engine.
struct Region {
  Engine* engine = nullptr;
  uint8_t* bytes = nullptr;
  size_t size = 0;
  Region(Engine* e, size_t n) : engine(e), size(n) {
    bytes = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    EXPECT_TRUE(engine->RegisterMemory(bytes, n).ok());
  }
  ~Region() {
    (void)engine->UnregisterMemory(bytes);
    std::free(bytes);
  }
};

// A page: its key, and where its bytes are in the source region, as one to
// three buffers.
struct Page {
  std::string key;
  std::vector<std::pair<size_t, size_t>> pieces;  // offset, length
  size_t length = 0;
};

std::vector<StoreBuffer> Buffers(const Region& r, const Page& p) {
  std::vector<StoreBuffer> out;
  for (auto [off, len] : p.pieces) out.push_back({r.bytes + off, len});
  return out;
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The transport of the nodes and the client.
  virtual std::string Protocol() const { return GetParam(); }

  // `extra`: settings NAME=VALUE for the nodes.
  void StartNodes(size_t n, const std::vector<std::string>& extra = {}, const std::string& metadata = "p2p") {
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) names.push_back("127.0.0.1:" + std::to_string(test::FreePort()));
    for (size_t i = 0; i < n; ++i) {
      Node node;
      node.name = names[i];
      node.args = {"--protocol", Protocol(), "--metadata", metadata, "--members", Join(names)};
      for (std::string kv : {"store_deadline_ms=2000", "store_read_window_ms=5000", "store_down_retry_ms=300"})
        node.args.insert(node.args.end(), {"--set", kv});
      for (const std::string& kv : extra) node.args.insert(node.args.end(), {"--set", kv});
      std::string error;
      ASSERT_TRUE(node.Start(&error)) << error;
      nodes_.push_back(std::move(node));
    }
    member_names_ = names;
  }

  void StartClient(const std::string& metadata = "p2p", const std::vector<std::string>& extra = {}) {
    EngineConfig cfg;
    cfg.protocol = Protocol();
    cfg.metadata = metadata;
    cfg.apply_environment = false;
    cfg.settings.log_level = "error";
    cfg.settings.store_members = Join(member_names_);
    cfg.settings.store_deadline_ms = 2000;
    cfg.settings.store_read_window_ms = 5000;
    cfg.settings.store_down_retry_ms = 300;
    for (const auto& kv : extra) ASSERT_TRUE(cfg.settings.Assign(kv).ok()) << kv;
    ASSERT_TRUE(Engine::Create(cfg, &engine_).ok());
    ASSERT_TRUE(Store::Create(engine_.get(), cfg.settings, &store_).ok());
    src_ = std::make_unique<Region>(engine_.get(), 48 << 20);
    dst_ = std::make_unique<Region>(engine_.get(), 48 << 20);
  }

  // `count` pages of mixed sizes (1 B to 512 KiB, one to three buffers each)
  // laid out in the source region with pattern `seed`.
  std::vector<Page> MakePages(size_t count, uint32_t seed, const std::string& prefix = "key-") {
    std::mt19937_64 rng(seed);
    std::vector<Page> pages;
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
      Page p;
      p.key = prefix + std::to_string(i);
      const size_t sizes[] = {1, 4095, 4097, 65536, 131072, 1 + rng() % (512 << 10)};
      p.length = sizes[rng() % 6];
      const size_t parts = std::min<size_t>(p.length, 1 + rng() % 3);
      size_t left = p.length;
      for (size_t k = 0; k < parts; ++k) {
        const size_t len = k + 1 == parts ? left : std::max<size_t>(1, left / (parts - k));
        p.pieces.push_back({at, len});
        at += len;
        left -= len;
      }
      pages.push_back(std::move(p));
    }
    EXPECT_LE(at, src_->size);
    tools::FillPattern(src_->bytes, at, 0, seed);
    return pages;
  }

  std::vector<Status> Put(const std::vector<Page>& pages) {
    std::vector<std::string> keys;
    std::vector<std::vector<StoreBuffer>> bufs;
    for (const Page& p : pages) {
      keys.push_back(p.key);
      bufs.push_back(Buffers(*src_, p));
    }
    std::vector<Status> st;
    EXPECT_TRUE(store_->BatchPut(keys, bufs, &st).ok());
    return st;
  }

  // Gets every page into the same layout in the destination region (zeroed
  // first); per page its status, and whether its bytes match the source.
  std::vector<Status> Get(const std::vector<Page>& pages, std::vector<bool>* exact = nullptr) {
    std::memset(dst_->bytes, 0, dst_->size);
    std::vector<std::string> keys;
    std::vector<std::vector<StoreBuffer>> bufs;
    for (const Page& p : pages) {
      keys.push_back(p.key);
      bufs.push_back(Buffers(*dst_, p));
    }
    std::vector<Status> st;
    std::vector<uint64_t> lengths;
    EXPECT_TRUE(store_->BatchGet(keys, bufs, &st, &lengths).ok());
    if (exact != nullptr) {
      exact->assign(pages.size(), false);
      for (size_t i = 0; i < pages.size(); ++i) {
        bool same = st[i].ok() && lengths[i] == pages[i].length;
        for (auto [off, len] : pages[i].pieces) same = same && std::memcmp(src_->bytes + off, dst_->bytes + off, len) == 0;
        (*exact)[i] = same;
      }
    }
    return st;
  }

  bool WaitForMembers(size_t n, int timeout_ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < until) {
      if (store_->Members().size() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return store_->Members().size() == n;
  }

  void TearDown() override {
    src_.reset();
    dst_.reset();
    store_.reset();
    engine_.reset();
    nodes_.clear();
  }

  std::vector<Node> nodes_;
  std::vector<std::string> member_names_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Region> src_, dst_;
};

size_t CountOk(const std::vector<Status>& st) {
  size_t n = 0;
  for (const auto& s : st) n += s.ok() ? 1 : 0;
  return n;
}

TEST_P(StoreTest, PagesOfMixedSizesAndBuffersComeBackByteExact) {
  StartNodes(3);
  StartClient();
  ASSERT_EQ(store_->Members().size(), 3u);
  const auto pages = MakePages(240, 11);
  const auto put = Put(pages);
  for (size_t i = 0; i < pages.size(); ++i) ASSERT_TRUE(put[i].ok()) << pages[i].key << ": " << put[i].ToString();
  std::vector<bool> exact;
  const auto got = Get(pages, &exact);
  for (size_t i = 0; i < pages.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << pages[i].key << ": " << got[i].ToString();
    EXPECT_TRUE(exact[i]) << pages[i].key;
  }
  const StoreStats st = store_->Stats();
  EXPECT_EQ(st.get_hits, pages.size());
  EXPECT_EQ(st.misses_checksum, 0u);
  EXPECT_EQ(st.control_calls, 6u) << "one message per node per batch";
  // A page into one buffer of another shape: the page fills it in order.
  std::vector<std::string> keys = {pages[7].key};
  std::vector<std::vector<StoreBuffer>> one = {{{dst_->bytes, pages[7].length + 100}}};
  std::vector<Status> s;
  std::vector<uint64_t> len;
  std::memset(dst_->bytes, 0, pages[7].length + 100);
  ASSERT_TRUE(store_->BatchGet(keys, one, &s, &len).ok());
  ASSERT_TRUE(s[0].ok()) << s[0].ToString();
  EXPECT_EQ(len[0], pages[7].length);
  size_t at = 0;
  for (auto [off, n] : pages[7].pieces) {
    EXPECT_EQ(std::memcmp(dst_->bytes + at, src_->bytes + off, n), 0);
    at += n;
  }
}

TEST_P(StoreTest, ExistsRemoveAndRemoveAll) {
  StartNodes(2);
  StartClient();
  auto pages = MakePages(12, 3);
  std::vector<Page> stored(pages.begin(), pages.begin() + 10);
  stored.push_back(pages[11]);
  ASSERT_EQ(CountOk(Put(stored)), stored.size());
  std::vector<std::string> keys;
  for (const Page& p : pages) keys.push_back(p.key);
  std::vector<bool> found;
  size_t leading = 0;
  ASSERT_TRUE(store_->BatchExists(keys, &found, &leading).ok());
  EXPECT_EQ(leading, 10u) << "key-10 is absent: the prefix ends there";
  EXPECT_FALSE(found[10]);
  EXPECT_TRUE(found[11]);

  std::vector<Status> st;
  ASSERT_TRUE(store_->BatchRemove({pages[3].key, pages[10].key}, &st).ok());
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_EQ(st[1].code(), Status::Code::kNotFound);
  EXPECT_EQ(Get({pages[3]})[0].code(), Status::Code::kNotFound);
  ASSERT_TRUE(store_->BatchExists(keys, &found, &leading).ok());
  EXPECT_EQ(leading, 3u);

  uint64_t removed = 0;
  ASSERT_TRUE(store_->RemoveAll(&removed).ok());
  EXPECT_EQ(removed, stored.size() - 1);
  ASSERT_TRUE(store_->BatchExists(keys, &found, &leading).ok());
  EXPECT_EQ(leading, 0u);
  for (bool f : found) EXPECT_FALSE(f);
}

TEST_P(StoreTest, BadInputFailsItsKeyOnlyAndChangesNothing) {
  StartNodes(2);
  StartClient();
  const auto pages = MakePages(4, 5);
  std::vector<Status> st;
  EXPECT_EQ(store_->BatchPut({"a", "b"}, {{}}, &st).code(), Status::Code::kInvalidArgument);

  // An empty key, an unregistered buffer and a page over the largest size,
  // beside good keys.
  std::vector<uint8_t> unregistered(4096, 1);
  std::vector<std::string> keys = {pages[0].key, "", "unregistered", pages[1].key, "too-big"};
  std::vector<std::vector<StoreBuffer>> bufs = {Buffers(*src_, pages[0]), Buffers(*src_, pages[0]),
                                                {{unregistered.data(), unregistered.size()}},
                                                Buffers(*src_, pages[1]), {{src_->bytes, (64u << 20) + 1}}};
  ASSERT_TRUE(store_->BatchPut(keys, bufs, &st).ok());
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_EQ(st[1].code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(st[2].ok());
  EXPECT_TRUE(st[3].ok()) << st[3].ToString();
  EXPECT_EQ(st[4].code(), Status::Code::kInvalidArgument);
  std::vector<bool> found;
  size_t leading = 0;
  ASSERT_TRUE(store_->BatchExists({"unregistered", "too-big"}, &found, &leading).ok());
  EXPECT_FALSE(found[0]);
  EXPECT_FALSE(found[1]);

  // A GET into buffers smaller than the page, and into unregistered memory.
  std::vector<uint64_t> len;
  ASSERT_TRUE(store_->BatchGet({pages[0].key, pages[1].key},
                               {{{dst_->bytes, pages[0].length - (pages[0].length > 1 ? 1 : 0)}},
                                {{unregistered.data(), std::min<size_t>(pages[1].length, 4096)}}},
                               &st, &len)
                  .ok());
  if (pages[0].length > 1) {
    EXPECT_EQ(st[0].code(), Status::Code::kInvalidArgument) << st[0].ToString();
  }
  if (pages[1].length <= 4096) {
    EXPECT_FALSE(st[1].ok());
  }
  // And the pages are still there, whole.
  std::vector<bool> exact;
  const auto got = Get({pages[0], pages[1]}, &exact);
  EXPECT_TRUE(exact[0]) << got[0].ToString();
  EXPECT_TRUE(exact[1]) << got[1].ToString();
}

TEST_P(StoreTest, AKilledNodeFailsOnlyItsKeysWithinTheDeadline) {
  StartNodes(3);
  StartClient();
  const auto pages = MakePages(150, 21);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  nodes_[1].Kill();
  const auto t0 = Clock::now();
  std::vector<bool> exact;
  const auto got = Get(pages, &exact);
  const auto took = Clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(2000 + 1000)) << "bounded by the store deadline";
  size_t ok = 0, failed = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (got[i].ok()) {
      ++ok;
      EXPECT_TRUE(exact[i]) << pages[i].key;
    } else {
      ++failed;
      EXPECT_NE(got[i].code(), Status::Code::kInvalidArgument) << got[i].ToString();
    }
  }
  EXPECT_GT(ok, pages.size() / 3) << "the other nodes' keys still come back";
  EXPECT_GT(failed, 0u) << "the dead node held some keys";
  // Placement drops it: every new page lands on the two left.
  ASSERT_TRUE(WaitForMembers(2, 3000));
  const auto again = MakePages(60, 22, "after-");
  EXPECT_EQ(CountOk(Put(again)), again.size());
  // Restarted under its name, it starts empty and takes its share again.
  std::string error;
  ASSERT_TRUE(nodes_[1].Start(&error)) << error;
  ASSERT_TRUE(WaitForMembers(3, 5000));
  const auto after = Get(again, &exact);
  size_t moved = 0;
  for (size_t i = 0; i < again.size(); ++i) {
    if (after[i].ok()) EXPECT_TRUE(exact[i]);
    else { EXPECT_EQ(after[i].code(), Status::Code::kNotFound) << after[i].ToString(); ++moved; }
  }
  EXPECT_GT(moved, 0u) << "keys homed on the restarted node are misses: it started empty";
  EXPECT_LT(moved, again.size());
}

// A node killed and restarted under its name between two calls of the
// client: no call failed meanwhile, so the client still holds the old
// engine's segment. Its pages must come back all the same (the first GET
// may fail its keys): the soak found them failing with NetworkError for
// ever, while PUTs to the node went on succeeding.
TEST_P(StoreTest, ANodeRestartedBetweenTwoCallsIsReadAgain) {
  StartNodes(3);
  StartClient();
  const auto pages = MakePages(90, 31);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  nodes_[1].Kill();
  std::string error;
  ASSERT_TRUE(nodes_[1].Start(&error)) << error;
  ASSERT_EQ(CountOk(Put(pages)), pages.size()) << "the client's view still has the three nodes";
  const auto until = Clock::now() + std::chrono::seconds(5);
  size_t exact_pages = 0;
  std::vector<bool> exact;
  std::string last_failure;
  while (Clock::now() < until && exact_pages < pages.size()) {
    const auto got = Get(pages, &exact);
    exact_pages = 0;
    for (size_t i = 0; i < pages.size(); ++i) {
      exact_pages += exact[i] ? 1 : 0;
      if (!got[i].ok()) last_failure = got[i].ToString();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(exact_pages, pages.size()) << "the restarted node's pages, put after its restart, stay unreadable: "
                                       << last_failure;
}

INSTANTIATE_TEST_SUITE_P(Transports, StoreTest, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

// Members from a real etcd and kvfabric-metadata-server: a killed node
// leaves when its lease (TTL) runs out, with no call failing first.
// GetParam() names the backend here; nodes and client speak tcp.
class StoreMembershipTest : public StoreTest {
 protected:
  std::string Protocol() const override { return "tcp"; }
};

TEST_P(StoreMembershipTest, AKilledNodeLeavesWhenItsLeaseEnds) {
  std::string error;
  const std::string& uri = test::SharedMetadataUri(GetParam() == "etcd" ? "etcd" : "http", &error);
  if (uri.empty()) GTEST_SKIP() << error;
  const std::string cluster = "store_cluster=t" + std::to_string(::getpid()) + std::to_string(Clock::now().time_since_epoch().count() % 100000);
  StartNodes(2, {cluster, "store_member_ttl_s=2", "store_membership_refresh_ms=200"}, uri);
  StartClient(uri, {cluster, "store_membership_refresh_ms=200"});
  ASSERT_TRUE(WaitForMembers(2, 5000));
  nodes_[0].Kill();
  const auto t0 = Clock::now();
  ASSERT_TRUE(WaitForMembers(1, 8000)) << "the lease of 2 s should have ended";
  EXPECT_GT(Clock::now() - t0, std::chrono::milliseconds(500)) << "dropped by the lease, not at once";
  const auto pages = MakePages(30, 9);
  EXPECT_EQ(CountOk(Put(pages)), pages.size());
  std::vector<bool> exact;
  Get(pages, &exact);
  for (bool e : exact) EXPECT_TRUE(e);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreMembershipTest, ::testing::Values("etcd", "http"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvfabric
