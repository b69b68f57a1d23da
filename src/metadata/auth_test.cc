#include "metadata/auth.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/crypto.h"
#include "common/hex.h"

namespace kvfabric::metadata::auth {
namespace {

TEST(AuthTest, NoncesAreFreshAndSized) {
  EXPECT_NE(NewNonce(), NewNonce());
  EXPECT_EQ(NewNonce().size(), kNonceSize);
}

TEST(AuthTest, KeysAndProofsAreSeparatedByPurposeAndDirection) {
  const std::string t = "token";
  EXPECT_NE(DeriveKey(t, Purpose::kHandshake), DeriveKey(t, Purpose::kDescriptor));
  EXPECT_NE(DeriveKey(t, Purpose::kKeySeal), DeriveKey(t, Purpose::kStoreWrite));
  EXPECT_NE(DeriveKey(t, Purpose::kHandshake), DeriveKey("other", Purpose::kHandshake));
  const std::string a = NewNonce(), b = NewNonce();
  EXPECT_NE(ServerProof(t, a, b), ClientProof(t, a, b));  // no reflection
  EXPECT_NE(ServerProof(t, a, b), ServerProof(t, b, a));  // nonces are ordered
  EXPECT_EQ(ClientProof(t, a, b), ClientProof(t, a, b));
  EXPECT_NE(ClientProof(t, a, b), ClientProof("tokem", a, b));
}

// The MAC is the documented HMAC over the documented message, so a writer in
// another language can produce it from the contract alone.
TEST(AuthTest, StoreWriteMacIsTheDocumentedHmac) {
  const std::string key = DeriveKey("tok", Purpose::kStoreWrite);
  const std::string msg = std::string("PUT\n/metadata\nkvfabric/segments/a:1\n1700000000\n") + crypto::Sha256("{}");
  EXPECT_EQ(StoreWriteMac("tok", "PUT", "/metadata", "kvfabric/segments/a:1", "1700000000", "{}"),
            crypto::HmacSha256(key, msg));
  EXPECT_EQ(StoreWriteHeader("tok", "PUT", "/metadata", "kvfabric/segments/a:1", 1700000000, "{}"),
            "t=1700000000,mac=" + hex::Encode(crypto::HmacSha256(key, msg)));
}

TEST(AuthTest, StoreWriteMacBindsEveryField) {
  const std::string base = StoreWriteMac("tok", "PUT", "/m", "k", "100", "body");
  EXPECT_EQ(base.size(), crypto::kMacSize);
  EXPECT_NE(base, StoreWriteMac("tom", "PUT", "/m", "k", "100", "body"));
  EXPECT_NE(base, StoreWriteMac("tok", "DELETE", "/m", "k", "100", "body"));
  EXPECT_NE(base, StoreWriteMac("tok", "PUT", "/n", "k", "100", "body"));
  EXPECT_NE(base, StoreWriteMac("tok", "PUT", "/m", "j", "100", "body"));
  EXPECT_NE(base, StoreWriteMac("tok", "PUT", "/m", "k", "101", "body"));
  EXPECT_NE(base, StoreWriteMac("tok", "PUT", "/m", "k", "100", "bodY"));
  // A ttl is part of the signed method: added, changed or stripped, the MAC differs.
  EXPECT_EQ(SignedMethod("PUT", 0), "PUT");
  EXPECT_EQ(SignedMethod("PUT", 10), "PUT ttl=10");
  const std::string ttl10 = StoreWriteMac("tok", SignedMethod("PUT", 10), "/m", "k", "100", "body");
  EXPECT_NE(base, ttl10);
  EXPECT_NE(ttl10, StoreWriteMac("tok", SignedMethod("PUT", 11), "/m", "k", "100", "body"));
}

TEST(AuthTest, CheckStoreWriteAcceptsOnlyAFreshRightMac) {
  const int64_t now = 1700000000;
  auto header = [&](int64_t t) { return StoreWriteHeader("tok", "PUT", "/m", "k", t, "v"); };
  EXPECT_TRUE(CheckStoreWrite("tok", header(now), "PUT", "/m", "k", "v", now).ok());
  EXPECT_TRUE(CheckStoreWrite("tok", header(now - kStoreWriteMaxSkewS), "PUT", "/m", "k", "v", now).ok());
  EXPECT_TRUE(CheckStoreWrite("tok", header(now + kStoreWriteMaxSkewS), "PUT", "/m", "k", "v", now).ok());

  auto refused = [&](const std::string& h, std::string_view body, const std::string& why) {
    Status s = CheckStoreWrite("tok", h, "PUT", "/m", "k", body, now);
    EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << h;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.ToString();
  };
  refused("", "v", "no X-Kvf-Auth header");
  refused(header(now - kStoreWriteMaxSkewS - 1), "v", "synchronize the clocks");
  refused(header(now + kStoreWriteMaxSkewS + 1), "v", "synchronize the clocks");
  refused(header(now), "w", "wrong MAC");  // another body
  refused(StoreWriteHeader("tom", "PUT", "/m", "k", now, "v"), "v", "wrong MAC");
  const std::string zeros(64, '0');
  for (const std::string& bad : std::vector<std::string>{
           "t=1700000000", "mac=00", "t=,mac=" + zeros, "t=17x,mac=" + zeros, "x=1,mac=" + zeros, "t=-1,mac=" + zeros,
           "t=1700000000,mac=" + zeros.substr(1), "t=1700000000,mac=" + zeros.substr(2),
           "t=1700000000,mac=" + std::string(64, 'g')})
    refused(bad, "v", "malformed");
}

}  // namespace
}  // namespace kvfabric::metadata::auth
