// Movement: one way of moving some groups of a flight's requests (the
// pages of one home, most often), behind one interface: started when it is
// made, then asked whether a group or a request has landed, waited for,
// and finished. BatchRunner chooses the way per group, by the memory its
// requests reach: a fabric batch (FabricMovement) or copies to and from a
// pool this process maps (CopyMovement); its callers never ask which.
#pragma once

#include <cstddef>
#include <vector>

#include "kvfabric/status.h"
#include "net/socket.h"

namespace kvfabric::store {

class Movement {
 public:
  virtual ~Movement() = default;
  // Whether request t (0-based, in the order given) of group g has ended,
  // without waiting; when so, *failure is its failure (OK if none).
  virtual bool RequestEnded(size_t g, size_t t, Status* failure) const = 0;
  // Whether every request of group g has ended, without waiting; when so,
  // *failure is the first failure among them (OK if none).
  virtual bool GroupEnded(size_t g, Status* failure) const = 0;
  // Waits until every request has ended, or `until`: true when every one
  // has ended well (false: some are still out, or failed).
  virtual bool WaitUntil(net::Deadline until) = 0;
  // Ends the movement: by `deadline` (what a fabric has not done by then
  // fails with Timeout and writes nothing more, where the provider allows;
  // copies always end, since they write memory the caller is about to
  // use), and sets (*outcomes)[g] of each of its groups that failed.
  virtual void Finish(net::Deadline deadline, std::vector<Status>* outcomes) = 0;
  // Whether group g lands on another thread while the caller goes on, so
  // that the caller may take each of its pages as it lands.
  virtual bool LandsMeanwhile(size_t g) const = 0;
};

}  // namespace kvfabric::store
