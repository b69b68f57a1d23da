// The store across processes: nodes are `kvfabric-store-bench serve`
// processes, the client is a Store without a pool in this process. Every
// page is checked byte for byte.
#include "tests/integration/store/store_fixture.h"

namespace kvfabric {
namespace {

using namespace store_test;  // NOLINT: the fixture's names

TEST_P(StoreTest, PagesOfMixedSizesAndBuffersComeBackByteExact) {
  StartNodes(3);
  StartClientOutsideHandoffWindow();
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
  // One message per node per batch (a PUT by WRITE: its reserve and its commit).
  EXPECT_EQ(st.control_calls, PutMode() == "pull" ? 6u : 9u) << "messages per node per batch";
  // Where the pages are, and a part of one READ from there with the engine
  // (a layer-wise load's ranged read).
  {
    std::vector<std::string> keys;
    for (const Page& p : pages) keys.push_back(p.key);
    std::vector<StorePage> where;
    std::vector<Status> found;
    ASSERT_TRUE(store_->BatchLocate(keys, &where, &found).ok());
    const size_t k = 9;
    ASSERT_TRUE(found[k].ok()) << found[k].ToString();
    EXPECT_EQ(where[k].length, pages[k].length);
    EXPECT_EQ(where[k].valid_ms, 5000u) << "the members' read window";
    SegmentHandle seg = -1;
    ASSERT_TRUE(engine_->OpenSegment(where[k].segment, &seg).ok());
    const uint64_t from = pages[k].length / 3, n = pages[k].length - from;
    std::memset(dst_->bytes, 0, n);
    ASSERT_TRUE(engine_->Transfer({{OpCode::kRead, dst_->bytes, seg, where[k].addr + from, n}}).ok());
    std::vector<uint8_t> whole;
    for (const auto& b : Buffers(*src_, pages[k]))
      whole.insert(whole.end(), static_cast<uint8_t*>(b.addr), static_cast<uint8_t*>(b.addr) + b.length);
    EXPECT_EQ(std::memcmp(dst_->bytes, whole.data() + from, n), 0) << "the part read from where the page is";
    ASSERT_TRUE(store_->BatchLocate({"absent-key", ""}, &where, &found).ok());
    EXPECT_EQ(found[0].code(), Status::Code::kNotFound);
    EXPECT_EQ(found[1].code(), Status::Code::kInvalidArgument);
  }
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
  // Shared pools: the nodes' tables of keys answered, with no message (a
  // miss on the node that started second is asked of the first too: the
  // store is younger than KVF_STORE_HANDOFF_MS).
  if (SharedPools()) {
    EXPECT_GE(store_->Stats().exists_local, 3 * keys.size());
    for (const Node& n : nodes_) EXPECT_EQ(StatsOf(n.name).exists, 0u) << n.name << " was asked";
  } else {
    EXPECT_EQ(store_->Stats().exists_local, 0u);
  }
}

// More keys than a node's table of keys holds (tiny pages, each a 4 KiB
// slot: 3/4 of 8192 entries for a pool of 64 MiB): the keys not entered go
// to the node, and every answer is still exact; once they are gone the
// table answers all again.
TEST_P(StoreTest, ExistsStaysExactWhenTheTableOfKeysOverflows) {
  StartNodes(1);
  StartClient();
  constexpr size_t kKeys = 7000, kAbsent = 500, kFit = 8192 * 3 / 4;
  std::vector<Page> pages;
  for (size_t i = 0; i < kKeys; ++i) pages.push_back(Page{"tiny-" + std::to_string(i), {{i, 1}}, 1});
  tools::FillPattern(src_->bytes, kKeys, 0, 5);
  for (size_t at = 0; at < kKeys; at += 1000) {
    const std::vector<Page> batch(pages.begin() + at, pages.begin() + std::min(kKeys, at + 1000));
    ASSERT_EQ(CountOk(Put(batch)), batch.size());
  }
  std::vector<std::string> keys;
  for (const Page& p : pages) keys.push_back(p.key);
  for (size_t i = 0; i < kAbsent; ++i) keys.push_back("never-" + std::to_string(i));
  std::vector<bool> found;
  size_t leading = 0;
  ASSERT_TRUE(store_->BatchExists(keys, &found, &leading).ok());
  EXPECT_EQ(leading, kKeys);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(found[i], i < kKeys) << keys[i];
  const uint64_t local = store_->Stats().exists_local;
  EXPECT_EQ(local, SharedPools() ? kFit : 0u) << "the keys entered; the others, and the absent, asked the node";
  EXPECT_EQ(StatsOf(nodes_[0].name).exists, keys.size() - local);
  uint64_t removed = 0;
  ASSERT_TRUE(store_->RemoveAll(&removed).ok());
  ASSERT_TRUE(store_->BatchExists(keys, &found, &leading).ok());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_FALSE(found[i]) << keys[i];
  EXPECT_EQ(store_->Stats().exists_local, local + (SharedPools() ? keys.size() : 0u));
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
  // Restarted under its name, it starts empty and takes its share again:
  // the pages put on the others for its keys meanwhile are read there,
  // then handed over to it.
  std::string error;
  ASSERT_TRUE(nodes_[1].Start(&error)) << error;
  ASSERT_TRUE(WaitForMembers(3, 5000));
  const auto after = Get(again, &exact);
  for (size_t i = 0; i < again.size(); ++i)
    EXPECT_TRUE(after[i].ok() && exact[i]) << again[i].key << ": " << after[i].ToString();
  const store::Placement placement = PlacementOf(member_names_);
  size_t homed_there = 0;
  for (const Page& p : again) homed_there += placement.Home(p.key) == 1 ? 1 : 0;
  EXPECT_GT(homed_there, 0u);
  // Not flooded: it receives each of its pages once, by hand-over, was
  // asked once for each of its keys (nothing retried), and new pages give
  // it its share, no more.
  store::NodeStats restarted = StatsOf(nodes_[1].name);
  for (auto until = Clock::now() + std::chrono::seconds(5); restarted.pages < homed_there && Clock::now() < until;
       restarted = StatsOf(nodes_[1].name))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(restarted.pages, homed_there) << "the pages put for its keys while it was down were handed over";
  EXPECT_EQ(restarted.puts, homed_there) << "pages handed over more than once";
  EXPECT_EQ(restarted.lookups, homed_there) << "lookups beyond one per key it is home of";
  const auto fresh = MakePages(90, 23, "fresh-");
  ASSERT_EQ(CountOk(Put(fresh)), fresh.size());
  size_t its_share = 0;
  for (const Page& p : fresh) its_share += placement.Home(p.key) == 1 ? 1 : 0;
  restarted = StatsOf(nodes_[1].name);
  EXPECT_EQ(restarted.puts, homed_there + its_share) << "puts to the restarted node beyond the keys homed there";
  EXPECT_EQ(restarted.pages, homed_there + its_share);
  EXPECT_GT(its_share, 0u);
}

// A node killed and restarted under its name between two calls of the
// client: no call failed meanwhile, so the client still holds the old
// engine's segment. Its pages must come back all the same (the first GET
// may fail its keys), not fail with NetworkError for ever while PUTs to
// the node go on succeeding.
TEST_P(StoreTest, ANodeRestartedBetweenTwoCallsIsReadAgain) {
  StartNodes(3);
  StartClient();
  const auto pages = MakePages(90, 31);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  nodes_[1].Kill();
  std::string error;
  ASSERT_TRUE(nodes_[1].Start(&error)) << error;
  const std::vector<Status> again = Put(pages);
  for (const Status& s : again) ASSERT_TRUE(s.ok()) << "the client's view still has the three nodes: " << s.ToString();
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

// A child forked from a process with a store finds its copy inert: every
// call refused with Closed, nothing sent down the parent's connections, and
// destroying it leaves the parent's store whole. The parent keeps putting
// and getting byte-exact, before and after the child ends.
TEST_P(StoreTest, AForkedChildsCopyIsInertAndLeavesTheParentsStoreAlone) {
  StartNodes(3);
  StartClient();
  const auto pages = MakePages(24, 21);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  std::vector<bool> exact;
  Get(pages, &exact);  // the control connections are open: the caller writes to them itself
  for (bool e : exact) ASSERT_TRUE(e);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang ends the child with SIGALRM, which the parent reports
    int bad = 0;
    std::vector<Status> st;
    std::vector<uint64_t> len;
    std::vector<bool> found;
    size_t leading = 0;
    uint64_t removed = 0;
    bad += store_->BatchPut({"from-child"}, {{{src_->bytes, 4096}}}, &st).code() != Status::Code::kClosed;
    bad += store_->BatchGet({pages[0].key}, {Buffers(*dst_, pages[0])}, &st, &len).code() != Status::Code::kClosed;
    bad += store_->BatchExists({pages[0].key}, &found, &leading).code() != Status::Code::kClosed;
    bad += store_->BatchRemove({pages[0].key}, &st).code() != Status::Code::kClosed;
    bad += store_->RemoveAll(&removed).code() != Status::Code::kClosed;
    bad += !store_->Members().empty();
    bad += store_->Stats().get_keys != 0;
    store_->Close();
    store_.reset();
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "calls in the child were not all refused with Closed";
  Get(pages, &exact);
  for (bool e : exact) EXPECT_TRUE(e) << "the parent's store after the child";
  std::vector<bool> found;
  size_t leading = 0;
  ASSERT_TRUE(store_->BatchExists({"from-child", pages[0].key}, &found, &leading).ok());
  EXPECT_FALSE(found[0]) << "the child's put reached a node";
  EXPECT_TRUE(found[1]) << "the child's remove reached a node";
  EXPECT_EQ(store_->Members().size(), 3u);
  const auto more = MakePages(24, 22, "after-");
  EXPECT_EQ(CountOk(Put(more)), more.size());
}

// A pin goes where its key's home was when pinned, and so does its unpin:
// keys of a node that was down were put and pinned on the others; when the
// node comes back the keys home on it again, but their unpins must still
// go to the nodes that hold the pins, or those pages stay pinned for good.
TEST_P(StoreTest, AnUnpinGoesWhereItsPinWentAfterTheHomeMoved) {
  StartNodes(3);
  StartClient();
  const auto placement = PlacementOf(member_names_);
  const auto pages = MakePages(60, 41);
  std::vector<Page> moved;
  for (const Page& p : pages)
    if (placement.Home(p.key) == 2) moved.push_back(p);
  ASSERT_GT(moved.size(), 0u);
  nodes_[2].Kill();
  Put(moved);  // fails on the dead node, which leaves placement
  ASSERT_TRUE(WaitForMembers(2, 5000));
  ASSERT_EQ(CountOk(Put(moved)), moved.size()) << "put again on the two others";
  std::vector<std::string> keys;
  for (const Page& p : moved) keys.push_back(p.key);
  std::vector<Status> st;
  ASSERT_TRUE(store_->BatchPin(keys, &st).ok());
  ASSERT_EQ(CountOk(st), keys.size());
  EXPECT_EQ(StatsOf(member_names_[0]).pinned_pages + StatsOf(member_names_[1]).pinned_pages, keys.size());
  std::string error;
  ASSERT_TRUE(nodes_[2].Start(&error)) << error;
  ASSERT_TRUE(WaitForMembers(3, 5000)) << "the restarted node is back in placement";
  ASSERT_TRUE(store_->BatchUnpin(keys, &st).ok());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
  EXPECT_EQ(StatsOf(member_names_[0]).pinned_pages + StatsOf(member_names_[1]).pinned_pages, 0u)
      << "pages left pinned where their keys no longer home";
  ASSERT_TRUE(store_->BatchUnpin(keys, &st).ok());
  EXPECT_EQ(CountOk(st), 0u) << "an unpin beyond the pins";
}

// A PUT by WRITE as any process on the network could drive it, one step
// at a time: slots reserved and never committed come back after the
// writer's budget; a commit for no reservation, or of the wrong shape,
// changes nothing; and a page whose writer's checksum is wrong is a miss,
// never bytes.
// A hand-over's PUT (if absent) never replaces the page a key has on its
// home: it is OK and stores nothing; a key with no page gets the page.
TEST_P(StoreTest, AHandOverNeverReplacesThePageItsHomeHas) {
  StartNodes(1);
  StartClient();
  constexpr size_t kPage = 4096;
  tools::FillPattern(src_->bytes, kPage, 0, 1);
  tools::FillPattern(src_->bytes + kPage, kPage, 0, 2);
  std::vector<Status> st;
  ASSERT_TRUE(store_->BatchPut({"held"}, {{{src_->bytes, kPage}}}, &st).ok());
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  const store::NodeStats before = StatsOf(nodes_[0].name);
  store::PutRequest put;
  put.writer = engine_->name();
  put.budget_ms = 1500;
  put.hand_over = store::PutRequest::HandOver::kIfAbsent;
  const auto from = reinterpret_cast<uintptr_t>(src_->bytes + kPage);
  put.items = {{"held", {{from, kPage}}}, {"new", {{from, kPage}}}};
  std::string reply;
  ASSERT_TRUE(CallNode(nodes_[0].name, store::EncodePut(put), &reply).ok());
  ASSERT_TRUE(store::DecodeStatuses(reply, 2, &st).ok());
  EXPECT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << "; " << st[1].ToString();
  const store::NodeStats after = StatsOf(nodes_[0].name);
  EXPECT_EQ(after.pages, before.pages + 1) << "only the key with no page got one";
  EXPECT_EQ(after.overwrites, before.overwrites);
  EXPECT_EQ(after.used_bytes, before.used_bytes + kPage) << "the refused page's slot went back";
  std::vector<uint64_t> len;
  ASSERT_TRUE(store_->BatchGet({"held", "new"}, {{{dst_->bytes, kPage}}, {{dst_->bytes + kPage, kPage}}}, &st, &len).ok());
  ASSERT_TRUE(st[0].ok() && st[1].ok());
  EXPECT_EQ(tools::CheckPattern(dst_->bytes, kPage, 0, 1), kPage) << "the page the key had stays";
  EXPECT_EQ(tools::CheckPattern(dst_->bytes + kPage, kPage, 0, 2), kPage);
}

// A key removed on its home within the hand-over window does not come back
// through a hand-over that copied an older page out before the remove
// reached the previous home: the hand-over's PUT of it, if absent or over
// the home's page, is refused (the previous home keeps what it has),
// whether the home had a page or not, while a key nobody removed is still
// handed over.
TEST_P(StoreTest, AHandOverNeverBringsBackAKeyRemovedOnItsHome) {
  StartNodes(1);
  StartClient();
  constexpr size_t kPage = 4096;
  tools::FillPattern(src_->bytes, kPage, 0, 3);
  std::vector<Status> st;
  ASSERT_TRUE(store_->BatchPut({"held"}, {{{src_->bytes, kPage}}}, &st).ok());
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  ASSERT_TRUE(store_->BatchRemove({"held", "absent"}, &st).ok());
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_EQ(st[1].code(), Status::Code::kNotFound) << st[1].ToString();
  for (const auto kind : {store::PutRequest::HandOver::kIfAbsent, store::PutRequest::HandOver::kOver}) {
    const std::string fresh = "fresh-" + std::to_string(static_cast<int>(kind));
    SCOPED_TRACE(fresh);
    const store::NodeStats before = StatsOf(nodes_[0].name);
    store::PutRequest put;
    put.writer = engine_->name();
    put.budget_ms = 1500;
    put.hand_over = kind;
    const auto from = reinterpret_cast<uintptr_t>(src_->bytes);
    put.items = {{"held", {{from, kPage}}}, {"absent", {{from, kPage}}}, {fresh, {{from, kPage}}}};
    std::string reply;
    ASSERT_TRUE(CallNode(nodes_[0].name, store::EncodePut(put), &reply).ok());
    ASSERT_TRUE(store::DecodeStatuses(reply, 3, &st).ok());
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(st[i].code(), Status::Code::kUnavailable) << i << ": " << st[i].ToString();
      EXPECT_NE(st[i].message().find("removed on its home"), std::string::npos) << st[i].ToString();
    }
    EXPECT_TRUE(st[2].ok()) << st[2].ToString();
    const store::NodeStats after = StatsOf(nodes_[0].name);
    EXPECT_EQ(after.pages, before.pages + 1) << "only the key nobody removed was taken";
    EXPECT_EQ(after.used_bytes, before.used_bytes + kPage) << "the refused pages' slots went back";
    std::vector<uint64_t> len;
    ASSERT_TRUE(store_->BatchGet({"held", "absent", fresh},
                                 {{{dst_->bytes, kPage}}, {{dst_->bytes + kPage, kPage}}, {{dst_->bytes + 2 * kPage, kPage}}},
                                 &st, &len)
                    .ok());
    EXPECT_EQ(st[0].code(), Status::Code::kNotFound) << st[0].ToString();
    EXPECT_EQ(st[1].code(), Status::Code::kNotFound) << st[1].ToString();
    ASSERT_TRUE(st[2].ok()) << st[2].ToString();
    EXPECT_EQ(tools::CheckPattern(dst_->bytes + 2 * kPage, kPage, 0, 3), kPage);
  }
}

TEST_P(StoreTest, PutsByWriteThatGoWrongLeaveNothingBehind) {
  if (PutMode() != "push") GTEST_SKIP() << "the client puts by READ here";
  StartNodes(1);
  StartClient();
  const std::string node = member_names_[0];
  auto call = [&](const std::string& request, std::string* reply) { return CallNode(node, request, reply); };
  std::string reply;
  store::Slots slots;
  // Reserved and abandoned by its writer.
  ASSERT_TRUE(call(store::EncodeReserve({100, {{"never", 65536}, {"", 1}}}), &reply).ok());
  ASSERT_TRUE(store::DecodeSlots(reply, 2, &slots).ok());
  ASSERT_TRUE(slots.statuses[0].ok()) << slots.statuses[0].ToString();
  EXPECT_EQ(slots.statuses[1].code(), Status::Code::kInvalidArgument) << "an empty key";
  EXPECT_NE(slots.ticket, 0u);
  EXPECT_EQ(StatsOf(node).reserved_bytes, 65536u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // the budget, and the node's second of grace
  store::NodeStats stats = StatsOf(node);
  EXPECT_EQ(stats.reserved_bytes, 0u) << "slots of a writer that never committed are still reserved";
  EXPECT_EQ(stats.quarantined_bytes, 65536u) << "a late WRITE may still land there";
  EXPECT_EQ(stats.pages, 0u);
  Status s = call(store::EncodeCommit({slots.ticket, {{store::CommitState::kWritten, false, {}, ""}, {store::CommitState::kNotWritten, false, {}, ""}}, {}}), &reply);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << "a commit after the budget: " << s.ToString();

  // A commit for a ticket never handed out, and one of the wrong shape.
  s = call(store::EncodeCommit({12345, {{store::CommitState::kWritten, false, {}, ""}}, {}}), &reply);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  ASSERT_TRUE(call(store::EncodeReserve({2000, {{"shape", 4096}}}), &reply).ok());
  ASSERT_TRUE(store::DecodeSlots(reply, 1, &slots).ok());
  s = call(store::EncodeCommit({slots.ticket, {{store::CommitState::kWritten, false, {}, ""}, {store::CommitState::kWritten, false, {}, ""}}, {}}), &reply);
  EXPECT_EQ(s.code(), Status::Code::kProtocolError) << s.ToString();
  stats = StatsOf(node);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.pages, 0u);

  // Bytes written whole, committed with a checksum that is not theirs: a
  // miss, counted, and never the bytes.
  store::NodeInfo info;
  SegmentHandle segment = -1;
  ASSERT_NO_FATAL_FAILURE(OpenPool(node, &info, &segment));
  ASSERT_TRUE(call(store::EncodeReserve({2000, {{"liar", 4096}}}), &reply).ok());
  ASSERT_TRUE(store::DecodeSlots(reply, 1, &slots).ok());
  ASSERT_TRUE(slots.statuses[0].ok());
  std::memset(src_->bytes, 0x5a, 4096);
  ASSERT_TRUE(engine_->Transfer({{OpCode::kWrite, src_->bytes, segment, slots.addrs[0], 4096}}).ok());
  const store::Checksum wrong{1, 2};
  ASSERT_TRUE(call(store::EncodeCommit({slots.ticket, {{store::CommitState::kWritten, true, wrong, ""}}, {}}), &reply).ok());
  store::CommitReply committed;
  ASSERT_TRUE(store::DecodeCommitReply(reply, 1, &committed).ok());
  ASSERT_TRUE(committed.statuses[0].ok()) << committed.statuses[0].ToString();
  const Status got = GetOnePage("liar");
  EXPECT_EQ(got.code(), Status::Code::kNotFound) << got.ToString();
  EXPECT_EQ(store_->Stats().misses_checksum, 1u);
}

// Granted slots (KVF_STORE_PUT_GRANTS) as any writer could drive them: a
// commit asks for slots for the next PUT and gets them; a commit of those
// names each page's key; a slot named with no key fails alone and is held
// back (a WRITE may have gone there); a slot never used is free at once.
TEST_P(StoreTest, GrantedSlotsAsAnyWriterCouldDriveThem) {
  if (PutMode() != "push") GTEST_SKIP() << "the client puts by READ here";
  StartNodes(1);
  StartClient();
  const std::string node = member_names_[0];
  auto call = [&](const std::string& request, std::string* reply) { return CallNode(node, request, reply); };
  std::string reply;
  store::NodeInfo info;
  SegmentHandle segment = -1;
  ASSERT_NO_FATAL_FAILURE(OpenPool(node, &info, &segment));
  auto write = [&](uint64_t addr, uint8_t fill, size_t n) {
    std::memset(src_->bytes, fill, n);
    return engine_->Transfer({{OpCode::kWrite, src_->bytes, segment, addr, n}});
  };

  // A PUT by WRITE whose commit asks for three slots ahead.
  store::Slots slots;
  ASSERT_TRUE(call(store::EncodeReserve({2000, {{"first", 4096}}}), &reply).ok());
  ASSERT_TRUE(store::DecodeSlots(reply, 1, &slots).ok());
  ASSERT_TRUE(write(slots.addrs[0], 0x11, 4096).ok());
  store::CommitRequest commit{slots.ticket,
                              {{store::CommitState::kWritten, true, store::ChecksumOfBytes(src_->bytes, 4096), ""}},
                              {4096, 4096, 8192}};
  ASSERT_TRUE(call(store::EncodeCommit(commit), &reply).ok());
  store::CommitReply committed;
  ASSERT_TRUE(store::DecodeCommitReply(reply, 1, &committed).ok());
  ASSERT_TRUE(committed.statuses[0].ok()) << committed.statuses[0].ToString();
  const store::Slots granted = committed.granted;
  ASSERT_NE(granted.ticket, 0u);
  EXPECT_EQ(granted.epoch, info.epoch);
  ASSERT_EQ(granted.addrs.size(), 3u);
  EXPECT_EQ(StatsOf(node).reserved_bytes, 16384u);

  // Slot 0 written and named; slot 1 said written but named by no key;
  // slot 2 never used.
  ASSERT_TRUE(write(granted.addrs[0], 0x22, 4096).ok());
  const store::Checksum sum = store::ChecksumOfBytes(src_->bytes, 4096);
  store::CommitRequest use{granted.ticket,
                           {{store::CommitState::kWritten, true, sum, "granted"},
                            {store::CommitState::kWritten, true, sum, ""},
                            {store::CommitState::kUnused, false, {}, ""}},
                           {}};
  ASSERT_TRUE(call(store::EncodeCommit(use), &reply).ok());
  ASSERT_TRUE(store::DecodeCommitReply(reply, 3, &committed).ok());
  EXPECT_TRUE(committed.statuses[0].ok()) << committed.statuses[0].ToString();
  EXPECT_EQ(committed.statuses[1].code(), Status::Code::kInvalidArgument) << committed.statuses[1].ToString();
  EXPECT_EQ(committed.granted.ticket, 0u) << "nothing asked, nothing granted";
  store::NodeStats stats = StatsOf(node);
  EXPECT_EQ(stats.pages, 2u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(stats.quarantined_bytes, 4096u) << "only the slot a WRITE may have gone to is held back";
  EXPECT_EQ(call(store::EncodeCommit(use), &reply).code(), Status::Code::kNotFound) << "a ticket is used once";

  const Status got = GetOnePage("granted");
  EXPECT_TRUE(got.ok()) << got.ToString();
}

// The client's PUTs use what their homes granted: the second PUT of the
// same pages costs one message per home, every page comes back byte-exact,
// pages that fit no grant are reserved first (a reserve per home), and a closing client
// gives its unused slots back at once.
TEST_P(StoreTest, PutsIntoGrantedSlotsCostOneRoundTripAndGiveBackWhatTheyDoNotUse) {
  if (PutMode() != "push") GTEST_SKIP() << "the client puts by READ here";
  StartNodes(2);
  StartClientOutsideHandoffWindow();
  // Pages of mixed sizes, fewer bytes than a home grants per commit (a
  // sixteenth of its pool), wherever placement puts them.
  auto pages = MakePages(60, 41);
  uint64_t bytes = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (bytes + pages[i].length >= kPool / 16) {
      pages.resize(i);
      break;
    }
    bytes += pages[i].length;
  }
  ASSERT_GE(pages.size(), 10u);
  uint64_t calls = store_->Stats().control_calls;
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  EXPECT_EQ(store_->Stats().control_calls - calls, 4u) << "a reserve and a commit per home";
  EXPECT_EQ(store_->Stats().put_granted, 0u);
  calls = store_->Stats().control_calls;
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  EXPECT_EQ(store_->Stats().control_calls - calls, 2u) << "a commit per home, no reserve";
  EXPECT_EQ(store_->Stats().put_granted, pages.size());
  std::vector<bool> exact;
  Get(pages, &exact);
  EXPECT_EQ(std::count(exact.begin(), exact.end(), true), static_cast<long>(pages.size()));

  // Larger pages than any granted: reserved first, and whole.
  const auto big = MakePages(12, 43, "big-");
  std::vector<Page> larger;
  for (Page p : big) {
    p.pieces = {{0, 600 << 10}};
    p.length = 600 << 10;
    larger.push_back(p);
  }
  const uint64_t granted = store_->Stats().put_granted;
  ASSERT_EQ(CountOk(Put(larger)), larger.size());
  EXPECT_EQ(store_->Stats().put_granted, granted);
  Get(larger, &exact);
  EXPECT_EQ(std::count(exact.begin(), exact.end(), true), static_cast<long>(larger.size()));

  auto reserved = [&] {
    uint64_t bytes = 0;
    for (const std::string& n : member_names_) bytes += StatsOf(n).reserved_bytes;
    return bytes;
  };
  EXPECT_GT(reserved(), 0u) << "slots granted for the next PUTs";
  // Past use (a second), the client's next call gives them back.
  std::this_thread::sleep_for(std::chrono::milliseconds(store::kGrantUsableMs + 100));
  std::vector<bool> found;
  size_t leading = 0;
  ASSERT_TRUE(store_->BatchExists({pages[0].key}, &found, &leading).ok());
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (reserved() != 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(reserved(), 0u) << "granted slots past use not given back";

  // Granted again (new keys: overwriting pages that were read would
  // quarantine their old slots), and given back at close.
  std::vector<Page> renamed = pages;
  for (Page& p : renamed) p.key = "again-" + p.key;
  ASSERT_EQ(CountOk(Put(renamed)), renamed.size());
  ASSERT_EQ(CountOk(Put(renamed)), renamed.size());
  EXPECT_GT(reserved(), 0u);
  store_->Close();
  for (const std::string& n : member_names_) {
    const store::NodeStats stats = StatsOf(n);
    EXPECT_EQ(stats.reserved_bytes, 0u) << n << ": granted slots not given back at close";
    EXPECT_EQ(stats.quarantined_bytes, 0u) << n << ": unused slots must be free at once";
    EXPECT_EQ(stats.put_failures, 0u) << n;
  }
}

// Threads of one client PUT streams of same-shaped batches at once, each
// over its own keys, and read them back: grants pass between the threads
// (at most kCreditsPerHome kept per home, the oldest given back), every
// page comes back byte-exact, and nothing stays reserved after close.
TEST_P(StoreTest, ThreadsPuttingAtOnceShareGrantsAndEveryPageComesBack) {
  if (PutMode() != "push") GTEST_SKIP() << "the client puts by READ here";
  StartNodes(2);
  StartClient();
  constexpr size_t kThreads = 4, kRounds = 25, kPages = 8, kPage = 16384;
  std::vector<std::thread> threads;
  std::atomic<size_t> failed{0}, wrong{0};
  for (size_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      uint8_t* src = src_->bytes + t * kPages * kPage;
      uint8_t* dst = dst_->bytes + t * kPages * kPage;
      for (size_t round = 0; round < kRounds; ++round) {
        std::vector<std::string> keys;
        std::vector<std::vector<StoreBuffer>> from, into;
        for (size_t i = 0; i < kPages; ++i) {
          keys.push_back("thread-" + std::to_string(t) + "-" + std::to_string(i));
          tools::FillPattern(src + i * kPage, kPage, 0, static_cast<uint32_t>(t * 1000 + round * 10 + i));
          from.push_back({{src + i * kPage, kPage}});
          into.push_back({{dst + i * kPage, kPage}});
        }
        std::vector<Status> st;
        std::vector<uint64_t> len;
        if (!store_->BatchPut(keys, from, &st).ok()) ++failed;
        failed += kPages - CountOk(st);
        std::memset(dst, 0, kPages * kPage);
        if (!store_->BatchGet(keys, into, &st, &len).ok()) ++failed;
        failed += kPages - CountOk(st);
        if (std::memcmp(src, dst, kPages * kPage) != 0) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u) << "rounds whose pages came back other than put";
  const StoreStats stats = store_->Stats();
  EXPECT_GT(stats.put_granted, kThreads * kPages * kRounds / 2) << "most pages into granted slots";
  store_->Close();
  for (const std::string& n : member_names_) {
    const store::NodeStats node = StatsOf(n);
    EXPECT_EQ(node.reserved_bytes, 0u) << n << ": granted slots not given back at close";
    EXPECT_EQ(node.put_failures, 0u) << n;
  }
}

// One home hangs (SIGSTOP) during a GET whose other keys live on a healthy
// home, remembered by the client but with their region's version moved (a
// neighbour removed): those keys must still come back, in time, and the
// healthy home must stay in placement. (The lookups that confirm such pages
// must not wait for the hung home's deadline: sent after it, they would time
// out and take the healthy home out of placement.)
TEST_P(StoreTest, AHungHomeCostsOnlyItsOwnKeys) {
  StartNodes(2);
  StartClient("p2p", {"store_down_retry_ms=20000"});
  std::vector<std::string> on_a, on_b;
  KeysByHome("hung-", 4, 8, &on_a, &on_b);
  std::vector<Page> pages;
  for (const std::string& k : on_a) pages.push_back(Page{k, {{pages.size() * 4096, 4096}}, 4096});
  for (const std::string& k : on_b) pages.push_back(Page{k, {{pages.size() * 4096, 4096}}, 4096});
  tools::FillPattern(src_->bytes, pages.size() * 4096, 0, 5);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  std::vector<bool> exact;
  Get(pages, &exact);  // remembered, then confirmed by versions
  Get(pages, &exact);
  for (bool e : exact) ASSERT_TRUE(e);
  std::vector<Status> removed;
  ASSERT_TRUE(store_->BatchRemove({on_b[0], on_a[0]}, &removed).ok());  // versions move on both homes
  std::vector<Page> asked(pages.begin() + 1, pages.begin() + 4);
  asked.insert(asked.end(), pages.begin() + 5, pages.end());
  std::vector<Status> st;
  ASSERT_NO_FATAL_FAILURE(GetWhileFirstNodeStopped(asked, &st, &exact));
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(st[i].ok()) << "the hung home's key " << asked[i].key;
  for (size_t i = 3; i < asked.size(); ++i)
    EXPECT_TRUE(st[i].ok() && exact[i]) << asked[i].key << " lives on the healthy home: " << st[i].ToString();
  const auto members = store_->Members();
  EXPECT_NE(std::find(members.begin(), members.end(), nodes_[1].name), members.end())
      << "the healthy home was taken out of placement";
}

// A remembered location that another client's overwrite made stale is read
// again where the lookup says, at once: not after the pages of a home that
// hangs, which hold the call to its deadline. Otherwise keys of healthy
// nodes fail with Timeout while another node is down: their second READ
// would start only after the dead node's pages waited out the deadline.
TEST_P(StoreTest, AMovedPageIsReadAgainWhileAHungHomeIsAwaited) {
  StartNodes(2);
  StartClient("p2p", {"store_down_retry_ms=20000"});
  std::vector<std::string> on_a, on_b;
  KeysByHome("moved-", 3, 3, &on_a, &on_b);
  std::vector<Page> pages;  // the hung home's pages first: a GET that waited for them in order would be late
  for (const std::string& k : on_a) pages.push_back(Page{k, {{pages.size() << 16, 1 << 16}}, 1 << 16});
  for (const std::string& k : on_b) pages.push_back(Page{k, {{pages.size() << 16, 1 << 16}}, 1 << 16});
  tools::FillPattern(src_->bytes, pages.size() << 16, 0, 7);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  std::vector<bool> exact;
  Get(pages, &exact);  // every location remembered
  for (bool e : exact) ASSERT_TRUE(e);
  // Another client overwrites the healthy home's pages: what this one remembers of them is stale.
  const EngineConfig cfg = ClientConfig();
  std::unique_ptr<Engine> other_engine;
  std::unique_ptr<Store> other;
  ASSERT_TRUE(Engine::Create(cfg, &other_engine).ok());
  ASSERT_TRUE(Store::Create(other_engine.get(), cfg.settings, &other).ok());
  {
    Region from(other_engine.get(), pages.size() << 16);
    tools::FillPattern(src_->bytes + (3 << 16), 3 << 16, 3 << 16, 8);  // what the GET must now return
    std::memcpy(from.bytes, src_->bytes, pages.size() << 16);
    std::vector<std::string> keys(on_b.begin(), on_b.end());
    std::vector<std::vector<StoreBuffer>> bufs;
    for (size_t j = 3; j < pages.size(); ++j) bufs.push_back({{from.bytes + (j << 16), 1 << 16}});
    std::vector<Status> st;
    ASSERT_TRUE(other->BatchPut(keys, bufs, &st).ok());
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<Status> st;
  ASSERT_NO_FATAL_FAILURE(GetWhileFirstNodeStopped(pages, &st, &exact));
  for (size_t i = 3; i < pages.size(); ++i)
    EXPECT_TRUE(st[i].ok() && exact[i]) << pages[i].key << " moved on the healthy home: " << st[i].ToString();
  EXPECT_GE(store_->Stats().get_cached_stale, 3u) << "the test meant the remembered locations to be stale";
}

// A GET whose home hangs (SIGSTOP) with its READs in flight returns Timeout
// at the call's deadline, and the caller gives the buffers to other data.
// When the home goes on, those READs must not land in them: the engine
// closes their connection before the call returns (Engine::ExpireBatch).
// Over shm the client copies a READ itself, so the GET may even succeed.
TEST_P(StoreTest, AGetThatTimedOutNeverWritesItsBuffersLater) {
  StartNodes(1);
  StartClient();
  std::vector<Page> pages;
  for (size_t i = 0; i < 8; ++i) pages.push_back(Page{"late-" + std::to_string(i), {{i << 19, 1 << 19}}, 1 << 19});
  tools::FillPattern(src_->bytes, 8 << 19, 0, 41);
  ASSERT_EQ(CountOk(Put(pages)), pages.size());
  std::vector<bool> exact;
  Get(pages, &exact);  // locations remembered: the next GET READs at once
  for (bool e : exact) ASSERT_TRUE(e);
  ASSERT_TRUE(test::StopProcess(nodes_[0].child->pid())) << "the node did not stop";
  const auto st = Get(pages, &exact);
  for (size_t i = 0; i < pages.size(); ++i)
    if (st[i].ok()) EXPECT_TRUE(exact[i]) << pages[i].key;
    else EXPECT_EQ(st[i].code(), Status::Code::kTimeout) << st[i].ToString();
  tools::FillPattern(dst_->bytes, 8 << 19, 0, 42);  // the caller's next use of its buffers
  kill(nodes_[0].child->pid(), SIGCONT);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(tools::CheckPattern(dst_->bytes, 8 << 19, 0, 42), size_t{8} << 19) << "a timed-out READ landed later";
  // The node serves again.
  const auto again = Get(pages, &exact);
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_TRUE(exact[i]) << again[i].ToString();
}

// Pools shared, a node on the same host as this process: the pages the
// client gets, and those it puts by WRITE, are copied between its buffers
// and the mapped pools, not sent through the fabric. Private pools: none is.
TEST_P(StoreTest, PagesOfSameHostNodesAreCopiedWhenTheirPoolsAreShared) {
  StartNodes(2);
  StartClient();
  const auto pages = MakePages(60, 23);
  const auto put = Put(pages);
  for (size_t i = 0; i < pages.size(); ++i) ASSERT_TRUE(put[i].ok()) << pages[i].key << ": " << put[i].ToString();
  std::vector<bool> exact;
  const auto got = Get(pages, &exact);
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_TRUE(exact[i]) << pages[i].key << ": " << got[i].ToString();
  const StoreStats st = store_->Stats();
  const uint64_t puts_copied = SharedPools() && PutMode() == "push" ? pages.size() : 0;
  EXPECT_EQ(st.copied_pages, puts_copied + (SharedPools() ? pages.size() : 0));
  EXPECT_EQ(st.misses_checksum, 0u);
  // Another client, which looks every page up, gets them the same way.
  EngineConfig cfg = ClientConfig();
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Create(cfg, &engine).ok());
  std::unique_ptr<Store> reader;
  ASSERT_TRUE(Store::Create(engine.get(), cfg.settings, &reader).ok());
  Region into(engine.get(), 48 << 20);
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> bufs;
  for (const Page& p : pages) {
    keys.push_back(p.key);
    bufs.push_back(Buffers(into, p));
  }
  std::vector<Status> rst;
  std::vector<uint64_t> lengths;
  ASSERT_TRUE(reader->BatchGet(keys, bufs, &rst, &lengths).ok());
  for (size_t i = 0; i < pages.size(); ++i) {
    ASSERT_TRUE(rst[i].ok()) << pages[i].key << ": " << rst[i].ToString();
    for (auto [off, len] : pages[i].pieces)
      EXPECT_EQ(std::memcmp(src_->bytes + off, into.bytes + off, len), 0) << pages[i].key;
  }
  EXPECT_EQ(reader->Stats().copied_pages, SharedPools() ? pages.size() : 0u);
  reader.reset();
  engine->Close();
}

// A node killed (SIGKILL) while a client maps its pool: the client's
// mapping would still hold the dead node's memory, but its pages are not
// read from it. They fail, as through the fabric, and the other node's
// pages come back exact.
TEST_P(StoreTest, AKilledNodesMappedPoolIsNotReadFrom) {
  if (!SharedPools()) GTEST_SKIP() << "pools private";
  StartNodes(2);
  StartClient();
  const auto pages = MakePages(40, 29);
  for (const Status& s : Put(pages)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<bool> exact;
  Get(pages, &exact);  // the pools mapped, the locations remembered
  for (bool e : exact) ASSERT_TRUE(e);
  const store::Placement placement = PlacementOf(member_names_);
  nodes_[0].Kill();
  const auto t0 = Clock::now();
  const auto st = Get(pages, &exact);
  // Its pages fail at once: not through the fabric, where a READ of a dead
  // shm peer waits for the deadline (2 s here).
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1000)) << "a dead same-host node's pages waited";
  size_t on_dead = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (placement.members()[placement.Home(pages[i].key)].name == nodes_[0].name) {
      ++on_dead;
      EXPECT_FALSE(st[i].ok()) << pages[i].key << " was read from a dead node's memory";
    } else {
      EXPECT_TRUE(exact[i]) << pages[i].key << ": " << st[i].ToString();
    }
  }
  EXPECT_GT(on_dead, 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, StoreTest, ::testing::ValuesIn(StoreTransports()), TransportName);

// Members from a real etcd and kvfabric-metadata-server: a killed node
// leaves when its lease (TTL) runs out, with no call failing first.
// GetParam() names the backend here; nodes and client speak tcp.
class StoreMembershipTest : public StoreTest {
 protected:
  std::string Protocol() const override { return "tcp"; }

  // Two nodes and a client over the backend GetParam() names, in a cluster
  // of their own (the servers are shared by the binary), members refreshed
  // every 200 ms, leases of 2 s (uri_: the backend's), and `extra`
  // settings in nodes and client. Skips the test when the backend cannot
  // start.
  void StartTwoNodes(const std::vector<std::string>& extra = {}) {
    std::string error;
    uri_ = test::SharedMetadataUri(GetParam() == "etcd" ? "etcd" : "http", &error);
    if (uri_.empty()) GTEST_SKIP() << error;
    cluster_ = "store_cluster=t" + std::to_string(::getpid()) + "-" + std::to_string(++clusters_);
    std::vector<std::string> node = NodeSettings(), client = {cluster_, "store_membership_refresh_ms=200"};
    node.insert(node.end(), extra.begin(), extra.end());
    client.insert(client.end(), extra.begin(), extra.end());
    StartNodes(2, node, uri_);
    StartClient(uri_, client);
    ASSERT_TRUE(WaitForMembers(2, 5000));
  }
  std::vector<std::string> NodeSettings() const {
    return {cluster_, "store_member_ttl_s=2", "store_membership_refresh_ms=200"};
  }
  // Two nodes and the client with a hand-over window of `window_ms`, and a
  // client whose view lags: it refreshes its members every 600 s, so it
  // keeps the two members it finds now. Then a third node joins, with a
  // pool of `pool` bytes: `joined` is when.
  void StartALaggingClientAndJoin(int window_ms, int64_t pool, std::unique_ptr<Engine>* engine,
                                  std::unique_ptr<Store>* store, Clock::time_point* joined) {
    const std::string window = "store_handoff_ms=" + std::to_string(window_ms);
    StartTwoNodes({window});
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(StartLaggingClient(engine, store));
    std::vector<std::string> extra = NodeSettings();
    extra.push_back(window);
    StartNodes(1, extra, uri_, pool);
    *joined = Clock::now();
    ASSERT_TRUE(WaitForMembers(3, 5000)) << "the client never saw the third node";
    ASSERT_EQ((*store)->Members().size(), 2u) << "the lagging client saw the join: nothing to test";
  }
  // `count` keys "<prefix>N", each a page of `page` bytes at N pages into
  // `src` (to put) and into dst_ (to get); how many home on the node that
  // joined last.
  size_t KeysOfPages(const std::string& prefix, size_t count, size_t page, uint8_t* src,
                     std::vector<std::string>* keys, std::vector<std::vector<StoreBuffer>>* from,
                     std::vector<std::vector<StoreBuffer>>* into) {
    for (size_t i = 0; i < count; ++i) {
      keys->push_back(prefix + std::to_string(i));
      from->push_back({{src + i * page, page}});
      into->push_back({{dst_->bytes + i * page, page}});
    }
    const store::Placement placement = PlacementOf(member_names_);
    size_t moving = 0;
    for (const auto& k : *keys) moving += member_names_[placement.Home(k)] == nodes_.back().name ? 1 : 0;
    return moving;
  }
  void StartLaggingClient(std::unique_ptr<Engine>* engine, std::unique_ptr<Store>* store) {
    EngineConfig cfg = ClientConfig(uri_);
    for (std::string kv : {cluster_, std::string("store_membership_refresh_ms=600000"),
                           std::string("store_handoff_ms=600001")})
      ASSERT_TRUE(cfg.settings.Assign(kv).ok()) << kv;
    ASSERT_TRUE(Engine::Create(cfg, engine).ok());
    ASSERT_TRUE(Store::Create(engine->get(), cfg.settings, store).ok());
  }

  std::string uri_, cluster_;
  static inline int clusters_ = 0;
};

TEST_P(StoreMembershipTest, AKilledNodeLeavesWhenItsLeaseEnds) {
  StartTwoNodes();
  if (IsSkipped() || HasFatalFailure()) return;
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

// A third node joins two that serve while a client puts and gets without a
// pause, every page checked byte for byte: no call fails, no key misses
// (one whose home moved is found on its previous home, then on the new
// node once handed over); new pages go to the new node in its share.
TEST_P(StoreMembershipTest, ANodeJoiningTakesItsShareWithoutStoppingAnyone) {
  StartTwoNodes();
  if (IsSkipped() || HasFatalFailure()) return;
  // At most one round (a put of 8 pages, a get of 32) per 10 ms: an
  // overwritten page's slot waits out the read window (5 s) if it was read,
  // so 16 KiB pages keep even a fast host's pools far from eviction.
  constexpr size_t kPage = 16 << 10, kStill = 96, kChurn = 96, kPutBatch = 8, kGetBatch = 32;
  // Keys 0..kStill-1 are put once, before the join, and only read; the
  // others are put again and again, each time with a new version's bytes.
  auto key = [](size_t i) { return "ws-" + std::to_string(i); };
  auto seed = [](size_t i, uint32_t version) { return static_cast<uint32_t>(i * 2654435761u + version * 40503u + 1); };
  std::vector<uint32_t> version(kStill + kChurn, 0);
  std::vector<bool> put_after_join(kStill + kChurn, false);  // last put with the new node in the client's view
  auto put = [&](const std::vector<size_t>& which, std::vector<Status>* st) {
    std::vector<std::string> keys;
    std::vector<std::vector<StoreBuffer>> bufs;
    for (size_t j = 0; j < which.size(); ++j) {
      uint8_t* p = src_->bytes + j * kPage;
      tools::FillPattern(p, kPage, 0, seed(which[j], version[which[j]] + 1));
      keys.push_back(key(which[j]));
      bufs.push_back({{p, kPage}});
    }
    return store_->BatchPut(keys, bufs, st);
  };
  std::vector<size_t> all(kStill + kChurn);
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  for (size_t first = 0; first < all.size(); first += kGetBatch) {
    std::vector<size_t> which(all.begin() + first, all.begin() + first + kGetBatch);
    std::vector<Status> st;
    ASSERT_TRUE(put(which, &st).ok());
    for (size_t j = 0; j < which.size(); ++j) {
      ASSERT_TRUE(st[j].ok()) << st[j].ToString();
      ++version[which[j]];
    }
  }

  // What the client saw, checked once it stopped. The new node is not known
  // before it starts (its port): misses are recorded and judged at the end.
  std::atomic<bool> stop{false}, joined{false};
  std::vector<std::string> unexpected;  // failures other than a miss, and wrong bytes
  std::vector<std::pair<size_t, bool>> misses;  // key, whether its last put had the new node in view
  size_t gets = 0, hits = 0, puts = 0;
  std::atomic<size_t> calls{0};
  Clock::duration slowest{};
  std::thread client([&] {
    std::mt19937_64 rng(7);
    for (auto next = Clock::now(); !stop; next += std::chrono::milliseconds(10)) {
      std::this_thread::sleep_until(next);
      const bool view3 = store_->Members().size() == 3;
      if (view3) joined = true;
      std::vector<size_t> which;
      while (which.size() < kPutBatch) {
        const size_t i = kStill + rng() % kChurn;
        if (std::find(which.begin(), which.end(), i) == which.end()) which.push_back(i);
      }
      std::vector<Status> st;
      auto t0 = Clock::now();
      Status call = put(which, &st);
      slowest = std::max(slowest, Clock::now() - t0);
      if (!call.ok()) unexpected.push_back("BatchPut: " + call.ToString());
      for (size_t j = 0; call.ok() && j < which.size(); ++j) {
        if (!st[j].ok()) {
          unexpected.push_back("put " + key(which[j]) + ": " + st[j].ToString());
          continue;
        }
        ++version[which[j]];
        put_after_join[which[j]] = view3;
        ++puts;
      }
      which.clear();
      std::vector<std::string> keys;
      std::vector<std::vector<StoreBuffer>> bufs;
      for (size_t j = 0; j < kGetBatch; ++j) {
        which.push_back(rng() % (kStill + kChurn));
        keys.push_back(key(which[j]));
        bufs.push_back({{dst_->bytes + j * kPage, kPage}});
      }
      std::vector<uint64_t> len;
      t0 = Clock::now();
      call = store_->BatchGet(keys, bufs, &st, &len);
      slowest = std::max(slowest, Clock::now() - t0);
      ++calls;
      if (!call.ok()) unexpected.push_back("BatchGet: " + call.ToString());
      for (size_t j = 0; call.ok() && j < which.size(); ++j) {
        const size_t i = which[j];
        ++gets;
        if (st[j].code() == Status::Code::kNotFound) {
          misses.push_back({i, put_after_join[i]});
        } else if (!st[j].ok()) {
          unexpected.push_back("get " + key(i) + ": " + st[j].ToString());
        } else if (len[j] != kPage || tools::CheckPattern(dst_->bytes + j * kPage, kPage, 0, seed(i, version[i])) != kPage) {
          unexpected.push_back("get " + key(i) + ": wrong bytes (not version " + std::to_string(version[i]) + ")");
        } else {
          ++hits;
        }
      }
    }
  });

  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const size_t before = calls;
  const auto t0 = Clock::now();
  StartNodes(1, NodeSettings(), uri_);
  const bool seen = WaitForMembers(3, 5000);
  const auto join_took = Clock::now() - t0;
  const size_t during = calls - before;
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  stop = true;
  client.join();
  ASSERT_TRUE(seen) << "the client never saw the third node";
  ASSERT_TRUE(joined) << "the client's traffic did not outlast the join";
  EXPECT_GT(before, 0u);
  EXPECT_GT(during, 0u) << "no call completed while the node joined";
  std::cerr << "join seen in " << std::chrono::duration_cast<std::chrono::milliseconds>(join_took).count()
            << " ms; " << puts << " puts, " << gets << " gets, " << hits << " hits, " << misses.size()
            << " misses; slowest call " << std::chrono::duration_cast<std::chrono::milliseconds>(slowest).count()
            << " ms\n";

  // (a) Nothing failed, no wrong bytes, nobody stalled, no miss.
  for (size_t i = 0; i < std::min<size_t>(unexpected.size(), 10); ++i) ADD_FAILURE() << unexpected[i];
  EXPECT_EQ(unexpected.size(), 0u);
  EXPECT_LT(slowest, std::chrono::milliseconds(1000)) << "a call took half the deadline: someone waited";
  const std::string& added = member_names_.back();
  const store::Placement placement = PlacementOf(member_names_);
  for (auto [i, after] : misses)
    ADD_FAILURE() << key(i) << " missed" << (member_names_[placement.Home(key(i))] == added ? " (its home moved)" : "")
                  << (after ? ", though put with the new node in view" : "");
  // The old homes hand the moved keys over: the new node's puts stop growing.
  for (uint64_t last = UINT64_MAX, now = StatsOf(added).puts; now != last; now = StatsOf(added).puts) {
    last = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
  const StoreStats cs = store_->Stats();
  EXPECT_EQ(cs.misses_checksum, 0u);
  EXPECT_EQ(cs.control_failures, 0u) << "a call to a node failed";
  for (const std::string& n : member_names_) EXPECT_EQ(StatsOf(n).evictions, 0u) << n << ": a page was evicted";

  // (b) New pages: the new node takes its share, each page put once.
  std::vector<store::NodeStats> was;
  for (const std::string& n : member_names_) was.push_back(StatsOf(n));
  const auto fresh = MakePages(300, 31, "fresh-");
  ASSERT_EQ(CountOk(Put(fresh)), fresh.size());
  size_t share = 0, received = 0;
  for (const Page& p : fresh) share += member_names_[placement.Home(p.key)] == added ? 1 : 0;
  for (size_t n = 0; n < member_names_.size(); ++n) {
    const uint64_t got = StatsOf(member_names_[n]).puts - was[n].puts;
    received += got;
    if (member_names_[n] == added) {
      EXPECT_EQ(got, share) << "the new node's puts are not the keys homed on it";
    }
  }
  EXPECT_EQ(received, fresh.size()) << "a page was put more than once, or lost";
  // A third of 300, within five standard deviations (one is 8.2 keys).
  EXPECT_GT(share, 100u - 41) << "the new node took less than its share";
  EXPECT_LT(share, 100u + 41) << "the new node took more than its share";

  // (c) Every page is still a hit, byte-exact, where it lives now.
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> bufs;
  for (size_t i = 0; i < all.size(); ++i) {
    keys.push_back(key(i));
    bufs.push_back({{dst_->bytes + i * kPage, kPage}});
  }
  std::vector<Status> st;
  std::vector<uint64_t> len;
  ASSERT_TRUE(store_->BatchGet(keys, bufs, &st, &len).ok());
  size_t stayed = 0, handed = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool moved = member_names_[placement.Home(key(i))] == added;
    ASSERT_TRUE(st[i].ok()) << key(i) << (moved ? (put_after_join[i] ? " (put since the join)" : " (handed over)")
                                                : " (home unchanged)")
                            << ": " << st[i].ToString();
    EXPECT_EQ(tools::CheckPattern(dst_->bytes + i * kPage, kPage, 0, seed(i, version[i])), kPage) << key(i);
    stayed += !moved && i < kStill ? 1 : 0;
    handed += moved && i < kStill ? 1 : 0;
  }
  EXPECT_GT(stayed, 0u) << "no page put before the join kept its home: (c) checked less";
  EXPECT_GT(handed, 0u) << "no page put before the join had its home moved: (c) checked less";
}

// A writer whose view lags a join puts keys on their previous homes: a
// process that sees the new member finds every one of them at once (on the
// previous home), the old homes hand the new member's keys over to it, and
// once the window is over every key is read, tested and removed where it
// lives, each page held once in the store.
TEST_P(StoreMembershipTest, KeysPutByAWriterThatHasNotSeenAJoinStayReadable) {
  constexpr int kWindowMs = 4000;
  std::unique_ptr<Engine> lagging_engine;
  std::unique_ptr<Store> lagging;
  Clock::time_point joined;
  ASSERT_NO_FATAL_FAILURE(StartALaggingClientAndJoin(kWindowMs, kPool, &lagging_engine, &lagging, &joined));
  if (IsSkipped()) return;
  Region src(lagging_engine.get(), 4 << 20);

  constexpr size_t kKeys = 40, kPage = 4096;
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> from, into;
  const size_t moving = KeysOfPages("lag-", kKeys, kPage, src.bytes, &keys, &from, &into);
  ASSERT_GT(moving, 0u) << "no key homes on the new node: nothing to test";
  for (size_t i = 0; i < kKeys; ++i)
    tools::FillPattern(src.bytes + i * kPage, kPage, 0, static_cast<uint32_t>(i + 1));
  std::vector<Status> st;
  ASSERT_TRUE(lagging->BatchPut(keys, from, &st).ok());
  ASSERT_EQ(CountOk(st), kKeys);

  auto read_all = [&](const char* when) {
    std::memset(dst_->bytes, 0, kKeys * kPage);
    std::vector<uint64_t> len;
    ASSERT_TRUE(store_->BatchGet(keys, into, &st, &len).ok());
    for (size_t i = 0; i < kKeys; ++i) {
      EXPECT_TRUE(st[i].ok()) << when << ": " << keys[i] << ": " << st[i].ToString();
      EXPECT_EQ(tools::CheckPattern(dst_->bytes + i * kPage, kPage, 0, static_cast<uint32_t>(i + 1)), kPage)
          << when << ": " << keys[i];
    }
    std::vector<bool> found;
    ASSERT_TRUE(store_->BatchExists(keys, &found, nullptr).ok());
    EXPECT_EQ(std::count(found.begin(), found.end(), true), static_cast<long>(kKeys)) << when;
  };
  read_all("at once");
  if (HasFailure()) return;

  // The old homes hand the keys over within a few refreshes; after the
  // window, readers look on the homes alone.
  size_t on_new = 0;
  for (auto until = Clock::now() + std::chrono::seconds(3); on_new < moving && Clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(100)))
    on_new = StatsOf(nodes_.back().name).pages;
  EXPECT_EQ(on_new, moving) << "the new node holds its keys";
  std::this_thread::sleep_until(joined + std::chrono::milliseconds(kWindowMs + 1000));
  read_all("after the window");
  uint64_t held = 0;
  for (const std::string& n : member_names_) held += StatsOf(n).pages;
  EXPECT_EQ(held, kKeys) << "every page held once: none left behind, none copied twice";

  std::vector<Status> removed;
  ASSERT_TRUE(store_->BatchRemove(keys, &removed).ok());
  for (size_t i = 0; i < kKeys; ++i) EXPECT_TRUE(removed[i].ok()) << keys[i] << ": " << removed[i].ToString();
  held = 0;
  for (const std::string& n : member_names_) held += StatsOf(n).pages;
  EXPECT_EQ(held, 0u);
  lagging.reset();
}

// A lagging writer puts a key again on its previous home after that node
// handed the first page over: the second hand-over must put the newer page
// over the one the home got from the first (not drop it as "there
// already"), or the acknowledged PUT is lost and readers get the older page.
TEST_P(StoreMembershipTest, APagePutAgainAfterItsHandOverReplacesTheOneHandedOver) {
  constexpr int kWindowMs = 4000;
  std::unique_ptr<Engine> lagging_engine;
  std::unique_ptr<Store> lagging;
  Clock::time_point joined;
  ASSERT_NO_FATAL_FAILURE(StartALaggingClientAndJoin(kWindowMs, kPool, &lagging_engine, &lagging, &joined));
  if (IsSkipped()) return;
  Region src(lagging_engine.get(), 4 << 20);
  constexpr size_t kKeys = 40, kPage = 4096;
  std::vector<std::string> keys;
  std::vector<std::vector<StoreBuffer>> from, into;
  const size_t moving = KeysOfPages("again-", kKeys, kPage, src.bytes, &keys, &from, &into);
  ASSERT_GT(moving, 0u) << "no key homes on the new node: nothing to test";
  const store::Placement placement = PlacementOf(member_names_);
  auto put_all = [&](uint32_t version) {
    for (size_t i = 0; i < kKeys; ++i)
      tools::FillPattern(src.bytes + i * kPage, kPage, 0, static_cast<uint32_t>(version * 1000 + i));
    std::vector<Status> st;
    ASSERT_TRUE(lagging->BatchPut(keys, from, &st).ok());
    ASSERT_EQ(CountOk(st), kKeys);
  };
  auto wait_handed_over = [&](const char* when) {
    uint64_t elsewhere = moving;
    for (auto until = Clock::now() + std::chrono::seconds(3); elsewhere > 0 && Clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
      elsewhere = 0;
      for (size_t n = 0; n + 1 < nodes_.size(); ++n) elsewhere += StatsOf(nodes_[n].name).pages;
      elsewhere -= kKeys - moving;  // the keys that home on the two first nodes stay there
    }
    ASSERT_EQ(elsewhere, 0u) << when << ": the previous homes still hold keys of the new node";
  };
  ASSERT_NO_FATAL_FAILURE(put_all(1));
  ASSERT_NO_FATAL_FAILURE(wait_handed_over("first"));
  ASSERT_NO_FATAL_FAILURE(put_all(2));  // the lagging writer still puts them on their previous homes
  ASSERT_NO_FATAL_FAILURE(wait_handed_over("second"));
  ASSERT_LT(Clock::now(), joined + std::chrono::milliseconds(kWindowMs)) << "the window ended: nothing tested";
  std::vector<Status> st;
  std::vector<uint64_t> len;
  ASSERT_TRUE(store_->BatchGet(keys, into, &st, &len).ok());
  for (size_t i = 0; i < kKeys; ++i) {
    EXPECT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
    EXPECT_EQ(tools::CheckPattern(dst_->bytes + i * kPage, kPage, 0, static_cast<uint32_t>(2000 + i)), kPage)
        << keys[i] << " (home " << member_names_[placement.Home(keys[i])] << "): not the last page put";
  }
  lagging.reset();
}

// A page its new home refuses (here: larger than the new node's whole
// pool) stays on its previous home after the hand-over window, where a
// process whose view still places it there reads it: dropping it would
// lose an acknowledged page whenever a node's view differs from its
// clients'.
TEST_P(StoreMembershipTest, PagesTheNewHomeRefusesStayWhereALaggingReaderFindsThem) {
  constexpr int kWindowMs = 2000;
  std::unique_ptr<Engine> lagging_engine;
  std::unique_ptr<Store> lagging;
  Clock::time_point joined;
  ASSERT_NO_FATAL_FAILURE(StartALaggingClientAndJoin(kWindowMs, 1 << 20, &lagging_engine, &lagging, &joined));
  if (IsSkipped()) return;
  constexpr size_t kMoving = 6, kStaying = 2, kKeys = kMoving + kStaying, kPage = 2 << 20;
  Region src(lagging_engine.get(), kKeys * kPage), into(lagging_engine.get(), kKeys * kPage);
  // Keys homed on the new node (their pages move there) and a few others.
  const store::Placement placement = PlacementOf(member_names_, {kPool, kPool, 1 << 20});
  std::vector<std::string> keys;
  size_t moving = 0;
  for (int i = 0; keys.size() < kKeys; ++i) {
    const std::string k = "refused-" + std::to_string(i);
    const bool moves = member_names_[placement.Home(k)] == nodes_.back().name;
    if (moves ? moving < kMoving : keys.size() - moving < kStaying) {
      keys.push_back(k);
      moving += moves ? 1 : 0;
    }
  }
  std::vector<std::vector<StoreBuffer>> from, to;
  for (size_t i = 0; i < kKeys; ++i) {
    tools::FillPattern(src.bytes + i * kPage, kPage, 0, static_cast<uint32_t>(i + 7));
    from.push_back({{src.bytes + i * kPage, kPage}});
    to.push_back({{into.bytes + i * kPage, kPage}});
  }
  std::vector<Status> st;
  ASSERT_TRUE(lagging->BatchPut(keys, from, &st).ok());
  ASSERT_EQ(CountOk(st), kKeys);

  std::this_thread::sleep_until(joined + std::chrono::milliseconds(kWindowMs + 1500));
  std::vector<uint64_t> len;
  ASSERT_TRUE(lagging->BatchGet(keys, to, &st, &len).ok());
  for (size_t i = 0; i < kKeys; ++i) {
    EXPECT_TRUE(st[i].ok()) << keys[i] << ": " << st[i].ToString();
    EXPECT_EQ(tools::CheckPattern(into.bytes + i * kPage, kPage, 0, static_cast<uint32_t>(i + 7)), kPage) << keys[i];
  }
  EXPECT_EQ(StatsOf(nodes_.back().name).pages, 0u) << "the new node took a page larger than its pool";
  EXPECT_EQ(StatsOf(member_names_[0]).pages + StatsOf(member_names_[1]).pages, kKeys) << "a refused page was dropped";
  lagging.reset();
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreMembershipTest, ::testing::Values("etcd", "http"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvfabric
