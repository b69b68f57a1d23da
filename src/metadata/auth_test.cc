#include "metadata/auth.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvfabric::metadata::auth
