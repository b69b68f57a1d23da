// kvfabric-store-bench: the store's speed beside its ceiling, the bare
// engine READ of the same pages from the same pools (and for op put the
// bare WRITE into them, the ceiling of a PUT by WRITE), measured in the
// same run in alternating windows (medians and their ratios are reported).
//
//   serve  a node: an engine, a store with a pool, until SIGINT/SIGTERM
//            kvfabric-store-bench serve --protocol tcp --pool 1G --listen 127.0.0.1:7400
//                --members 127.0.0.1:7400,127.0.0.1:7401
//   drive  a client against running nodes
//            kvfabric-store-bench drive --protocol tcp --members 127.0.0.1:7400,127.0.0.1:7401
//                --op get --page 128K --batch 32
//   local  starts --nodes serve processes on this host, drives them, and
//          with --kill, kills one and reads the whole working set again
//          (only that node's pages are lost, none comes back wrong)
//            kvfabric-store-bench local --nodes 3 --op get --kill
//
// Ops: get, put, exists, mixed (--put_share of the batches are puts), lone
// (one page at a time: GET beside the bare READ plus one control round
// trip). --check fills every page with a pattern of its key and checks
// every byte a GET returns. --json prints one JSON object at the end. Logs
// go to stderr.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/engine.h"
#include "kvfabric/store.h"
#include "net/socket.h"
#include "store/wire/control_client.h"
#include "store/wire/messages.h"
#include "tools/common/flag_names.h"
#include "tools/common/pattern.h"

using namespace kvfabric;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string protocol = "tcp";
  std::string metadata = "p2p";
  std::string members;
  std::string local_server_name = "127.0.0.1:0";
  std::string nic_filter;
  std::vector<std::string> set;
  // serve
  uint64_t pool = 512ull << 20;
  std::string listen = "127.0.0.1:0";
  uint64_t ceiling = 0;  // bytes of private memory registered for the bare READ and WRITE
  // local: the nodes' ceiling regions, "engine-segment@addr+bytes"
  std::vector<std::string> ceilings;
  // drive
  std::string op = "get";
  uint64_t page = 128 << 10;
  size_t batch = 32;
  size_t threads = 1;
  size_t working_set = 2048;
  double hit_ratio = 1.0;
  double put_share = 0.2;
  double duration = 3;
  double warmup = 0.5;
  size_t rounds = 3;
  bool check = false;
  uint32_t copies = 1;  // copies of each page a PUT stores
  bool checksum_off_too = false;
  bool json = false;
  // local
  size_t nodes = 3;
  bool kill = false;
};

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "kvfabric-store-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

Status NewEngine(const Options& o, std::unique_ptr<Engine>* out) {
  EngineConfig cfg;
  cfg.protocol = o.protocol;
  cfg.metadata = o.metadata;
  cfg.local_server_name = o.local_server_name;
  cfg.nic_filter = o.nic_filter;
  cfg.settings.log_level = "warn";
  for (const auto& kv : o.set) KVF_RETURN_IF_ERROR(cfg.settings.Assign(kv));
  cfg.settings.store_max_copies = std::max<int64_t>(cfg.settings.store_max_copies, o.copies);
  if (!o.members.empty()) cfg.settings.store_members = o.members;
  return Engine::Create(cfg, out);
}

int Serve(const Options& o) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::unique_ptr<Engine> engine;
  if (Status s = NewEngine(o, &engine); !s.ok()) return Fail("engine", s);
  Settings settings = engine->settings();
  settings.store_pool_bytes = static_cast<int64_t>(o.pool);
  settings.store_listen = o.listen;
  std::unique_ptr<Store> store;
  if (Status s = Store::Create(engine.get(), settings, &store); !s.ok()) return Fail("store", s);
  // The bare READ's and WRITE's memory (--ceiling): private, in huge pages,
  // faulted in and written, as a pool that is not shared is; its address
  // follows READY.
  uint8_t* ceiling = nullptr;
  if (o.ceiling > 0) {
    ceiling = static_cast<uint8_t*>(std::aligned_alloc(1 << 21, o.ceiling));
    if (ceiling == nullptr) return Fail("ceiling", Status::Unavailable("no memory for --ceiling"));
    (void)madvise(ceiling, o.ceiling, MADV_HUGEPAGE);
    tools::FillPattern(ceiling, o.ceiling, 0, 7);
    if (Status s = engine->RegisterMemory(ceiling, o.ceiling, "cpu"); !s.ok()) return Fail("ceiling", s);
  }
  std::printf("READY %s %s %llu %llu\n", store->name().c_str(), engine->name().c_str(),
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(ceiling)),
              static_cast<unsigned long long>(o.ceiling));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  store->Close();
  if (ceiling != nullptr) {
    (void)engine->UnregisterMemory(ceiling);
    engine->Close();
    std::free(ceiling);
  }
  return 0;
}

