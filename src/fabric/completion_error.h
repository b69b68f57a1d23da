// What a failed completion says: the path to the operation's peer is gone
// (the peer died, reset its connection, or cannot be reached), or the
// operation itself failed. The two are different statuses because callers
// act on them differently: a lost peer is a NetworkError, like a peer that
// could not be reached in the first place, and its operation has ended (the
// provider gave it back); anything else is a FabricError.
//
// Measured: a tcp peer killed with READs and WRITEs posted to it fails them
// at once with FI_ECANCELED ("Transport endpoint is not connected"): the
// provider flushes a closed connection's operations. As a FabricError, a
// store GET that met it was Mooncake's TRANSFER_FAIL (-800) through the
// compat layer, on which vLLM stops the worker; as a NetworkError it is
// RPC_FAIL (-900), a failure vLLM expects.
#pragma once

#include <string>

#include "kvfabric/status.h"

namespace kvfabric::fabric {

// The status code of a completion that failed with libfabric error `err`
// (positive, as in fi_cq_err_entry::err) and provider error `prov_errno`,
// on a rail of `provider`:
//  - kNetworkError for the errors of a lost path: FI_ECANCELED (flushed
//    with its connection or endpoint; kvfabric cancels nothing itself),
//    FI_ENOTCONN, FI_ECONNRESET, FI_ECONNABORTED, FI_ECONNREFUSED,
//    FI_ESHUTDOWN, FI_ETIMEDOUT, FI_EHOSTDOWN, FI_EHOSTUNREACH,
//    FI_ENETDOWN, FI_ENETUNREACH; and on efa, FI_EIO with the device's
//    "unresponsive remote" (13) or "unreachable remote" (15), how libfabric
//    before 1.19 reports a peer that stopped answering;
//  - kFabricError for every other error (a bad key or address, a length,
//    the remote's I/O error, the provider's own failure).
Status::Code CompletionErrorCode(const std::string& provider, int err, int prov_errno);

}  // namespace kvfabric::fabric
