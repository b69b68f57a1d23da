// The fixture of the store's tests across processes: nodes are
// `kvfabric-store-bench serve` processes, the client is a Store without a
// pool in the test's process, over the transport the parameter names.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "kvfabric/store.h"
#include "net/socket.h"
#include "store/wire/checksum.h"
#include "store/wire/control_client.h"
#include "store/wire/messages.h"
#include "store/node/node_service.h"
#include "store/members/placement.h"
#include "tests/support/process.h"
#include "tests/support/providers.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

#ifndef KVF_STORE_BENCH_PATH
#error "KVF_STORE_BENCH_PATH must name the kvfabric-store-bench binary"
#endif

namespace kvfabric::store_test {

using Clock = std::chrono::steady_clock;
using test::Child;
constexpr int64_t kPool = 64 << 20;

inline std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// A node process serving on a fixed port (so it can restart under its name).
struct Node {
  std::unique_ptr<Child> child;
  std::string name;  // control address
  std::vector<std::string> args;  // kvfabric-store-bench serve's
  int64_t pool = kPool;

  bool Start(std::string* error) {
    child = std::make_unique<Child>();
    std::vector<std::string> argv = {KVF_STORE_BENCH_PATH, "serve", "--listen", name, "--pool", std::to_string(pool)};
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

inline std::vector<StoreBuffer> Buffers(const Region& r, const Page& p) {
  std::vector<StoreBuffer> out;
  for (auto [off, len] : p.pieces) out.push_back({r.bytes + off, len});
  return out;
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  // The transport of the nodes and the client: the parameter up to a '-';
  // after it, the client's KVF_STORE_PUT_MODE ("tcp-pull"), or "private":
  // pools not shared (KVF_STORE_SHARE_POOLS off in nodes and client, so
  // every page crosses the fabric; shared, those of the nodes, all on this
  // host, are copied).
  virtual std::string Protocol() const { return GetParam().substr(0, GetParam().find('-')); }
  std::string Variant() const {
    const size_t dash = GetParam().find('-');
    return dash == std::string::npos ? std::string() : GetParam().substr(dash + 1);
  }
  std::string PutMode() const {
    return Variant() == "pull" ? Variant() : std::string(Settings{}.store_put_mode);
  }
  bool SharedPools() const { return Variant() != "private"; }

  // `extra`: settings NAME=VALUE for the nodes. Nodes are added to nodes_;
  // those of one call list each other (the static members of p2p); their
  // pools are of `pool` bytes.
  void StartNodes(size_t n, const std::vector<std::string>& extra = {}, const std::string& metadata = "p2p",
                  int64_t pool = kPool) {
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) names.push_back("127.0.0.1:" + std::to_string(test::FreePort()));
    for (size_t i = 0; i < n; ++i) {
      Node node;
      node.name = names[i];
      node.pool = pool;
      node.args = {"--protocol", Protocol(), "--metadata", metadata, "--members", Join(names)};
      for (std::string kv : {"store_deadline_ms=2000", "store_read_window_ms=5000", "store_down_retry_ms=300"})
        node.args.insert(node.args.end(), {"--set", kv});
      if (!SharedPools()) node.args.insert(node.args.end(), {"--set", "store_share_pools=0"});
      for (const std::string& kv : extra) node.args.insert(node.args.end(), {"--set", kv});
      std::string error;
      ASSERT_TRUE(node.Start(&error)) << error;
      nodes_.push_back(std::move(node));
    }
    member_names_.insert(member_names_.end(), names.begin(), names.end());
  }

  // A client's engine over this test's protocol, knowing the nodes as its members.
  EngineConfig ClientConfig(const std::string& metadata = "p2p") const {
    EngineConfig cfg;
    cfg.protocol = Protocol();
    cfg.metadata = metadata;
    cfg.apply_environment = false;
    cfg.settings.log_level = "error";
    cfg.settings.store_members = Join(member_names_);
    cfg.settings.store_put_mode = PutMode();
    cfg.settings.store_share_pools = SharedPools();
    return cfg;
  }

  void StartClient(const std::string& metadata = "p2p", const std::vector<std::string>& extra = {}) {
    EngineConfig cfg = ClientConfig(metadata);
    cfg.settings.store_deadline_ms = 2000;
    cfg.settings.store_read_window_ms = 5000;
    cfg.settings.store_down_retry_ms = 300;
    for (const auto& kv : extra) ASSERT_TRUE(cfg.settings.Assign(kv).ok()) << kv;
    ASSERT_TRUE(Engine::Create(cfg, &engine_).ok());
    ASSERT_TRUE(Store::Create(engine_.get(), cfg.settings, &store_).ok());
    src_ = std::make_unique<Region>(engine_.get(), 48 << 20);
    dst_ = std::make_unique<Region>(engine_.get(), 48 << 20);
  }

  // A client whose hand-over window (KVF_STORE_HANDOFF_MS) is shorter than
  // the nodes' age when it returns: its calls go to the homes alone (a
  // PUT to a member that entered within the window also removes the key
  // from its previous home: one more message), so tests can count them.
  void StartClientOutsideHandoffWindow() {
    StartClient("p2p", {"store_handoff_ms=1001"});
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
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

  // The pages' keys, and their buffers laid out in `region`.
  static void KeysAndBuffers(const Region& region, const std::vector<Page>& pages, std::vector<std::string>* keys,
                             std::vector<std::vector<StoreBuffer>>* bufs) {
    for (const Page& p : pages) {
      keys->push_back(p.key);
      bufs->push_back(Buffers(region, p));
    }
  }

  std::vector<Status> Put(const std::vector<Page>& pages) {
    std::vector<std::string> keys;
    std::vector<std::vector<StoreBuffer>> bufs;
    KeysAndBuffers(*src_, pages, &keys, &bufs);
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
    KeysAndBuffers(*dst_, pages, &keys, &bufs);
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

  // GETs the page of `key` into the destination region's first 4096 bytes
  // (zeroed first): the key's status, or Internal when its bytes are not
  // the source region's first 4096.
  Status GetOnePage(const std::string& key) {
    std::vector<Status> st;
    std::vector<uint64_t> len;
    std::memset(dst_->bytes, 0, 4096);
    KVF_RETURN_IF_ERROR(store_->BatchGet({key}, {{{dst_->bytes, 4096}}}, &st, &len));
    KVF_RETURN_IF_ERROR(st[0]);
    if (std::memcmp(dst_->bytes, src_->bytes, 4096) != 0)
      return Status::Internal("the page's bytes are not the source's");
    return Status::OK();
  }

  // `na` keys named PREFIX<n> whose home is the first node and `nb` whose
  // home is another (two nodes).
  void KeysByHome(const std::string& prefix, size_t na, size_t nb, std::vector<std::string>* on_a,
                  std::vector<std::string>* on_b) {
    const store::Placement placement = PlacementOf(member_names_);
    for (int i = 0; on_a->size() < na || on_b->size() < nb; ++i) {
      const std::string k = prefix + std::to_string(i);
      (placement.members()[placement.Home(k)].name == nodes_[0].name ? on_a : on_b)->push_back(k);
    }
    on_a->resize(na);
    on_b->resize(nb);
  }

  // Get while the first node is stopped (SIGSTOP; resumed after), within
  // the client's 2 s deadline and some slack.
  void GetWhileFirstNodeStopped(const std::vector<Page>& pages, std::vector<Status>* st, std::vector<bool>* exact) {
    ASSERT_TRUE(test::StopProcess(nodes_[0].child->pid())) << "the node did not stop";
    const auto t0 = Clock::now();
    *st = Get(pages, exact);
    const auto took = Clock::now() - t0;
    kill(nodes_[0].child->pid(), SIGCONT);
    EXPECT_LT(took, std::chrono::milliseconds(2000 + 1500)) << "the call's deadline is 2 s";
  }

  bool WaitForMembers(size_t n, int timeout_ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < until) {
      if (store_->Members().size() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return store_->Members().size() == n;
  }

  // What node `name` says of itself: its pages and the requests it served.
  store::NodeStats StatsOf(const std::string& name) {
    store::ControlClient control(engine_->settings());
    std::string reply;
    store::NodeStats stats;
    Status s = control.CallSync(name, store::EncodeBare(store::Op::kStats), net::DeadlineIn(2000), &reply);
    if (s.ok()) s = store::DecodeNodeStats(reply, &stats);
    EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
    return stats;
  }

  // A control call to node `name`, as any process on the network could make it.
  Status CallNode(const std::string& name, const std::string& request, std::string* reply) {
    if (!raw_control_) raw_control_ = std::make_unique<store::ControlClient>(engine_->settings());
    return raw_control_->CallSync(name, request, net::DeadlineIn(2000), reply);
  }
  // Node `name`'s greeting, and its pool's segment opened in this engine.
  void OpenPool(const std::string& name, store::NodeInfo* info, SegmentHandle* segment) {
    std::string reply;
    ASSERT_TRUE(CallNode(name, store::EncodeBare(store::Op::kHello), &reply).ok());
    ASSERT_TRUE(store::DecodeNodeInfo(reply, info).ok());
    ASSERT_TRUE(engine_->OpenSegment(info->segment, segment).ok());
  }

  // Where keys live among the nodes named, with pools of `pools` bytes (of
  // kPool where not given; the placement every client computes): Home(key)
  // indexes `names`.
  static store::Placement PlacementOf(const std::vector<std::string>& names, const std::vector<int64_t>& pools = {}) {
    std::vector<store::Member> members;
    for (size_t i = 0; i < names.size(); ++i)
      members.push_back({names[i], static_cast<uint64_t>(i < pools.size() ? pools[i] : kPool)});
    return store::Placement(std::move(members));
  }

  void SetUp() override {
    // A provider libfabric has here but could not list: a failure to see, not a case to drop.
    for (const test::FoundProvider& p : test::FabricProviders())
      ASSERT_TRUE(p.protocol != Protocol() || p.probe_error.empty())
          << "libfabric has the " << p.protocol << " provider but could not list it: " << p.probe_error;
  }

  void TearDown() override {
    // The store and the engine's rails first: a READ still pending into the
    // regions (a key that failed with Timeout on a node that hung, then
    // went on) may land until the rails close.
    store_.reset();
    raw_control_.reset();
    if (engine_) engine_->Close();
    src_.reset();
    dst_.reset();
    engine_.reset();
    nodes_.clear();
  }

  std::vector<Node> nodes_;
  std::vector<std::string> member_names_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Region> src_, dst_;
  std::unique_ptr<store::ControlClient> raw_control_;  // CallNode's
};

// The transports every store test runs over (StoreTest's parameter), and
// their names in test names: each fabric provider this host has (tcp and
// shm always; efa and verbs where libfabric finds them) with pools private
// ("tcp-private": KVF_STORE_SHARE_POOLS off, so every page crosses that
// provider), then "tcp" (pools shared: the nodes all run on this host, so
// pages are copied from their mapped pools whatever the provider, and one
// provider shows it) and "tcp-pull" (PUTs by READ).
inline std::vector<std::string> StoreTransports() {
  std::vector<std::string> out;
  for (const test::FoundProvider& p : test::FabricProviders()) out.push_back(p.protocol + "-private");
  for (const char* variant : {"tcp", "tcp-pull"}) out.push_back(variant);
  return out;
}
inline std::string TransportName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

inline size_t CountOk(const std::vector<Status>& st) {
  size_t n = 0;
  for (const auto& s : st) n += s.ok() ? 1 : 0;
  return n;
}

}  // namespace kvfabric::store_test
