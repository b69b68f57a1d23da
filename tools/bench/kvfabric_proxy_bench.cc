// kvfabric-proxy-bench: WRITEs issued through the proxy queue
// (kvfabric/proxy.h) beside the same WRITEs submitted to the engine
// directly, by producer threads x block size, between two engines of this
// process over one provider. Modes, each for --duration seconds:
//   quiet_each    PutNbi, then Quiet, per WRITE
//   nbi           PutNbi without waiting (the ring bounds what is in
//                 flight), one Quiet at the end
//   direct_each   Engine::Transfer per WRITE (the blocking equivalent of quiet_each)
//   direct_batch  engine batches of --window WRITEs, each waited for
//                 (the engine's own way of keeping many in flight)
// Each producer writes its own stretch of the buffer, over and over.
// Prints one line per point (and --json objects): WRITEs per second, GB/s
// and the process's CPU time per WRITE.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/proxy.h"
#include "tools/common/flag_names.h"
#include "tools/common/cpu_time.h"

using namespace kvfabric;
using Clock = std::chrono::steady_clock;

namespace {

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvfabric-proxy-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

struct Setup {
  std::unique_ptr<Engine> initiator, target;
  std::vector<uint8_t> src, dst;
  SegmentHandle seg = -1;
  size_t stretch = 0;  // bytes per producer
};

struct Point {
  std::string mode;
  size_t producers = 0, block = 0;
};

// One producer's loop for `mode` until `until`; returns the WRITEs it ended.
uint64_t Produce(Setup& st, proxy::ProxyQueue* q, const Point& pt, size_t window, uint64_t p, Clock::time_point until,
                 Status* error) {
  uint8_t* base = st.src.data() + p * st.stretch;
  const uint64_t remote = reinterpret_cast<uint64_t>(st.dst.data()) + p * st.stretch;
  const size_t slots = st.stretch / pt.block;
  uint64_t n = 0;
  auto at = [&](uint64_t i) { return (i % slots) * pt.block; };
  if (pt.mode == "direct_batch") {
    std::vector<TransferRequest> reqs(window);
    while (Clock::now() < until && error->ok()) {
      for (size_t i = 0; i < window; ++i)
        reqs[i] = {OpCode::kWrite, base + at(n + i), st.seg, remote + at(n + i), pt.block};
      *error = st.initiator->Transfer(reqs);
      n += window;
    }
    return n;
  }
  for (; Clock::now() < until && error->ok(); ++n) {
    if (pt.mode == "direct_each") {
      *error = st.initiator->Transfer({{OpCode::kWrite, base + at(n), st.seg, remote + at(n), pt.block}});
      continue;
    }
    *error = q->PutNbi(p, base + at(n), st.seg, remote + at(n), pt.block);
    if (error->ok() && pt.mode == "quiet_each") *error = q->Quiet(p, 30000);
  }
  if (error->ok() && pt.mode == "nbi") *error = q->Quiet(p, 30000);
  return n;
}

int RunPoint(Setup& st, const Point& pt, double duration, size_t capacity, size_t window, bool json) {
  std::unique_ptr<proxy::ProxyQueue> q;
  if (pt.mode != "direct_each" && pt.mode != "direct_batch") {
    proxy::ProxyOptions o;
    o.capacity = capacity;
    o.producers = pt.producers;
    const Status s = proxy::ProxyQueue::Create(st.initiator.get(), o, &q);
    if (!s.ok()) return Fail("proxy queue", s);
  }
  std::vector<uint64_t> done(pt.producers, 0);
  std::vector<Status> errors(pt.producers);
  const double cpu0 = tools::CpuSeconds();
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
  std::vector<std::thread> threads;
  for (uint64_t p = 0; p < pt.producers; ++p)
    threads.emplace_back([&, p] { done[p] = Produce(st, q.get(), pt, window, p, until, &errors[p]); });
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = tools::CpuSeconds() - cpu0;
  for (const Status& e : errors)
    if (!e.ok()) return Fail(pt.mode, e);
  uint64_t ops = 0;
  for (uint64_t d : done) ops += d;
  const double gbps = static_cast<double>(ops) * pt.block / secs / 1e9;
  if (json)
    std::printf("%s\n", nlohmann::json({{"tool", "kvfabric-proxy-bench"}, {"mode", pt.mode},
                                         {"producers", pt.producers}, {"block_size", pt.block},
                                         {"duration_s", secs}, {"writes", ops}, {"writes_per_s", ops / secs},
                                         {"gb_per_s", gbps}, {"cpu_us_per_write", ops ? 1e6 * cpu / ops : 0}})
                            .dump()
                            .c_str());
  std::printf("kvfabric-proxy-bench %-12s producers %2zu, block %8zu: %10.0f WRITEs/s %7.2f GB/s, CPU %6.2f us/WRITE\n",
              pt.mode.c_str(), pt.producers, pt.block, ops / secs, gbps, ops ? 1e6 * cpu / ops : 0.0);
  std::fflush(stdout);
  return 0;
}

Status Prepare(const std::string& protocol, size_t bytes, Setup* st) {
  for (auto* e : {&st->initiator, &st->target}) {
    EngineConfig cfg;
    cfg.protocol = protocol;
    cfg.settings.log_level = "warn";  // KVF_LOG_LEVEL still applies
    KVF_RETURN_IF_ERROR(Engine::Create(cfg, e));
  }
  st->src.assign(bytes, 1);
  st->dst.assign(bytes, 0);
  KVF_RETURN_IF_ERROR(st->initiator->RegisterMemory(st->src.data(), bytes));
  KVF_RETURN_IF_ERROR(st->target->RegisterMemory(st->dst.data(), bytes));
  KVF_RETURN_IF_ERROR(st->initiator->OpenSegment(st->target->name(), &st->seg));
  return st->initiator->Warmup(st->target->name());
}

}  // namespace

