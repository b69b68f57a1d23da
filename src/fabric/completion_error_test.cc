#include "fabric/completion_error.h"

#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

namespace kvfabric::fabric {
namespace {

TEST(CompletionErrorTest, ALostPathIsANetworkError) {
  for (int err : {FI_ECANCELED, FI_ENOTCONN, FI_ECONNRESET, FI_ECONNABORTED, FI_ECONNREFUSED, FI_ESHUTDOWN,
                  FI_ETIMEDOUT, FI_EHOSTDOWN, FI_EHOSTUNREACH, FI_ENETDOWN, FI_ENETUNREACH})
    for (const char* provider : {"tcp;ofi_rxm", "shm", "efa", "verbs;ofi_rxm"})
      EXPECT_EQ(CompletionErrorCode(provider, err, 0), Status::Code::kNetworkError) << provider << " " << err;
}

TEST(CompletionErrorTest, EfasUnansweringPeerIsANetworkErrorOnlyOnEfa) {
  EXPECT_EQ(CompletionErrorCode("efa", FI_EIO, 13), Status::Code::kNetworkError);
  EXPECT_EQ(CompletionErrorCode("efa", FI_EIO, 15), Status::Code::kNetworkError);
  EXPECT_EQ(CompletionErrorCode("efa-direct", FI_EIO, 13), Status::Code::kNetworkError);
  EXPECT_EQ(CompletionErrorCode("efa", FI_EIO, 5), Status::Code::kFabricError) << "a bad key is the operation's";
  EXPECT_EQ(CompletionErrorCode("tcp;ofi_rxm", FI_EIO, 13), Status::Code::kFabricError)
      << "13 is efa's number, not tcp's";
}

TEST(CompletionErrorTest, EverythingElseIsAFabricError) {
  for (int err : {int{FI_EIO}, int{FI_EINVAL}, int{FI_EACCES}, int{FI_EMSGSIZE}, int{FI_EREMOTEIO}, int{FI_ENOMEM},
                  int{FI_EOTHER}, int{FI_ETRUNC}})
    EXPECT_EQ(CompletionErrorCode("tcp;ofi_rxm", err, 0), Status::Code::kFabricError) << err;
}

}  // namespace
}  // namespace kvfabric::fabric
