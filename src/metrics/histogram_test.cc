#include "metrics/histogram.h"

#include <gtest/gtest.h>

namespace kvfabric::metrics {
namespace {

TEST(HistogramTest, BucketIsTheFirstBoundAtLeastTheValue) {
  EXPECT_EQ(Histogram::BucketOf(-5), 0u);  // a clock read out of order
  EXPECT_EQ(Histogram::BucketOf(0), 0u);
  EXPECT_EQ(Histogram::BucketOf(5'000), 0u);
  EXPECT_EQ(Histogram::BucketOf(5'001), 1u);
  EXPECT_EQ(Histogram::BucketOf(1'000'000), 7u);
  EXPECT_EQ(Histogram::BucketOf(10'000'000'000), Histogram::kUpperNs.size() - 1);
  EXPECT_EQ(Histogram::BucketOf(10'000'000'001), Histogram::kUpperNs.size());
}

TEST(HistogramTest, ReadGivesEachBucketItsCountAndTheSum) {
  Histogram h;
  h.Add(3'000);
  h.Add(3'000);
  h.Add(2'000'000);
  h.Add(60'000'000'000);
  const LatencyHistogram r = h.Read();
  ASSERT_EQ(r.upper_seconds.size(), Histogram::kUpperNs.size());
  ASSERT_EQ(r.counts.size(), Histogram::kUpperNs.size() + 1);
  EXPECT_DOUBLE_EQ(r.upper_seconds[0], 5e-6);
  EXPECT_EQ(r.counts[0], 2u);
  EXPECT_EQ(r.counts[Histogram::BucketOf(2'000'000)], 1u);
  EXPECT_EQ(r.counts.back(), 1u);
  EXPECT_EQ(r.count, 4u);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_NEAR(r.sum_seconds, 60.002006, 1e-9);
}

}  // namespace
}  // namespace kvfabric::metrics
