#include "engine/segment_server.h"

#include <unistd.h>

#include <chrono>

#include "common/crypto.h"
#include "common/host.h"
#include "common/log.h"
#include "common/text.h"
#include "metadata/descriptor_seal.h"
#include "net/address.h"

namespace kvfabric::engine {

Status SegmentServer::Start(const metadata::HandshakeServer::Options& options, const std::string& host,
                            const RailSet* rails, const memory::MemoryRegistry* registry,
                            metadata::MetadataStore* store, NoticeBoard* notices,
                            std::unique_ptr<SegmentServer>* out) {
  std::unique_ptr<SegmentServer> s(new SegmentServer());
  // The start time (ms since 1970, 41 bits until 2039+) above 20 random bits.
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  s->epoch_ = (static_cast<uint64_t>(ms) << 20) | (crypto::RandomU64() & ((1u << 20) - 1));
  s->token_ = options.auth_token;
  s->rails_ = rails;
  s->registry_ = registry;
  s->store_ = store;
  s->notices_ = notices;
  SegmentServer* self = s.get();
  KVF_RETURN_IF_ERROR(metadata::HandshakeServer::Start(
      options, [self](uint16_t t, const std::string& p, std::string* r) { return self->Handle(t, p, r); },
      &s->server_));
  s->name_ = net::FormatHostPort(host, s->server_->port());
  *out = std::move(s);
  return Status::OK();
}

uint64_t SegmentServer::refused() const { return server_ ? server_->refused() : 0; }

SegmentServer::~SegmentServer() {
  if (store_ != nullptr) {
    Status s = store_->Remove(name_);  // peers stop finding us now, not at lease expiry
    if (!s.ok()) KVF_LOG_WARN("shutdown: {}", s.ToString());
  }
  server_.reset();  // no new requests
}

metadata::SegmentDesc SegmentServer::Describe() const {
  metadata::SegmentDesc d;
  d.name = name_;
  d.epoch = epoch_;
  d.generation = registry_->version();  // read before the snapshot: never ahead of it
  d.host_id = host::BootId();
  d.pid = getpid();
  for (const auto& r : rails_->rails)
    d.rails.push_back({r->info().provider, r->info().fabric, r->info().domain, r->address(), r->virt_addr()});
  for (const auto& b : registry_->Snapshot()) {
    metadata::BufferDesc bd{b->addr, b->length, b->location, {}, b->read_only};
    for (const auto& c : b->chunks) {
      metadata::ChunkDesc cd{c.addr, c.length, {}};
      for (const auto& mr : c.regions) cd.keys.push_back(mr ? std::optional<uint64_t>(mr->key()) : std::nullopt);
      bd.chunks.push_back(std::move(cd));
    }
    d.buffers.push_back(std::move(bd));
  }
  return d;
}

std::string SegmentServer::DescribeForPeers() const { return metadata::SealDescriptor(Describe(), token_); }

Status SegmentServer::Publish() {
  if (store_ == nullptr) return Status::OK();
  std::lock_guard<std::mutex> g(publish_mu_);
  return store_->Publish(name_, DescribeForPeers());
}

void SegmentServer::TakeNotifies(std::vector<std::string>* out) {
  std::lock_guard<std::mutex> g(notify_mu_);
  out->assign(std::make_move_iterator(notifies_.begin()), std::make_move_iterator(notifies_.end()));
  notifies_.clear();
  notify_bytes_ = 0;
}

Status SegmentServer::Handle(uint16_t type, const std::string& payload, std::string* reply) {
  switch (type) {
    case metadata::kGetSegment:
      *reply = DescribeForPeers();
      return Status::OK();
    case metadata::kProbe:
      *reply = name_;
      return Status::OK();
    case metadata::kNotify:
      return Notify(payload);
    case metadata::kNotice:
      return Notice(payload);
  }
  return Status::ProtocolError("unknown request");
}

Status SegmentServer::Notify(const std::string& payload) {
  std::lock_guard<std::mutex> g(notify_mu_);
  if (payload.size() > kMaxNotifyBytes)
    return Status::InvalidArgument(text::Format(
        "a notification of {} bytes exceeds {} bytes; send bulk data by WRITE and notify its place", payload.size(),
        kMaxNotifyBytes));
  if (notify_bytes_ + payload.size() > kMaxNotifyQueueBytes)
    return Status::Busy(text::Format(
        "notification queue of {} is full ({} bytes): the receiver must call GetNotifies", name_, notify_bytes_));
  if (notifies_.size() >= kMaxNotifies)
    return Status::Busy(text::Format(
        "notification queue of {} is full ({} messages): the receiver must call GetNotifies", name_, kMaxNotifies));
  notify_bytes_ += payload.size();
  notifies_.push_back(payload);
  return Status::OK();
}

Status SegmentServer::Notice(const std::string& payload) {
  uint64_t epoch = 0;
  std::vector<uint16_t> notices;
  if (!DecodeNoticeMessage(payload, &epoch, &notices))
    return Status::InvalidArgument(text::Format(
        "a message of WRITEs' notices must hold an 8-byte epoch, then 1 to {} notices of 2 bytes, none 0; got {} "
        "bytes",
        kMaxNoticesPerMessage, payload.size()));
  // A notice for the process that was at this address before: its WRITE
  // landed in memory that is no longer there.
  if (epoch != epoch_)
    return Status::NotFound(text::Format("segment {} restarted (epoch {}, the notice names {}): the WRITE's bytes "
                                         "went to the process before it; open the segment again",
                                         name_, epoch_, epoch));
  if (notices_ == nullptr) return Status::Unavailable(text::Format("segment {} takes no notices", name_));
  for (uint16_t n : notices) notices_->Landed(n);
  return Status::OK();
}

}  // namespace kvfabric::engine
