#include "metadata/descriptor_seal.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvfabric::metadata {
namespace {

SegmentDesc Sample() {
  SegmentDesc d;
  d.name = "10.0.0.1:15000";
  d.epoch = 12345;
  d.generation = 3;
  d.host_id = "boot";
  d.pid = 42;
  d.rails = {{"tcp;ofi_rxm", "10.0.0.0/24", "eth0", "addr0", false}, {"tcp;ofi_rxm", "10.0.1.0/24", "eth1", "addr1", false}};
  d.buffers = {{0x1000, 0x3000, "cpu:0", {{0x1000, 0x2000, {0x1111222233334444ull, std::nullopt}},
                                          {0x3000, 0x1000, {0x5555666677778888ull, 0x9999aaaabbbbccccull}}}}};
  return d;
}

TEST(DescriptorSealTest, WithoutATokenTheDescriptorIsPlainJson) {
  SegmentDesc back;
  ASSERT_TRUE(OpenDescriptor(SealDescriptor(Sample(), ""), "", &back).ok());
  EXPECT_EQ(back.buffers[0].chunks[1].keys[1], Sample().buffers[0].chunks[1].keys[1]);
  EXPECT_EQ(SealDescriptor(Sample(), ""), ToJson(Sample()));
}

TEST(DescriptorSealTest, SealedKeysOpenWithTheTokenOnly) {
  const SegmentDesc d = Sample();
  const std::string text = SealDescriptor(d, "t0ken");
  for (uint64_t key : {0x1111222233334444ull, 0x5555666677778888ull, 0x9999aaaabbbbccccull})
    EXPECT_EQ(text.find(std::to_string(key)), std::string::npos) << "key " << key << " readable";
  SegmentDesc back;
  ASSERT_TRUE(OpenDescriptor(text, "t0ken", &back).ok());
  EXPECT_EQ(back.name, d.name);
  EXPECT_EQ(back.generation, 3u);
  EXPECT_TRUE(back.seal_nonce.empty());
  for (size_t c = 0; c < 2; ++c) EXPECT_EQ(back.buffers[0].chunks[c].keys, d.buffers[0].chunks[c].keys);
  // Each sealing draws a fresh nonce: the masked keys differ every time.
  EXPECT_NE(SealDescriptor(d, "t0ken"), text);
  Status s = OpenDescriptor(text, "another", &back);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_NE(s.message().find("MAC does not match"), std::string::npos) << s.ToString();
}

TEST(DescriptorSealTest, AnyChangeToTheBodyIsRefused) {
  const std::string text = SealDescriptor(Sample(), "t0ken");
  auto j = nlohmann::json::parse(text);
  const std::string body = j["body"];
  for (size_t i = 0; i < body.size(); i += 7) {
    auto tampered = j;
    std::string b = body;
    b[i] ^= 1;
    tampered["body"] = b;
    SegmentDesc out;
    out.name = "untouched";
    Status s = OpenDescriptor(tampered.dump(), "t0ken", &out);
    EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << "byte " << i;
    EXPECT_EQ(out.name, "untouched");
  }
}

TEST(DescriptorSealTest, TokenMismatchesSayWhatToDo) {
  SegmentDesc out;
  Status s = OpenDescriptor(SealDescriptor(Sample(), ""), "t0ken", &out);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_NE(s.message().find("has no KVF_AUTH_TOKEN"), std::string::npos) << s.ToString();
  s = OpenDescriptor(SealDescriptor(Sample(), "t0ken"), "", &out);
  EXPECT_EQ(s.code(), Status::Code::kPermissionDenied);
  EXPECT_NE(s.message().find("set the same token"), std::string::npos) << s.ToString();
  for (const char* bad : {"{\"sealed\":1}", "{\"sealed\":2,\"body\":\"{}\",\"mac\":\"00\"}",
                          "{\"sealed\":1,\"body\":5,\"mac\":\"00\"}", "{\"sealed\":1,\"body\":\"{}\",\"mac\":\"zz\"}"})
    EXPECT_EQ(OpenDescriptor(bad, "t0ken", &out).code(), Status::Code::kProtocolError) << bad;
}

}  // namespace
}  // namespace kvfabric::metadata
