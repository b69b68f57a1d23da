// kvfabric-bench: engine throughput between a target and an initiator.
//   target:    kvfabric-bench --mode=target --protocol=tcp
//   initiator: kvfabric-bench --mode=initiator --segment_id=<from the target> --operation=write
//   probe:     kvfabric-bench --mode=probe --segment_id=<from the target>
// --block_size, --batch_size and --threads take comma-separated lists: the
// initiator runs every combination (a sweep), one human line each ending in
// the rate; --json also prints one JSON object per point, --json_out=FILE
// writes them all with the rails' description. Logs go to stderr.
// The probe times a peer's first use: opening its segment (one handshake,
// every rail's address inserted), warmup, the first transfer of --block_size
// (connections made on the way) and the warm ones after it.
// The initiator's CPU time (user + system, every thread of the process)
// per request and per GB is reported beside the rate; --notice makes every
// WRITE carry a notice (KVF_NOTICE_PATH says how), which the target takes.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <thread>
#include <vector>

#include <unistd.h>

#include "kvfabric/engine.h"
#include "memory/cuda.h"
#include "tools/bench/units.h"
#include "tools/common/flag_names.h"
#include "tools/common/cpu_time.h"
#include "tools/common/pattern.h"

using namespace kvfabric;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

struct Options {
  std::string mode = "initiator";
  std::string protocol = "auto";
  std::string metadata = "P2PHANDSHAKE";
  std::string local_server_name = "127.0.0.1:0";
  std::string segment_id;
  std::string operation = "write";
  std::vector<size_t> block_sizes{65536};
  std::vector<size_t> batch_sizes{128};
  std::vector<size_t> thread_counts{4};
  std::string json_out;
  size_t buffer_size = 1ull << 30;
  double duration = 10;
  std::string report_unit = "GB";
  std::string nic_filter;
  bool verify = false;
  bool json = false;
  bool use_vram = false;  // buffers in GPU memory (cuda:N)
  int gpu_id = 0;         // with --use_vram: the device, or -1 for all (thread t on device t mod count)
  bool init_mem = false;  // fill the buffers before the run (host memory is always touched)
  bool notice = false;    // every WRITE carries a notice
  std::vector<std::string> set;
};

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvfabric-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// One buffer of the bench: host memory, or GPU memory with --use_vram
// (filled and checked through a host copy).
struct Memory {
  uint8_t* base = nullptr;
  size_t size = 0;
  int device = -1;  // -1: host memory

  Status Alloc(size_t n, int dev) {
    size = n;
    device = dev;
    void* p = nullptr;
    if (dev >= 0) {
      KVF_RETURN_IF_ERROR(memory::cuda::Alloc(dev, n, &p));
    } else if (posix_memalign(&p, 1 << 21, n) != 0) {
      return Status::InvalidArgument("cannot allocate " + std::to_string(n) + " bytes of host memory");
    }
    base = static_cast<uint8_t*>(p);
    return Status::OK();
  }
  std::string location() const { return device >= 0 ? "cuda:" + std::to_string(device) : "cpu:0"; }
  // [off, off+n) gets the pattern of `seed` as it runs from byte
  // `pattern_off` (the target's offset of the same bytes); seed < 0: zeros.
  Status Fill(size_t off, size_t n, int seed, size_t pattern_off) {
    if (device < 0) {
      if (seed < 0) std::memset(base + off, 0, n);
      else tools::FillPattern(base + off, n, pattern_off, static_cast<uint8_t>(seed));
      return Status::OK();
    }
    std::vector<uint8_t> host(n, 0);
    if (seed >= 0) tools::FillPattern(host.data(), n, pattern_off, static_cast<uint8_t>(seed));
    return memory::cuda::Copy(base + off, host.data(), n, device);
  }
  // Bytes of [off, off+n) that hold that pattern.
  size_t Check(size_t off, size_t n, int seed, size_t pattern_off) {
    if (device < 0) return tools::CheckPattern(base + off, n, pattern_off, static_cast<uint8_t>(seed));
    std::vector<uint8_t> host(n);
    if (!memory::cuda::Copy(host.data(), base + off, n, device).ok()) return 0;
    return tools::CheckPattern(host.data(), n, pattern_off, static_cast<uint8_t>(seed));
  }
  void Free() {
    if (device >= 0) memory::cuda::Free(base);
    else std::free(base);
    base = nullptr;
  }
};

