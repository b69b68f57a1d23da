#include "metadata/segment_desc.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvfabric::metadata {
namespace {

SegmentDesc Sample() {
  SegmentDesc d;
  d.name = "10.0.0.1:15000";
  d.epoch = 0xfeedfacecafebeefull;
  d.host_id = "boot";
  d.pid = 42;
  d.rails = {{"tcp;ofi_rxm", "10.0.0.0/24", "eth0", std::string("\x02\x00\x01\xff", 4), false},
             {"shm", "shm", "shm", "fi_shm://42", true}};
  d.buffers = {{0x1000, 0x3000, "cpu:0", {{0x1000, 0x2000, {7, std::nullopt}}, {0x3000, 0x1000, {8, 9}}}},
               {0x10000, 0x100, "cpu:1", {{0x10000, 0x100, {1, 2}}}}};
  return d;
}

TEST(SegmentDescTest, RoundTrip) {
  SegmentDesc d = Sample(), back;
  ASSERT_TRUE(FromJson(ToJson(d), &back).ok());
  EXPECT_EQ(back.name, d.name);
  EXPECT_EQ(back.epoch, d.epoch);
  ASSERT_EQ(back.rails.size(), 2u);
  EXPECT_EQ(back.rails[0].address, d.rails[0].address);
  EXPECT_TRUE(back.rails[1].virt_addr);
  ASSERT_EQ(back.buffers.size(), 2u);
  EXPECT_EQ(back.buffers[0].chunks[0].keys[0], std::optional<uint64_t>(7));
  EXPECT_FALSE(back.buffers[0].chunks[0].keys[1].has_value());
}

TEST(SegmentDescTest, GenerationRoundTripsAndIsOptional) {
  SegmentDesc d = Sample(), back;
  d.generation = 17;
  ASSERT_TRUE(FromJson(ToJson(d), &back).ok());
  EXPECT_EQ(back.generation, 17u);
  auto j = nlohmann::json::parse(ToJson(d));
  j.erase("generation");  // a peer that sends none
  ASSERT_TRUE(FromJson(j.dump(), &back).ok());
  EXPECT_EQ(back.generation, 0u);
}

TEST(SegmentDescTest, ReadOnlyRoundTripsAndIsOptional) {
  SegmentDesc d = Sample(), back;
  d.buffers[1].read_only = true;
  ASSERT_TRUE(FromJson(ToJson(d), &back).ok());
  EXPECT_FALSE(back.buffers[0].read_only);
  EXPECT_TRUE(back.buffers[1].read_only);
  auto j = nlohmann::json::parse(ToJson(d));
  EXPECT_FALSE(j["buffers"][0].contains("read_only")) << "written only where set";
  j["buffers"][1]["read_only"] = "yes";
  EXPECT_EQ(FromJson(j.dump(), &back).code(), Status::Code::kProtocolError);
}

TEST(SegmentDescTest, StaleMeansAnEarlierEpochOrGeneration) {
  SegmentDesc held = Sample(), fetched = Sample();
  held.generation = 5;
  fetched.generation = 5;
  EXPECT_FALSE(IsStale(held, fetched));  // the same state again
  fetched.generation = 6;
  EXPECT_FALSE(IsStale(held, fetched));  // registered more since
  fetched.generation = 4;
  EXPECT_TRUE(IsStale(held, fetched));
  fetched.epoch = held.epoch + 1;  // restarted: its generations start over
  fetched.generation = 0;
  EXPECT_FALSE(IsStale(held, fetched));
  fetched.epoch = held.epoch - 1;  // a previous process
  fetched.generation = 99;
  EXPECT_TRUE(IsStale(held, fetched));
}

TEST(SegmentDescTest, FindBuffer) {
  SegmentDesc d = Sample();
  EXPECT_NE(d.FindBuffer(0x1000, 0x3000), nullptr);
  EXPECT_NE(d.FindBuffer(0x3fff, 1), nullptr);
  EXPECT_EQ(d.FindBuffer(0x3fff, 2), nullptr);  // one byte past the end
  EXPECT_EQ(d.FindBuffer(0xfff, 2), nullptr);   // starts before
  EXPECT_EQ(d.FindBuffer(0x4000, 1), nullptr);  // in the gap
  EXPECT_EQ(d.FindBuffer(0x10000, ~0ull), nullptr);
  EXPECT_EQ(d.FindBuffer(~0ull, 2), nullptr);
}

// Every malformed document is refused with a ProtocolError and leaves the output alone.
TEST(SegmentDescTest, MalformedInputIsRefused) {
  using nlohmann::json;
  const json good = json::parse(ToJson(Sample()));
  std::vector<std::string> bad = {"", "null", "[]", "{", "{\"version\":1}", "\xff\xfe"};
  auto mutate = [&](auto f) {
    json j = good;
    f(j);
    bad.push_back(j.dump());
  };
  mutate([](json& j) { j["version"] = 2; });
  mutate([](json& j) { j["version"] = "1"; });
  mutate([](json& j) { j["epoch"] = -1; });
  mutate([](json& j) { j["name"] = 5; });
  mutate([](json& j) { j["name"] = std::string(5000, 'x'); });
  mutate([](json& j) { j["rails"] = json::object(); });
  mutate([](json& j) { j["rails"][0]["address"] = "xyz"; });
  mutate([](json& j) { j["rails"][0]["address"] = "abc"; });
  mutate([](json& j) { j["rails"][0].erase("virt_addr"); });
  mutate([](json& j) { j["buffers"][0]["length"] = 0; });
  mutate([](json& j) { j["buffers"][0]["addr"] = ~0ull; });
  mutate([](json& j) { j["buffers"][1]["addr"] = 0x2000; });  // overlaps buffer 0
  mutate([](json& j) { j["buffers"][0]["chunks"][1]["addr"] = 0x3001; });  // gap
  mutate([](json& j) { j["buffers"][0]["chunks"].erase(1); });            // short
  mutate([](json& j) { j["buffers"][0]["chunks"][0]["keys"] = json::array({1}); });
  mutate([](json& j) { j["buffers"][0]["chunks"][0]["keys"][0] = "7"; });
  mutate([](json& j) { j["buffers"][0]["chunks"][0]["keys"][0] = -7; });
  mutate([](json& j) { j["buffers"] = json::array({1, 2}); });
  for (const auto& text : bad) {
    SegmentDesc out;
    out.name = "untouched";
    Status s = FromJson(text, &out);
    EXPECT_EQ(s.code(), Status::Code::kProtocolError) << text.substr(0, 200);
    EXPECT_EQ(out.name, "untouched");
  }
}

}  // namespace
}  // namespace kvfabric::metadata
