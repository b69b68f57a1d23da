// The public Engine: each call checks its arguments and hands the work to
// the part that owns it (engine_impl.h says who owns what).
#include "kvfabric/engine.h"

#include <unistd.h>

#include "common/hex.h"
#include "common/log.h"
#include "common/text.h"
#include "engine/engine_impl.h"
#include "engine/request_check.h"

namespace kvfabric {

// The first line of every public call: inside the engine's gate until the
// call returns, or refused with Closed (closed engine, forked child).
#define KVF_ENTER_ENGINE_()                                 \
  const engine::CallGate::Pass pass_ = impl_->gate.Enter(); \
  if (!pass_.ok()) return pass_.refusal()

using engine::Batch;
using engine::Clock;
using engine::kSelfHandle;

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_->gate.forked()) {
    // A forked child's copy: tearing it down would remove the parent's
    // descriptor from the store, close endpoints and shared memory the
    // parent still uses, and join threads the child does not have.
    KVF_LOG_DEBUG("engine {}: the copy forked into process {} is left to process {}", impl_->name, getpid(),
                  impl_->gate.owner_pid());
    (void)impl_.release();
    return;
  }
  Close();
}

void Engine::Close() {
  Impl& e = *impl_;
  if (e.gate.forked()) {
    (void)e.gate.Shut();  // the parent's: nothing to tear down here (see ~Engine)
    return;
  }
  if (!e.gate.Shut()) {
    e.closed.wait(false);  // another thread is closing: return when it is done
    return;
  }
  e.Drain();
  KVF_LOG_INFO("engine {} closed", e.name);
  e.closed.store(true);
  e.closed.notify_all();
}

bool Engine::closed() const { return impl_->gate.shut() || impl_->gate.forked(); }

Status Engine::Create(const EngineConfig& config, std::unique_ptr<Engine>* out) {
  auto impl = std::make_unique<Impl>();
  KVF_RETURN_IF_ERROR(impl->Build(config));
  out->reset(new Engine(std::move(impl)));
  return Status::OK();
}

const std::string& Engine::name() const { return impl_->name; }
const Settings& Engine::settings() const { return impl_->settings; }
const std::string& Engine::metadata() const { return impl_->metadata; }

Status Engine::Stats(EngineStats* out) const {
  KVF_ENTER_ENGINE_();
  *out = EngineStats();
  impl_->FillStats(out);
  return Status::OK();
}

std::string Engine::metrics_address() const {
  const auto pass = impl_->gate.Enter();
  return pass.ok() && impl_->metrics ? impl_->metrics->address() : "";
}

std::vector<RailInfo> Engine::rails() const {
  std::vector<RailInfo> out;
  const auto pass = impl_->gate.Enter();
  if (!pass.ok()) return out;
  for (const auto& r : impl_->rails.rails) {
    const fabric::RailInfo& info = r->info();
    RailInfo o;
    o.provider = info.provider;
    o.domain = info.domain;
    o.fabric = info.fabric;
    o.tx_depth = info.tx_depth;
    o.max_msg_size = info.max_msg_size;
    o.virt_addr = info.virt_addr;
    o.completed_bytes = r->completed_bytes();
    o.peer_slots = r->peer_slots();
    out.push_back(std::move(o));
  }
  return out;
}

Status Engine::RegisterMemory(void* addr, size_t length, const std::string& location) {
  KVF_ENTER_ENGINE_();
  return RegisterMemoryBatch({{addr, length, location}});
}

Status Engine::UnregisterMemory(void* addr) {
  KVF_ENTER_ENGINE_();
  return UnregisterMemoryBatch({addr});
}

Status Engine::RegisterMemoryBatch(const std::vector<BufferEntry>& buffers) {
  KVF_ENTER_ENGINE_();
  // All or nothing: on a failure the buffers registered by this call are undone.
  auto undo = [&](size_t n) {
    // Registered by this call a moment ago: unregistering them cannot fail.
    for (size_t j = 0; j < n; ++j) (void)impl_->registry->Unregister(buffers[j].addr);
  };
  for (size_t i = 0; i < buffers.size(); ++i) {
    Status s = impl_->registry->Register(buffers[i].addr, buffers[i].length, buffers[i].location, buffers[i].read_only);
    if (impl_->counters) impl_->counters->Registered(s.ok());
    if (!s.ok()) {
      undo(i);
      return buffers.size() > 1 ? s.Annotate(text::Format("buffer {}", i)) : s;
    }
  }
  Status s = impl_->server->Publish();
  if (!s.ok()) {
    undo(buffers.size());
    return s.Annotate("register: peers could not be told, so nothing was registered");
  }
  return Status::OK();
}

