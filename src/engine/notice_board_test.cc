#include "engine/notice_board.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvfabric::engine {
namespace {

TEST(NoticeBoardTest, ANoticeIsReadyOnceEverySliceLandedInAnyOrder) {
  NoticeBoard b;
  std::vector<uint16_t> got;
  b.Arrived(EncodeNotice(7, 3));
  b.Arrived(EncodeNotice(9, 1));  // another WRITE, whole in one slice
  b.Arrived(EncodeNotice(7, 3));
  b.Take(&got);
  EXPECT_EQ(got, (std::vector<uint16_t>{9}));
  EXPECT_EQ(b.partial(), 1u);
  b.Arrived(EncodeNotice(7, 3));
  got.clear();
  b.Take(&got);
  EXPECT_EQ(got, (std::vector<uint16_t>{7}));
  EXPECT_EQ(b.partial(), 0u);
  got.clear();
  b.Take(&got);
  EXPECT_TRUE(got.empty()) << "taken once";
}

TEST(NoticeBoardTest, TheSameNoticeCountsAgainForTheNextWrite) {
  NoticeBoard b;
  std::vector<uint16_t> got;
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 2; ++i) b.Arrived(EncodeNotice(5, 2));
  b.Take(&got);
  EXPECT_EQ(got, (std::vector<uint16_t>{5, 5}));
}

TEST(NoticeBoardTest, ValuesThatAreNotNoticesChangeNothing) {
  NoticeBoard b;
  std::vector<uint16_t> got;
  b.Arrived(EncodeNotice(0, 1));
  b.Arrived(EncodeNotice(4, 0));
  b.Take(&got);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(b.partial(), 0u);
  EXPECT_EQ(NoticeOf(EncodeNotice(0xfffe, kMaxNoticeSlices)), 0xfffe);
  EXPECT_EQ(SlicesOf(EncodeNotice(0xfffe, kMaxNoticeSlices)), kMaxNoticeSlices);
  EXPECT_LE(EncodeNotice(0xffff, kMaxNoticeSlices), 0xffffffffu) << "fits efa's four bytes";
}

TEST(NoticeBoardTest, NoticesNobodyTakesAreBoundedAndTheOldestDropped) {
  NoticeBoard b;
  for (size_t i = 0; i < kMaxReadyNotices + 5; ++i) b.Landed(static_cast<uint16_t>(1 + i % 1000));
  EXPECT_EQ(b.dropped(), 5u);
  std::vector<uint16_t> got;
  b.Take(&got);
  ASSERT_EQ(got.size(), kMaxReadyNotices);
  EXPECT_EQ(got.front(), 6) << "the five oldest went";
  EXPECT_EQ(got.back(), static_cast<uint16_t>(1 + (kMaxReadyNotices + 4) % 1000));
}

TEST(NoticeBoardTest, WaitReturnsWhenANoticeLandsOrTheTimeEnds) {
  NoticeBoard b;
  std::vector<uint16_t> got;
  EXPECT_FALSE(b.Wait(std::chrono::milliseconds(20), &got));
  std::thread lander([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b.Landed(3);
  });
  EXPECT_TRUE(b.Wait(std::chrono::seconds(10), &got));
  lander.join();
  EXPECT_EQ(got, (std::vector<uint16_t>{3}));
  std::thread closer([&] { b.Close(); });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(b.Wait(std::chrono::seconds(10), &got));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "Close ends the wait";
  closer.join();
}

TEST(NoticeBoardTest, ANoticeMessageCarriesItsEpochAndNotices) {
  uint64_t epoch = 0;
  std::vector<uint16_t> got;
  const std::vector<uint16_t> sent = {0xfffe, 1, 7};
  ASSERT_TRUE(DecodeNoticeMessage(EncodeNoticeMessage(0x0102030405060708ull, sent), &epoch, &got));
  EXPECT_EQ(epoch, 0x0102030405060708ull);
  EXPECT_EQ(got, sent);
  const uint16_t two = 2;
  EXPECT_EQ(EncodeNoticeMessage(1, {&two, 1}), std::string("\x01\0\0\0\0\0\0\0\x02\0", 10)) << "little-endian";
  const std::vector<uint16_t> with_zero = {3, 0};
  EXPECT_FALSE(DecodeNoticeMessage(EncodeNoticeMessage(1, with_zero), &epoch, &got)) << "0 is no notice";
  EXPECT_FALSE(DecodeNoticeMessage(EncodeNoticeMessage(1, {}), &epoch, &got)) << "at least one";
  EXPECT_FALSE(DecodeNoticeMessage(std::string(11, '\1'), &epoch, &got)) << "half a notice";
  const std::vector<uint16_t> too_many(kMaxNoticesPerMessage + 1, 1);
  EXPECT_FALSE(DecodeNoticeMessage(EncodeNoticeMessage(1, too_many), &epoch, &got));
  EXPECT_TRUE(DecodeNoticeMessage(EncodeNoticeMessage(1, {too_many.data(), kMaxNoticesPerMessage}), &epoch, &got));
}

}  // namespace
}  // namespace kvfabric::engine
