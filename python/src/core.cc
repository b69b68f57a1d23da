// kvfabric._core: the C++ engine for Python (nanobind). The Pythonic layer
// (kvfabric/__init__.py) wraps it; this module stays a thin, typed mirror of
// include/kvfabric/engine.h. Every call that can block (handshakes,
// registration, transfers, waits) releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <rdma/fabric.h>

#include "fabric/fabric_info.h"
#include "kvfabric/engine.h"

namespace nb = nanobind;
using kvfabric::Status;

namespace {

// A failed Status crossing into Python. The translator turns it into the
// exception class kvfabric/errors.py registered for its code.
struct StatusError {
  Status status;
};

// dict: code (int) -> exception class. A raw, deliberately leaked reference:
// a global nb::object would be released after the interpreter is gone.
PyObject* g_error_classes = nullptr;

void Check(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}

using Release = nb::call_guard<nb::gil_scoped_release>;
// (opcode, local address, segment, remote address, length); opcode 0 READ, 1 WRITE.
using Request = std::tuple<int, uintptr_t, int64_t, uint64_t, uint64_t>;
// (state, transferred bytes, error code, error message)
using StatusTuple = std::tuple<int, uint64_t, int, std::string>;

std::vector<kvfabric::TransferRequest> ToRequests(const std::vector<Request>& in) {
  std::vector<kvfabric::TransferRequest> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto& [op, local, seg, raddr, len] = in[i];
    if (op != 0 && op != 1)
      Check(Status::InvalidArgument("request " + std::to_string(i) + ": opcode must be 0 (READ) or 1 (WRITE)"));
    out[i] = {op == 0 ? kvfabric::OpCode::kRead : kvfabric::OpCode::kWrite, reinterpret_cast<void*>(local), seg,
              raddr, static_cast<size_t>(len)};
  }
  return out;
}

StatusTuple ToTuple(const kvfabric::TransferStatus& s) {
  return {static_cast<int>(s.state), s.transferred_bytes, static_cast<int>(s.error.code()),
          s.error.ok() ? std::string() : s.error.ToString()};
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

  kvfabric::Engine& e() {
    if (!engine_) Check(Status::InvalidArgument("the engine is closed"));
    return *engine_;
  }
  void Close() {
    nb::gil_scoped_release r;
    engine_.reset();
  }
  bool closed() const { return !engine_; }

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
  std::vector<std::string> GetNotifies() {
    std::vector<std::string> v;
    Check(e().GetNotifies(&v));
    return v;
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
  void FreeBatch(uint64_t batch) { Check(e().FreeBatch(batch)); }
  void Transfer(const std::vector<kvfabric::TransferRequest>& reqs) { Check(e().Transfer(reqs)); }

 private:
  std::unique_ptr<kvfabric::Engine> engine_;
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

NB_MODULE(_core, m) {
  m.doc() = "kvfabric engine core (C++); use the kvfabric package, not this module.";

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
      nb::object exc = cls(nb::str(e.status.ToString().c_str()), nb::int_(code));
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });
  m.def("_set_error_classes", [](nb::dict d) {
    Py_XDECREF(g_error_classes);
    g_error_classes = d.inc_ref().ptr();
  });

  m.def("buffer_info", &BufferInfo, nb::arg("buffer"),
        "(address, nbytes, dlpack device type, device id, read-only) of a buffer-protocol or DLPack object.");
  m.def("libfabric_versions", [] {
    auto fmt = [](uint32_t v) { return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)); };
    return std::map<std::string, std::string>{{"library", fmt(fi_version())},
                                              {"headers", fmt(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION))},
                                              {"requested", fmt(kvfabric::fabric::ApiVersion())}};
  }, "The loaded libfabric's version, the one kvfabric was built against, and the API version it requests.");
  m.def("fabric_domains", [](const std::string& protocol) {
    std::vector<std::map<std::string, std::string>> out;
    std::string provider;
    Check(kvfabric::fabric::ProviderForProtocol(protocol, &provider));
    kvfabric::fabric::InfoList list;
    if (!kvfabric::fabric::InfoList::Query(provider, &list).ok()) return out;
    for (const fi_info* i : list.entries())
      out.push_back({{"provider", i->fabric_attr->prov_name},
                     {"domain", i->domain_attr->name},
                     {"fabric", i->fabric_attr->name},
                     {"ip", kvfabric::fabric::SourceIp(i)},
                     {"hmem", (i->caps & FI_HMEM) ? "yes" : "no"}});
    return out;
  }, nb::arg("protocol"), "The usable libfabric domains (rails) of a protocol; empty when it is absent.");
  m.def("setting_table", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::string>> out;
    for (const auto& s : kvfabric::Settings::Table()) out.emplace_back(s.env, s.type, s.default_value, s.meaning);
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
      .def("register", &PyEngine::Register, Release())
      .def("unregister", &PyEngine::Unregister, Release())
      .def("register_batch", &PyEngine::RegisterBatch, Release())
      .def("unregister_batch", &PyEngine::UnregisterBatch, Release())
      .def("open_segment", &PyEngine::OpenSegment, Release())
      .def("close_segment", &PyEngine::CloseSegment, Release())
      .def("segment_buffers", &PyEngine::SegmentBuffers, Release())
      .def("warmup", &PyEngine::Warmup, Release())
      .def("probe", &PyEngine::Probe, Release())
      .def("send_notify", &PyEngine::SendNotify, Release())
      .def("get_notifies", &PyEngine::GetNotifies)
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
      .def("free_batch", &PyEngine::FreeBatch)
      .def(
          "transfer",
          [](PyEngine& self, const std::vector<Request>& reqs) {
            auto v = ToRequests(reqs);
            nb::gil_scoped_release r;
            self.Transfer(v);
          },
          nb::arg("requests"));
}