// The bytes of the pattern of page `key_index` (--check).
uint32_t Seed(size_t key_index) { return static_cast<uint32_t>(key_index * 2654435761u + 1); }

// One thread's registered memory: a batch of pages to put from and one to get into.
struct Slab {
  Engine* engine;
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  size_t bytes;
  Slab(Engine* e, size_t n) : engine(e), bytes(n) {
    src = static_cast<uint8_t*>(std::aligned_alloc(1 << 21, n));
    dst = static_cast<uint8_t*>(std::aligned_alloc(1 << 21, n));
    std::memset(src, 1, n);
    std::memset(dst, 0, n);
    (void)engine->RegisterMemory(src, n);
    (void)engine->RegisterMemory(dst, n);
  }
  ~Slab() {
    (void)engine->UnregisterMemory(src);
    (void)engine->UnregisterMemory(dst);
    std::free(src);
    std::free(dst);
  }
};

// What a window measured.
struct Rate {
  double seconds = 0;
  uint64_t bytes = 0, ops = 0, keys = 0, hits = 0, wrong = 0, failures = 0;
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double kps() const { return seconds > 0 ? keys / seconds : 0; }
  void Add(const Rate& r) {
    bytes += r.bytes;
    ops += r.ops;
    keys += r.keys;
    hits += r.hits;
    wrong += r.wrong;
    failures += r.failures;
  }
};

std::string Key(size_t i) { return "ws-" + std::to_string(i); }

class Driver {
 public:
  Driver(const Options& o, Engine* engine) : o_(o), engine_(engine) {
    for (size_t t = 0; t < o.threads; ++t) slabs_.push_back(std::make_unique<Slab>(engine, o.batch * o.page));
  }

  Status Open() {
    Settings s = engine_->settings();
    s.store_pool_bytes = 0;
    KVF_RETURN_IF_ERROR(Store::Create(engine_, s, &store_));
    if (o_.checksum_off_too) {
      s.store_verify = false;
      KVF_RETURN_IF_ERROR(Store::Create(engine_, s, &unverified_));
    }
    if (store_->Members().empty()) return Status::Unavailable("no store member is reachable: check --members");
    return Pools();
  }

  // The nodes' pools, for the bare READ.
  Status Pools() {
    store::ControlClient control(engine_->settings());
    for (const std::string& name : store_->Members()) {
      std::string reply;
      KVF_RETURN_IF_ERROR(control.CallSync(name, store::EncodeBare(store::Op::kHello), net::DeadlineIn(5000), &reply));
      store::NodeInfo info;
      KVF_RETURN_IF_ERROR(store::DecodeNodeInfo(reply, &info));
      SegmentHandle h;
      KVF_RETURN_IF_ERROR(engine_->OpenSegment(info.segment, &h));
      pools_.push_back({name, h});
    }
    return Status::OK();
  }

