// NoticeBoard: the notices of WRITEs that landed in this engine's memory
// (TransferRequest::notice; docs/design/weights.md, "Notices").
//
// Every slice of a WRITE with a notice carries, as remote CQ data, the
// notice and the number of slices the WRITE was cut into (EncodeNotice).
// The target's rails hand each value here as that slice lands; once as
// many have landed as the value says, the notice is ready for
// Engine::TakeNotices / WaitNotices. The initiator never moves a notice
// slice in pieces, so the count it sent stays true.
//
// Where remote CQ data is not used (KVF_NOTICE_PATH), the initiator sends
// the notice as a handshake message once its WRITE was delivered
// (EncodeNoticeMessage; engine/notice_mailer.h), and the target's segment
// server hands it here whole (Landed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvfabric::engine {

// The remote CQ data of one slice of a WRITE with `notice` cut into
// `slices` slices: the notice in bits 16-31, the count in bits 0-15 (four
// bytes: efa carries no more). REQUIRES: 1 <= slices <= kMaxNoticeSlices.
inline constexpr uint32_t kMaxNoticeSlices = 0xffff;
inline uint64_t EncodeNotice(uint16_t notice, uint32_t slices) { return (uint64_t{notice} << 16) | slices; }
inline uint16_t NoticeOf(uint64_t data) { return static_cast<uint16_t>(data >> 16); }
inline uint32_t SlicesOf(uint64_t data) { return static_cast<uint32_t>(data & 0xffff); }
// Notices as a message: the target segment's epoch, so that a process
// restarted at the same address refuses the notices meant for the one
// before it, then the notices (at least one, at most kMaxNoticesPerMessage),
// two bytes each; little-endian.
inline constexpr size_t kMaxNoticesPerMessage = 4096;
std::string EncodeNoticeMessage(uint64_t epoch, std::span<const uint16_t> notices);
// False when `payload` is not such a message or holds notice 0.
bool DecodeNoticeMessage(std::string_view payload, uint64_t* epoch, std::vector<uint16_t>* notices);

// Ready notices kept for the application: past this, a peer's WRITEs would
// grow the engine's memory without bound, so the oldest are dropped (and
// counted, dropped()).
inline constexpr size_t kMaxReadyNotices = 1 << 16;

class NoticeBoard {
 public:
  // A slice carrying `data` landed (a rail's remote-data sink). A value
  // with a count of 0 or a notice of 0 is not one of ours: ignored.
  void Arrived(uint64_t data);
  // A WRITE with `notice` landed whole (the engine's own segment: a copy).
  void Landed(uint16_t notice);
  // Moves the ready notices, in the order they became ready, to `out`.
  void Take(std::vector<uint16_t>* out);
  // Take, waiting up to `timeout` for at least one; false when none came.
  // Ends early, false, after Close.
  bool Wait(std::chrono::milliseconds timeout, std::vector<uint16_t>* out);
  // Wakes every Wait (the engine is closing).
  void Close();
  // Notices with some of their slices landed and not all.
  size_t partial() const;
  // Ready notices dropped, never taken, because kMaxReadyNotices waited.
  uint64_t dropped() const;
  bool closed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint16_t, uint32_t> landed_;  // notice -> slices landed so far
  std::deque<uint16_t> ready_;
  uint64_t dropped_ = 0;
  bool closed_ = false;
};

}  // namespace kvfabric::engine