Status Engine::UnregisterMemoryBatch(const std::vector<void*>& addrs) {
  KVF_ENTER_ENGINE_();
  for (size_t i = 0; i < addrs.size(); ++i)
    if (!impl_->registry->Find(reinterpret_cast<uintptr_t>(addrs[i]), 1))
      return Status::NotFound(text::Format("{}{} is not registered; nothing was unregistered",
                                           addrs.size() > 1 ? text::Format("buffer {} ", i) : "buffer ",
                                           hex::Address(reinterpret_cast<uintptr_t>(addrs[i]))));
  Status first;
  for (void* a : addrs) {
    Status s = impl_->registry->Unregister(a);
    if (!s.ok() && first.ok()) first = s;
  }
  // The memory is revoked either way; a stale descriptor only makes peers'
  // requests to it fail.
  Status p = impl_->server->Publish();
  if (!p.ok()) KVF_LOG_WARN("unregister: {}", p.ToString());
  return first;
}

Status Engine::DescribeMemory(const void* addr, size_t length, MemoryFacts* out) const {
  KVF_ENTER_ENGINE_();
  const auto a = reinterpret_cast<uintptr_t>(addr);
  auto b = impl_->registry->Find(a, length);
  if (!b)
    return Status::NotFound(text::Format("[{}, +{}) is not inside one registered buffer (register it first)",
                                         hex::Address(a), length));
  out->location = b->location;
  out->device = b->device >= 0;
  out->read_only = b->read_only;
  out->remote_access = false;
  for (const memory::Chunk& c : b->chunks)
    for (const auto& r : c.regions) out->remote_access = out->remote_access || r != nullptr;
  return Status::OK();
}

Status Engine::OpenSegment(const std::string& name, SegmentHandle* out) {
  KVF_ENTER_ENGINE_();
  return impl_->segments->Open(name, out);
}

Status Engine::CloseSegment(SegmentHandle handle) {
  KVF_ENTER_ENGINE_();
  return impl_->segments->Close(handle);
}

Status Engine::GetSegmentBuffers(SegmentHandle handle, std::vector<RemoteBuffer>* out) {
  KVF_ENTER_ENGINE_();
  out->clear();
  if (handle == kSelfHandle) {
    for (const auto& b : impl_->registry->Snapshot()) out->push_back({b->addr, b->length, b->location, b->read_only});
    return Status::OK();
  }
  auto peer = impl_->segments->Find(handle);
  if (!peer) return Status::NotFound(text::Format("unknown segment handle {}", handle));
  KVF_RETURN_IF_ERROR(impl_->segments->Refresh(peer.get()));
  for (const auto& b : peer->desc()->buffers) out->push_back({b.addr, b.length, b.location, b.read_only});
  return Status::OK();
}

Status Engine::Warmup(const std::string& name) {
  KVF_ENTER_ENGINE_();
  SegmentHandle h;
  KVF_RETURN_IF_ERROR(OpenSegment(name, &h).Annotate("warmup"));
  if (h == kSelfHandle) return Status::OK();
  auto peer = impl_->segments->Find(h);
  if (!peer) return Status::NotFound("warmup " + name + ": segment closed concurrently");
  const auto usable = peer->usable_rails();  // keeps the list alive through the loop
  for (size_t r : *usable) {
    fi_addr_t a;
    KVF_RETURN_IF_ERROR(peer->Resolve(impl_->rails[r], &a).Annotate("warmup " + name));
  }
  return Status::OK();
}

Status Engine::Probe(const std::string& name) {
  KVF_ENTER_ENGINE_();
  std::string reply;
  Status s = metadata::HandshakeCall(name, metadata::kProbe, "", impl_->segments->call_options(), &reply);
  if (!s.ok() && impl_->counters) impl_->counters->HandshakeFailed();
  return s.Annotate("probe " + name);
}

Status Engine::SendNotify(const std::string& name, const std::string& message) {
  KVF_ENTER_ENGINE_();
  std::string reply;
  Status s = metadata::HandshakeCall(name, metadata::kNotify, message, impl_->segments->call_options(), &reply);
  if (!s.ok() && impl_->counters) impl_->counters->HandshakeFailed();
  return s.Annotate("notify " + name);
}

Status Engine::GetNotifies(std::vector<std::string>* out) {
  KVF_ENTER_ENGINE_();
  impl_->server->TakeNotifies(out);
  return Status::OK();
}

Status Engine::TakeNotices(std::vector<uint16_t>* out) {
  KVF_ENTER_ENGINE_();
  impl_->notices.Take(out);
  return Status::OK();
}

