#include "engine/rail_options.h"

#include <gtest/gtest.h>

namespace kvfabric::engine {
namespace {

using namespace std::chrono_literals;

TEST(RailOptionsTest, DefaultSettingsGiveTheDefaultOptions) {
  fabric::RailOptions o;
  ASSERT_TRUE(RailOptionsFromSettings(Settings(), &o).ok());
  const fabric::RailOptions d;
  EXPECT_EQ(o.post_mode, fabric::PostMode::kAuto);
  EXPECT_EQ(o.write_completion, fabric::WriteCompletion::kDelivery);
  EXPECT_EQ(o.tx_depth, 0u);
  EXPECT_EQ(o.cq_size, 0u);
  EXPECT_EQ(o.max_slice_bytes, 0u);
  EXPECT_EQ(o.stall_period, 2000ms);
  EXPECT_EQ(o.retry_period, 5000ms);
  EXPECT_EQ(o.post_burst, 20us);
  // fabric::RailOptions() is what default Settings ask for.
  EXPECT_EQ(o.post_mode, d.post_mode);
  EXPECT_EQ(o.write_completion, d.write_completion);
  EXPECT_EQ(o.stall_period, d.stall_period);
  EXPECT_EQ(o.retry_period, d.retry_period);
  EXPECT_EQ(o.post_burst, d.post_burst);
}

TEST(RailOptionsTest, EveryModeAndValueIsTakenAsGiven) {
  Settings s;
  s.post_mode = "direct";
  s.write_completion = "transmit";
  s.tx_depth = 1 << 20;  // above any provider's depth: Rail::Open caps it, not this
  s.cq_size = 16;
  s.max_slice_bytes = int64_t{1} << 40;
  s.rail_stall_ms = 0;
  s.rail_retry_ms = 250;
  s.post_burst_us = 0;
  fabric::RailOptions o;
  ASSERT_TRUE(RailOptionsFromSettings(s, &o).ok());
  EXPECT_EQ(o.post_mode, fabric::PostMode::kDirect);
  EXPECT_EQ(o.write_completion, fabric::WriteCompletion::kTransmit);
  EXPECT_EQ(o.tx_depth, size_t{1} << 20);
  EXPECT_EQ(o.cq_size, 16u);
  EXPECT_EQ(o.max_slice_bytes, size_t{1} << 40);
  EXPECT_EQ(o.stall_period, 0ns);
  EXPECT_EQ(o.retry_period, 250ms);
  EXPECT_EQ(o.post_burst, 0ns);
  s.post_mode = "progress";
  ASSERT_TRUE(RailOptionsFromSettings(s, &o).ok());
  EXPECT_EQ(o.post_mode, fabric::PostMode::kProgress);
}

// The error names the variable, the value and what it accepts; the options
// are left alone.
void ExpectRefused(const Settings& s, const std::string& variable, const std::string& value,
                   const std::string& accepted) {
  fabric::RailOptions o;
  o.cq_size = 7;
  Status st = RailOptionsFromSettings(s, &o);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(variable), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(value), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(accepted), std::string::npos) << st.message();
  EXPECT_EQ(o.cq_size, 7u);
}

TEST(RailOptionsTest, UnknownModesAreRefused) {
  Settings s;
  s.post_mode = "Direct";
  ExpectRefused(s, "KVF_POST_MODE", "'Direct'", "'auto', 'direct' or 'progress'");
  s = Settings();
  s.write_completion = "remote";
  ExpectRefused(s, "KVF_WRITE_COMPLETION", "'remote'", "'delivery' or 'transmit'");
}

TEST(RailOptionsTest, NegativeOrOverlongValuesAreRefusedNotClamped) {
  Settings s;
  s.tx_depth = -1;
  ExpectRefused(s, "KVF_TX_DEPTH", "-1", "use 0");
  s = Settings();
  s.cq_size = -8;
  ExpectRefused(s, "KVF_CQ_SIZE", "-8", "use 0");
  s = Settings();
  s.max_slice_bytes = -4096;
  ExpectRefused(s, "KVF_MAX_SLICE_BYTES", "-4096", "use 0");
  s = Settings();
  s.rail_stall_ms = -1;
  ExpectRefused(s, "KVF_RAIL_STALL_MS", "-1", "milliseconds");
  s = Settings();
  s.rail_retry_ms = int64_t{1} << 62;  // overflows the nanosecond clock
  ExpectRefused(s, "KVF_RAIL_RETRY_MS", std::to_string(int64_t{1} << 62), "milliseconds");
  s = Settings();
  s.post_burst_us = -20;
  ExpectRefused(s, "KVF_POST_BURST_US", "-20", "microseconds");
}

}  // namespace
}  // namespace kvfabric::engine
