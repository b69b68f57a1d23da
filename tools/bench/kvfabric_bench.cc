// kvfabric-bench: engine throughput between a target and an initiator.
//   target:    kvfabric-bench --mode=target --protocol=tcp
//   initiator: kvfabric-bench --mode=initiator --segment_id=<from the target> --operation=write
// The initiator prints one human line ending in the rate and, with --json,
// a JSON object on stdout. Logs go to stderr.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include <unistd.h>

#include "kvfabric/engine.h"
#include "tests/support/pattern.h"
#include "tools/bench/units.h"

using namespace kvfabric;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Options {
  std::string mode = "initiator";
  std::string protocol = "auto";
  std::string metadata_server = "P2PHANDSHAKE";
  std::string local_server_name = "127.0.0.1:0";
  std::string segment_id;
  std::string operation = "write";
  size_t block_size = 65536;
  size_t batch_size = 128;
  size_t threads = 4;
  size_t buffer_size = 1ull << 30;
  double duration = 10;
  std::string report_unit = "GB";
  std::string device_name;
  bool verify = false;
  bool json = false;
  std::vector<std::string> set;
};

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvfabric-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

void* AllocBuffer(size_t size) {
  void* p = nullptr;
  if (posix_memalign(&p, 1 << 21, size) != 0) return nullptr;
  return p;
}

int RunTarget(Engine& e, const Options& o) {
  void* buf = AllocBuffer(o.buffer_size);
  if (buf == nullptr) return Fail("allocate", Status::InvalidArgument("cannot allocate --buffer_size bytes"));
  // Touch every page (and give --verify a known pattern to read back).
  testing::FillPattern(buf, o.buffer_size, 0, 7);
  Status s = e.RegisterMemory(buf, o.buffer_size);
  if (!s.ok()) return Fail("register", s);
  std::printf("kvfabric-bench target ready: %zu bytes registered on %zu rail(s) (%s). Run the initiator with "
              "--segment_id=%s\n",
              o.buffer_size, e.rails().size(), e.rails().front().provider.c_str(), e.name().c_str());
  std::fflush(stdout);
  // Serves until SIGINT/SIGTERM: the target's engine drives progress meanwhile.
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  e.UnregisterMemory(buf);
  std::free(buf);
  return 0;
}