// The devices --use_vram puts buffers on: --gpu_id, or all of them for -1.
Status VramDevices(const Options& o, std::vector<int>* out) {
  out->clear();
  if (!o.use_vram) {
    out->push_back(-1);
    return Status::OK();
  }
  Status s = memory::cuda::Load();
  if (!s.ok()) return s.Annotate("--use_vram");
  const int n = memory::cuda::DeviceCount();
  if (o.gpu_id >= n) return Status::InvalidArgument("--gpu_id=" + std::to_string(o.gpu_id) + ": " + std::to_string(n) + " GPU(s) here");
  if (o.gpu_id >= 0) out->push_back(o.gpu_id);
  else for (int d = 0; d < n; ++d) out->push_back(d);
  return Status::OK();
}

int RunTarget(Engine& e, const Options& o) {
  std::vector<int> devices;
  Status s = VramDevices(o, &devices);
  if (!s.ok()) return Fail("target", s);
  // One buffer of --buffer_size per device in use (every GPU with
  // --gpu_id=-1, as the initiator spreads its threads): initiator thread t
  // works in buffer t mod count.
  std::vector<Memory> mems;
  auto release = [&] {
    for (Memory& m : mems) {
      const Status u = e.UnregisterMemory(m.base);
      if (!u.ok()) std::fprintf(stderr, "kvfabric-bench target: %s\n", u.ToString().c_str());
      m.Free();
    }
  };
  for (int d : devices) {
    Memory mem;
    s = mem.Alloc(o.buffer_size, d);
    if (!s.ok()) {
      release();
      return Fail("allocate", s);
    }
    // Touch every page (and give --verify a known pattern to read back).
    s = mem.Fill(0, o.buffer_size, 7, 0);
    if (s.ok()) s = e.RegisterMemory(mem.base, o.buffer_size, mem.location());
    if (!s.ok()) {
      mem.Free();
      release();
      return Fail("fill and register " + mem.location() + " memory", s);
    }
    mems.push_back(mem);
  }
  std::printf("kvfabric-bench target ready: %zu bytes registered%s on %zu rail(s) (%s). Run the initiator with "
              "--segment_id=%s\n",
              o.buffer_size, mems.size() > 1 ? (" on each of " + std::to_string(mems.size()) + " GPUs").c_str() : "",
              e.rails().size(), e.rails().front().provider.c_str(), e.name().c_str());
  std::fflush(stdout);
  // Serves until SIGINT/SIGTERM: the target's engine drives progress
  // meanwhile; the notices of WRITEs that carry them are taken as they come.
  std::vector<uint16_t> notices;
  while (!g_stop.load()) {
    notices.clear();
    (void)e.WaitNotices(50, &notices);  // a timeout is the quiet case
  }
  release();
  return 0;
}

// One point of a sweep.
struct Point {
  size_t block_size, batch_size, threads;
};

