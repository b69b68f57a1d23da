#include "fabric/completion_error.h"

#include <rdma/fi_errno.h>

namespace kvfabric::fabric {

namespace {

// The efa device's completion statuses for a peer that stopped answering.
constexpr int kEfaUnresponsiveRemote = 13;
constexpr int kEfaUnreachableRemote = 15;

}  // namespace

Status::Code CompletionErrorCode(const std::string& provider, int err, int prov_errno) {
  switch (err) {
    case FI_ECANCELED:
    case FI_ENOTCONN:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ECONNREFUSED:
    case FI_ESHUTDOWN:
    case FI_ETIMEDOUT:
    case FI_EHOSTDOWN:
    case FI_EHOSTUNREACH:
    case FI_ENETDOWN:
    case FI_ENETUNREACH:
      return Status::Code::kNetworkError;
    case FI_EIO:
      if (provider.rfind("efa", 0) == 0 &&
          (prov_errno == kEfaUnresponsiveRemote || prov_errno == kEfaUnreachableRemote))
        return Status::Code::kNetworkError;
      return Status::Code::kFabricError;
    default:
      return Status::Code::kFabricError;
  }
}

}  // namespace kvfabric::fabric
