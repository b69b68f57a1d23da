#include "tests/integration/transport/fixture.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "tests/support/providers.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {

void PrintTo(const TransportCase& c, std::ostream* os) {
  *os << c.name << " (protocol " << c.protocol << ", ";
  switch (c.where) {
    case Where::kProcess: *os << "separate process"; break;
    case Where::kInProcess: *os << "second engine in this process"; break;
    case Where::kSelf: *os << "the engine's own segment"; break;
  }
  if (!c.settings.empty()) *os << ", " << c.settings;
  if (!c.metadata.empty()) *os << ", metadata " << c.metadata;
  if (!c.probe_error.empty()) *os << ", probe failed: " << c.probe_error;
  *os << ")";
}

std::string CaseName(const ::testing::TestParamInfo<TransportCase>& info) { return info.param.name; }

namespace {

std::vector<TransportCase> FindProviderCases() {
  std::vector<TransportCase> cases;
  for (const FoundProvider& p : FabricProviders())
    cases.push_back({p.protocol, p.protocol, Where::kProcess, "", "", p.probe_error});
  return cases;
}

}  // namespace

const std::vector<TransportCase>& ProviderCases() {
  static const std::vector<TransportCase> cases = FindProviderCases();
  return cases;
}

std::vector<TransportCase> TransportCases() {
  std::vector<TransportCase> cases = ProviderCases();
  const std::vector<TransportCase> variants = {
      {"tcp_in_process", "tcp", Where::kInProcess},
      {"shm_in_process", "shm", Where::kInProcess},
      {"auto", "auto", Where::kProcess},
      {"tcp_posted_directly", "tcp", Where::kProcess, "KVF_POST_MODE=direct"},
      {"tcp_etcd", "tcp", Where::kProcess, "", "etcd"},
      {"tcp_http", "tcp", Where::kProcess, "", "http"},
      {"own_segment", "tcp", Where::kSelf},
  };
  cases.insert(cases.end(), variants.begin(), variants.end());
  return cases;
}

std::vector<TransportCase> DataPathCases() {
  std::vector<TransportCase> cases = TransportCases();
  std::erase_if(cases, [](const TransportCase& c) { return !c.metadata.empty(); });
  return cases;
}

std::vector<TransportCase> PeerFailureCases() { return ProviderCases(); }

void TransportFixture::SetUp() {
  const TransportCase& c = GetParam();
  // Present here but not listable: a failure to see, not a case to drop.
  ASSERT_EQ(c.probe_error, "") << "libfabric has the " << c.protocol << " provider but could not list it";
  cfg_.protocol = c.protocol;
  cfg_.apply_environment = false;
  cfg_.settings.log_level = "error";
  cfg_.settings.transfer_timeout_ms = 20000;
  std::istringstream words(c.settings);
  for (std::string kv; words >> kv;) ASSERT_TRUE(cfg_.settings.Assign(kv).ok()) << kv;
  if (!c.metadata.empty()) {
    std::string why;
    cfg_.metadata = SharedMetadataUri(c.metadata, &why);
    if (cfg_.metadata.empty()) GTEST_SKIP() << why;
  }
}

void TransportFixture::TearDown() {
  target_.reset();
  if (engine_ && local_ && !engine_->closed()) {
    EXPECT_TRUE(engine_->UnregisterMemory(local_).ok());
  }
  engine_.reset();
  std::free(local_);
}

void TransportFixture::Start(size_t target_size, const std::string& peer_settings) {
  Status created = Engine::Create(cfg_, &engine_);
  ASSERT_TRUE(created.ok()) << created.ToString();
  ASSERT_EQ(posix_memalign(&local_, 4096, kLocalSize), 0);
  ASSERT_TRUE(engine_->RegisterMemory(local_, kLocalSize).ok());
  std::string err;
  const TransportCase& c = GetParam();
  switch (c.where) {
    case Where::kProcess:
      target_ = StartProcessTarget(
          c.protocol, target_size,
          peer_settings + " " + c.settings + (cfg_.metadata == "p2p" ? "" : " metadata=" + cfg_.metadata), &err);
      break;
    case Where::kInProcess:
      target_ = StartLocalTarget(c.protocol, target_size, nullptr, &err);
      break;
    case Where::kSelf:
      target_ = StartLocalTarget(c.protocol, target_size, engine_.get(), &err);
      break;
  }
  ASSERT_NE(target_, nullptr) << err;
  Status s = engine_->OpenSegment(target_->name, &seg_);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

Status TransportFixture::WritePattern(size_t local_off, size_t remote_off, size_t len, uint32_t seed) {
  tools::FillPattern(local(local_off), len, remote_off, seed);
  return engine_->Transfer({Req(OpCode::kWrite, local_off, remote_off, len)});
}

void TransportFixture::SubmitBatch(const std::vector<TransferRequest>& reqs, BatchId* b) {
  ASSERT_TRUE(engine_->AllocateBatch(reqs.size(), b).ok());
  Status s = engine_->Submit(*b, reqs);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

size_t TransportFixture::WaitForPeerSlots(size_t want) {
  size_t n = 0;
  for (int i = 0; i < 200; ++i) {
    n = 0;
    for (const RailInfo& r : engine_->rails()) n = std::max(n, r.peer_slots);
    if (n == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return n;
}

}  // namespace kvfabric::test