  // Where the working set's pages are (each node asked for every key: its
  // own are found), so the bare READ reads the very pages the store does:
  // slots of a pool never written read the kernel's shared zero page, whose
  // bytes are always in cache (on shm that inflates the "ceiling" far past
  // what real pages allow).
  Status Locate() {
    store::ControlClient control(engine_->settings());
    pages_.clear();
    for (const Pool& pool : pools_) {
      for (size_t first = 0; first < o_.working_set; first += 1024) {
        std::vector<std::string> keys;
        for (size_t i = first; i < std::min(o_.working_set, first + 1024); ++i) keys.push_back(Key(i));
        std::vector<std::string_view> views(keys.begin(), keys.end());
        std::string reply;
        KVF_RETURN_IF_ERROR(control.CallSync(pool.name, store::EncodeKeys(store::Op::kLookup, views),
                                             net::DeadlineIn(5000), &reply));
        std::vector<store::Location> found;
        KVF_RETURN_IF_ERROR(store::DecodeLocations(reply, keys.size(), &found));
        for (const store::Location& l : found)
          if (l.found) pages_.push_back({pool.segment, l.addr, l.length});
      }
    }
    if (pages_.empty()) return Status::NotFound("no page of the working set was found on any node");
    // `local`: the nodes' private regions instead (--ceiling), so that the
    // ceiling is the fabric's best whatever the pools' memory (a shared
    // pool has 4 KiB pages where shmem_enabled says never, and shm's READs
    // of those are slower).
    if (o_.ceilings.empty()) return Status::OK();
    pages_.clear();
    for (const std::string& c : o_.ceilings) {
      const size_t at = c.rfind('@'), plus = c.rfind('+');
      SegmentHandle h;
      KVF_RETURN_IF_ERROR(engine_->OpenSegment(c.substr(0, at), &h));
      const uint64_t addr = std::stoull(c.substr(at + 1, plus - at - 1)), bytes = std::stoull(c.substr(plus + 1));
      for (uint64_t off = 0; off + o_.page <= bytes; off += o_.page) pages_.push_back({h, addr + off, o_.page});
    }
    bare_from_private_ = true;
    return Status::OK();
  }

  // Puts every page of the working set (the pattern of its key with --check).
  Status Fill() {
    Slab& slab = *slabs_[0];
    for (size_t first = 0; first < o_.working_set; first += o_.batch) {
      std::vector<std::string> keys;
      std::vector<std::vector<StoreBuffer>> bufs;
      for (size_t i = first; i < std::min(o_.working_set, first + o_.batch); ++i) {
        uint8_t* p = slab.src + (i - first) * o_.page;
        if (o_.check) tools::FillPattern(p, o_.page, 0, Seed(i));
        keys.push_back(Key(i));
        bufs.push_back({{p, o_.page}});
      }
      std::vector<Status> st;
      KVF_RETURN_IF_ERROR(store_->BatchPut(keys, bufs, &st, StorePutOptions{o_.copies}));
      for (size_t i = 0; i < st.size(); ++i)
        if (!st[i].ok()) return st[i].Annotate("filling " + keys[i]);
    }
    return Status::OK();
  }

