// kvfabric-call-cost: what the engine's bookkeeping calls cost per call,
// beside the floor of the call gate every public call passes (an atomic add
// and subtract on one shared counter, timed in the same run). Transfers go
// to the engine's own segment (local copies of 64 bytes), so no network
// time is counted. Best of --reps, in ns per call, for 1 and 2 threads.
// The submit row runs twice: with the request counters off (KVF_METRICS=0)
// and on, so their cost per request is the difference of the same run.
//   kvfabric-call-cost --iterations 200000 --reps 5
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"

namespace {

using Clock = std::chrono::steady_clock;

void Check(const kvfabric::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "kvfabric-call-cost: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// ns per call of `body` run `iterations` times on each of `threads` threads, best of `reps`.
double NsPerCall(int threads, long iterations, int reps, const std::function<void(int)>& body) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    std::vector<std::thread> ts;
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (long i = 0; i < iterations; ++i) body(t);
      });
    for (auto& t : ts) t.join();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(iterations));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfabric-call-cost: ns per bookkeeping call beside the call gate's floor"};
  long iterations = 200000;
  int reps = 5;
  app.add_option("--iterations", iterations, "calls per thread and repetition")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "repetitions; the best is shown")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  kvfabric::EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.settings.log_level = "error";
  std::unique_ptr<kvfabric::Engine> e, uncounted;
  Check(kvfabric::Engine::Create(cfg, &e), "create the engine");
  cfg.settings.metrics = false;
  Check(kvfabric::Engine::Create(cfg, &uncounted), "create the engine without counters");
  std::vector<char> src(4096), dst(4096);
  kvfabric::SegmentHandle self, uncounted_self;
  for (auto* engine : {e.get(), uncounted.get()}) {
    Check(engine->RegisterMemory(src.data(), src.size()), "register");
    Check(engine->RegisterMemory(dst.data(), dst.size()), "register");
  }
  Check(e->OpenSegment(e->name(), &self), "open the engine's own segment");
  Check(uncounted->OpenSegment(uncounted->name(), &uncounted_self), "open the engine's own segment");

  // One completed task per thread, for status polls.
  std::vector<kvfabric::BatchId> polled(2);
  for (auto& b : polled) {
    Check(e->AllocateBatch(1, &b), "allocate");
    Check(e->Submit(b, {{kvfabric::OpCode::kWrite, src.data(), self, reinterpret_cast<uint64_t>(dst.data()), 64}}),
          "submit");
  }
  std::atomic<uint64_t> gate{0};
  // One request to `engine`'s own segment, from allocation to free.
  auto SubmitOne = [&](kvfabric::Engine* engine, kvfabric::SegmentHandle to) {
    kvfabric::BatchId b;
    Check(engine->AllocateBatch(1, &b), "allocate");
    Check(engine->Submit(b, {{kvfabric::OpCode::kWrite, src.data(), to, reinterpret_cast<uint64_t>(dst.data()), 64}}),
          "submit");
    kvfabric::TransferStatus st;
    do Check(engine->GetBatchStatus(b, &st), "status");
    while (st.state == kvfabric::TaskState::kPending);
    Check(engine->FreeBatch(b), "free");
  };
  std::printf("%-44s %12s %12s\n", "ns per call", "1 thread", "2 threads");
  struct Row {
    const char* name;
    std::function<void(int)> body;
  };
  const std::vector<Row> rows = {
      {"floor: atomic add + subtract (the gate)",
       [&](int) {
         gate.fetch_add(2, std::memory_order_acq_rel);
         gate.fetch_sub(2, std::memory_order_acq_rel);
       }},
      {"GetTaskStatus",
       [&](int t) {
         kvfabric::TransferStatus st;
         Check(e->GetTaskStatus(polled[t], 0, &st), "status");
       }},
      {"AllocateBatch + Submit (64 B local) + FreeBatch", [&](int) { SubmitOne(e.get(), self); }},
      {"  the same, request counters off (KVF_METRICS=0)", [&](int) { SubmitOne(uncounted.get(), uncounted_self); }},
  };
  for (const auto& row : rows)
    std::printf("%-44s %12.1f %12.1f\n", row.name, NsPerCall(1, iterations, reps, row.body),
                NsPerCall(2, iterations, reps, row.body));
  for (auto b : polled) Check(e->FreeBatch(b), "free");
  return 0;
}
