// kvfabric._native.WeightSync: kvfabric::weights::WeightSync
// (include/kvfabric/weights.h) for kvfabric/weights.py, which turns
// Python's arrays into addresses and back. Every call that waits or copies
// releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "kvfabric/engine.h"
#include "kvfabric/weights.h"

namespace nb = nanobind;

namespace kvfabric::python {
namespace {

using weights::SyncOptions;
using weights::TensorRef;
using weights::WeightSync;
// (name, dtype, shape, address, bytes): a received tensor, valid until the next call.
using Received = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, uint64_t>;

class PyWeightSync {
 public:
  // `engine` is a kvfabric._native.Engine, held until this object's sync
  // is gone (the sync unregisters its slots from that engine).
  PyWeightSync(nb::object engine, uint64_t bucket_bytes, uint64_t manifest_bytes, int slots, int64_t timeout_ms,
               const std::string& host, int rails)
      : engine_(std::move(engine)) {
    const auto address = nb::cast<uintptr_t>(engine_.attr("ptr"));
    SyncOptions o;
    o.bucket_bytes = bucket_bytes;
    o.manifest_bytes = manifest_bytes;
    o.slots = slots;
    o.timeout_ms = timeout_ms;
    o.host = host;
    o.rails = rails;
    Status s;
    {
      nb::gil_scoped_release r;
      s = WeightSync::Create(reinterpret_cast<Engine*>(address), o, &sync_);
    }
    Check(s);
  }
  WeightSync& s() {
    if (!sync_) Check(Status::Closed("the weight sync was closed"));
    return *sync_;
  }
  std::string Describe() { return s().Describe(); }
  nb::dict Stats() {
    const weights::SyncStats st = s().Stats();
    nb::dict d;
    d["buckets"] = st.buckets;
    d["bytes"] = st.bytes;
    d["copy_s"] = st.copy_ns / 1e9;
    d["checksum_s"] = st.checksum_ns / 1e9;
    d["notice_wait_s"] = st.notice_wait_ns / 1e9;
    d["write_wait_s"] = st.write_wait_ns / 1e9;
    return d;
  }
  std::vector<int> Parents() { return s().parents(); }
  void Connect(const std::vector<std::string>& members, int me) { Check(s().Connect(members, me)); }
  void BeginSend(uint64_t version) { Check(s().BeginSend(version)); }
  void Send(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape, uintptr_t data,
            uint64_t bytes) {
    Check(s().Send({name, dtype, shape, reinterpret_cast<const void*>(data), bytes}));
  }
  void EndSend() { Check(s().EndSend()); }
  void BeginReceive(uint64_t version) { Check(s().BeginReceive(version)); }
  // The next tensor, or None when the version is complete.
  std::optional<Received> Next() {
    TensorRef t;
    bool done = false;
    Check(s().Next(&t, &done));
    if (done) return std::nullopt;
    return Received{t.name, t.dtype, t.shape, reinterpret_cast<uintptr_t>(t.data), t.bytes};
  }

  ~PyWeightSync() { Close(); }
  // Unregisters the slots (after the WRITEs still reading them); idempotent.
  void Close() {
    nb::gil_scoped_release r;
    sync_.reset();
  }

 private:
  nb::object engine_;  // declared first: released after sync_
  std::unique_ptr<WeightSync> sync_;
};

}  // namespace

void BindWeights(nb::module_& m) {
  using Release = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<PyWeightSync>(m, "WeightSync")
      .def(nb::init<nb::object, uint64_t, uint64_t, int, int64_t, const std::string&, int>(), nb::arg("engine"),
           nb::arg("bucket_bytes"), nb::arg("manifest_bytes"), nb::arg("slots"), nb::arg("timeout_ms"),
           nb::arg("host"), nb::arg("rails"))
      .def("describe", &PyWeightSync::Describe)
      .def("close", &PyWeightSync::Close)
      .def("parents", &PyWeightSync::Parents)
      .def("stats", &PyWeightSync::Stats)
      .def("connect", &PyWeightSync::Connect, nb::arg("members"), nb::arg("me"), Release())
      .def("begin_send", &PyWeightSync::BeginSend, nb::arg("version"), Release())
      .def("send", &PyWeightSync::Send, nb::arg("name"), nb::arg("dtype"), nb::arg("shape"), nb::arg("data"),
           nb::arg("bytes"), Release())
      .def("end_send", &PyWeightSync::EndSend, Release())
      .def("begin_receive", &PyWeightSync::BeginReceive, nb::arg("version"), Release())
      .def("next", &PyWeightSync::Next, Release());
}

}  // namespace kvfabric::python
