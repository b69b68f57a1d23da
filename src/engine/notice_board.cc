#include "engine/notice_board.h"

#include "common/log.h"

namespace kvfabric::engine {

void NoticeBoard::Arrived(uint64_t data) {
  const uint16_t notice = NoticeOf(data);
  const uint32_t slices = SlicesOf(data);
  if (notice == 0 || slices == 0) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    uint32_t& n = landed_[notice];
    if (++n < slices) return;
    landed_.erase(notice);
    if (ready_.size() >= kMaxReadyNotices) {
      ready_.pop_front();
      if (dropped_++ == 0)
        KVF_LOG_WARN(
            "{} notices of landed WRITEs wait to be taken: the oldest are dropped from now on; call "
            "Engine::TakeNotices (Python: take_notices) on this engine",
            kMaxReadyNotices);
    }
    ready_.push_back(notice);
  }
  cv_.notify_all();
}

std::string EncodeNoticeMessage(uint64_t epoch, std::span<const uint16_t> notices) {
  std::string out(8 + 2 * notices.size(), '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(epoch >> (8 * i));
  for (size_t i = 0; i < notices.size(); ++i) {
    out[8 + 2 * i] = static_cast<char>(notices[i] & 0xff);
    out[9 + 2 * i] = static_cast<char>(notices[i] >> 8);
  }
  return out;
}

bool DecodeNoticeMessage(std::string_view payload, uint64_t* epoch, std::vector<uint16_t>* notices) {
  if (payload.size() < 10 || payload.size() % 2 != 0 || payload.size() > 8 + 2 * kMaxNoticesPerMessage) return false;
  const auto byte = [&](size_t i) { return static_cast<uint64_t>(static_cast<uint8_t>(payload[i])); };
  *epoch = 0;
  for (int i = 0; i < 8; ++i) *epoch |= byte(i) << (8 * i);
  notices->clear();
  for (size_t i = 8; i < payload.size(); i += 2) {
    const auto n = static_cast<uint16_t>(byte(i) | (byte(i + 1) << 8));
    if (n == 0) return false;
    notices->push_back(n);
  }
  return true;
}

void NoticeBoard::Landed(uint16_t notice) { Arrived(EncodeNotice(notice, 1)); }

void NoticeBoard::Take(std::vector<uint16_t>* out) {
  std::lock_guard<std::mutex> g(mu_);
  out->insert(out->end(), ready_.begin(), ready_.end());
  ready_.clear();
}

bool NoticeBoard::Wait(std::chrono::milliseconds timeout, std::vector<uint16_t>* out) {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait_for(g, timeout, [&] { return !ready_.empty() || closed_; });
  if (ready_.empty()) return false;
  out->insert(out->end(), ready_.begin(), ready_.end());
  ready_.clear();
  return true;
}

void NoticeBoard::Close() {
  {
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool NoticeBoard::closed() const {
  std::lock_guard<std::mutex> g(mu_);
  return closed_;
}

uint64_t NoticeBoard::dropped() const {
  std::lock_guard<std::mutex> g(mu_);
  return dropped_;
}

size_t NoticeBoard::partial() const {
  std::lock_guard<std::mutex> g(mu_);
  return landed_.size();
}

}  // namespace kvfabric::engine
