// Transfer targets for the integration tests: a separate process
// (kvfabric-test-peer), a second engine in this process, or the initiator's
// own segment. Each answers questions about its OWN memory.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "kvfabric/engine.h"

namespace kvfabric::test {

class Target {
 public:
  virtual ~Target() = default;
  std::string name;    // segment name to open
  uint64_t addr = 0;   // the registered buffer in the target's address space
  size_t size = 0;
  // Index of the first byte of [off, off+len) that differs from pattern
  // `seed` (positions counted from the buffer start), or len.
  virtual size_t Check(size_t off, size_t len, uint32_t seed) = 0;
  virtual void Fill(size_t off, size_t len, uint32_t seed) = 0;
  virtual bool Kill() { return false; }    // only a process can be killed
  virtual bool Freeze() { return false; }  // SIGSTOP: it serves nothing until killed or thawed
  virtual bool Thaw() { return false; }    // SIGCONT: it serves again
  // Unregisters the buffer in the target's engine (the memory stays, unreachable).
  virtual bool Unregister() = 0;
  // The target engine's notices (GatherNotices, tests/support/notices.h):
  // up to `count` within `wait_ms`, each with whether the `chunk` bytes of
  // its WRITE held pattern `seed` when it came.
  virtual std::string Notices(int wait_ms, size_t count, size_t chunk, uint32_t seed) = 0;
};

// Starts kvfabric-test-peer; `settings` are "name=value" words passed on.
std::unique_ptr<Target> StartProcessTarget(const std::string& protocol, size_t size,
                                           const std::string& settings, std::string* error);
// A second engine in this process (`engine` null) or the initiator's own
// segment (`engine` given: the buffer is registered there).
std::unique_ptr<Target> StartLocalTarget(const std::string& protocol, size_t size, Engine* engine,
                                         std::string* error);

}  // namespace kvfabric::test
