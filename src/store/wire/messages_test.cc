#include "store/wire/messages.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <random>

#include "store/wire/checksum.h"

namespace kvfabric::store {
namespace {

TEST(MessagesTest, KeysRoundTrip) {
  const std::vector<std::string_view> keys = {"a", std::string_view("b\0c", 3), "layer-17/page-4"};
  const std::string wire = EncodeKeys(Op::kLookup, keys);
  Op op;
  ASSERT_TRUE(PeekOp(wire, &op).ok());
  EXPECT_EQ(op, Op::kLookup);
  std::vector<std::string_view> back;
  ASSERT_TRUE(DecodeKeys(wire, &back).ok());
  EXPECT_EQ(back, keys);
}

TEST(MessagesTest, PutRoundTrip) {
  PutRequest put{"10.0.0.2:15000", 4000, {{"k1", {{4096, 100}, {8192, 200}}}, {"k2", {{1, 1}}}}};
  PutRequest back;
  ASSERT_TRUE(DecodePut(EncodePut(put), &back).ok());
  EXPECT_EQ(back.writer, put.writer);
  EXPECT_EQ(back.budget_ms, 4000u);
  ASSERT_EQ(back.items.size(), 2u);
  EXPECT_EQ(back.items[0].key, "k1");
  ASSERT_EQ(back.items[0].sources.size(), 2u);
  EXPECT_EQ(back.items[0].sources[1].addr, 8192u);
  EXPECT_EQ(back.items[0].sources[1].length, 200u);
  EXPECT_EQ(back.hand_over, PutRequest::HandOver::kNo);
  for (const auto kind : {PutRequest::HandOver::kIfAbsent, PutRequest::HandOver::kOver}) {
    put.hand_over = kind;
    ASSERT_TRUE(DecodePut(EncodePut(put), &back).ok());
    EXPECT_EQ(back.hand_over, kind);
  }
  std::string wire = EncodePut(put);
  wire[1 + 4 + put.writer.size() + 4] = 3;  // op, the writer's length and bytes, the budget, then the kind
  EXPECT_EQ(DecodePut(wire, &back).code(), Status::Code::kProtocolError) << "no such hand-over";
}

// The operation a request names (0 when it names none).
uint8_t OpOf(std::string_view wire) {
  Op op;
  return PeekOp(wire, &op).ok() ? static_cast<uint8_t>(op) : 0;
}

TEST(MessagesTest, PutByWriteRoundTrip) {
  ReserveRequest reserve{3000, {{"k1", 131072}, {std::string("k\0z", 3), 1}}};
  std::string wire = EncodeReserve(reserve);
  EXPECT_EQ(OpOf(wire), static_cast<uint8_t>(Op::kReserve));
  ReserveRequest reserve_back;
  ASSERT_TRUE(DecodeReserve(wire, &reserve_back).ok());
  EXPECT_EQ(reserve_back.budget_ms, 3000u);
  ASSERT_EQ(reserve_back.items.size(), 2u);
  EXPECT_EQ(reserve_back.items[0].length, 131072u);
  EXPECT_EQ(reserve_back.items[1].key, std::string("k\0z", 3));

  Slots slots{99, 7, {Status::OK(), Status::Busy("pool full"), Status::OK()}, {4096, 0, 8192}};
  Slots slots_back;
  ASSERT_TRUE(DecodeSlots(EncodeSlots(slots), 3, &slots_back).ok());
  EXPECT_EQ(slots_back.ticket, 99u);
  EXPECT_EQ(slots_back.epoch, 7u);
  EXPECT_EQ(slots_back.statuses[1].code(), Status::Code::kBusy);
  EXPECT_EQ(slots_back.statuses[1].message(), "pool full");
  EXPECT_EQ(slots_back.addrs, (std::vector<uint64_t>{4096, 0, 8192}));
  EXPECT_FALSE(DecodeSlots(EncodeSlots(slots), 2, &slots_back).ok()) << "a reply for other keys";

  CommitRequest commit{99,
                      {{CommitState::kWritten, true, {5, 6}, ""},
                       {CommitState::kNotWritten, false, {}, ""},
                       {CommitState::kWritten, false, {}, std::string("g\0k", 3)},
                       {CommitState::kUnused, false, {}, ""}},
                      {131072, 4096}};
  wire = EncodeCommit(commit);
  EXPECT_EQ(OpOf(wire), static_cast<uint8_t>(Op::kCommit));
  CommitRequest commit_back;
  ASSERT_TRUE(DecodeCommit(wire, &commit_back).ok());
  EXPECT_EQ(commit_back.ticket, 99u);
  ASSERT_EQ(commit_back.items.size(), 4u);
  EXPECT_TRUE(commit_back.items[0].written() && commit_back.items[0].has_checksum);
  EXPECT_EQ(commit_back.items[0].checksum, (Checksum{5, 6}));
  EXPECT_EQ(commit_back.items[1].state, CommitState::kNotWritten);
  EXPECT_TRUE(commit_back.items[2].written());
  EXPECT_FALSE(commit_back.items[2].has_checksum);
  EXPECT_EQ(commit_back.items[2].key, std::string("g\0k", 3));
  EXPECT_EQ(commit_back.items[3].state, CommitState::kUnused);
  EXPECT_EQ(commit_back.grant, (std::vector<uint64_t>{131072, 4096}));

  for (size_t n = 0; n < wire.size(); ++n) EXPECT_FALSE(DecodeCommit(wire.substr(0, n), &commit_back).ok()) << n;
  EXPECT_FALSE(DecodeCommit(wire + "x", &commit_back).ok());
  CommitRequest one{1, {{CommitState::kNotWritten, false, {}, ""}}, {}};
  std::string bad_state = EncodeCommit(one);
  bad_state[1 + 8 + 4] = 4;  // op, ticket, count, then the first item's state
  EXPECT_EQ(DecodeCommit(bad_state, &commit_back).code(), Status::Code::kProtocolError);

  const Location committed{true, 4096, 5000, 7, Checksum{11, 12}, 3};
  CommitReply reply{{Status::OK(), Status::Unavailable("not written")}, slots, {committed, Location{}}};
  CommitReply reply_back;
  const std::string reply_wire = EncodeCommitReply(reply);
  ASSERT_TRUE(DecodeCommitReply(reply_wire, 2, &reply_back).ok());
  EXPECT_EQ(reply_back.statuses[1].code(), Status::Code::kUnavailable);
  EXPECT_EQ(reply_back.granted.ticket, 99u);
  EXPECT_EQ(reply_back.granted.addrs, (std::vector<uint64_t>{4096, 0, 8192}));
  EXPECT_EQ(reply_back.pages, (std::vector<Location>{committed, Location{}})) << "where each committed page lies";
  CommitReply one_page_short = reply;
  one_page_short.pages.pop_back();
  EXPECT_FALSE(DecodeCommitReply(EncodeCommitReply(one_page_short), 2, &reply_back).ok())
      << "pages for another commit";
  EXPECT_FALSE(DecodeCommitReply(reply_wire, 3, &reply_back).ok()) << "a reply for another commit";
  for (size_t n = 0; n < reply_wire.size(); ++n)
    EXPECT_FALSE(DecodeCommitReply(reply_wire.substr(0, n), 2, &reply_back).ok()) << n;
  ASSERT_TRUE(DecodeCommitReply(EncodeCommitReply({{Status::OK()}, {}, {}}), 1, &reply_back).ok());
  EXPECT_EQ(reply_back.granted.ticket, 0u) << "nothing granted";
  EXPECT_TRUE(reply_back.pages.empty()) << "no location known";
  const std::string reserve_wire = EncodeReserve(reserve);
  for (size_t n = 0; n < reserve_wire.size(); ++n)
    EXPECT_FALSE(DecodeReserve(reserve_wire.substr(0, n), &reserve_back).ok()) << n;
  const std::string slots_wire = EncodeSlots(slots);
  for (size_t n = 0; n < slots_wire.size(); ++n)
    EXPECT_FALSE(DecodeSlots(slots_wire.substr(0, n), 3, &slots_back).ok()) << n;
}

TEST(MessagesTest, RepliesRoundTrip) {
  const std::vector<Location> locs = {{true, 1, 2, 3, {4, 5}, 11}, {}, {true, 6, 7, 8, {9, 10}, 12}};
  std::vector<Location> locs_back;
  ASSERT_TRUE(DecodeLocations(EncodeLocations(locs), 3, &locs_back).ok());
  EXPECT_EQ(locs_back, locs);
  EXPECT_EQ(locs_back[0].checksum, (Checksum{4, 5}));
  EXPECT_FALSE(locs_back[1].found);
  EXPECT_EQ(locs_back[2].generation, 8u);
  EXPECT_EQ(locs_back[2].version, 12u);
  EXPECT_FALSE(DecodeLocations(EncodeLocations(locs), 2, &locs_back).ok()) << "a reply for other keys";

  const std::vector<Status> st = {Status::OK(), Status::Busy("pool full"), Status::InvalidArgument("big")};
  std::vector<Status> st_back;
  ASSERT_TRUE(DecodeStatuses(EncodeStatuses(st), 3, &st_back).ok());
  EXPECT_TRUE(st_back[0].ok());
  EXPECT_EQ(st_back[1].code(), Status::Code::kBusy);
  EXPECT_EQ(st_back[1].message(), "pool full");
  EXPECT_EQ(st_back[2].code(), Status::Code::kInvalidArgument);

  NodeInfo info{"h:1", 4096, 1 << 20, 65536, 15000, 77, 8192, 4096,
                {"boot/pid:[4026531836]/net:[4026531840]", 1234, 7, 99, (1 << 20) + 4096}, 31337};
  NodeInfo info_back;
  ASSERT_TRUE(DecodeNodeInfo(EncodeNodeInfo(info), &info_back).ok());
  EXPECT_EQ(info_back.segment, "h:1");
  EXPECT_EQ(info_back.epoch, 77u);
  EXPECT_EQ(info_back.versions_addr, 8192u);
  EXPECT_EQ(info_back.region_bytes, 4096u);
  EXPECT_EQ(info_back.share, info.share);
  EXPECT_EQ(info_back.age_ms, 31337u);

  NodeStats stats;
  stats.evictions = 5;
  stats.exists = 9;
  NodeStats stats_back;
  ASSERT_TRUE(DecodeNodeStats(EncodeNodeStats(stats), &stats_back).ok());
  EXPECT_EQ(stats_back.evictions, 5u);
  EXPECT_EQ(stats_back.exists, 9u);
}

// Every proper prefix of a valid message, and the message with a byte
// added, is refused; so is any run of random bytes that does not happen to
// be well formed (none of these crash: the fuzz target goes further).
TEST(MessagesTest, TruncatedAndTrailingBytesAreRefused) {
  const std::string put = EncodePut({"w:1", 1000, {{"key", {{1, 2}, {3, 4}}}}});
  PutRequest p;
  for (size_t n = 0; n < put.size(); ++n) EXPECT_FALSE(DecodePut(put.substr(0, n), &p).ok()) << n;
  EXPECT_FALSE(DecodePut(put + "x", &p).ok());
  const std::string keys = EncodeKeys(Op::kExists, {"a", "bb"});
  std::vector<std::string_view> k;
  for (size_t n = 0; n < keys.size(); ++n) EXPECT_FALSE(DecodeKeys(keys.substr(0, n), &k).ok()) << n;
  EXPECT_FALSE(DecodeKeys(keys + "x", &k).ok());
}

TEST(MessagesTest, FlagsOtherThanZeroOrOneAreRefused) {
  std::string locations = EncodeLocations({Location{}});
  locations.back() = 2;
  std::vector<Location> l;
  EXPECT_EQ(DecodeLocations(locations, 1, &l).code(), Status::Code::kProtocolError);
  std::string bits = EncodeBits({true});
  bits.back() = 7;
  std::vector<bool> b;
  EXPECT_EQ(DecodeBits(bits, 1, &b).code(), Status::Code::kProtocolError);
}

TEST(MessagesTest, HugeCountsAreRefusedBeforeAnyAllocation) {
  std::string wire = EncodeKeys(Op::kLookup, {});
  wire[1] = wire[2] = wire[3] = wire[4] = '\xff';  // 4 billion keys in 5 bytes
  std::vector<std::string_view> keys;
  EXPECT_EQ(DecodeKeys(wire, &keys).code(), Status::Code::kProtocolError);
}

TEST(MessagesTest, UnknownOperationsAndKeysAreRefused) {
  Op op;
  EXPECT_EQ(PeekOp("", &op).code(), Status::Code::kProtocolError);
  EXPECT_EQ(PeekOp(std::string(1, '\0'), &op).code(), Status::Code::kProtocolError);
  EXPECT_EQ(PeekOp(std::string(1, '\x7f'), &op).code(), Status::Code::kProtocolError);
  EXPECT_EQ(CheckKey("").code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(CheckKey(std::string(kMaxKeyBytes + 1, 'k')).code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(CheckKey(std::string(kMaxKeyBytes, 'k')).ok());
}

TEST(ChecksumTest, PiecesGiveTheChecksumOfTheirBytesInOrder) {
  std::vector<uint8_t> page(300000);
  std::mt19937 rng(1);
  for (auto& b : page) b = static_cast<uint8_t>(rng());
  const Checksum whole = ChecksumOfBytes(page.data(), page.size());
  const ByteRange three[] = {{page.data(), 1000}, {page.data() + 1000, 99000}, {page.data() + 100000, 200000}};
  EXPECT_EQ(ChecksumOf(three, page.size()), whole);
  // A length shorter than the pieces covers only its bytes.
  EXPECT_EQ(ChecksumOf(three, 5000), ChecksumOfBytes(page.data(), 5000));
  // Fed piece by piece, in any cut, as a GET feeds a page's pieces as they land.
  for (size_t piece : {size_t{1}, size_t{4096}, size_t{65536}, size_t{299999}}) {
    ChecksumStream stream;
    for (size_t at = 0; at < page.size(); at += piece) stream.Add(page.data() + at, std::min(piece, page.size() - at));
    EXPECT_EQ(stream.Digest(), whole) << piece;
  }
  page[123456] ^= 1;
  EXPECT_FALSE(ChecksumOfBytes(page.data(), page.size()) == whole);
}

}  // namespace
}  // namespace kvfabric::store
