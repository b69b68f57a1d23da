// The C API (include/kvfabric.h) for the engine: thin wrappers that turn
// kvfabric::Status into negative codes plus a per-thread message. The
// store's calls are in store_api.cc.
#include "kvfabric.h"

#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "capi/handles.h"
#include "kvfabric/engine.h"

namespace {

using kvfabric::Status;
using kvfabric::capi::Acquire;
using kvfabric::capi::Guard;
using kvfabric::capi::Release;

// The C constants and the C++ enumerators are generated from the same rows of
// kvfabric/codes.h; these keep them equal should either side be edited by hand.
static_assert(KVF_OK == static_cast<int>(Status::Code::kOk));
#define KVF_CHECK_STATUS_(number, Name, C_NAME, meaning) \
  static_assert(KVF_##C_NAME == -static_cast<int>(Status::Code::k##Name), "KVF_" #C_NAME);
KVF_STATUS_CODES(KVF_CHECK_STATUS_)
#undef KVF_CHECK_STATUS_
#define KVF_CHECK_STATE_(number, Name, C_NAME, meaning) \
  static_assert(KVF_##C_NAME == static_cast<int>(kvfabric::TaskState::k##Name), "KVF_" #C_NAME);
KVF_TASK_STATES(KVF_CHECK_STATE_)
#undef KVF_CHECK_STATE_
#define KVF_CHECK_OP_(number, Name, C_NAME, meaning) \
  static_assert(KVF_##C_NAME == static_cast<int>(kvfabric::OpCode::k##Name), "KVF_" #C_NAME);
KVF_OP_CODES(KVF_CHECK_OP_)
#undef KVF_CHECK_OP_

bool IsOpCode(int op) {
  switch (op) {
#define KVF_OP_CASE_(number, Name, C_NAME, meaning) case KVF_##C_NAME:
    KVF_OP_CODES(KVF_OP_CASE_)
#undef KVF_OP_CASE_
    return true;
  }
  return false;
}

// "KVF_READ, KVF_WRITE"
std::string OpCodeNames() {
  std::string names;
#define KVF_OP_NAME_(number, Name, C_NAME, meaning) \
  names += std::string(names.empty() ? "" : ", ") + "KVF_" #C_NAME;
  KVF_OP_CODES(KVF_OP_NAME_)
#undef KVF_OP_NAME_
  return names;
}

// A call on an engine: f(engine) with the handle held (see kvf_engine).
template <typename F>
int WithEngine(kvf_engine* e, F&& f) {
  return kvfabric::capi::WithHandle(e, "engine", [&](kvf_engine& h) -> Status {
    if (!h.engine) return Status::InvalidArgument("engine is NULL");
    return f(*h.engine);
  });
}

Status ToRequests(const kvf_request* in, size_t n, std::vector<kvfabric::TransferRequest>* out) {
  if (in == nullptr && n > 0) return Status::InvalidArgument("requests is NULL");
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!IsOpCode(in[i].opcode))
      return Status::InvalidArgument("request " + std::to_string(i) + ": opcode " +
                                     std::to_string(in[i].opcode) + " is not one of " + OpCodeNames());
    (*out)[i] = {static_cast<kvfabric::OpCode>(in[i].opcode), in[i].local, in[i].target, in[i].remote_addr,
                 static_cast<size_t>(in[i].length)};
  }
  return Status::OK();
}

void FromStatus(const kvfabric::TransferStatus& s, kvf_transfer_status* out) {
  out->state = static_cast<int>(s.state);  // KVF_<state> == TaskState::k<State> (asserted above)
  out->transferred_bytes = s.transferred_bytes;
  out->error = -static_cast<int>(s.error.code());
  // A failed or timed-out request's message, for kvf_last_error().
  if (!s.error.ok()) kvfabric::capi::LastError() = s.error.ToString();
}

}  // namespace

namespace kvfabric::capi {

std::string& LastError() {
  thread_local std::string message;
  return message;
}

int Report(const Status& s) {
  if (s.ok()) return KVF_OK;
  LastError() = s.ToString();
  return -static_cast<int>(s.code());
}

Status AssignSettings(const char* const* list, Settings* settings) {
  for (const char* const* kv = list; kv != nullptr && *kv != nullptr; ++kv)
    KVF_RETURN_IF_ERROR(settings->Assign(*kv));
  return Status::OK();
}

}  // namespace kvfabric::capi

extern "C" {

const char* kvf_last_error(void) { return kvfabric::capi::LastError().c_str(); }

const char* kvf_code_name(int code) {
  // CodeName's views are of string literals: NUL-terminated. -INT_MIN does not
  // exist; it is no code either.
  if (code > 0 || code == INT_MIN) return "Unknown";
  return Status::CodeName(static_cast<Status::Code>(-code)).data();
}

int kvf_engine_create(const kvf_config* config, kvf_engine** out) {
  return Guard([&]() -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    *out = nullptr;
    kvfabric::EngineConfig cfg;
    if (config != nullptr) {
      if (config->local_server_name) cfg.local_server_name = config->local_server_name;
      if (config->metadata) cfg.metadata = config->metadata;
      if (config->protocol) cfg.protocol = config->protocol;
      if (config->nic_filter) cfg.nic_filter = config->nic_filter;
    }
    // The environment first, then the caller's settings over it.
    KVF_RETURN_IF_ERROR(cfg.settings.ApplyEnvironment());
    cfg.apply_environment = false;
    KVF_RETURN_IF_ERROR(kvfabric::capi::AssignSettings(config ? config->settings : nullptr, &cfg.settings));
    auto e = std::make_unique<kvf_engine>();
    KVF_RETURN_IF_ERROR(kvfabric::Engine::Create(cfg, &e->engine));
    *out = e.release();
    return Status::OK();
  });
}

void kvf_engine_close(kvf_engine* engine) {
  if (engine == nullptr || !engine->engine) return;
  Acquire(engine);
  engine->engine->Close();
  Release(engine);
}

void kvf_engine_destroy(kvf_engine* engine) {
  if (engine == nullptr) return;
  if (engine->engine) engine->engine->Close();  // calls under way return; a forked child's copy is left alone
  Release(engine);
}

const char* kvf_engine_name(const kvf_engine* engine) {
  return engine != nullptr && engine->engine ? engine->engine->name().c_str() : "";
}

int kvf_register_memory(kvf_engine* e, void* addr, size_t length, const char* location) {
  return WithEngine(e, [&](kvfabric::Engine& engine) {
    return engine.RegisterMemory(addr, length, location ? location : "*");
  });
}

int kvf_unregister_memory(kvf_engine* e, void* addr) {
  return WithEngine(e, [&](kvfabric::Engine& engine) { return engine.UnregisterMemory(addr); });
}

int kvf_register_memory_batch(kvf_engine* e, void* const* addrs, const size_t* lengths, size_t count,
                              const char* location) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (count > 0 && (addrs == nullptr || lengths == nullptr))
      return Status::InvalidArgument("addrs or lengths is NULL");
    std::vector<kvfabric::BufferEntry> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = {addrs[i], lengths[i], location ? location : "*"};
    return engine.RegisterMemoryBatch(v);
  });
}

