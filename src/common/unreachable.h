// Unreachable: whether a failure says the other side could not be reached.
#pragma once

#include "kvfabric/status.h"

namespace kvfabric {

// The network, a deadline, or the fabric (the other side's engine did not
// serve a transfer): the other side may be gone, as opposed to an answer
// it gave. A store client takes such a member out of its view; a weight
// sync's receiver takes such a parent for dead.
inline bool Unreachable(const Status& failure) {
  const auto code = failure.code();
  return code == Status::Code::kNetworkError || code == Status::Code::kTimeout || code == Status::Code::kFabricError;
}

}  // namespace kvfabric
