// kvfabric._native: the C++ engine for Python (nanobind), imported as
// kvfabric._core (kvfabric/_core.py names what is missing when it cannot
// load). The Pythonic layer (kvfabric/engine.py) wraps it; this module stays
// a thin, typed mirror of include/kvfabric/engine.h. Every call that can block (handshakes,
// registration, transfers, waits) releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kvfabric/diagnostics.h"
#include "kvfabric/engine.h"
#include "kvfabric/store.h"
#include "bindings.h"

namespace nb = nanobind;
using kvfabric::Status;

namespace {

using kvfabric::python::Check;
using kvfabric::python::StatusError;

// dict: code (int) -> exception class. A raw, deliberately leaked reference:
// a global nb::object would be released after the interpreter is gone.
PyObject* g_error_classes = nullptr;

using Release = nb::call_guard<nb::gil_scoped_release>;
// (opcode, local address, segment, remote address, length, notice); opcode 0
// READ, 1 WRITE; notice 0 for none.
using Request = std::tuple<int, uintptr_t, int64_t, uint64_t, uint64_t, uint32_t>;
// (state, transferred bytes, error code, error message)
using StatusTuple = std::tuple<int, uint64_t, int, std::string>;

std::vector<kvfabric::TransferRequest> ToRequests(const std::vector<Request>& in) {
  std::vector<kvfabric::TransferRequest> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto& [op, local, seg, raddr, len, notice] = in[i];
    if (op != 0 && op != 1)
      Check(Status::InvalidArgument("request " + std::to_string(i) + ": opcode must be 0 (READ) or 1 (WRITE)"));
    if (notice > 0xffff)
      Check(Status::InvalidArgument("request " + std::to_string(i) + ": a notice is 1 to 65535 (0: none)"));
    out[i] = {op == 0 ? kvfabric::OpCode::kRead : kvfabric::OpCode::kWrite, reinterpret_cast<void*>(local), seg,
              raddr, static_cast<size_t>(len), static_cast<uint16_t>(notice)};
  }
  return out;
}