  // Runs `body` on every thread for the duration (after the warm-up) and sums.
  Rate Window(const std::function<Rate(size_t thread, std::mt19937_64& rng)>& body) {
    std::atomic<bool> measuring{false}, stop{false};
    std::vector<Rate> per(o_.threads);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < o_.threads; ++t)
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t * 7919 + 1);
        while (!stop) {
          const bool counted = measuring;
          Rate r = body(t, rng);
          if (counted && !stop) per[t].Add(r);
        }
      });
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.warmup));
    measuring = true;
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.duration));
    stop = true;
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& th : threads) th.join();
    Rate sum;
    for (const Rate& r : per) sum.Add(r);
    sum.seconds = seconds;
    return sum;
  }

  // A batch of `op`s on random pages of the working set, where they lie in
  // the pools, the ceiling of a store call of the same size and depth:
  //  - kRead into this thread's destination pages: of a GET;
  //  - kWrite from its source pages: of a PUT (which WRITEs into slots its
  //    homes hand out). It overwrites those pages' bytes, so later GETs of
  //    them miss (their checksums no longer match): only op put measures it.
  Rate Bare(OpCode op, size_t t, std::mt19937_64& rng, size_t depth) {
    Slab& slab = *slabs_[t];
    uint8_t* local = op == OpCode::kRead ? slab.dst : slab.src;
    std::vector<TransferRequest> reqs;
    for (size_t i = 0; i < depth; ++i) {
      const PageAt& page = pages_[rng() % pages_.size()];
      reqs.push_back({op, local + i * o_.page, page.segment, page.addr, std::min<size_t>(page.length, o_.page)});
    }
    Rate r;
    Status s = engine_->Transfer(reqs);
    r.ops = 1;
    if (s.ok()) r.bytes = depth * o_.page;
    else r.failures = 1;
    return r;
  }

  std::vector<std::string> PickKeys(std::mt19937_64& rng, size_t n, std::vector<size_t>* index) {
    std::vector<std::string> keys;
    index->clear();
    std::uniform_real_distribution<double> u(0, 1);
    for (size_t i = 0; i < n; ++i) {
      const size_t k = rng() % o_.working_set;
      const bool hit = u(rng) < o_.hit_ratio;
      index->push_back(hit ? k : SIZE_MAX);
      keys.push_back(hit ? Key(k) : "absent-" + std::to_string(rng()));
    }
    return keys;
  }

  Rate Get(Store* store, size_t t, std::mt19937_64& rng, size_t depth) {
    Slab& slab = *slabs_[t];
    std::vector<size_t> index;
    const auto keys = PickKeys(rng, depth, &index);
    std::vector<std::vector<StoreBuffer>> bufs;
    for (size_t i = 0; i < depth; ++i) bufs.push_back({{slab.dst + i * o_.page, o_.page}});
    std::vector<Status> st;
    std::vector<uint64_t> len;
    Rate r;
    r.ops = 1;
    r.keys = depth;
    if (!store->BatchGet(keys, bufs, &st, &len).ok()) return r;
    for (size_t i = 0; i < depth; ++i) {
      if (!st[i].ok()) {
        r.failures += st[i].code() == Status::Code::kNotFound ? 0 : 1;
        continue;
      }
      ++r.hits;
      r.bytes += len[i];
      if (o_.check && (index[i] == SIZE_MAX || len[i] != o_.page ||
                       tools::CheckPattern(slab.dst + i * o_.page, o_.page, 0, Seed(index[i])) != o_.page))
        ++r.wrong;
    }
    return r;
  }

  Rate Put(size_t t, std::mt19937_64& rng) {
    Slab& slab = *slabs_[t];
    std::vector<std::string> keys;
    std::vector<std::vector<StoreBuffer>> bufs;
    for (size_t i = 0; i < o_.batch; ++i) {
      const size_t k = rng() % o_.working_set;
      uint8_t* p = slab.src + i * o_.page;
      if (o_.check) tools::FillPattern(p, o_.page, 0, Seed(k));
      keys.push_back(Key(k));
      bufs.push_back({{p, o_.page}});
    }
    std::vector<Status> st;
    Rate r;
    r.ops = 1;
    r.keys = o_.batch;
    if (!store_->BatchPut(keys, bufs, &st, StorePutOptions{o_.copies}).ok()) return r;
    for (const Status& s : st) {
      if (s.ok()) {
        r.bytes += o_.page;
        continue;
      }
      ++r.failures;
      static std::once_flag first;
      std::call_once(first, [&] { std::fprintf(stderr, "store-bench: first failed put: %s\n", s.ToString().c_str()); });
    }
    return r;
  }

  Rate Exists(std::mt19937_64& rng, size_t depth) {
    std::vector<size_t> index;
    const auto keys = PickKeys(rng, depth, &index);
    std::vector<bool> found;
    size_t leading = 0;
    Rate r;
    r.ops = 1;
    r.keys = depth;
    if (store_->BatchExists(keys, &found, &leading).ok()) r.hits = std::count(found.begin(), found.end(), true);
    return r;
  }

  // The kill demo: kills nothing itself; reads the whole working set and
  // counts pages back, missing and wrong.
  Rate ReadAll() {
    Rate all;
    Slab& slab = *slabs_[0];
    for (size_t first = 0; first < o_.working_set; first += o_.batch) {
      std::vector<std::string> keys;
      std::vector<std::vector<StoreBuffer>> bufs;
      const size_t n = std::min(o_.working_set, first + o_.batch) - first;
      for (size_t i = 0; i < n; ++i) {
        keys.push_back(Key(first + i));
        bufs.push_back({{slab.dst + i * o_.page, o_.page}});
      }
      std::vector<Status> st;
      std::vector<uint64_t> len;
      if (!store_->BatchGet(keys, bufs, &st, &len).ok()) continue;
      for (size_t i = 0; i < n; ++i) {
        ++all.keys;
        if (!st[i].ok()) continue;
        ++all.hits;
        if (tools::CheckPattern(slab.dst + i * o_.page, o_.page, 0, Seed(first + i)) != o_.page) ++all.wrong;
      }
    }
    return all;
  }

  Store* store() { return store_.get(); }
  Store* unverified() { return unverified_.get(); }

 private:
  struct Pool {
    std::string name;  // control address
    SegmentHandle segment;
  };
  struct PageAt {
    SegmentHandle segment;
    uint64_t addr, length;
  };
  const Options& o_;
  Engine* engine_;
  std::vector<std::unique_ptr<Slab>> slabs_;
  std::unique_ptr<Store> store_, unverified_;
  std::vector<Pool> pools_;
  std::vector<PageAt> pages_;
  bool bare_from_private_ = false;

 public:
  bool bare_from_private() const { return bare_from_private_; }
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Drive(const Options& o) {
  std::unique_ptr<Engine> engine;
  if (Status s = NewEngine(o, &engine); !s.ok()) return Fail("engine", s);
  Driver d(o, engine.get());
  if (Status s = d.Open(); !s.ok()) return Fail("store", s);
  if (Status s = d.Fill(); !s.ok()) return Fail("filling the working set", s);
  if (Status s = d.Locate(); !s.ok()) return Fail("locating the working set", s);
  std::fprintf(stderr, "store-bench: %zu members, working set %zu pages of %llu bytes, op %s, batch %zu, %zu threads\n",
               d.store()->Members().size(), o.working_set, static_cast<unsigned long long>(o.page), o.op.c_str(),
               o.batch, o.threads);
  if (d.bare_from_private())
    std::printf("bare READ and WRITE: of the nodes' private memory in huge pages (--ceiling, the working set's "
                "size), the fabric's best, whatever the pools' memory\n");
  nlohmann::json out = {{"bare_memory", d.bare_from_private() ? "private" : "pools"},
                        {"op", o.op},       {"page_bytes", o.page},    {"batch", o.batch},
                        {"threads", o.threads}, {"protocol", o.protocol}, {"members", d.store()->Members().size()},
                        {"working_set", o.working_set}, {"hit_ratio", o.hit_ratio}, {"rounds", nlohmann::json::array()}};
  std::vector<double> bare, bare_write, store, blind, keys_s, lone_get, lone_read, lone_rtt;
  uint64_t wrong = 0, failures = 0;
  const size_t depth = o.op == "lone" ? 1 : o.batch;
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t round = 0; round < o.rounds; ++round) {
    nlohmann::json r;
    if (o.op == "get" || o.op == "lone" || o.op == "put" || o.op == "mixed") {
      const Rate b = d.Window([&](size_t t, std::mt19937_64& rng) { return d.Bare(OpCode::kRead, t, rng, depth); });
      bare.push_back(b.gbps());
      r["bare_read_gbps"] = b.gbps();
      if (o.op == "lone") lone_read.push_back(b.seconds * 1e6 / std::max<uint64_t>(1, b.ops));
    }
    if (o.op == "put") {
      const Rate w = d.Window([&](size_t t, std::mt19937_64& rng) { return d.Bare(OpCode::kWrite, t, rng, depth); });
      bare_write.push_back(w.gbps());
      r["bare_write_gbps"] = w.gbps();
    }
    Rate s;
    if (o.op == "get" || o.op == "lone") {
      s = d.Window([&](size_t t, std::mt19937_64& rng) { return d.Get(d.store(), t, rng, depth); });
      if (d.unverified() != nullptr) {
        const Rate n = d.Window([&](size_t t, std::mt19937_64& rng) { return d.Get(d.unverified(), t, rng, depth); });
        blind.push_back(n.gbps());
        r["get_unverified_gbps"] = n.gbps();
      }
    } else if (o.op == "put") {
      s = d.Window([&](size_t t, std::mt19937_64& rng) { return d.Put(t, rng); });
    } else if (o.op == "exists") {
      s = d.Window([&](size_t, std::mt19937_64& rng) { return d.Exists(rng, o.batch); });
    } else {
      s = d.Window([&](size_t t, std::mt19937_64& rng) {
        return u(rng) < o.put_share ? d.Put(t, rng) : d.Get(d.store(), t, rng, o.batch);
      });
    }
    if (o.op == "lone") {
      lone_get.push_back(s.seconds * 1e6 / std::max<uint64_t>(1, s.ops));
      const Rate e = d.Window([&](size_t, std::mt19937_64& rng) { return d.Exists(rng, 1); });
      lone_rtt.push_back(e.seconds * 1e6 / std::max<uint64_t>(1, e.ops));
      r["lone_get_us"] = lone_get.back();
      r["lone_read_us"] = lone_read.back();
      r["control_rtt_us"] = lone_rtt.back();
    }
    store.push_back(s.gbps());
    keys_s.push_back(s.kps());
    wrong += s.wrong;
    failures += s.failures;
    r["store_gbps"] = s.gbps();
    r["keys_per_s"] = s.kps();
    r["hits"] = s.hits;
    r["keys"] = s.keys;
    out["rounds"].push_back(r);
    std::printf("round %zu: store %s %.3f GB/s, %.0f keys/s (%llu of %llu hit)%s%s\n", round + 1, o.op.c_str(),
                s.gbps(), s.kps(), static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.keys),
                (bare.empty() ? "" : "; bare READ " + std::to_string(bare.back()).substr(0, 5) + " GB/s" +
                                         (bare_write.empty() ? "" : ", WRITE " + std::to_string(bare_write.back()).substr(0, 5) + " GB/s"))
                    .c_str(),
                blind.empty() ? "" : ("; GET unverified " + std::to_string(blind.back()).substr(0, 5) + " GB/s").c_str());
  }
  const double ms = Median(store), mb = Median(bare);
  out["median_store_gbps"] = ms;
  out["median_keys_per_s"] = Median(keys_s);
  out["wrong_pages"] = wrong;
  out["failures"] = failures;
  std::printf("median: store %s %.3f GB/s, %.0f keys/s", o.op.c_str(), ms, Median(keys_s));
  if (!bare.empty()) {
    out["median_bare_read_gbps"] = mb;
    out["ratio_to_bare_read"] = mb > 0 ? ms / mb : 0;
    std::printf("; bare READ %.3f GB/s; ratio %.3f", mb, mb > 0 ? ms / mb : 0);
  }
  if (!bare_write.empty()) {
    const double mw = Median(bare_write);
    out["median_bare_write_gbps"] = mw;
    out["ratio_to_bare_write"] = mw > 0 ? ms / mw : 0;
    std::printf("; bare WRITE %.3f GB/s; ratio %.3f", mw, mw > 0 ? ms / mw : 0);
  }
  if (!blind.empty()) {
    out["median_get_unverified_gbps"] = Median(blind);
    std::printf("; unverified GET %.3f GB/s (checksum costs %.1f%%)", Median(blind),
                Median(blind) > 0 ? 100 * (1 - ms / Median(blind)) : 0);
  }
  if (o.op == "lone") {
    const double g = Median(lone_get), rd = Median(lone_read), rtt = Median(lone_rtt);
    out["median_lone_get_us"] = g;
    out["median_lone_read_us"] = rd;
    out["median_control_rtt_us"] = rtt;
    out["lone_bound_us"] = (rd + rtt) * 1.2;
    std::printf("\nlone GET %.1f us; bare READ %.1f us + control round trip %.1f us = %.1f us (+20%%: %.1f us)", g, rd, rtt,
                rd + rtt, (rd + rtt) * 1.2);
  }
  std::printf("; %llu wrong pages, %llu failed keys\n", static_cast<unsigned long long>(wrong),
              static_cast<unsigned long long>(failures));
  if (o.op == "get" || o.op == "lone" || o.op == "mixed") {
    const StoreStats st = d.store()->Stats();
    out["get_keys"] = st.get_keys;
    out["get_cached"] = st.get_cached;
    out["get_cached_stale"] = st.get_cached_stale;
    out["get_no_lookup"] = st.get_no_lookup;
    std::printf("location cache (KVF_STORE_LOCATION_CACHE): %llu of %llu pages read at once from a remembered "
                "location and confirmed, %llu of them with no lookup; %llu guesses not confirmed\n",
                static_cast<unsigned long long>(st.get_cached), static_cast<unsigned long long>(st.get_keys),
                static_cast<unsigned long long>(st.get_no_lookup), static_cast<unsigned long long>(st.get_cached_stale));
  }
  if (o.op == "put" || o.op == "mixed") {
    const StoreStats st = d.store()->Stats();
    out["put_keys"] = st.put_keys;
    out["put_granted"] = st.put_granted;
    std::printf("granted slots (KVF_STORE_PUT_GRANTS): %llu of %llu pages written with no reserve round trip\n",
                static_cast<unsigned long long>(st.put_granted), static_cast<unsigned long long>(st.put_keys));
  }
  if (o.json) std::printf("%s\n", out.dump().c_str());
  return wrong == 0 ? 0 : 3;
}

