// The store against clients that misbehave, on purpose or by accident, and
// the promises that hold whatever they do: an acknowledged PUT is read back
// until something newer evicts it, and no client takes what belongs to
// others (their reservations, the pool). Every page is checked byte for byte.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/integration/store/store_fixture.h"

namespace kvfabric {
namespace {

using namespace store_test;  // NOLINT: the fixture's names

constexpr size_t kPage = 256 << 10;

class StoreHardeningTest : public StoreTest {
 protected:
  // Pages of kPage named `keys`, their bytes from the first eight pages of
  // the source region (pattern 7), put in batches of 32; per key its status.
  std::vector<Status> PutPages(const std::vector<std::string>& keys) {
    tools::FillPattern(src_->bytes, 8 * kPage, 0, 7);
    std::vector<Status> all;
    for (size_t at = 0; at < keys.size(); at += 32) {
      std::vector<std::string> batch(keys.begin() + at, keys.begin() + std::min(keys.size(), at + 32));
      std::vector<std::vector<StoreBuffer>> bufs;
      for (size_t i = 0; i < batch.size(); ++i) bufs.push_back({{src_->bytes + (at + i) % 8 * kPage, kPage}});
      std::vector<Status> st;
      EXPECT_TRUE(store_->BatchPut(batch, bufs, &st).ok());
      all.insert(all.end(), st.begin(), st.end());
    }
    return all;
  }
  // Gets the pages PutPages put under `keys` (the i-th of them from source
  // page i % 8); how many came back byte for byte. By `store` into `into`
  // (32 pages or more), or by this test's client.
  size_t ExactPages(const std::vector<std::string>& keys) { return ExactPages(keys, store_.get(), dst_.get()); }
  size_t ExactPages(const std::vector<std::string>& keys, Store* store, const Region* into) {
    size_t exact = 0;
    for (size_t at = 0; at < keys.size(); at += 32) {
      std::vector<std::string> batch(keys.begin() + at, keys.begin() + std::min(keys.size(), at + 32));
      std::vector<std::vector<StoreBuffer>> bufs;
      for (size_t i = 0; i < batch.size(); ++i) bufs.push_back({{into->bytes + i * kPage, kPage}});
      std::memset(into->bytes, 0, batch.size() * kPage);
      std::vector<Status> st;
      std::vector<uint64_t> lengths;
      EXPECT_TRUE(store->BatchGet(batch, bufs, &st, &lengths).ok());
      for (size_t i = 0; i < batch.size(); ++i)
        exact += st[i].ok() && lengths[i] == kPage &&
                 std::memcmp(into->bytes + i * kPage, src_->bytes + (at + i) % 8 * kPage, kPage) == 0;
    }
    return exact;
  }
  static std::vector<std::string> Keys(const std::string& prefix, size_t n) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
    return keys;
  }
  static std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
    return {keys.begin(), keys.end()};
  }
  // "127.0.0.1:port" of a socket that takes connections and never answers
  // (closed with the test).
  std::string Blackhole() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), len), 0);
    EXPECT_EQ(listen(fd, 64), 0);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
    holes_.push_back(fd);
    return "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  }
  void TearDown() override {
    StoreTest::TearDown();
    for (int fd : holes_) close(fd);
  }
  std::vector<int> holes_;
};

// A full pool whose older pages were all read within their window: a PUT
// by WRITE whose commit asks for slots ahead (as every writer's commit
// does) must not have its pages evicted for that grant. Its pages read back
// whole, the pages read before all stay, and no grant is given, since
// nothing else could make room.
TEST_P(StoreHardeningTest, AGrantNeverEvictsThePagesItsCommitStored) {
  if (PutMode() != "push") GTEST_SKIP() << "the client puts by READ here";
  StartNodes(1);
  StartClient("p2p", {"store_put_grants=0"});
  const std::string node = member_names_[0];
  constexpr size_t kSlots = kPool / kPage, kNew = 4;
  const std::vector<std::string> old = Keys("old-", kSlots - kNew);
  ASSERT_EQ(CountOk(PutPages(old)), old.size());
  std::string reply;
  ASSERT_TRUE(CallNode(node, store::EncodeKeys(store::Op::kLookup, Views(old)), &reply).ok());  // read windows open

  store::NodeInfo info;
  SegmentHandle segment = -1;
  ASSERT_NO_FATAL_FAILURE(OpenPool(node, &info, &segment));
  const std::vector<std::string> fresh = Keys("new-", kNew);
  store::ReserveRequest reserve{2000, {}};
  for (const std::string& k : fresh) reserve.items.push_back({k, kPage});
  ASSERT_TRUE(CallNode(node, store::EncodeReserve(reserve), &reply).ok());
  store::Slots slots;
  ASSERT_TRUE(store::DecodeSlots(reply, kNew, &slots).ok());
  store::CommitRequest commit{slots.ticket, {}, std::vector<uint64_t>(kNew, kPage)};
  for (size_t i = 0; i < kNew; ++i) {
    ASSERT_TRUE(slots.statuses[i].ok()) << slots.statuses[i].ToString();
    uint8_t* bytes = src_->bytes + i % 8 * kPage;
    ASSERT_TRUE(engine_->Transfer({{OpCode::kWrite, bytes, segment, slots.addrs[i], kPage}}).ok());
    commit.items.push_back({store::CommitState::kWritten, true, store::ChecksumOfBytes(bytes, kPage), ""});
  }
  ASSERT_TRUE(CallNode(node, store::EncodeCommit(commit), &reply).ok());
  store::CommitReply committed;
  ASSERT_TRUE(store::DecodeCommitReply(reply, kNew, &committed).ok());
  for (const Status& s : committed.statuses) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(committed.granted.ticket, 0u) << "a grant was made of the pool the node had no room in";

  EXPECT_EQ(ExactPages(fresh), kNew) << "an acknowledged PUT was evicted by its own commit's grant";
  EXPECT_EQ(ExactPages(old), old.size()) << "pages read within their window were evicted for a grant";
  const store::NodeStats stats = StatsOf(node);
  EXPECT_EQ(stats.pages, kSlots);
  EXPECT_EQ(stats.evictions, 0u);
}