// Registered memory and the opened target, shared by every point of a sweep.
// Thread t works in region t of the buffers: on device t mod count with
// --use_vram --gpu_id=-1, else all in one buffer.
struct Setup {
  std::vector<Memory> mems;  // one per device in use
  size_t region = 0;         // bytes per thread region (block x batch of the largest point)
  SegmentHandle seg = -1;
  std::vector<uint64_t> raddrs;  // the target's buffers (one per GPU it spreads over), in its order
  double open_us = 0;  // OpenSegment alone: one handshake, every rail's address inserted
  double register_us = 0;  // RegisterMemory of the initiator's buffers, summed
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

// Thread t's region and its memory.
Memory& MemOf(Setup& st, size_t t) { return st.mems[t % st.mems.size()]; }
size_t RegionOffset(const Setup& st, size_t t) { return (t / st.mems.size()) * st.region; }
// Thread t's region at the target: buffer t mod count, offset within it.
uint64_t RemoteBase(const Setup& st, size_t t) { return st.raddrs[t % st.raddrs.size()]; }
size_t RemoteOffset(const Setup& st, size_t t, size_t region) { return (t / st.raddrs.size()) * region; }

int Prepare(Engine& e, Options& o, size_t region, size_t threads, Setup* st) {
  if (o.segment_id.empty())
    return Fail(o.mode, Status::InvalidArgument("--segment_id is required (the target prints it)"));
  const size_t need = region * threads;
  if (o.buffer_size < need) {
    std::fprintf(stderr, "kvfabric-bench: --buffer_size raised from %zu to %zu (block x batch x threads)\n",
                 o.buffer_size, need);
    o.buffer_size = need;
  }
  std::vector<int> devices;
  Status s = VramDevices(o, &devices);
  if (!s.ok()) return Fail(o.mode, s);
  st->region = region;
  for (int d : devices) {
    Memory m;
    const size_t per = devices.size() == 1 ? o.buffer_size : region * ((threads + devices.size() - 1) / devices.size());
    s = m.Alloc(per, d);
    // Host memory is touched (zeroed) always, GPU memory with --init_mem.
    if (s.ok() && (d < 0 || o.init_mem)) s = m.Fill(0, per, d < 0 ? -1 : 3, 0);
    const auto t_reg = Clock::now();
    if (s.ok()) s = e.RegisterMemory(m.base, per, m.location());
    st->register_us += std::chrono::duration<double, std::micro>(Clock::now() - t_reg).count();
    if (!s.ok()) return Fail("allocate and register " + m.location() + " memory", s);
    st->mems.push_back(m);
  }
  const auto t_open = Clock::now();
  s = e.OpenSegment(o.segment_id, &st->seg);
  if (!s.ok()) return Fail("open segment", s);
  st->open_us = std::chrono::duration<double, std::micro>(Clock::now() - t_open).count();
  std::vector<RemoteBuffer> remote;
  s = e.GetSegmentBuffers(st->seg, &remote);
  if (!s.ok()) return Fail("segment buffers", s);
  if (remote.empty()) return Fail(o.mode, Status::OutOfRange("the target registered no buffer"));
  // Threads spread over the target's buffers (one per GPU with --gpu_id=-1).
  const size_t per_buffer = region * ((threads + remote.size() - 1) / remote.size());
  for (const RemoteBuffer& b : remote) {
    if (b.length < per_buffer)
      return Fail(o.mode, Status::OutOfRange("the target registered " + std::to_string(b.length) +
                                             " bytes at " + b.location + "; start it with --buffer_size >= " +
                                             std::to_string(per_buffer)));
    st->raddrs.push_back(b.addr);
  }
  return 0;
}

// Runs one point for --duration; 0, or the exit code of a failure.
int RunPoint(Engine& e, const Options& o, Setup& st, const Point& pt, nlohmann::json* out) {
  const OpCode op = o.operation == "read" ? OpCode::kRead : OpCode::kWrite;
  const size_t region = pt.block_size * pt.batch_size;  // per thread, here and at the target
  // Each thread's region, with what it holds: the pattern to write, or zeros
  // for reads to fill (the pattern runs from the region's offset in its
  // target buffer, as the target filled it).
  auto each_region = [&](const std::function<Status(Memory&, size_t local, size_t t)>& f) {
    for (size_t t = 0; t < pt.threads; ++t) {
      Status s = f(MemOf(st, t), RegionOffset(st, t), t);
      if (!s.ok()) return s;
    }
    return Status::OK();
  };
  // Every region this point reads or writes, as one request per block.
  auto requests = [&](OpCode kind) {
    std::vector<TransferRequest> reqs;
    (void)each_region([&](Memory& m, size_t local, size_t t) {  // cannot fail: it only builds requests
      for (size_t i = 0; i < pt.batch_size; ++i)
        reqs.push_back({kind, m.base + local + i * pt.block_size, st.seg,
                        RemoteBase(st, t) + RemoteOffset(st, t, region) + i * pt.block_size, pt.block_size});
      return Status::OK();
    });
    return reqs;
  };
  Status prep;
  if (o.verify && op == OpCode::kRead) {
    // The target's regions get a known pattern first (an earlier WRITE run
    // may have changed them); the local ones are zeroed for the reads.
    prep = each_region(
        [&](Memory& m, size_t local, size_t t) { return m.Fill(local, region, 7, RemoteOffset(st, t, region)); });
    if (prep.ok()) prep = e.Transfer(requests(OpCode::kWrite));
  }
  if (prep.ok())
    prep = each_region([&](Memory& m, size_t local, size_t t) {
      return m.Fill(local, region, o.verify && op == OpCode::kWrite ? 5 : -1, RemoteOffset(st, t, region));
    });
  if (!prep.ok()) return Fail("prepare", prep);
  std::vector<uint64_t> rail_before;
  for (const auto& r : e.rails()) rail_before.push_back(r.completed_bytes);

  std::atomic<uint64_t> bytes{0}, batches{0}, failures{0};
  std::vector<std::vector<double>> lat(pt.threads);
  std::string first_error;
  std::mutex err_mu;
  const double cpu0 = tools::CpuSeconds();
  const auto t0 = Clock::now();
  const auto until = t0 + std::chrono::duration<double>(o.duration);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < pt.threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<TransferRequest> reqs(pt.batch_size);
      uint8_t* local = MemOf(st, t).base + RegionOffset(st, t);
      for (size_t i = 0; i < pt.batch_size; ++i)
        reqs[i] = {op, local + i * pt.block_size, st.seg,
                   RemoteBase(st, t) + RemoteOffset(st, t, region) + i * pt.block_size, pt.block_size,
                   o.notice ? static_cast<uint16_t>(1 + t * pt.batch_size + i) : uint16_t{0}};
      while (Clock::now() < until && !g_stop.load()) {
        BatchId b;
        auto b0 = Clock::now();
        Status s = e.AllocateBatch(pt.batch_size, &b);
        TransferStatus agg;
        if (s.ok()) s = e.Submit(b, reqs);
        if (s.ok()) s = e.WaitBatch(b, -1, &agg);
        if (s.ok() && agg.state != TaskState::kCompleted) s = agg.error;
        const Status freed = e.FreeBatch(b);
        if (s.ok()) s = freed;
        if (!s.ok()) {
          ++failures;
          std::lock_guard<std::mutex> g(err_mu);
          if (first_error.empty()) first_error = s.ToString();
          return;
        }
        lat[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - b0).count());
        bytes += pt.block_size * pt.batch_size;
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
  const double cpu = tools::CpuSeconds() - cpu0;
  const uint64_t ops_done = batches.load() * pt.batch_size;
  const double cpu_us_per_op = ops_done ? 1e6 * cpu / ops_done : 0;
  const double cpu_s_per_gb = bytes.load() ? cpu / (bytes.load() / 1e9) : 0;
  if (failures > 0) return Fail("transfer", Status::FabricError(first_error));

  std::string verdict = "not checked";
  Status s;
  if (o.verify) {
    bool good = true;
    const int seed = op == OpCode::kWrite ? 5 : 7;  // what was written, or what the reads should find
    if (op == OpCode::kWrite) {
      // Read back what the target holds and compare with what was written.
      s = each_region([&](Memory& m, size_t local, size_t) { return m.Fill(local, region, -1, 0); });
      if (s.ok()) s = e.Transfer(requests(OpCode::kRead));
    }
    if (s.ok())
      s = each_region([&](Memory& m, size_t local, size_t t) {
        return m.Check(local, region, seed, RemoteOffset(st, t, region)) == region
                   ? Status::OK()
                   : Status::Internal("thread " + std::to_string(t) + "'s region differs");
      });
    good = s.ok();
    verdict = good ? "verified" : "DATA MISMATCH";
    if (!good) std::fprintf(stderr, "kvfabric-bench: --verify found wrong bytes %s\n", s.ToString().c_str());
  }

  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  const double p50 = Percentile(all, 0.5), p99 = Percentile(all, 0.99);
  double rate = 0;
  bench::ToUnit(static_cast<double>(bytes.load()) / secs, o.report_unit, &rate);
  const auto rails = e.rails();
  nlohmann::json rail_bytes = nlohmann::json::array();
  for (size_t i = 0; i < rails.size(); ++i) rail_bytes.push_back(rails[i].completed_bytes - rail_before[i]);
  *out = {{"tool", "kvfabric-bench"}, {"operation", o.operation}, {"protocol", rails.front().provider},
          {"rails", rails.size()}, {"block_size", pt.block_size}, {"batch_size", pt.batch_size},
          {"threads", pt.threads}, {"duration_s", secs}, {"bytes", bytes.load()},
          {"batches", batches.load()}, {"bytes_per_s", bytes.load() / secs},
          {"rate", rate}, {"unit", o.report_unit + "/s"},
          {"batch_latency_us", {{"p50", p50}, {"p99", p99}}},
          {"rail_bytes", rail_bytes}, {"verify", verdict}, {"register_ms", st.register_us / 1000},
          {"notice", o.notice}, {"cpu_s", cpu}, {"cpu_us_per_op", cpu_us_per_op}, {"cpu_s_per_gb", cpu_s_per_gb}};
  if (o.json) std::printf("%s\n", out->dump().c_str());
  std::printf("kvfabric-bench %s%s: %s x%zu rail(s), block %zu, batch %zu, threads %zu, %.1f s, batch p50 %.0f us "
              "p99 %.0f us, %s: %.2f %s/s, CPU %.2f us/op, %.3f s/GB\n",
              o.operation.c_str(), o.notice ? " with notices" : "", rails.front().provider.c_str(), rails.size(),
              pt.block_size, pt.batch_size, pt.threads, secs, p50, p99, verdict.c_str(), rate,
              o.report_unit.c_str(), cpu_us_per_op, cpu_s_per_gb);
  std::fflush(stdout);
  return verdict == "DATA MISMATCH" ? 3 : 0;
}

nlohmann::json RailsJson(Engine& e) {
  nlohmann::json rails = nlohmann::json::array();
  for (const auto& r : e.rails())
    rails.push_back({{"provider", r.provider}, {"domain", r.domain}, {"fabric", r.fabric}, {"tx_depth", r.tx_depth}});
  return rails;
}

int WriteJson(const Options& o, Engine& e, nlohmann::json points) {
  if (o.json_out.empty()) return 0;
  nlohmann::json doc = {{"tool", "kvfabric-bench"}, {"mode", o.mode}, {"segment", o.segment_id},
                        {"engine", e.name()}, {"rails", RailsJson(e)}, {"points", std::move(points)}};
  FILE* f = std::fopen(o.json_out.c_str(), "w");
  if (f == nullptr) return Fail("--json_out", Status::InvalidArgument("cannot write " + o.json_out));
  std::fprintf(f, "%s\n", doc.dump(2).c_str());
  std::fclose(f);
  return 0;
}

void Release(Engine& e, Setup& st) {
  for (Memory& m : st.mems) {
    const Status s = e.UnregisterMemory(m.base);
    if (!s.ok()) std::fprintf(stderr, "kvfabric-bench: %s\n", s.ToString().c_str());
    m.Free();
  }
}

int RunInitiator(Engine& e, Options o) {
  size_t region = 0, threads = 0;
  std::vector<Point> points;
  for (size_t th : o.thread_counts)
    for (size_t ba : o.batch_sizes)
      for (size_t bl : o.block_sizes) {
        points.push_back({bl, ba, th});
        region = std::max(region, bl * ba);
        threads = std::max(threads, th);
      }
  Setup st;
  if (int rc = Prepare(e, o, region, threads, &st)) return rc;
  Status s = e.Warmup(o.segment_id);
  if (!s.ok()) return Fail("warmup", s);
  nlohmann::json results = nlohmann::json::array();
  int rc = 0;
  for (const Point& pt : points) {
    if (g_stop.load()) break;
    nlohmann::json j;
    rc = RunPoint(e, o, st, pt, &j);
    if (rc == 1) break;
    results.push_back(std::move(j));
  }
  if (int w = WriteJson(o, e, std::move(results))) rc = rc ? rc : w;
  Release(e, st);
  return rc;
}

// First use of a peer: each phase timed on its own, in this order.
int RunProbe(Engine& e, Options o) {
  const size_t block = o.block_sizes.front();
  const OpCode op = o.operation == "read" ? OpCode::kRead : OpCode::kWrite;
  Setup st;
  if (int rc = Prepare(e, o, block, 1, &st)) return rc;
  auto us = [](Clock::time_point a) { return std::chrono::duration<double, std::micro>(Clock::now() - a).count(); };
  const double open_us = st.open_us;
  const auto t_warm = Clock::now();
  Status s = e.Warmup(o.segment_id);
  if (!s.ok()) return Fail("warmup", s);
  const double warmup_us = us(t_warm);
  const TransferRequest req{op, st.mems.front().base, st.seg, st.raddrs.front(), block};
  const auto t_first = Clock::now();
  s = e.Transfer({req});
  if (!s.ok()) return Fail("first transfer", s);
  const double first_us = us(t_first);
  std::vector<double> warm;
  for (int i = 0; i < 20; ++i) {
    const auto t = Clock::now();
    s = e.Transfer({req});
    if (!s.ok()) return Fail("transfer", s);
    warm.push_back(us(t));
  }
  const double warm_p50 = Percentile(warm, 0.5);
  const auto rails = e.rails();
  nlohmann::json j = {{"tool", "kvfabric-bench"}, {"mode", "probe"}, {"operation", o.operation},
                      {"protocol", rails.front().provider}, {"rails", rails.size()}, {"block_size", block},
                      {"open_segment_us", open_us}, {"warmup_us", warmup_us}, {"first_transfer_us", first_us},
                      {"warm_transfer_p50_us", warm_p50}};
  if (o.json) std::printf("%s\n", j.dump().c_str());
  std::printf("kvfabric-bench probe: %s x%zu rail(s): open segment (one handshake, every rail's address "
              "inserted) %.0f us, warmup %.0f us, first %s of %zu bytes %.0f us, warm p50 %.0f us\n",
              rails.front().provider.c_str(), rails.size(), open_us, warmup_us, o.operation.c_str(), block,
              first_us, warm_p50);
  int rc = WriteJson(o, e, nlohmann::json::array({j}));
  Release(e, st);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kvfabric-bench: one-sided READ/WRITE throughput between two engines"};
  app.add_option("--mode", o.mode, "target, initiator or probe (first-use latency)")
      ->check(CLI::IsMember({"target", "initiator", "probe"}));
  app.add_option("--protocol", o.protocol, "efa, tcp, shm, verbs, sockets or auto");
  app.add_option("--metadata", o.metadata, "p2p (P2PHANDSHAKE), etcd://HOST:PORT or http://HOST:PORT/PATH");
  app.add_option("--local_server_name", o.local_server_name, "host:port to bind and advertise (port 0: any)");
  app.add_option("--segment_id", o.segment_id, "initiator: the target's segment (host:port)")
      ->check([](const std::string& v) -> std::string {
        // CLI11 hands an empty `--segment_id=` the next argument instead.
        return v.rfind("-", 0) == 0 ? "'" + v + "' is a flag, not host:port: --segment_id is empty (paste the "
                                              "value the target printed)"
                                    : "";
      });
  app.add_option("--operation", o.operation, "read or write")->check(CLI::IsMember({"read", "write"}));
  app.add_option("--block_size", o.block_sizes, "bytes per request (a comma-separated list sweeps)")
      ->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--batch_size", o.batch_sizes, "requests per batch (a list sweeps)")
      ->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--threads", o.thread_counts, "initiator submission threads (a list sweeps)")
      ->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--buffer_size", o.buffer_size, "registered bytes (initiator: raised to block x batch x threads)");
  app.add_option("--duration", o.duration, "seconds to run (initiator)");
  app.add_option("--report_unit", o.report_unit, "GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb")
      ->check(CLI::IsMember({"GB", "GiB", "Gb", "MB", "MiB", "Mb", "KB", "KiB", "Kb"}));
  app.add_option("--nic_filter", o.nic_filter, "comma-separated NICs (libfabric domain names); empty: all");
  app.add_flag("--verify", o.verify, "check every byte moved");
  app.add_flag("--notice", o.notice,
               "every WRITE carries a notice (remote CQ data or a message, KVF_NOTICE_PATH), which the target takes");
  app.add_flag("--use_vram", o.use_vram, "buffers in GPU memory (the CUDA driver is loaded at run time)");
  app.add_option("--gpu_id", o.gpu_id, "with --use_vram: the GPU, or -1 for every GPU (thread t on GPU t mod count)")
      ->check(CLI::Range(-1, 1 << 16));
  app.add_flag("--init_mem", o.init_mem, "with --use_vram: write the buffers before the run (host memory is always)");
  app.add_flag("--json", o.json, "also print a JSON object per point (initiator, probe)");
  app.add_option("--json_out", o.json_out, "write every point and the rails to this JSON file");
  app.add_option("--set", o.set, "a setting, KVF_NAME=value (repeatable); see the list below");
  std::string footer = "\nSettings (environment variables, or --set NAME=value):\n";
  for (const auto& s : Settings::Table())
    footer += "  " + s.env + " (default " + s.default_value + "; " + s.values + "): " + s.meaning + "\n";
  app.footer(footer);
  tools::UseCurrentFlagNames(argc, argv, "kvfabric-bench");
  CLI11_PARSE(app, argc, argv);
  if (o.notice && o.operation != "write") return Fail("--notice", Status::InvalidArgument("only WRITEs carry notices"));
  for (size_t th : o.thread_counts)
    for (size_t ba : o.batch_sizes)
      if (o.notice && th * ba > 65535)
        return Fail("--notice", Status::InvalidArgument("threads x batch must stay within 65535 notices"));

  EngineConfig cfg;
  cfg.protocol = o.protocol;
  cfg.metadata = o.metadata;
  cfg.local_server_name = o.local_server_name;
  cfg.nic_filter = o.nic_filter;
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
  if (o.mode == "target") return RunTarget(*e, o);
  return o.mode == "probe" ? RunProbe(*e, o) : RunInitiator(*e, o);
}
