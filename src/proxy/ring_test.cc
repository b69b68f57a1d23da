// The proxy ring's protocol (ring.h) with threads alone: producers and one
// consumer through a small ring, every command taken once, in each
// producer's order, and a full ring that holds producers back.
#include "proxy/ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kvfabric::proxy {
namespace {

kvf_proxy_slot Command(uint64_t producer, uint64_t n) {
  kvf_proxy_slot c{};
  c.producer = producer;
  c.local = n;
  c.remote = n * 3;
  c.length = n + 1;
  c.target = static_cast<int64_t>(producer) + 100;
  return c;
}

TEST(ProxyRingTest, LayoutIsAlignedAndEverySlotFreeForItsFirstTicket) {
  RingPtr r = NewRing(8, 3);
  ASSERT_TRUE(r);
  EXPECT_EQ(sizeof(kvf_proxy_slot), 64u);
  EXPECT_EQ(sizeof(kvf_proxy_ring), 192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.get()) % 4096, 0u) << "page-aligned, to map for a device";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(kvf_proxy_slots(r.get())) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<char*>(kvf_proxy_slots(r.get())) + 8 * 64,
            reinterpret_cast<char*>(r.get()) + kvf_proxy_ring_bytes(8, 3));
  for (uint64_t t = 0; t < 8; ++t) EXPECT_TRUE(SlotFree(r.get(), t));
  EXPECT_FALSE(SlotFree(r.get(), 8)) << "the second round waits for the first";
  kvf_proxy_slot out;
  EXPECT_FALSE(Take(r.get(), &out)) << "nothing published";
}

TEST(ProxyRingTest, AFullRingHoldsTheNextTicketUntilTheProxyTakesOne) {
  RingPtr r = NewRing(2, 1);
  for (uint64_t n = 0; n < 2; ++n) Publish(r.get(), TakeTicket(r.get()), Command(0, n));
  const uint64_t third = TakeTicket(r.get());
  EXPECT_FALSE(SlotFree(r.get(), third));
  kvf_proxy_slot out;
  ASSERT_TRUE(Take(r.get(), &out));
  EXPECT_EQ(out.local, 0u);
  EXPECT_TRUE(SlotFree(r.get(), third));
  Publish(r.get(), third, Command(0, 2));
  ASSERT_TRUE(Take(r.get(), &out));
  EXPECT_EQ(out.local, 1u);
  ASSERT_TRUE(Take(r.get(), &out));
  EXPECT_EQ(out.local, 2u);
  EXPECT_EQ(out.length, 3u);
  EXPECT_EQ(out.target, 100);
  EXPECT_EQ(kvf_proxy_issued(r.get())[0], 3u);
  CountEnded(r.get(), 0, false);
  CountEnded(r.get(), 0, true);
  EXPECT_EQ(kvf_proxy_ended(r.get())[0], 2u);
  EXPECT_EQ(kvf_proxy_failed(r.get())[0], 1u);
}

TEST(ProxyRingTest, ManyProducersOneConsumerEveryCommandOnceInEachProducersOrder) {
  constexpr uint64_t kProducers = 4, kEach = 20000;
  RingPtr r = NewRing(16, kProducers);
  std::vector<std::thread> producers;
  for (uint64_t p = 0; p < kProducers; ++p)
    producers.emplace_back([&r, p] {
      for (uint64_t n = 0; n < kEach; ++n) {
        const uint64_t ticket = TakeTicket(r.get());
        while (!SlotFree(r.get(), ticket)) std::this_thread::yield();
        Publish(r.get(), ticket, Command(p, n));
      }
    });
  std::vector<uint64_t> next(kProducers, 0);
  uint64_t taken = 0;
  bool in_order = true, intact = true;
  while (taken < kProducers * kEach) {
    kvf_proxy_slot c;
    if (!Take(r.get(), &c)) {
      std::this_thread::yield();
      continue;
    }
    ++taken;
    ASSERT_LT(c.producer, kProducers);
    in_order = in_order && c.local == next[c.producer];
    intact = intact && c.remote == c.local * 3 && c.length == c.local + 1 &&
             c.target == static_cast<int64_t>(c.producer) + 100;
    next[c.producer] = c.local + 1;
    CountEnded(r.get(), c.producer, false);
  }
  for (auto& t : producers) t.join();
  EXPECT_TRUE(in_order) << "each producer's commands in the order it issued them";
  EXPECT_TRUE(intact) << "no command torn";
  kvf_proxy_slot c;
  EXPECT_FALSE(Take(r.get(), &c)) << "none twice";
  for (uint64_t p = 0; p < kProducers; ++p) {
    EXPECT_EQ(next[p], kEach);
    EXPECT_EQ(kvf_proxy_issued(r.get())[p], kEach);
    EXPECT_EQ(kvf_proxy_ended(r.get())[p], kEach);
  }
}

}  // namespace
}  // namespace kvfabric::proxy