int kvf_unregister_memory_batch(kvf_engine* e, void* const* addrs, size_t count) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (count > 0 && addrs == nullptr) return Status::InvalidArgument("addrs is NULL");
    return engine.UnregisterMemoryBatch(std::vector<void*>(addrs, addrs + count));
  });
}

int kvf_open_segment(kvf_engine* e, const char* name, kvf_segment* out) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (name == nullptr || out == nullptr) return Status::InvalidArgument("name or out is NULL");
    return engine.OpenSegment(name, out);
  });
}

int kvf_close_segment(kvf_engine* e, kvf_segment segment) {
  return WithEngine(e, [&](kvfabric::Engine& engine) { return engine.CloseSegment(segment); });
}

int kvf_segment_buffers(kvf_engine* e, kvf_segment segment, kvf_remote_buffer* out, size_t capacity,
                        size_t* count) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (count == nullptr || (capacity > 0 && out == nullptr))
      return Status::InvalidArgument("count is NULL, or out is NULL with a capacity");
    std::vector<kvfabric::RemoteBuffer> v;
    KVF_RETURN_IF_ERROR(engine.GetSegmentBuffers(segment, &v));
    for (size_t i = 0; i < v.size() && i < capacity; ++i) out[i] = {v[i].addr, v[i].length};
    *count = v.size();
    return Status::OK();
  });
}

int kvf_warmup(kvf_engine* e, const char* name) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (name == nullptr) return Status::InvalidArgument("name is NULL");
    return engine.Warmup(name);
  });
}

int kvf_batch_allocate(kvf_engine* e, size_t capacity, kvf_batch* out) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    return engine.AllocateBatch(capacity, out);
  });
}

int kvf_batch_submit(kvf_engine* e, kvf_batch batch, const kvf_request* requests, size_t count) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    std::vector<kvfabric::TransferRequest> v;
    KVF_RETURN_IF_ERROR(ToRequests(requests, count, &v));
    return engine.Submit(batch, v);
  });
}

int kvf_task_status(kvf_engine* e, kvf_batch batch, size_t task, kvf_transfer_status* out) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    kvfabric::TransferStatus s;
    KVF_RETURN_IF_ERROR(engine.GetTaskStatus(batch, task, &s));
    FromStatus(s, out);
    return Status::OK();
  });
}

int kvf_batch_status(kvf_engine* e, kvf_batch batch, kvf_transfer_status* out) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    kvfabric::TransferStatus s;
    KVF_RETURN_IF_ERROR(engine.GetBatchStatus(batch, &s));
    FromStatus(s, out);
    return Status::OK();
  });
}

int kvf_batch_wait(kvf_engine* e, kvf_batch batch, int64_t timeout_ms, kvf_transfer_status* out) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    kvfabric::TransferStatus s;
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    KVF_RETURN_IF_ERROR(engine.WaitBatch(batch, timeout_ms, &s));
    FromStatus(s, out);
    return Status::OK();
  });
}

int kvf_batch_expire(kvf_engine* e, kvf_batch batch) {
  return WithEngine(e, [&](kvfabric::Engine& engine) { return engine.ExpireBatch(batch); });
}

int kvf_batch_free(kvf_engine* e, kvf_batch batch) {
  return WithEngine(e, [&](kvfabric::Engine& engine) { return engine.FreeBatch(batch); });
}

int kvf_transfer(kvf_engine* e, const kvf_request* requests, size_t count) {
  return WithEngine(e, [&](kvfabric::Engine& engine) -> Status {
    std::vector<kvfabric::TransferRequest> v;
    KVF_RETURN_IF_ERROR(ToRequests(requests, count, &v));
    return engine.Transfer(v);
  });
}

}  // extern "C"