// Tickets belong to the connection that reserved: a commit of another
// connection's ticket is answered as if there were none and takes nothing,
// the owner's commit then goes through, and a connection that closes takes
// its reservations with it (its slots held back, never committed by anyone).
TEST_P(StoreHardeningTest, OnlyTheConnectionThatReservedCommits) {
  if (PutMode() != "push") GTEST_SKIP() << "the client puts by READ here";
  StartNodes(1);
  StartClient();
  const std::string node = member_names_[0];
  store::NodeInfo info;
  SegmentHandle segment = -1;
  ASSERT_NO_FATAL_FAILURE(OpenPool(node, &info, &segment));
  std::string reply;
  store::Slots slots;
  ASSERT_TRUE(CallNode(node, store::EncodeReserve({2000, {{"mine", 4096}}}), &reply).ok());
  ASSERT_TRUE(store::DecodeSlots(reply, 1, &slots).ok());
  std::memset(src_->bytes, 0x3c, 4096);
  ASSERT_TRUE(engine_->Transfer({{OpCode::kWrite, src_->bytes, segment, slots.addrs[0], 4096}}).ok());
  const store::CommitRequest commit{
      slots.ticket, {{store::CommitState::kWritten, true, store::ChecksumOfBytes(src_->bytes, 4096), ""}}, {}};

  {
    store::ControlClient thief(engine_->settings());
    const Status s = thief.CallSync(node, store::EncodeCommit(commit), net::DeadlineIn(2000), &reply);
    EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
    // The thief's own reservation, left open when its connection closes.
    ASSERT_TRUE(thief.CallSync(node, store::EncodeReserve({2000, {{"left", 8192}}}), net::DeadlineIn(2000), &reply)
                    .ok());
    EXPECT_EQ(StatsOf(node).reserved_bytes, 4096u + 8192) << "the foreign commit took the owner's slots";
  }
  ASSERT_TRUE(CallNode(node, store::EncodeCommit(commit), &reply).ok());
  store::CommitReply committed;
  ASSERT_TRUE(store::DecodeCommitReply(reply, 1, &committed).ok());
  ASSERT_TRUE(committed.statuses[0].ok()) << committed.statuses[0].ToString();

  // The closed connection's slots leave reservation as its close is seen.
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (StatsOf(node).reserved_bytes != 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const store::NodeStats stats = StatsOf(node);
  EXPECT_EQ(stats.reserved_bytes, 0u) << "a closed connection's reservation is still open";
  EXPECT_EQ(stats.quarantined_bytes, 8192u) << "its WRITEs may still land: held back";
  const Status got = GetOnePage("mine");
  EXPECT_TRUE(got.ok()) << got.ToString();
}

// One client's pins never take the pool from the others: a batch that
// would pin more than KVF_STORE_MAX_PINNED_SHARE of the pool, or more pins
// than KVF_STORE_MAX_PINS for its connection, is refused with Busy and pins
// nothing; pins within both are kept, and other clients' PUTs still find
// room in the rest of the pool.
TEST_P(StoreHardeningTest, PinsNeverTakeThePoolFromOtherClients) {
  StartNodes(1, {"store_max_pins=150"});
  StartClient();
  const std::string node = member_names_[0];
  const std::vector<std::string> held = Keys("held-", 200);
  ASSERT_EQ(CountOk(PutPages(held)), held.size());
  std::vector<Status> st;
  ASSERT_TRUE(store_->BatchPin({held.begin(), held.begin() + 130}, &st).ok());  // 32.5 of the pool's 64 MiB
  for (const Status& s : st) {
    ASSERT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
    EXPECT_NE(s.message().find("KVF_STORE_MAX_PINNED_SHARE"), std::string::npos) << s.message();
  }
  EXPECT_EQ(StatsOf(node).pinned_pages, 0u) << "a refused pin batch pinned pages";

  const std::vector<std::string> some(held.begin(), held.begin() + 100);  // 25 MiB: within half the pool
  ASSERT_TRUE(store_->BatchPin(some, &st).ok());
  EXPECT_EQ(CountOk(st), some.size());
  ASSERT_TRUE(store_->BatchPin({held.begin() + 100, held.begin() + 151}, &st).ok());
  for (const Status& s : st) {
    ASSERT_EQ(s.code(), Status::Code::kBusy) << s.ToString();
    EXPECT_NE(s.message().find("KVF_STORE_MAX_PINS"), std::string::npos) << s.message();
  }
  EXPECT_EQ(StatsOf(node).pinned_pages, some.size());

  // PUTs fill the rest of the pool, twice over: the pinned pages stay, and
  // the PUTs never find the pool full.
  const std::vector<std::string> others = Keys("other-", 300);
  EXPECT_EQ(CountOk(PutPages(others)), others.size());
  EXPECT_EQ(ExactPages(some), some.size());
  EXPECT_EQ(StatsOf(node).pinned_pages, some.size());
}

// PUTs by READ naming a writer that never answers (any client can send
// them, whatever the node's own PUT mode): the node holds at most
// KVF_STORE_PUT_QUEUE_BYTES of them and refuses the rest at once; a writer
// it knows is served meanwhile (a put thread stays free of handshakes with
// new writers); once the open failed, requests naming that writer are
// refused at once for KVF_STORE_DOWN_RETRY_MS.
TEST_P(StoreHardeningTest, PutsNamingAWriterThatNeverAnswersNeitherPileUpNorHoldUpOthers) {
  if (GetParam() != "tcp") GTEST_SKIP() << "the node's side alone: one transport shows it";
  StartNodes(1, {"store_put_queue_bytes=64KiB", "handshake_timeout_ms=1500", "store_down_retry_ms=20000"});
  StartClient();
  const std::string node = member_names_[0];
  tools::FillPattern(src_->bytes, 4096, 0, 3);
  auto put = [&](const std::string& writer, const std::string& prefix, size_t items) {
    store::PutRequest r{writer, 2000, {}};
    for (size_t i = 0; i < items; ++i)
      r.items.push_back({prefix + std::to_string(i), {{reinterpret_cast<uintptr_t>(src_->bytes), 4096}}});
    return store::EncodePut(r);
  };
  auto expect_put = [&](const std::string& request) {
    std::string reply;
    const auto t0 = Clock::now();
    ASSERT_TRUE(CallNode(node, request, &reply).ok());
    std::vector<Status> st;
    ASSERT_TRUE(store::DecodeStatuses(reply, 1, &st).ok());
    EXPECT_TRUE(st[0].ok()) << st[0].ToString();
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1000)) << "a known writer waited behind handshakes";
  };
  ASSERT_NO_FATAL_FAILURE(expect_put(put(engine_->name(), "known-", 1)));  // the node opens this engine

  const std::string nowhere = Blackhole();  // a writer's address that never answers
  const std::string one = put(nowhere, "nowhere-00-", 400);
  ASSERT_GT(one.size(), 12u << 10);
  ASSERT_LT(one.size(), 20u << 10);

  store::ControlClient flood(engine_->settings());
  std::atomic<int> busy{0}, answered{0};
  constexpr int kFlood = 40;
  for (int i = 0; i < kFlood; ++i)
    flood.Call(node, put(nowhere, "nowhere-" + std::to_string(10 + i) + "-", 400), net::DeadlineIn(10000),
               [&](Status s, std::string) {
                 busy += s.code() == Status::Code::kBusy &&
                         s.message().find("KVF_STORE_PUT_QUEUE_BYTES") != std::string::npos;
                 ++answered;
               });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_NO_FATAL_FAILURE(expect_put(put(engine_->name(), "known-again-", 1)));
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (answered.load() < kFlood && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(answered.load(), kFlood);
  EXPECT_GE(busy.load(), kFlood - 8) << "the node queued more than KVF_STORE_PUT_QUEUE_BYTES";

  std::string reply;
  const auto t0 = Clock::now();
  const Status later = CallNode(node, put(nowhere, "later-", 1), &reply);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500)) << "a writer that failed its open was tried again";
  EXPECT_NE(later.message().find("KVF_STORE_DOWN_RETRY_MS"), std::string::npos) << later.ToString();
  EXPECT_EQ(StatsOf(node).pages, 2u);
}

