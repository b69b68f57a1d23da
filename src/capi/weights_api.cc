// The weight sync's C API (kvf_weights_* in include/kvfabric.h) over
// kvfabric::weights::WeightSync: the handle, the options, and tensors
// turned between the C struct and the C++ one.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/handles.h"
#include "kvfabric.h"
#include "kvfabric/weights.h"

// The handle: the sync, a use of its engine's handle (so the engine's
// object outlives the sync whatever the order of destroys), and what the
// last received tensor's C view points into.
struct kvf_weights {
  std::unique_ptr<kvfabric::weights::WeightSync> sync;
  kvf_engine* engine = nullptr;  // a use of it, released with this handle
  std::string name, dtype;       // of the tensor kvf_weights_next gave last
  std::vector<int64_t> shape;

  ~kvf_weights() {
    sync.reset();
    if (engine != nullptr) kvfabric::capi::Release(engine);
  }
};

namespace {

using kvfabric::Status;
using kvfabric::capi::Guard;
using kvfabric::weights::SyncOptions;
using kvfabric::weights::TensorRef;
using kvfabric::weights::WeightSync;

// A call on a sync: f(sync) if the handle and its engine are there.
template <typename F>
int WithSync(kvf_weights* w, F&& f) {
  return Guard([&]() -> Status {
    if (w == nullptr || !w->sync) return Status::InvalidArgument("weights is NULL");
    if (w->engine->engine->closed())
      return Status::Closed("weight sync: its engine " + w->engine->engine->name() +
                            " is closed; destroy weight syncs before their engine");
    return f(*w);
  });
}

}  // namespace

extern "C" {

void kvf_weights_options_init(kvf_weights_options* options) {
  if (options == nullptr) return;
  const SyncOptions d;
  *options = {d.bucket_bytes, d.manifest_bytes, d.slots, d.timeout_ms, nullptr, d.rails};
}

int kvf_weights_create(kvf_engine* engine, const kvf_weights_options* options, kvf_weights** out) {
  return kvfabric::capi::WithHandle(engine, "engine", [&](kvf_engine& e) -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    *out = nullptr;
    if (!e.engine || e.engine->closed())
      return Status::Closed("create a weight sync: the engine is closed (or belongs to the parent of this forked "
                            "process); create it on an open engine");
    SyncOptions o;
    if (options != nullptr) {
      o.bucket_bytes = options->bucket_bytes;
      o.manifest_bytes = options->manifest_bytes;
      o.slots = options->slots;
      o.timeout_ms = options->timeout_ms;
      o.host = options->host != nullptr ? options->host : "";
      o.rails = options->rails;
    }
    auto h = std::make_unique<kvf_weights>();
    KVF_RETURN_IF_ERROR(WeightSync::Create(e.engine.get(), o, &h->sync));
    kvfabric::capi::Acquire(&e);  // the sync's use of its engine, released when its handle is freed
    h->engine = &e;
    *out = h.release();
    return Status::OK();
  });
}

void kvf_weights_destroy(kvf_weights* weights) { delete weights; }

int kvf_weights_describe(kvf_weights* weights, char* out, size_t capacity, size_t* size) {
  return WithSync(weights, [&](kvf_weights& w) -> Status {
    if (size == nullptr) return Status::InvalidArgument("size is NULL");
    const std::string d = w.sync->Describe();
    *size = d.size() + 1;
    if (capacity == 0) return Status::OK();
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    if (capacity < d.size() + 1)
      return Status::OutOfRange("the description takes " + std::to_string(d.size() + 1) + " bytes; out holds " +
                                std::to_string(capacity));
    std::memcpy(out, d.c_str(), d.size() + 1);
    return Status::OK();
  });
}

int kvf_weights_connect(kvf_weights* weights, const char* const* members, size_t count, int me) {
  return WithSync(weights, [&](kvf_weights& w) -> Status {
    if (members == nullptr && count > 0) return Status::InvalidArgument("members is NULL");
    std::vector<std::string> v;
    for (size_t i = 0; i < count; ++i) {
      if (members[i] == nullptr) return Status::InvalidArgument("member " + std::to_string(i) + " is NULL");
      v.emplace_back(members[i]);
    }
    return w.sync->Connect(v, me);
  });
}

int kvf_weights_begin_send(kvf_weights* weights, uint64_t version) {
  return WithSync(weights, [&](kvf_weights& w) { return w.sync->BeginSend(version); });
}

int kvf_weights_send(kvf_weights* weights, const kvf_tensor* tensor) {
  return WithSync(weights, [&](kvf_weights& w) -> Status {
    if (tensor == nullptr || tensor->name == nullptr || tensor->dtype == nullptr)
      return Status::InvalidArgument("tensor, or its name or dtype, is NULL");
    if ((tensor->shape == nullptr && tensor->ndim > 0) || (tensor->data == nullptr && tensor->bytes > 0))
      return Status::InvalidArgument("tensor '" + std::string(tensor->name) + "': its shape or data is NULL");
    const TensorRef t{tensor->name, tensor->dtype, {tensor->shape, tensor->shape + tensor->ndim}, tensor->data,
                      tensor->bytes};
    return w.sync->Send(t);
  });
}

int kvf_weights_end_send(kvf_weights* weights) {
  return WithSync(weights, [&](kvf_weights& w) { return w.sync->EndSend(); });
}

int kvf_weights_begin_receive(kvf_weights* weights, uint64_t version) {
  return WithSync(weights, [&](kvf_weights& w) { return w.sync->BeginReceive(version); });
}

int kvf_weights_next(kvf_weights* weights, kvf_tensor* out, int* done) {
  return WithSync(weights, [&](kvf_weights& w) -> Status {
    if (out == nullptr || done == nullptr) return Status::InvalidArgument("out or done is NULL");
    TensorRef t;
    bool finished = false;
    KVF_RETURN_IF_ERROR(w.sync->Next(&t, &finished));
    *done = finished ? 1 : 0;
    if (finished) {
      *out = kvf_tensor{};
      return Status::OK();
    }
    w.name = std::move(t.name);
    w.dtype = std::move(t.dtype);
    w.shape = std::move(t.shape);
    *out = {w.name.c_str(), w.dtype.c_str(), w.shape.data(), w.shape.size(), t.data, t.bytes};
    return Status::OK();
  });
}

}  // extern "C"
