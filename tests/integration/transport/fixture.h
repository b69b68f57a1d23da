// The transport tests' cases and their shared fixture. Every test body runs
// once per case: over each fabric provider this host has, against a separate
// process (kvfabric-test-peer), plus variants (a second engine in this
// process, auto, posted directly, etcd and http metadata stores, the engine's
// own segment; the etcd and http variants in the segment suite alone, where
// finding the target's segment is what they change). Bytes are checked in
// the target's own memory, not just read back. One suite per file, by role:
//   data_test.cc     TransportDataTest     rails and bytes moved
//   batch_test.cc    TransportBatchTest    batches, their status, refusals
//   segment_test.cc  TransportSegmentTest  segments, registration, handshake
//   failure_test.cc  PeerFailureTest       the target dies, stops or restarts
//   lifecycle_test.cc EngineLifecycleTest  Close while threads call, fork()
//   metrics_test.cc  MetricsTest           the metrics endpoint against what moved
//   movement_test.cc FabricMovementTest    the store's fabric way of moving pages
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "tests/support/targets.h"

namespace kvfabric::test {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

// Where the target of a case lives.
enum class Where { kProcess, kInProcess, kSelf };

struct TransportCase {
  std::string name;      // the last part of the test name: "tcp", "tcp_etcd"
  std::string protocol;  // EngineConfig::protocol of initiator and target
  Where where = Where::kProcess;
  std::string settings{};  // "NAME=value ..." for initiator and target alike
  std::string metadata{};  // "" (p2p), "etcd" or "http": a real server the tests start
  // Set when libfabric has the provider here but could not list it (an error
  // other than "no such provider or device"): the case fails with it.
  std::string probe_error{};
};

// What gtest prints for GetParam(): "tcp_etcd (protocol tcp, separate
// process, metadata etcd)" instead of the struct's bytes.
void PrintTo(const TransportCase& c, std::ostream* os);
// The instantiations' name generator: the case's name.
std::string CaseName(const ::testing::TestParamInfo<TransportCase>& info);

// The fabric providers of this host, one case each with the target in a
// separate process: tcp and shm always; efa and verbs when libfabric finds
// the provider with a device here. Probed once per process (at test
// registration, after main starts), so `--gtest_list_tests` (ctest's
// discovery) and each later run of one case agree on one host.
const std::vector<TransportCase>& ProviderCases();
// ProviderCases() followed by the variants: tcp_in_process, shm_in_process,
// auto, tcp_posted_directly, tcp_etcd, tcp_http, own_segment.
std::vector<TransportCase> TransportCases();
// TransportCases() without the metadata-store variants (tcp_etcd, tcp_http):
// where the target's segment is found matters to the segment suite, which
// runs them; once connected, bytes and batches take the same path as "tcp".
std::vector<TransportCase> DataPathCases();
// Cases whose target can be killed, stopped and restarted: ProviderCases().
std::vector<TransportCase> PeerFailureCases();

// The shared fixture: an initiator engine with a registered local buffer of
// kLocalSize and a target of GetParam()'s kind. Each suite derives from it.
class TransportFixture : public ::testing::TestWithParam<TransportCase> {
 protected:
  static constexpr size_t kLocalSize = 136 * MiB;

  void SetUp() override;
  void TearDown() override;

  // Creates the initiator (with cfg_) and a target with a buffer of `size`.
  void Start(size_t target_size = 16 * MiB, const std::string& peer_settings = "");

  uint8_t* local(size_t off = 0) { return static_cast<uint8_t*>(local_) + off; }
  TransferRequest Req(OpCode op, size_t local_off, size_t remote_off, size_t len) {
    return {op, local(local_off), seg_, target_->addr + remote_off, len};
  }
  // Writes pattern `seed` (as positioned at the target) from local_off to remote_off.
  Status WritePattern(size_t local_off, size_t remote_off, size_t len, uint32_t seed);
  // Allocates a batch of exactly `reqs` and submits them.
  void SubmitBatch(const std::vector<TransferRequest>& reqs, BatchId* b);
  // Peers in the address vector of the engine's fullest rail (a peer takes
  // a slot on each rail that reaches it: one for tcp, one per device for efa),
  // once it equals `want` (stale slots leave when their operations are
  // done), or after 10 s.
  size_t WaitForPeerSlots(size_t want);

  EngineConfig cfg_;
  std::unique_ptr<Engine> engine_;
  void* local_ = nullptr;
  std::unique_ptr<Target> target_;
  SegmentHandle seg_ = -1;
};

}  // namespace kvfabric::test