// Mooncake's batch shape: one target, one opcode, and parallel lists of local
// addresses, remote addresses and lengths, already converted from Python
// (nanobind converts each list in one pass, with the GIL held).
std::vector<kvfabric::TransferRequest> ListRequests(kvfabric::SegmentHandle target, int op,
                                                    const std::vector<uint64_t>& locals,
                                                    const std::vector<uint64_t>& remotes,
                                                    const std::vector<uint64_t>& lengths) {
  if (op != 0 && op != 1) Check(Status::InvalidArgument("opcode must be 0 (READ) or 1 (WRITE)"));
  if (locals.size() != remotes.size() || locals.size() != lengths.size())
    Check(Status::InvalidArgument(std::to_string(locals.size()) + " local addresses, " +
                                  std::to_string(remotes.size()) + " remote addresses and " +
                                  std::to_string(lengths.size()) + " lengths: the lists must have one entry each"));
  const auto opcode = op == 0 ? kvfabric::OpCode::kRead : kvfabric::OpCode::kWrite;
  std::vector<kvfabric::TransferRequest> out(locals.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = {opcode, reinterpret_cast<void*>(static_cast<uintptr_t>(locals[i])), target, remotes[i],
              static_cast<size_t>(lengths[i])};
  return out;
}

// The settings the diagnostics prepare libfabric with (as an engine of
// this process would: the KVF_* variables).
kvfabric::Settings Environment() {
  kvfabric::Settings settings;
  Check(settings.ApplyEnvironment());
  return settings;
}

// A peer name as Mooncake's callers write it: vLLM builds f"{get_ip()}:{port}",
// so an IPv6 peer arrives as "fe80::1:15000"; the engine names it
// "[fe80::1]:15000" (the last colon separates the port).
std::string MooncakeName(const std::string& name) {
  if (name.empty() || name.front() == '[' || std::count(name.begin(), name.end(), ':') < 2) return name;
  const size_t colon = name.rfind(':');
  return "[" + name.substr(0, colon) + "]" + name.substr(colon);
}

StatusTuple ToTuple(const kvfabric::TransferStatus& s) {
  return {static_cast<int>(s.state), s.transferred_bytes, static_cast<int>(s.error.code()),
          s.error.ok() ? std::string() : s.error.ToString()};
}

// A dict of name, value pairs: Dict("a", 1, "b", "x").
inline void PutAll(nb::dict&) {}
template <typename V, typename... Rest>
void PutAll(nb::dict& d, const char* name, V&& value, Rest&&... rest) {
  d[name] = std::forward<V>(value);
  PutAll(d, std::forward<Rest>(rest)...);
}
template <typename... NamesAndValues>
nb::dict Dict(NamesAndValues&&... kv) {
  nb::dict d;
  PutAll(d, std::forward<NamesAndValues>(kv)...);
  return d;
}

class PyEngine {
 public:
  PyEngine(const std::string& local_server_name, const std::string& metadata, const std::string& protocol,
           const std::string& nic_filter, const std::map<std::string, std::string>& settings) {
    kvfabric::EngineConfig cfg;
    cfg.local_server_name = local_server_name;
    cfg.metadata = metadata;
    cfg.protocol = protocol;
    cfg.nic_filter = nic_filter;
    Check(cfg.settings.ApplyEnvironment());
    cfg.apply_environment = false;
    for (const auto& [k, v] : settings) Check(cfg.settings.Set(k, v));
    Status s;
    {
      nb::gil_scoped_release r;
      s = kvfabric::Engine::Create(cfg, &engine_);
    }
    Check(s);
  }

  // Set for the object's whole life: Close stops the engine but keeps the
  // object, so calls other threads make meanwhile (GIL released) return
  // ClosedError instead of touching freed memory; it goes with this object.
  kvfabric::Engine& e() { return *engine_; }
  void Close() {
    nb::gil_scoped_release r;  // calls on other threads finish first (Engine::Close waits for them)
    engine_->Close();
  }
  bool closed() const { return engine_->closed(); }

  std::string name() { return e().name(); }
  std::map<std::string, std::string> settings() {
    std::map<std::string, std::string> out;
    for (const auto& info : kvfabric::Settings::Table()) out[info.env] = e().settings().Get(info.env);
    return out;
  }
  std::vector<std::map<std::string, std::string>> rails() {
    std::vector<std::map<std::string, std::string>> out;
    for (const auto& r : e().rails())
      out.push_back({{"provider", r.provider},
                     {"domain", r.domain},
                     {"fabric", r.fabric},
                     {"tx_depth", std::to_string(r.tx_depth)},
                     {"max_msg_size", std::to_string(r.max_msg_size)},
                     {"completed_bytes", std::to_string(r.completed_bytes)}});
    return out;
  }

  // Engine::Stats as plain Python values (see kvfabric.Engine.stats).
  nb::dict Stats() {
    kvfabric::EngineStats st;
    {
      nb::gil_scoped_release r;
      Check(e().Stats(&st));
    }
    nb::list rails, peers, failures, latency, regs;
    for (const auto& r : st.rails)
      rails.append(Dict("index", r.index, "label", r.label, "provider", r.provider, "domain", r.domain,
                        "write_bytes", r.write_bytes, "read_bytes", r.read_bytes, "writes", r.writes, "reads",
                        r.reads, "errors", r.errors, "stalls", r.stalls, "recoveries", r.recoveries, "in_service",
                        r.in_service, "queued", r.queued, "in_flight", r.in_flight, "credits", r.credits,
                        "peer_slots", r.peer_slots));
    for (const auto& p : st.peers)
      peers.append(Dict("peer", p.peer, "write_requests", p.write_requests, "write_bytes", p.write_bytes,
                        "read_requests", p.read_requests, "read_bytes", p.read_bytes, "failures", p.failures));
    for (const auto& f : st.failures) failures.append(Dict("op", f.op, "code", f.code, "count", f.count));
    for (const auto& l : st.latency) {
      nb::list buckets;
      for (size_t i = 0; i < l.histogram.counts.size(); ++i)
        buckets.append(nb::make_tuple(
            i < l.histogram.upper_seconds.size() ? l.histogram.upper_seconds[i] : INFINITY, l.histogram.counts[i]));
      latency.append(Dict("op", l.op, "size_class", l.size_class, "count", l.histogram.count, "sum_seconds",
                          l.histogram.sum_seconds, "buckets", buckets));
    }
    for (const auto& r : st.registrations)
      regs.append(Dict("location", r.location, "buffers", r.buffers, "bytes", r.bytes));
    return Dict("engine", st.engine, "counting", st.counting, "metrics_address", e().metrics_address(), "rails",
                rails, "peers", peers, "failures", failures, "latency", latency, "reroutes",
                Dict("failed", st.reroutes_failed, "stalled", st.reroutes_stalled, "refused", st.reroutes_refused),
                "registrations", regs, "registrations_total", st.registrations_total, "registration_failures",
                st.registration_failures, "handshake_errors", st.handshake_errors, "metadata_errors",
                st.metadata_errors, "handshakes_refused", st.handshakes_refused, "segments_open", st.segments_open, "notice_messages",
                Dict("sent", st.notice_messages_sent, "failed", st.notice_messages_failed));
  }

  void Register(uintptr_t addr, uint64_t length, const std::string& location) {
    Check(e().RegisterMemory(reinterpret_cast<void*>(addr), length, location));
  }
  void Unregister(uintptr_t addr) { Check(e().UnregisterMemory(reinterpret_cast<void*>(addr))); }
  void RegisterBatch(const std::vector<std::tuple<uintptr_t, uint64_t, std::string>>& bufs) {
    std::vector<kvfabric::BufferEntry> v;
    for (const auto& [a, l, loc] : bufs) v.push_back({reinterpret_cast<void*>(a), static_cast<size_t>(l), loc});
    Check(e().RegisterMemoryBatch(v));
  }
  void UnregisterBatch(const std::vector<uintptr_t>& addrs) {
    std::vector<void*> v;
    for (auto a : addrs) v.push_back(reinterpret_cast<void*>(a));
    Check(e().UnregisterMemoryBatch(v));
  }

  int64_t OpenSegment(const std::string& name) {
    kvfabric::SegmentHandle h;
    Check(e().OpenSegment(name, &h));
    return h;
  }
  void CloseSegment(int64_t h) { Check(e().CloseSegment(h)); }
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> SegmentBuffers(int64_t h) {
    std::vector<kvfabric::RemoteBuffer> v;
    Check(e().GetSegmentBuffers(h, &v));
    std::vector<std::tuple<uint64_t, uint64_t, std::string>> out;
    for (const auto& b : v) out.emplace_back(b.addr, b.length, b.location);
    return out;
  }
  void Warmup(const std::string& name) { Check(e().Warmup(name)); }
  void Probe(const std::string& name) { Check(e().Probe(name)); }
  void SendNotify(const std::string& name, const std::string& message) { Check(e().SendNotify(name, message)); }
  // The received notifications as bytes (a message is any bytes: nothing is
  // decoded, so no message can fail to convert). What the engine handed over
  // stays in `taken_` until the Python list holding all of it exists: should
  // building it fail (MemoryError), the next call returns the same messages,
  // and nothing more is taken from the engine meanwhile, whose queue bound
  // then holds senders back (Busy) instead of growing this one. Called with
  // the GIL held, which serializes callers.
  nb::list GetNotifies() {
    if (taken_.empty()) Check(e().GetNotifies(&taken_));
    nb::list out;
    for (const auto& m : taken_) out.append(nb::bytes(m.data(), m.size()));
    taken_.clear();
    return out;
  }

  uint64_t AllocateBatch(uint64_t capacity) {
    kvfabric::BatchId id;
    Check(e().AllocateBatch(capacity, &id));
    return id;
  }
  void Submit(uint64_t batch, const std::vector<kvfabric::TransferRequest>& reqs) { Check(e().Submit(batch, reqs)); }
  StatusTuple TaskStatus(uint64_t batch, uint64_t task) {
    kvfabric::TransferStatus s;
    Check(e().GetTaskStatus(batch, task, &s));
    return ToTuple(s);
  }
  StatusTuple BatchStatus(uint64_t batch) {
    kvfabric::TransferStatus s;
    Check(e().GetBatchStatus(batch, &s));
    return ToTuple(s);
  }
  StatusTuple WaitBatch(uint64_t batch, int64_t timeout_ms) {
    kvfabric::TransferStatus s;
    Check(e().WaitBatch(batch, timeout_ms, &s));
    return ToTuple(s);
  }
  void ExpireBatch(uint64_t batch) { Check(e().ExpireBatch(batch)); }
  void FreeBatch(uint64_t batch) { Check(e().FreeBatch(batch)); }
  void Transfer(const std::vector<kvfabric::TransferRequest>& reqs) { Check(e().Transfer(reqs)); }

  // The list forms (called with the GIL released): the target by name
  // (opened once, then cached by the engine; see MooncakeName), one opcode,
  // parallel lists.
  void TransferTo(const std::string& target, int op, const std::vector<uint64_t>& locals,
                  const std::vector<uint64_t>& remotes, const std::vector<uint64_t>& lengths) {
    EngineTime t(this);
    auto reqs = ListRequests(OpenSegment(MooncakeName(target)), op, locals, remotes, lengths);
    if (!reqs.empty()) Transfer(reqs);
  }
  // Allocates a batch, submits the lists and returns its id (never 0); on
  // any failure nothing stays allocated.
  uint64_t SubmitTo(const std::string& target, int op, const std::vector<uint64_t>& locals,
                    const std::vector<uint64_t>& remotes, const std::vector<uint64_t>& lengths) {
    EngineTime t(this);
    auto reqs = ListRequests(OpenSegment(MooncakeName(target)), op, locals, remotes, lengths);
    if (reqs.empty()) Check(Status::InvalidArgument("an empty batch"));
    const uint64_t batch = AllocateBatch(reqs.size());
    Status s = e().Submit(batch, reqs);
    if (!s.ok()) {
      (void)e().FreeBatch(batch);
      Check(s);
    }
    return batch;
  }
  void RegisterList(const std::vector<uint64_t>& addrs, const std::vector<uint64_t>& lengths,
                    const std::string& location) {
    if (addrs.size() != lengths.size())
      Check(Status::InvalidArgument(std::to_string(addrs.size()) + " addresses but " + std::to_string(lengths.size()) +
                                    " lengths"));
    std::vector<kvfabric::BufferEntry> v(addrs.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = {reinterpret_cast<void*>(static_cast<uintptr_t>(addrs[i])), static_cast<size_t>(lengths[i]), location};
    Check(e().RegisterMemoryBatch(v));
  }
  uintptr_t ptr() { return reinterpret_cast<uintptr_t>(&e()); }
  // Nanoseconds the list calls spent past their argument conversion, GIL
  // released: wall time, and the calling thread's CPU time. A caller's own
  // time minus these is what Python and the list conversion cost
  // (tools/bench/python_vs_cpp.py reports it per request).
  uint64_t engine_ns() const { return engine_ns_.load(std::memory_order_relaxed); }
  uint64_t engine_cpu_ns() const { return engine_cpu_ns_.load(std::memory_order_relaxed); }

 private:
  // Adds the wall and this thread's CPU time of a scope to two totals.
  struct EngineTime {
    explicit EngineTime(PyEngine* e) : e(e), wall0(std::chrono::steady_clock::now()), cpu0(ThreadCpuNs()) {}
    ~EngineTime() {
      const auto wall = std::chrono::steady_clock::now() - wall0;
      e->engine_ns_.fetch_add(
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count()),
          std::memory_order_relaxed);
      e->engine_cpu_ns_.fetch_add(ThreadCpuNs() - cpu0, std::memory_order_relaxed);
    }
    static uint64_t ThreadCpuNs() {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
    }
    PyEngine* e;
    std::chrono::steady_clock::time_point wall0;
    uint64_t cpu0;
  };

  std::unique_ptr<kvfabric::Engine> engine_;
  std::vector<std::string> taken_;  // notifications taken from the engine, not yet returned
  std::atomic<uint64_t> engine_ns_{0};
  std::atomic<uint64_t> engine_cpu_ns_{0};
};

// kvfabric.Store's core: the batch calls take parallel lists (keys, and per
// key its buffers as addresses and lengths), converted with the GIL held,
// and run with it released. Per-key results follow Mooncake's convention:
// 0 (put, remove) or the page's length (get) on success, else the negated
// status code, beside the (index, code, message) of each key that failed.
class PyStore {
 public:
  // Per key a result, and (index, code, message) of each failure.
  using Results = std::pair<std::vector<int64_t>, std::vector<std::tuple<size_t, int, std::string>>>;
  PyStore(PyEngine& engine, const std::map<std::string, std::string>& settings) {
    kvfabric::Settings s = engine.e().settings();
    for (const auto& [k, v] : settings) Check(s.Set(k, v));
    Status st;
    {
      nb::gil_scoped_release r;
      st = kvfabric::Store::Create(&engine.e(), s, &store_);
    }
    Check(st);
  }
  void Close() {
    nb::gil_scoped_release r;
    store_->Close();
  }
  std::string name() const { return store_->name(); }
  std::vector<std::string> members() const { return store_->Members(); }

  Results Put(const std::vector<std::string>& keys, const std::vector<std::vector<uint64_t>>& addrs,
                           const std::vector<std::vector<uint64_t>>& lengths, uint32_t copies) {
    auto bufs = Buffers(keys.size(), addrs, lengths);
    std::vector<Status> st;
    {
      nb::gil_scoped_release r;
      Check(store_->BatchPut(keys, bufs, &st, kvfabric::StorePutOptions{copies}));
    }
    return Codes(st, nullptr);
  }
  Results Get(const std::vector<std::string>& keys, const std::vector<std::vector<uint64_t>>& addrs,
                           const std::vector<std::vector<uint64_t>>& lengths) {
    auto bufs = Buffers(keys.size(), addrs, lengths);
    std::vector<Status> st;
    std::vector<uint64_t> got;
    {
      nb::gil_scoped_release r;
      Check(store_->BatchGet(keys, bufs, &st, &got));
    }
    return Codes(st, &got);
  }
  std::pair<std::vector<bool>, size_t> Exists(const std::vector<std::string>& keys) {
    std::vector<bool> found;
    size_t leading = 0;
    nb::gil_scoped_release r;
    Check(store_->BatchExists(keys, &found, &leading));
    return {found, leading};
  }
  // Per key (segment, address, length, valid_ms) of its page (empty segment
  // when the key failed), beside the codes.
  std::pair<Results, std::vector<std::tuple<std::string, uint64_t, uint64_t, uint64_t>>> Locate(
      const std::vector<std::string>& keys) {
    std::vector<Status> st;
    std::vector<kvfabric::StorePage> pages;
    {
      nb::gil_scoped_release r;
      Check(store_->BatchLocate(keys, &pages, &st));
    }
    std::vector<std::tuple<std::string, uint64_t, uint64_t, uint64_t>> out;
    out.reserve(pages.size());
    for (const auto& p : pages) out.emplace_back(p.segment, p.addr, p.length, p.valid_ms);
    return {Codes(st, nullptr), std::move(out)};
  }
  Results KeyOp(const std::string& op, const std::vector<std::string>& keys) {
    std::vector<Status> st;
    {
      nb::gil_scoped_release r;
      if (op == "remove") Check(store_->BatchRemove(keys, &st));
      else if (op == "pin") Check(store_->BatchPin(keys, &st));
      else Check(store_->BatchUnpin(keys, &st));
    }
    return Codes(st, nullptr);
  }
  uint64_t RemoveAll() {
    uint64_t n = 0;
    nb::gil_scoped_release r;
    Check(store_->RemoveAll(&n));
    return n;
  }
  std::map<std::string, uint64_t> Stats() const {
    const kvfabric::StoreStats s = store_->Stats();
    std::map<std::string, uint64_t> out;
#define KVF_STORE_STAT_ENTRY_(name, meaning) out[#name] = s.name;
    KVF_STORE_STATS(KVF_STORE_STAT_ENTRY_)
#undef KVF_STORE_STAT_ENTRY_
    return out;
  }
 private:
  static std::vector<std::vector<kvfabric::StoreBuffer>> Buffers(size_t keys,
                                                                 const std::vector<std::vector<uint64_t>>& addrs,
                                                                 const std::vector<std::vector<uint64_t>>& lengths) {
    if (addrs.size() != keys || lengths.size() != keys)
      Check(Status::InvalidArgument(std::to_string(keys) + " keys, " + std::to_string(addrs.size()) +
                                    " address lists and " + std::to_string(lengths.size()) +
                                    " length lists: one of each per key"));
    std::vector<std::vector<kvfabric::StoreBuffer>> out(keys);
    for (size_t i = 0; i < keys; ++i) {
      if (addrs[i].size() != lengths[i].size())
        Check(Status::InvalidArgument("key " + std::to_string(i) + ": " + std::to_string(addrs[i].size()) +
                                      " addresses but " + std::to_string(lengths[i].size()) + " lengths"));
      for (size_t j = 0; j < addrs[i].size(); ++j)
        out[i].push_back({reinterpret_cast<void*>(static_cast<uintptr_t>(addrs[i][j])), static_cast<size_t>(lengths[i][j])});
    }
    return out;
  }
  static Results Codes(const std::vector<Status>& st, const std::vector<uint64_t>* lengths) {
    Results out;
    out.first.resize(st.size());
    for (size_t i = 0; i < st.size(); ++i) {
      if (st[i].ok()) {
        out.first[i] = lengths != nullptr ? static_cast<int64_t>((*lengths)[i]) : 0;
        continue;
      }
      out.first[i] = -static_cast<int64_t>(st[i].code());
      out.second.emplace_back(i, static_cast<int>(st[i].code()), st[i].ToString());
    }
    return out;
  }

  std::unique_ptr<kvfabric::Store> store_;
};

// The address, size and device of anything nanobind's ndarray caster takes
// without copying: the buffer protocol (bytearray, memoryview, numpy), DLPack
// (torch, jax, cupy) and __array_interface__. Only C-contiguous memory: a
// strided view is not one range of bytes.
std::tuple<uintptr_t, uint64_t, int, int, bool> BufferInfo(nb::handle obj) {
  nb::ndarray<nb::c_contig> rw;
  if (nb::try_cast(obj, rw, /*convert=*/false))
    return {reinterpret_cast<uintptr_t>(rw.data()), rw.nbytes(), static_cast<int>(rw.device_type()),
            static_cast<int>(rw.device_id()), false};
  nb::ndarray<nb::ro, nb::c_contig> ro;
  if (nb::try_cast(obj, ro, /*convert=*/false))
    return {reinterpret_cast<uintptr_t>(ro.data()), ro.nbytes(), static_cast<int>(ro.device_type()),
            static_cast<int>(ro.device_id()), true};
  throw nb::type_error(("cannot take the memory of a " + std::string(nb::type_name(obj.type()).c_str()) +
                        ": pass an int address with a length, or a C-contiguous object with the buffer "
                        "protocol or DLPack (bytearray, memoryview, numpy array, torch tensor)")
                           .c_str());
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "kvfabric engine core (C++); use the kvfabric package, not this module.";
  // An Engine or Store a program never closed is still alive at interpreter
  // exit (a module-level object, a test class's store): not a leak to report.
  nb::set_leak_warnings(false);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const int code = static_cast<int>(e.status.code());
      nb::gil_scoped_acquire g;
      nb::object cls;
      if (g_error_classes != nullptr) {
        nb::dict classes = nb::borrow<nb::dict>(g_error_classes);
        if (classes.contains(nb::int_(code))) cls = classes[nb::int_(code)];
      }
      if (!cls.is_valid()) {
        PyErr_SetString(PyExc_RuntimeError, e.status.ToString().c_str());
        return;
      }
      nb::object exc = cls(nb::str(e.status.message().c_str()), nb::int_(code));  // the class names the code
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });
  kvfabric::python::BindWeights(m);
  m.def("_set_error_classes", [](nb::dict d) {
    Py_XDECREF(g_error_classes);
    g_error_classes = d.inc_ref().ptr();
  });
  // The declarations of kvfabric/codes.h: kvfabric/errors.py checks its
  // exception classes against status_codes(); TaskState and OpCode are the
  // enums kvfabric exports (IntEnum: equal to the C API's numbers).
  m.def("status_codes", [] {
    std::vector<std::tuple<std::string, int, std::string, std::string>> rows;
#define KVF_STATUS_ROW_(number, Name, C_NAME, meaning) rows.emplace_back(#Name, number, "KVF_" #C_NAME, meaning);
    KVF_STATUS_CODES(KVF_STATUS_ROW_)
#undef KVF_STATUS_ROW_
    return rows;
  }, "(name, code, C constant, meaning) of every failure code of the engine (0 is OK).");
  nb::enum_<kvfabric::TaskState> task_state(m, "TaskState", nb::is_arithmetic(),
                                            "The state of a request or a batch (kvfabric/codes.h).");