// Member records naming addresses that take connections and never answer
// (forged, or nodes that hang) cost a new client one store deadline in all,
// not one each: its members are greeted at once. The real member serves.
TEST_P(StoreHardeningTest, MembersThatNeverAnswerCostOneDeadlineNotOneEach) {
  if (GetParam() != "tcp") GTEST_SKIP() << "the client's side alone: one transport shows it";
  StartNodes(1);
  for (int i = 0; i < 4; ++i) member_names_.push_back(Blackhole());
  const auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartClient());
  const auto took = Clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(3500)) << "four silent members, a deadline of 2 s";
  EXPECT_EQ(store_->Members(), std::vector<std::string>{nodes_[0].name});
  const std::vector<std::string> keys = Keys("served-", 8);
  EXPECT_EQ(CountOk(PutPages(keys)), keys.size());
  EXPECT_EQ(ExactPages(keys), keys.size());
}

// A home hangs (SIGSTOP); a writer finds it out (its PUTs fail at the
// deadline) and puts its keys on the member ranked next, their home in its
// view now. Readers whose view still holds the hung home find those pages
// there once the home fails them, byte for byte, within the home's
// deadline and little more: neither a miss (exists) nor an error (get) for
// pages the store has. Pools private: a reader answers exists from the
// table of a same-host home's mapped pool without asking it, and that
// table says truly what the hung home holds.
TEST_P(StoreHardeningTest, AReadWhoseHomeFailsAsksTheMemberRankedNext) {
  if (GetParam() != "tcp-private") GTEST_SKIP() << "the client's side alone: one transport shows it";
  StartNodes(2);
  const std::vector<std::string> outside_window = {"store_down_retry_ms=20000", "store_handoff_ms=1001"};
  ASSERT_NO_FATAL_FAILURE(StartClient("p2p", outside_window));
  std::vector<std::string> on_a, on_b;
  KeysByHome("ranked-", 8, 0, &on_a, &on_b);
  struct Reader {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Store> store;
    std::unique_ptr<Region> into;
  } readers[2];
  for (Reader& r : readers) {
    EngineConfig cfg = ClientConfig();
    cfg.settings.store_deadline_ms = 2000;
    for (const std::string& kv : outside_window) ASSERT_TRUE(cfg.settings.Assign(kv).ok()) << kv;
    ASSERT_TRUE(Engine::Create(cfg, &r.engine).ok());
    ASSERT_TRUE(Store::Create(r.engine.get(), cfg.settings, &r.store).ok());
    r.into = std::make_unique<Region>(r.engine.get(), 32 * kPage);
    ASSERT_EQ(r.store->Members().size(), 2u);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // every process past its hand-over window
  ASSERT_TRUE(test::StopProcess(nodes_[0].child->pid())) << "the node did not stop";
  (void)PutPages(on_a);
  ASSERT_EQ(store_->Members(), std::vector<std::string>{nodes_[1].name}) << "the writer did not find the home out";
  ASSERT_EQ(CountOk(PutPages(on_a)), on_a.size());
  const auto t0 = Clock::now();
  size_t got = 0;
  std::thread get([&] { got = ExactPages(on_a, readers[0].store.get(), readers[0].into.get()); });
  std::vector<bool> there;
  size_t leading = 0;
  EXPECT_TRUE(readers[1].store->BatchExists(on_a, &there, &leading).ok());
  get.join();
  const auto took = Clock::now() - t0;
  kill(nodes_[0].child->pid(), SIGCONT);
  EXPECT_EQ(got, on_a.size()) << "pages on the member ranked next, read by a client that still counts the hung home";
  EXPECT_EQ(static_cast<size_t>(std::count(there.begin(), there.end(), true)), on_a.size());
  EXPECT_LT(took, std::chrono::milliseconds(2000 + 1500)) << "the home's deadline is 2 s";
}

// A node asked for a pool larger than the memory it can have refuses to
// start, saying so, rather than be killed by the kernel as it faults the
// pool in.
TEST(StoreNodeMemoryTest, APoolLargerThanTheMemoryAvailableIsRefusedAtStart) {
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  cfg.settings.log_level = "error";
  cfg.settings.store_pool_bytes =
      2 * static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Create(cfg, &engine).ok());
  std::unique_ptr<Store> store;
  const Status s = Store::Create(engine.get(), cfg.settings, &store);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("KVF_STORE_POOL_BYTES"), std::string::npos) << s.ToString();
  EXPECT_EQ(store, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Transports, StoreHardeningTest, ::testing::ValuesIn(StoreTransports()), TransportName);

}  // namespace
}  // namespace kvfabric