int RunInitiator(Engine& e, Options o) {
  if (o.segment_id.empty())
    return Fail("initiator", Status::InvalidArgument("--segment_id is required (the target prints it)"));
  const OpCode op = o.operation == "read" ? OpCode::kRead : OpCode::kWrite;
  const size_t need = o.block_size * o.batch_size * o.threads;
  if (o.buffer_size < need) {
    std::fprintf(stderr, "kvfabric-bench: --buffer_size raised from %zu to %zu (block x batch x threads)\n",
                 o.buffer_size, need);
    o.buffer_size = need;
  }
  void* buf = AllocBuffer(o.buffer_size);
  if (buf == nullptr) return Fail("allocate", Status::InvalidArgument("cannot allocate --buffer_size bytes"));
  auto* base = static_cast<uint8_t*>(buf);
  if (o.verify && op == OpCode::kWrite) testing::FillPattern(buf, need, 0, 5);
  else std::memset(buf, 0, o.buffer_size);
  Status s = e.RegisterMemory(buf, o.buffer_size);
  if (!s.ok()) return Fail("register", s);
  SegmentHandle seg;
  s = e.OpenSegment(o.segment_id, &seg);
  if (!s.ok()) return Fail("open segment", s);
  std::vector<RemoteBuffer> remote;
  s = e.GetSegmentBuffers(seg, &remote);
  if (!s.ok()) return Fail("segment buffers", s);
  if (remote.empty() || remote.front().length < need)
    return Fail("initiator", Status::OutOfRange("the target registered " +
                                                std::to_string(remote.empty() ? 0 : remote.front().length) +
                                                " bytes; start it with --buffer_size >= " + std::to_string(need)));
  const uint64_t raddr = remote.front().addr;
  s = e.Warmup(o.segment_id);
  if (!s.ok()) return Fail("warmup", s);

  std::atomic<uint64_t> bytes{0}, batches{0}, failures{0};
  std::vector<std::vector<double>> lat(o.threads);
  std::string first_error;
  std::mutex err_mu;
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(o.duration);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<TransferRequest> reqs(o.batch_size);
      for (size_t i = 0; i < o.batch_size; ++i) {
        size_t off = (t * o.batch_size + i) * o.block_size;
        reqs[i] = {op, base + off, seg, raddr + off, o.block_size};
      }
      while (Clock::now() < until && !g_stop.load()) {
        BatchId b;
        auto b0 = Clock::now();
        Status st = e.AllocateBatch(o.batch_size, &b);
        TransferStatus agg;
        if (st.ok()) st = e.Submit(b, reqs);
        if (st.ok()) st = e.WaitBatch(b, -1, &agg);
        if (st.ok() && agg.state != TaskState::kCompleted) st = agg.error;
        e.FreeBatch(b);
        if (!st.ok()) {
          ++failures;
          std::lock_guard<std::mutex> g(err_mu);
          if (first_error.empty()) first_error = st.ToString();
          return;
        }
        lat[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - b0).count());
        bytes += o.block_size * o.batch_size;
        ++batches;
      }
    });
  }
  // Live progress on a terminal (stderr), once a second; silent in pipes.
  if (isatty(STDERR_FILENO)) {
    uint64_t last_bytes = 0;
    auto last = Clock::now();
    while (Clock::now() < until && !g_stop.load() && failures.load() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (Clock::now() - last < std::chrono::seconds(1)) continue;
      const auto now = Clock::now();
      const uint64_t b = bytes.load();
      double rate = 0;
      bench::ToUnit((b - last_bytes) / std::chrono::duration<double>(now - last).count(), o.report_unit, &rate);
      std::fprintf(stderr, "\r  %5.1f s  %10.2f %s/s  %12.3f GB moved ",
                   std::chrono::duration<double>(now - t0).count(), rate, o.report_unit.c_str(), b / 1e9);
      last = now;
      last_bytes = b;
    }
    std::fprintf(stderr, "\r%60s\r", "");
  }
  for (auto& th : threads) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failures > 0) return Fail("transfer", Status::FabricError(first_error));

  std::string verdict = "not checked";
  if (o.verify) {
    bool good = true;
    if (op == OpCode::kWrite) {
      // Read back what the target holds and compare with what was written.
      std::memset(buf, 0, need);
      std::vector<TransferRequest> back;
      for (size_t off = 0; off < need; off += o.block_size)
        back.push_back({OpCode::kRead, base + off, seg, raddr + off, o.block_size});
      s = e.Transfer(back);
      good = s.ok() && testing::CheckPattern(buf, need, 0, 5) == need;
    } else {
      good = testing::CheckPattern(buf, need, 0, 7) == need;
    }
    verdict = good ? "verified" : "DATA MISMATCH";
    if (!good) std::fprintf(stderr, "kvfabric-bench: --verify found wrong bytes %s\n", s.ToString().c_str());
  }

  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[static_cast<size_t>(p * (all.size() - 1))]; };
  double rate = 0;
  bench::ToUnit(static_cast<double>(bytes.load()) / secs, o.report_unit, &rate);
  auto rails = e.rails();
  if (o.json) {
    nlohmann::json j = {{"tool", "kvfabric-bench"}, {"operation", o.operation}, {"protocol", rails.front().provider},
                        {"rails", rails.size()}, {"block_size", o.block_size}, {"batch_size", o.batch_size},
                        {"threads", o.threads}, {"duration_s", secs}, {"bytes", bytes.load()},
                        {"batches", batches.load()}, {"bytes_per_s", bytes.load() / secs},
                        {"rate", rate}, {"unit", o.report_unit + "/s"},
                        {"batch_latency_us", {{"p50", pct(0.5)}, {"p99", pct(0.99)}}},
                        {"verify", verdict}};
    std::printf("%s\n", j.dump().c_str());
  }
  std::printf("kvfabric-bench %s: %s x%zu rail(s), block %zu, batch %zu, threads %zu, %.1f s, batch p50 %.0f us "
              "p99 %.0f us, %s: %.2f %s/s\n",
              o.operation.c_str(), rails.front().provider.c_str(), rails.size(), o.block_size, o.batch_size,
              o.threads, secs, pct(0.5), pct(0.99), verdict.c_str(), rate, o.report_unit.c_str());
  e.UnregisterMemory(buf);
  std::free(buf);
  return verdict == "DATA MISMATCH" ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kvfabric-bench: one-sided READ/WRITE throughput between two engines"};
  app.add_option("--mode", o.mode, "target or initiator")->check(CLI::IsMember({"target", "initiator"}));
  app.add_option("--protocol", o.protocol, "efa, tcp, shm, verbs, sockets or auto");
  app.add_option("--metadata_server", o.metadata_server, "p2p (P2PHANDSHAKE)");
  app.add_option("--local_server_name", o.local_server_name, "host:port to bind and advertise (port 0: any)");
  app.add_option("--segment_id", o.segment_id, "initiator: the target's segment (host:port)")
      ->check([](const std::string& v) -> std::string {
        // CLI11 hands an empty `--segment_id=` the next argument instead.
        return v.rfind("-", 0) == 0 ? "'" + v + "' is a flag, not host:port: --segment_id is empty (paste the "
                                              "value the target printed)"
                                    : "";
      });
  app.add_option("--operation", o.operation, "read or write")->check(CLI::IsMember({"read", "write"}));
  app.add_option("--block_size", o.block_size, "bytes per request")->check(CLI::PositiveNumber);
  app.add_option("--batch_size", o.batch_size, "requests per batch")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "initiator submission threads")->check(CLI::PositiveNumber);
  app.add_option("--buffer_size", o.buffer_size, "registered bytes (initiator: raised to block x batch x threads)");
  app.add_option("--duration", o.duration, "seconds to run (initiator)");
  app.add_option("--report_unit", o.report_unit, "GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb")
      ->check(CLI::IsMember({"GB", "GiB", "Gb", "MB", "MiB", "Mb", "KB", "KiB", "Kb"}));
  app.add_option("--device_name", o.device_name, "comma-separated NICs (libfabric domain names)");
  app.add_flag("--verify", o.verify, "check every byte moved");
  app.add_flag("--json", o.json, "also print a JSON object (initiator)");
  app.add_option("--set", o.set, "a setting, KVF_NAME=value (repeatable); see the list below");
  std::string footer = "\nSettings (environment variables, or --set NAME=value):\n";
  for (const auto& s : Settings::Table())
    footer += "  " + s.env + " (default " + s.default_value + "): " + s.meaning + "\n";
  app.footer(footer);
  CLI11_PARSE(app, argc, argv);

  EngineConfig cfg;
  cfg.protocol = o.protocol;
  cfg.metadata = o.metadata_server;
  cfg.local_server_name = o.local_server_name;
  cfg.nic_filter = o.device_name;
  Status s = cfg.settings.ApplyEnvironment();
  if (!s.ok()) return Fail("settings", s);
  cfg.apply_environment = false;
  for (const auto& kv : o.set) {
    s = cfg.settings.Assign(kv);
    if (!s.ok()) return Fail("--set", s);
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::unique_ptr<Engine> e;
  s = Engine::Create(cfg, &e);
  if (!s.ok()) return Fail("create engine", s);
  return o.mode == "target" ? RunTarget(*e, o) : RunInitiator(*e, o);
}