#define KVF_TASK_STATE_VALUE_(number, Name, C_NAME, meaning) \
  task_state.value(#C_NAME, kvfabric::TaskState::k##Name, meaning);
  KVF_TASK_STATES(KVF_TASK_STATE_VALUE_)
#undef KVF_TASK_STATE_VALUE_
  nb::enum_<kvfabric::OpCode> op_code(m, "OpCode", nb::is_arithmetic(), "What a request does (kvfabric/codes.h).");
#define KVF_OP_CODE_VALUE_(number, Name, C_NAME, meaning) op_code.value(#C_NAME, kvfabric::OpCode::k##Name, meaning);
  KVF_OP_CODES(KVF_OP_CODE_VALUE_)
#undef KVF_OP_CODE_VALUE_
  // ToRequests and ListRequests above take these numbers as ints.
  static_assert(static_cast<int>(kvfabric::OpCode::kRead) == 0 && static_cast<int>(kvfabric::OpCode::kWrite) == 1);

  m.def("buffer_info", &BufferInfo, nb::arg("buffer"),
        "(address, nbytes, dlpack device type, device id, read-only) of a buffer-protocol or DLPack object.");
  m.def("libfabric_versions", [] {
    const kvfabric::LibfabricVersions v = kvfabric::GetLibfabricVersions();
    return std::map<std::string, std::string>{{"library", v.library}, {"headers", v.headers}, {"requested", v.requested}};
  }, "The loaded libfabric's version, the one kvfabric was built against, and the API version it requests.");
  m.def("fabric_domains", [](const std::string& protocol) {
    std::vector<kvfabric::FabricDomain> domains;
    Check(kvfabric::ListFabricDomains(Environment(), protocol, "", &domains));
    std::vector<std::map<std::string, std::string>> out;
    for (const auto& d : domains)
      out.push_back({{"provider", d.provider}, {"domain", d.domain}, {"fabric", d.fabric}, {"ip", d.ip},
                     {"hmem", d.hmem ? "yes" : "no"}, {"rma", d.rma}});
    return out;
  }, nb::arg("protocol"), "The usable libfabric domains (rails) of a protocol; empty when it is absent.");
  m.def("log", &kvfabric::WriteLog, nb::arg("level"), nb::arg("message"),
        "Writes one line to the engine's log (error, warn, info or debug).");
  m.def("mooncake_name", &MooncakeName, nb::arg("name"),
        "A peer name as Mooncake's callers write it, as the engine names it ([v6]:port).");
  m.def("cuda_device_of", [](uintptr_t addr) {
    return kvfabric::CudaDeviceOf(reinterpret_cast<const void*>(addr));
  }, nb::arg("addr"), "The CUDA device ordinal of device memory at `addr`, or -1 (host memory, or no driver loaded).");
  m.def("cuda_stream_synchronize", [](uintptr_t stream, int device) {
    Check(kvfabric::CudaStreamSynchronize(stream, device));
  }, nb::arg("stream"), nb::arg("device"), Release(),
        "Waits for the work queued on a CUstream (0: the legacy default stream) of `device`.");
  m.def("local_topology", [](const std::string& protocol, const std::string& devices) {
    // What an engine of this protocol would use, by location: Mooncake's
    // get_local_topology() shape.
    std::string json;
    Check(kvfabric::DescribeTopology(Environment(), protocol, devices, kvfabric::TopologyFormat::kLocationMatrix,
                                     &json));
    return json;
  }, nb::arg("protocol"), nb::arg("devices"), Release(),
        "The rails near each location (cpu:N, cuda:N) as JSON: {location: [[near], [other]]}.");
  m.def("setting_table", [] {
    // (variable, type, default, meaning, values in words, choices, unit)
    std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string, std::vector<std::string>,
                           std::string>>
        out;
    for (const auto& s : kvfabric::Settings::Table())
      out.emplace_back(s.env, s.type, s.default_value, s.meaning, s.values, s.choices, s.unit);
    return out;
  });

  nb::class_<PyEngine>(m, "Engine")
      .def(nb::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::map<std::string, std::string>&>(),
           nb::arg("local_server_name"), nb::arg("metadata"), nb::arg("protocol"), nb::arg("nic_filter"),
           nb::arg("settings"))
      .def("close", &PyEngine::Close)
      .def_prop_ro("closed", &PyEngine::closed)
      .def_prop_ro("name", &PyEngine::name)
      .def("settings", &PyEngine::settings)
      .def("rails", &PyEngine::rails)
      .def("stats", &PyEngine::Stats)
      .def("register", &PyEngine::Register, Release())
      .def("unregister", &PyEngine::Unregister, Release())
      .def("register_batch", &PyEngine::RegisterBatch, Release())
      .def("unregister_batch", &PyEngine::UnregisterBatch, Release())
      .def("open_segment", &PyEngine::OpenSegment, Release())
      .def("close_segment", &PyEngine::CloseSegment, Release())
      .def("segment_buffers", &PyEngine::SegmentBuffers, Release())
      .def("warmup", &PyEngine::Warmup, Release())
      .def("probe", &PyEngine::Probe, Release())
      .def(
          "send_notify",
          [](PyEngine& self, const std::string& name, nb::bytes message) {
            // Any bytes (kvfabric.Engine.notify encodes a str as UTF-8),
            // copied while the GIL is held.
            std::string m(message.c_str(), message.size());
            nb::gil_scoped_release r;
            self.SendNotify(name, m);
          },
          nb::arg("name"), nb::arg("message"))
      .def("get_notifies", &PyEngine::GetNotifies, "The messages peers sent, oldest first, as bytes.")
      .def(
          "take_notices",
          [](PyEngine& self) {
            std::vector<uint16_t> out;
            Check(self.e().TakeNotices(&out));
            return out;
          },
          "The notices of WRITEs that landed here whole since the last call.")
      .def(
          "wait_notices",
          [](PyEngine& self, int64_t timeout_ms) {
            std::vector<uint16_t> out;
            {
              nb::gil_scoped_release r;
              Check(self.e().WaitNotices(timeout_ms, &out));
            }
            return out;
          },
          nb::arg("timeout_ms"), "take_notices, waiting up to timeout_ms for at least one.")
      .def("allocate_batch", &PyEngine::AllocateBatch)
      .def(
          "submit",
          [](PyEngine& self, uint64_t batch, const std::vector<Request>& reqs) {
            auto v = ToRequests(reqs);
            nb::gil_scoped_release r;
            self.Submit(batch, v);
          },
          nb::arg("batch"), nb::arg("requests"))
      .def("task_status", &PyEngine::TaskStatus)
      .def("batch_status", &PyEngine::BatchStatus)
      .def("wait_batch", &PyEngine::WaitBatch, Release())
      .def("expire_batch", &PyEngine::ExpireBatch, Release())
      .def("free_batch", &PyEngine::FreeBatch)
      .def("transfer_to", &PyEngine::TransferTo, nb::arg("target"), nb::arg("opcode"), nb::arg("locals"),
           nb::arg("remotes"), nb::arg("lengths"), Release())
      .def("submit_to", &PyEngine::SubmitTo, nb::arg("target"), nb::arg("opcode"), nb::arg("locals"),
           nb::arg("remotes"), nb::arg("lengths"), Release())
      .def("register_list", &PyEngine::RegisterList, nb::arg("addrs"), nb::arg("lengths"), nb::arg("location"),
           Release())
      .def_prop_ro("ptr", &PyEngine::ptr)
      .def_prop_ro("engine_ns", &PyEngine::engine_ns)
      .def_prop_ro("engine_cpu_ns", &PyEngine::engine_cpu_ns)
      .def(
          "transfer",
          [](PyEngine& self, const std::vector<Request>& reqs) {
            auto v = ToRequests(reqs);
            nb::gil_scoped_release r;
            self.Transfer(v);
          },
          nb::arg("requests"));

  nb::class_<PyStore>(m, "Store")
      .def(nb::init<PyEngine&, const std::map<std::string, std::string>&>(), nb::arg("engine"), nb::arg("settings"),
           nb::keep_alive<1, 2>())
      .def("close", &PyStore::Close)
      .def_prop_ro("name", &PyStore::name)
      .def("members", &PyStore::members)
      .def("batch_put", &PyStore::Put, nb::arg("keys"), nb::arg("addrs"), nb::arg("lengths"), nb::arg("copies") = 1)
      .def("batch_get", &PyStore::Get, nb::arg("keys"), nb::arg("addrs"), nb::arg("lengths"))
      .def("batch_exists", &PyStore::Exists, nb::arg("keys"))
      .def("key_op", &PyStore::KeyOp, nb::arg("op"), nb::arg("keys"))
      .def("batch_locate", &PyStore::Locate, nb::arg("keys"))
      .def("remove_all", &PyStore::RemoveAll)
      .def("stats", &PyStore::Stats);
}