Status Engine::WaitNotices(int64_t timeout_ms, std::vector<uint16_t>* out) {
  KVF_ENTER_ENGINE_();
  if (impl_->notices.Wait(std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms)), out)) return Status::OK();
  if (impl_->notices.closed())
    return Status::Closed(text::Format("engine {} was closed while waiting for notices", impl_->name));
  return Status::Timeout(text::Format("no notice landed in engine {} within {} ms", impl_->name, timeout_ms));
}

Status Engine::AllocateBatch(size_t capacity, BatchId* out) {
  KVF_ENTER_ENGINE_();
  return impl_->batches.Allocate(capacity, out);
}

Status Engine::Submit(BatchId batch_id, const std::vector<TransferRequest>& requests) {
  KVF_ENTER_ENGINE_();
  // Held until the requests are posted: a FreeBatch meanwhile is refused.
  engine::BatchTable::SubmitGuard batch;
  KVF_RETURN_IF_ERROR(impl_->batches.AcquireForSubmit(batch_id, &batch));
  if (requests.empty()) return Status::OK();
  std::vector<engine::Plan> plans(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    KVF_RETURN_IF_ERROR(engine::CheckRequest(requests[i], i, *impl_->registry, impl_->segments.get(), &plans[i]));
  size_t first = 0;
  if (!batch->Reserve(requests.size(), &first))
    return Status::InvalidArgument(
        text::Format("batch {} has room for {} more request(s), not {}; allocate a larger batch", batch_id,
                     batch->capacity() - batch->used(), requests.size()));
  std::vector<fabric::Slice> scratch;
  for (size_t i = 0; i < plans.size(); ++i) {
    engine::Task& task = batch->task(first + i);
    if (!plans[i].peer) {  // own segment: a local copy, never a trip through the NIC
      impl_->poster->CopyLocal(batch.get(), &task, plans[i]);
      continue;
    }
    Status s = impl_->poster->Post(batch.get(), &task, plans[i], &scratch);
    if (!s.ok()) {
      task.Start(batch.get(), 0, Clock::now(), 0, "request", nullptr, nullptr, nullptr,
                 impl_->poster->TallyOf(plans[i]));
      task.Complete(0, s);
    }
  }
  return Status::OK();
}

Status Engine::GetTaskStatus(BatchId batch_id, size_t task, TransferStatus* out) {
  KVF_ENTER_ENGINE_();
  Status error;
  auto batch = impl_->FindBatch(batch_id, &error);
  if (!batch) return error;
  if (task >= batch->used())
    return Status::OutOfRange(
        text::Format("batch {} has {} task(s); no task {}", batch_id, batch->used(), task));
  *out = batch->task(task).Snapshot();
  return Status::OK();
}

Status Engine::GetBatchStatus(BatchId batch_id, TransferStatus* out) {
  KVF_ENTER_ENGINE_();
  Status error;
  auto batch = impl_->FindBatch(batch_id, &error);
  if (!batch) return error;
  *out = batch->Aggregate();
  return Status::OK();
}

Status Engine::WaitBatch(BatchId batch_id, int64_t timeout_ms, TransferStatus* out) {
  KVF_ENTER_ENGINE_();
  Status error;
  auto batch = impl_->FindBatch(batch_id, &error);
  if (!batch) return error;
  if (!batch->Wait(engine::WaitDeadline(Clock::now(), timeout_ms)))
    return Status::Closed(text::Format("engine {} was closed while waiting for batch {}; its requests were abandoned",
                                       impl_->name, batch_id));
  *out = batch->Aggregate();
  return Status::OK();
}

Status Engine::ExpireBatch(BatchId batch_id) {
  KVF_ENTER_ENGINE_();
  return impl_->batches.Expire(batch_id);
}

Status Engine::FreeBatch(BatchId batch_id) {
  KVF_ENTER_ENGINE_();
  return impl_->batches.Free(batch_id);
}

Status Engine::Transfer(const std::vector<TransferRequest>& requests) {
  KVF_ENTER_ENGINE_();
  if (requests.empty()) return Status::OK();
  BatchId id;
  KVF_RETURN_IF_ERROR(AllocateBatch(requests.size(), &id));
  Status s = Submit(id, requests);
  if (s.ok()) {
    TransferStatus st;
    s = WaitBatch(id, -1, &st);
    if (s.ok() && st.state != TaskState::kCompleted) s = st.error;
  }
  Status freed = FreeBatch(id);
  if (!freed.ok() && s.ok()) s = freed;
  return s;
}

}  // namespace kvfabric
