#include "engine/request_check.h"

#include "common/text.h"

namespace kvfabric::engine {

Status CheckRequest(const TransferRequest& r, size_t index, const memory::MemoryRegistry& registry,
                    SegmentDirectory* segments, Plan* plan) {
  const std::string where = text::Format("request {}", index);
  plan->req = &r;
  if (r.length == 0 || r.local == nullptr)
    return Status::InvalidArgument(where + ": null local address or zero length");
  const auto local = reinterpret_cast<uintptr_t>(r.local);
  plan->local = registry.Find(local, r.length);
  if (!plan->local)
    return Status::OutOfRange(text::Format("{}: local range {} is not inside a registered buffer; register it first",
                                           where, text::Range(local, r.length)));
  if (r.notice != 0 && r.opcode != OpCode::kWrite)
    return Status::InvalidArgument(where + ": a notice travels with a WRITE only");
  if (r.target == kSelfHandle) {
    plan->self_remote = registry.Find(r.remote_addr, r.length);
    if (!plan->self_remote)
      return Status::OutOfRange(text::Format("{}: target range {} is outside this engine's registered buffers",
                                             where, text::Range(r.remote_addr, r.length)));
    if (r.opcode == OpCode::kWrite && plan->self_remote->read_only)
      return Status::PermissionDenied(text::Format("{}: target range {} is in a buffer registered read-only; READ it",
                                                   where, text::Range(r.remote_addr, r.length)));
    return Status::OK();
  }
  plan->peer = segments->Find(r.target);
  if (!plan->peer)
    return Status::NotFound(
        text::Format("{}: unknown segment handle {} (open the segment first)", where, r.target));
  Peer& peer = *plan->peer;
  if (peer.TakeSuspect()) {
    // Its last request failed: it may have restarted under the same name.
    Status s = segments->Refresh(&peer);
    if (!s.ok()) {
      peer.MarkSuspect();
      return s.Annotate(text::Format("{}: segment {} failed its last request and does not answer", where, peer.name()));
    }
  }
  plan->desc = peer.desc();
  plan->remote = plan->desc->FindBuffer(r.remote_addr, r.length);
  if (plan->remote == nullptr) {
    // The peer may have registered memory since we fetched its descriptor.
    KVF_RETURN_IF_ERROR(segments->Refresh(&peer).Annotate(where));
    plan->desc = peer.desc();
    plan->remote = plan->desc->FindBuffer(r.remote_addr, r.length);
  }
  if (plan->remote == nullptr)
    return Status::OutOfRange(text::Format("{}: remote range {} is outside the buffers segment {} registered", where,
                                           text::Range(r.remote_addr, r.length), peer.name()));
  if (r.opcode == OpCode::kWrite && plan->remote->read_only)
    return Status::PermissionDenied(text::Format("{}: remote range {} is in a buffer segment {} registered read-only; "
                                                 "peers may READ it, never WRITE it",
                                                 where, text::Range(r.remote_addr, r.length), peer.name()));
  return Status::OK();
}

}  // namespace kvfabric::engine