// A serve process started by `local`.
struct Served {
  pid_t pid = -1;
  int out = -1;
  std::string name;
  std::string ceiling;  // its ceiling region, as Options::ceilings holds it
};

std::vector<std::string> ServeArgs(const char* self, const Options& o, const std::string& listen,
                                   const std::string& members) {
  // Each node's ceiling region holds its share of the working set, as its pool does.
  const uint64_t share = (o.working_set * o.page + o.nodes - 1) / o.nodes;
  const uint64_t ceiling = std::max<uint64_t>(o.page, (share + (2 << 20) - 1) / (2 << 20) * (2 << 20));
  std::vector<std::string> a = {self, "serve", "--protocol", o.protocol, "--pool", std::to_string(o.pool),
                                "--listen", listen, "--members", members, "--metadata", o.metadata,
                                "--ceiling", std::to_string(ceiling)};
  if (o.copies > 1) a.insert(a.end(), {"--set", "store_max_copies=" + std::to_string(o.copies)});
  for (const auto& kv : o.set) a.insert(a.end(), {"--set", kv});
  return a;
}

Status StartServe(const std::vector<std::string>& args, Served* s) {
  int p[2];
  if (pipe(p) != 0) return Status::Internal("pipe");
  s->pid = fork();
  if (s->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(p[1], 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(p[1]);
  s->out = p[0];
  std::string line;
  char c;
  while (read(s->out, &c, 1) == 1 && c != '\n') line.push_back(c);
  if (line.rfind("READY ", 0) != 0) return Status::Unavailable("a node did not start: '" + line + "'");
  std::istringstream words(line.substr(6));
  std::string engine_name;
  unsigned long long addr = 0, bytes = 0;
  words >> s->name >> engine_name >> addr >> bytes;
  if (bytes > 0) s->ceiling = engine_name + "@" + std::to_string(addr) + "+" + std::to_string(bytes);
  return Status::OK();
}

int Local(const char* self, Options o) {
  // Ports: the nodes list each other, so their addresses are chosen first.
  std::vector<std::string> names;
  for (size_t i = 0; i < o.nodes; ++i) {
    int fd = -1;
    if (!net::OpenTcpSocket(AF_INET, "127.0.0.1", &fd).ok()) return 1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return 1;
    names.push_back("127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
    close(fd);
  }
  std::string members;
  for (const auto& n : names) members += (members.empty() ? "" : ",") + n;
  std::vector<Served> served(o.nodes);
  for (size_t i = 0; i < o.nodes; ++i)
    if (Status s = StartServe(ServeArgs(self, o, names[i], members), &served[i]); !s.ok()) return Fail("local", s);
  std::fprintf(stderr, "store-bench: %zu nodes on this host: %s\n", o.nodes, members.c_str());
  o.members = members;
  for (const Served& s : served)
    if (!s.ceiling.empty()) o.ceilings.push_back(s.ceiling);
  int rc = Drive(o);
  if (rc == 0 && o.kill) {
    std::unique_ptr<Engine> engine;
    if (Status s = NewEngine(o, &engine); !s.ok()) return Fail("engine", s);
    Options check = o;
    check.check = true;
    Driver d(check, engine.get());
    if (Status s = d.Open(); !s.ok()) return Fail("store", s);
    if (Status s = d.Fill(); !s.ok()) return Fail("filling", s);
    const Rate before = d.ReadAll();
    kill(served.back().pid, SIGKILL);
    waitpid(served.back().pid, nullptr, 0);
    served.back().pid = -1;
    const Rate after = d.ReadAll();
    std::printf("killed node %s: %llu of %llu pages still served before, %llu after (about %zu%% lost: its share); "
                "%llu wrong pages\n",
                served.back().name.c_str(), static_cast<unsigned long long>(before.hits),
                static_cast<unsigned long long>(before.keys), static_cast<unsigned long long>(after.hits),
                static_cast<size_t>(100 - 100 * after.hits / std::max<uint64_t>(1, before.hits)),
                static_cast<unsigned long long>(before.wrong + after.wrong));
    if (before.wrong + after.wrong > 0) rc = 3;
  }
  for (Served& s : served)
    if (s.pid > 0) {
      kill(s.pid, SIGTERM);
      waitpid(s.pid, nullptr, 0);
    }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kvfabric-store-bench: the KV-cache store beside the bare engine READ, measured in the same run"};
  app.require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("--protocol", o.protocol, "efa, tcp, shm, verbs, sockets or auto");
    c->add_option("--metadata", o.metadata, "p2p (members from --members), etcd://host:port or http://host:port/path");
    c->add_option("--members", o.members, "static member list: control addresses host:port, comma-separated");
    c->add_option("--set", o.set, "a setting NAME=VALUE (repeatable), e.g. --set store_deadline_ms=2000");
    c->add_option("--local_server_name", o.local_server_name, "host:port of the engine's handshake server (port 0: any)");
    c->add_option("--nic_filter", o.nic_filter, "libfabric domains (rails) to use, comma-separated, e.g. b0,b1,b2,b3; empty: all");
  };
  auto drive = [&](CLI::App* c) {
    c->add_option("--op", o.op, "get, put, exists, mixed or lone")
        ->check(CLI::IsMember({"get", "put", "exists", "mixed", "lone"}));
    c->add_option("--page", o.page, "page size (K, M suffixes)")->transform(CLI::AsSizeValue(false));
    c->add_option("--batch", o.batch, "keys per batch call (and READs per bare batch)")->check(CLI::Range(1, 4096));
    c->add_option("--threads", o.threads, "client threads")->check(CLI::Range(1, 256));
    c->add_option("--working_set", o.working_set, "pages put before measuring")->check(CLI::Range(1, 1 << 24));
    c->add_option("--hit_ratio", o.hit_ratio, "share of keys asked that exist")->check(CLI::Range(0.0, 1.0));
    c->add_option("--put_share", o.put_share, "mixed: share of batches that are puts")->check(CLI::Range(0.0, 1.0));
    c->add_option("--duration", o.duration, "seconds measured per window");
    c->add_option("--warmup", o.warmup, "seconds before each window is measured");
    c->add_option("--rounds", o.rounds, "alternating windows (bare READ, bare WRITE for put, store) whose medians are reported")
        ->check(CLI::Range(1, 100));
    c->add_flag("--check", o.check, "pattern every page by its key and check every byte a GET returns");
    c->add_option("--copies", o.copies,
                  "copies of each page a PUT stores, on the key's first-ranked nodes (sets store_max_copies on "
                  "every process this run starts)")
        ->check(CLI::Range(1, 8));
    c->add_flag("--checksum_off_too", o.checksum_off_too, "also measure GETs without verification (what it costs)");
    c->add_flag("--json", o.json, "print one JSON object with every round");
  };
  CLI::App* serve = app.add_subcommand("serve", "run a node until SIGINT/SIGTERM");
  common(serve);
  serve->add_option("--pool", o.pool, "pool size (K, M, G suffixes)")->transform(CLI::AsSizeValue(false));
  serve->add_option("--listen", o.listen, "control address host:port (port 0: any)");
  serve->add_option("--ceiling", o.ceiling,
                    "bytes of private memory (huge pages) to register for a driver's bare READ and WRITE; its "
                    "address follows READY")
      ->transform(CLI::AsSizeValue(false));
  CLI::App* drv = app.add_subcommand("drive", "drive running nodes");
  common(drv);
  drive(drv);
  CLI::App* local = app.add_subcommand("local", "start nodes on this host, drive them, stop them");
  common(local);
  drive(local);
  local->add_option("--nodes", o.nodes, "nodes to start")->check(CLI::Range(1, 32));
  local->add_option("--pool", o.pool, "each node's pool (K, M, G suffixes)")->transform(CLI::AsSizeValue(false));
  local->add_flag("--kill", o.kill, "afterwards, kill one node and read the working set again");
  tools::UseCurrentFlagNames(argc, argv, "kvfabric-store-bench");
  CLI11_PARSE(app, argc, argv);
  if (serve->parsed()) return Serve(o);
  if (drv->parsed()) return Drive(o);
  return Local(argv[0], o);
}
