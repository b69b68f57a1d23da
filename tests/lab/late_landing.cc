// kvfabric-lab-late-landing: the two ends of tests/lab/lab_test.py's check
// that no operation of a stalled rail lands after its request completed
// elsewhere. Run in the lab's hosts (lab.sh exec A|B ...):
//
//   kvfabric-lab-late-landing target NICS HOST:PORT
//       registers 64 MiB filled with a pattern, prints "segment NAME", and
//       serves until its standard input closes.
//   kvfabric-lab-late-landing initiator NICS HOST:PORT SEGMENT
//       READs the target's 64 MiB again and again (16 requests of 4 MiB,
//       checking every byte) until a rail has stalled. It then fills its
//       buffer with 0xEE at once, as a caller reuses a buffer whose request
//       completed, prints "reused", waits for a line on its standard input
//       (the test brings the link back up), waits LINGER_S more seconds (8)
//       for anything still in flight to arrive, and prints
//       "late N wrong M": N bytes that are no longer 0xEE (READs of the
//       stalled rail that landed after all), M bytes that the READs got
//       wrong before. Exits 0 when it got that far, 1 otherwise.
//   kvfabric-lab-late-landing closes-connections
//       prints "yes" when its engine's tcp rails close a connection before
//       operations move off a stalled rail (KVF_CLOSE_CONNECTIONS and the
//       loaded libfabric), else "no".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fabric/fabric_info.h"
#include "kvfabric/diagnostics.h"
#include "kvfabric/engine.h"
#include "kvfabric/stats.h"

namespace {

using kvfabric::Engine;
using kvfabric::EngineConfig;
using kvfabric::Status;

constexpr size_t kSize = 64u << 20;
constexpr size_t kRequest = 4u << 20;

uint8_t PatternAt(size_t i) { return static_cast<uint8_t>((i * 131 + (i >> 12)) % 251 + 1); }

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

std::unique_ptr<Engine> Make(const std::string& nics, const std::string& address, Status* s) {
  EngineConfig c;
  c.protocol = "tcp";
  c.nic_filter = nics;
  c.local_server_name = address;
  std::unique_ptr<Engine> e;
  *s = Engine::Create(c, &e);
  return e;
}

int Target(const std::string& nics, const std::string& address) {
  Status s;
  auto engine = Make(nics, address, &s);
  if (!s.ok()) return Fail("starting the target's engine", s);
  std::vector<uint8_t> buf(kSize);
  for (size_t i = 0; i < kSize; ++i) buf[i] = PatternAt(i);
  s = engine->RegisterMemory(buf.data(), kSize);
  if (!s.ok()) return Fail("registering the target's buffer", s);
  std::printf("segment %s\n", engine->name().c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

uint64_t Stalls(Engine* e) {
  kvfabric::EngineStats st;
  if (!e->Stats(&st).ok()) return 0;
  uint64_t n = 0;
  for (const auto& r : st.rails) n += r.stalls;
  return n;
}

int Initiator(const std::string& nics, const std::string& address, const std::string& segment) {
  Status s;
  auto engine = Make(nics, address, &s);
  if (!s.ok()) return Fail("starting the initiator's engine", s);
  std::vector<uint8_t> buf(kSize);
  s = engine->RegisterMemory(buf.data(), kSize);
  if (!s.ok()) return Fail("registering the initiator's buffer", s);
  kvfabric::SegmentHandle h;
  s = engine->OpenSegment(segment, &h);
  if (!s.ok()) return Fail("opening the target's segment", s);
  std::vector<kvfabric::RemoteBuffer> theirs;
  s = engine->GetSegmentBuffers(h, &theirs);
  if (!s.ok() || theirs.size() != 1 || theirs[0].length != kSize)
    return Fail("finding the target's buffer", s.ok() ? Status::InvalidArgument("not one buffer of 64 MiB") : s);
  const uint64_t remote = theirs[0].addr;
  std::vector<kvfabric::TransferRequest> reads;
  for (size_t off = 0; off < kSize; off += kRequest)
    reads.push_back({kvfabric::OpCode::kRead, buf.data() + off, h, remote + off, kRequest});
  size_t wrong = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int round = 0;; ++round) {
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "no rail stalled within 60 s\n");
      return 1;
    }
    std::memset(buf.data(), 0, kSize);
    s = engine->Transfer(reads);
    if (!s.ok()) return Fail("READ round " + std::to_string(round), s);
    for (size_t i = 0; i < kSize; ++i) wrong += buf[i] != PatternAt(i);
    if (Stalls(engine.get()) > 0) break;
  }
  // The READ that the stall moved has completed: its caller reuses the buffer.
  std::memset(buf.data(), 0xEE, kSize);
  std::printf("reused\n");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  const char* linger = std::getenv("LINGER_S");
  std::this_thread::sleep_for(std::chrono::seconds(linger != nullptr ? std::atoi(linger) : 8));
  size_t late = 0;
  for (size_t i = 0; i < kSize; ++i) late += buf[i] != 0xEE;
  std::printf("late %zu wrong %zu\n", late, wrong);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "target" && argc == 4) return Target(argv[2], argv[3]);
  if (mode == "closes-connections" && argc == 2) {
    kvfabric::Settings s;
    const bool env = s.ApplyEnvironment().ok();
    const std::string v = kvfabric::GetLibfabricVersions().library;  // "1.17.0"
    const int major = std::atoi(v.c_str()), minor = std::atoi(v.c_str() + v.find('.') + 1);
    const bool yes = env && kvfabric::fabric::MayCloseStalledConnections(s.close_connections, FI_VERSION(major, minor));
    std::printf("%s\n", yes ? "yes" : "no");
    return 0;
  }
  if (mode == "initiator" && argc == 5) return Initiator(argv[2], argv[3], argv[4]);
  std::fprintf(stderr,
               "usage: %s target NICS HOST:PORT | initiator NICS HOST:PORT SEGMENT | closes-connections\n"
               "(tests/lab/late_landing.cc says what each does)\n",
               argv[0]);
  return 2;
}