int main(int argc, char** argv) {
  std::string protocol = "tcp";
  std::vector<size_t> producers{1, 4}, blocks{4096, 65536, 1 << 20};
  std::vector<std::string> modes{"quiet_each", "nbi", "direct_each", "direct_batch"};
  double duration = 2;
  size_t capacity = 1024, window = 64, buffer = 256 << 20;
  bool json = false;
  CLI::App app{"kvfabric-proxy-bench: WRITEs through the proxy queue beside the engine's own submission"};
  app.add_option("--protocol", protocol, "tcp, shm, efa or verbs");
  app.add_option("--producers", producers, "producer threads (a comma-separated list sweeps)")->delimiter(',');
  app.add_option("--block_size", blocks, "bytes per WRITE (a list sweeps)")->delimiter(',');
  app.add_option("--modes", modes, "quiet_each, nbi, direct_each, direct_batch")
      ->delimiter(',')
      ->check(CLI::IsMember({"quiet_each", "nbi", "direct_each", "direct_batch"}));
  app.add_option("--duration", duration, "seconds per point");
  app.add_option("--capacity", capacity, "commands in the proxy's ring");
  app.add_option("--window", window, "WRITEs per engine batch in direct_batch");
  app.add_option("--buffer_size", buffer, "registered bytes on each side");
  app.add_flag("--json", json, "also print a JSON object per point");
  tools::UseCurrentFlagNames(argc, argv, "kvfabric-proxy-bench");
  CLI11_PARSE(app, argc, argv);
  Setup st;
  Status s = Prepare(protocol, buffer, &st);
  if (!s.ok()) return Fail("setup", s);
  for (size_t p : producers)
    for (size_t b : blocks) {
      st.stretch = buffer / p / b * b;
      if (st.stretch < b * window) return Fail("--buffer_size", Status::InvalidArgument("too small for the sweep"));
      for (const std::string& m : modes)
        if (int rc = RunPoint(st, {m, p, b}, duration, capacity, window, json)) return rc;
    }
  return 0;
}
