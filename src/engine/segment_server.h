// SegmentServer: this engine's segment as peers see it. It builds the
// descriptor (rails, registered buffers, epoch), answers the handshake
// requests of peers (descriptor, probe, notifications, which it queues for
// the application, and WRITEs' notices, which go on the engine's
// NoticeBoard) and publishes the descriptor to a metadata store when
// the engine uses one. Destroying it removes the descriptor from the store
// and closes the handshake server.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/notice_board.h"
#include "engine/rail_set.h"
#include "memory/memory_registry.h"
#include "metadata/handshake.h"
#include "metadata/segment_desc.h"
#include "metadata/store.h"

namespace kvfabric::engine {

class SegmentServer {
 public:
  // A receiver holding this many unread notifications, or this many bytes
  // of them, refuses more (Busy), so none is ever dropped and a sender
  // cannot fill the receiver's memory.
  static constexpr size_t kMaxNotifies = 4096;
  static constexpr size_t kMaxNotifyQueueBytes = 64 << 20;
  // A longer notification is refused (InvalidArgument): notifications are
  // short messages; bulk data goes by READ or WRITE.
  static constexpr size_t kMaxNotifyBytes = 1 << 20;

  // Starts the handshake server (`options`; port 0 picks one). The segment's
  // name is "host:port" with `host` as the application gave it. `rails`,
  // `registry`, `store` (null with p2p) and `notices` must outlive the server.
  static Status Start(const metadata::HandshakeServer::Options& options, const std::string& host,
                      const RailSet* rails, const memory::MemoryRegistry* registry,
                      metadata::MetadataStore* store, NoticeBoard* notices, std::unique_ptr<SegmentServer>* out);
  ~SegmentServer();
  SegmentServer(const SegmentServer&) = delete;
  SegmentServer& operator=(const SegmentServer&) = delete;

  const std::string& name() const { return name_; }
  uint64_t epoch() const { return epoch_; }
  // Handshakes refused so far (authentication, malformed frames).
  uint64_t refused() const;

  // The descriptor as of now.
  metadata::SegmentDesc Describe() const;
  // The descriptor as peers and the store get it: sealed with the token.
  std::string DescribeForPeers() const;
  // With a metadata store, puts the current descriptor there (every
  // registration change calls it); with p2p nothing: peers ask this server.
  // Publishes run one at a time, each describing the segment as it is when
  // its turn comes, so the store never ends with an older descriptor than
  // a concurrent one (a wait of at most one store call's deadline).
  Status Publish();
  // Moves the queued notifications to `out`, oldest first.
  void TakeNotifies(std::vector<std::string>* out);

 private:
  SegmentServer() = default;
  Status Handle(uint16_t type, const std::string& payload, std::string* reply);
  Status Notify(const std::string& payload);
  Status Notice(const std::string& payload);

  std::string name_;
  uint64_t epoch_ = 0;  // per process, larger at each restart: peers tell a restart by it
  std::string token_;   // seals the descriptor when set (descriptor_seal.h)
  const RailSet* rails_ = nullptr;
  const memory::MemoryRegistry* registry_ = nullptr;
  metadata::MetadataStore* store_ = nullptr;
  NoticeBoard* notices_ = nullptr;
  std::unique_ptr<metadata::HandshakeServer> server_;
  std::mutex publish_mu_;
  std::mutex notify_mu_;
  std::deque<std::string> notifies_;
  size_t notify_bytes_ = 0;  // the payload bytes in notifies_
};

}  // namespace kvfabric::engine
