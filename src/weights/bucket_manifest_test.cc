#include "weights/bucket_manifest.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvfabric::weights {
namespace {

std::vector<PieceEntry> Pieces() {
  return {
      {"model.embed_tokens.weight", "bfloat16", {1024, 256}, 524288, 0, 0, 524288},
      {"model.norm.weight", "float32", {256}, 1024, 0, 524288, 1024},
      {"lm_head.weight", "bfloat16", {4096, 256}, 2097152, 1048576, 525312, 1048576},
      {"scalar", "int64", {}, 8, 0, 1573888, 8},
  };
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

TEST(BucketManifestTest, HeaderAndManifestComeBackAsWritten) {
  BucketHeader h;
  h.flags = BucketHeader::kLast;
  h.version = 42;
  h.bucket = 7;
  h.payload_bytes = 1573896;
  const std::string manifest = EncodeManifest(Pieces());
  h.manifest_bytes = static_cast<uint32_t>(manifest.size());
  h.pieces = 4;
  h.checksum = 0x1234567890abcdefull;
  const std::string header = EncodeHeader(h);
  ASSERT_EQ(header.size(), kHeaderBytes);
  BucketHeader back;
  ASSERT_TRUE(DecodeHeader(Bytes(header), header.size(), &back).ok());
  EXPECT_EQ(back.flags, h.flags);
  EXPECT_EQ(back.version, 42u);
  EXPECT_EQ(back.bucket, 7u);
  EXPECT_EQ(back.payload_bytes, h.payload_bytes);
  EXPECT_EQ(back.manifest_bytes, h.manifest_bytes);
  EXPECT_EQ(back.pieces, 4u);
  EXPECT_EQ(back.checksum, h.checksum);
  std::vector<PieceEntry> pieces;
  ASSERT_TRUE(DecodeManifest(Bytes(manifest), manifest.size(), 4, h.payload_bytes, &pieces).ok());
  EXPECT_EQ(pieces, Pieces());
}

TEST(BucketManifestTest, AHeaderOfAnotherVersionOrBucketOrTooLargeIsRefusedByName) {
  BucketHeader h;
  h.version = 3;
  h.bucket = 1;
  h.payload_bytes = 100;
  h.manifest_bytes = 10;
  EXPECT_TRUE(CheckHeader(h, 3, 1, 10, 100).ok());
  const Status v = CheckHeader(h, 4, 1, 10, 100);
  EXPECT_NE(v.message().find("version 3, not the version 4"), std::string::npos) << v.ToString();
  const Status b = CheckHeader(h, 3, 2, 10, 100);
  EXPECT_NE(b.message().find("where bucket 2 was due"), std::string::npos) << b.ToString();
  EXPECT_FALSE(CheckHeader(h, 3, 1, 9, 100).ok());
  EXPECT_FALSE(CheckHeader(h, 3, 1, 10, 99).ok());
}

TEST(BucketManifestTest, WhatIsNotABucketIsRefused) {
  std::string header = EncodeHeader(BucketHeader{});
  BucketHeader out;
  EXPECT_FALSE(DecodeHeader(Bytes(header), kHeaderBytes - 1, &out).ok()) << "short";
  std::string zeros(kHeaderBytes, '\0');
  EXPECT_FALSE(DecodeHeader(Bytes(zeros), zeros.size(), &out).ok()) << "no magic";
  header[4] = 9;  // the format
  const Status f = DecodeHeader(Bytes(header), header.size(), &out);
  EXPECT_NE(f.message().find("format 9"), std::string::npos) << f.ToString();
}

// Every prefix of a manifest, and every byte of it changed in turn, parses
// to an error or to pieces inside their bucket: never a read past its end
// (ASan, in the stress and fuzz builds, would say), never pieces outside.
TEST(BucketManifestTest, CutOrDamagedManifestsAreErrorsNeverPiecesOutside) {
  const std::string manifest = EncodeManifest(Pieces());
  const uint64_t payload = 1573896;
  std::vector<PieceEntry> pieces;
  for (size_t n = 0; n < manifest.size(); ++n) {
    const std::string cut = manifest.substr(0, n);
    EXPECT_FALSE(DecodeManifest(Bytes(cut), cut.size(), 4, payload, &pieces).ok()) << n;
    EXPECT_TRUE(pieces.empty());
  }
  EXPECT_FALSE(DecodeManifest(Bytes(manifest), manifest.size(), 3, payload, &pieces).ok()) << "bytes left over";
  EXPECT_FALSE(DecodeManifest(Bytes(manifest), manifest.size(), 5, payload, &pieces).ok()) << "a piece missing";
  EXPECT_FALSE(DecodeManifest(Bytes(manifest), manifest.size(), 4, payload - 1, &pieces).ok()) << "past the payload";
  for (size_t i = 0; i < manifest.size(); ++i) {
    std::string bad = manifest;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    if (DecodeManifest(Bytes(bad), bad.size(), 4, payload, &pieces).ok()) {
      for (const PieceEntry& p : pieces) {
        EXPECT_LE(p.bucket_offset + p.length, payload) << "byte " << i;
        EXPECT_LE(p.tensor_offset + p.length, p.tensor_bytes) << "byte " << i;
        EXPECT_LE(p.shape.size(), kMaxDims);
      }
    }
  }
}

TEST(BucketManifestTest, TheChecksumCoversTheManifestAndEveryPayloadByte) {
  const std::string manifest = EncodeManifest(Pieces());
  std::vector<uint8_t> payload(1 << 16);
  std::iota(payload.begin(), payload.end(), 0);
  const uint64_t sum = BucketChecksum(manifest.data(), manifest.size(), payload.data(), payload.size());
  EXPECT_EQ(sum, BucketChecksum(manifest.data(), manifest.size(), payload.data(), payload.size()));
  payload[12345] ^= 1;
  EXPECT_NE(sum, BucketChecksum(manifest.data(), manifest.size(), payload.data(), payload.size()));
  payload[12345] ^= 1;
  std::string other = manifest;
  other[3] ^= 1;
  EXPECT_NE(sum, BucketChecksum(other.data(), other.size(), payload.data(), payload.size()));
}

}  // namespace
}  // namespace kvfabric::weights
