#include "store/wire/control_frame.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "common/text.h"

namespace kvfabric::store::control {
namespace {

void Put(char* p, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<char>(v >> (8 * (bytes - 1 - i)));
}
uint64_t Get(const char* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

constexpr size_t kReadBlock = 64 << 10;
// recv calls per Read: enough to drain a busy socket's usual backlog, few
// enough that the other connections of the thread get their turn.
constexpr int kReadsPerCall = 16;
// Frames handed to one sendmsg.
constexpr size_t kFramesPerSend = 32;

Status StatusOf(int code, std::string message) {
  switch (code) {
#define KVF_CONTROL_CODE_(number, Name, C_NAME, meaning) \
  case number: return Status::Name(std::move(message));
    KVF_STATUS_CODES(KVF_CONTROL_CODE_)
#undef KVF_CONTROL_CODE_
  }
  return Status::ProtocolError(text::Format("error reply with unknown status code {}: {}", code, message));
}

}  // namespace

std::string ErrorPayload(const Status& s) {
  std::string p(4, '\0');
  Put(p.data(), static_cast<uint32_t>(s.code()), 4);
  return p + s.message();
}

Status StatusFromErrorPayload(std::string_view payload) {
  if (payload.size() < 4) return Status::ProtocolError("error reply of " + std::to_string(payload.size()) + " bytes");
  const int code = static_cast<int>(Get(payload.data(), 4));
  if (code == 0) return Status::ProtocolError("error reply with status OK");
  return StatusOf(code, std::string(payload.substr(4)));
}

Status CheckLength(uint32_t length, size_t limit) {
  if (length <= limit) return Status::OK();
  return Status::ProtocolError(
      text::Format("frame of {} bytes exceeds the limit of {} (KVF_HANDSHAKE_MAX_FRAME)", length, limit));
}

bool FrameReader::Next(const HeaderCheck& check, Frame* out, Status* error) {
  if (!in_frame_) {
    if (end_ - begin_ < kHeaderSize) return false;
    const char* h = buffer_.data() + begin_;
    if (const uint64_t magic = Get(h, 4); magic != kMagic) {
      const uint64_t digit = magic & 0xFF;
      if ((magic & 0xFFFFFF00) == kMagicPrefix && digit >= '0' && digit <= '9')
        *error = Status::ProtocolError(text::Format(
            "the peer speaks store protocol version {} and this process version {}: every store member and "
            "client must run the same kvfabric release (upgrade them together)",
            digit - '0', kProtocolVersion));
      else
        *error = Status::ProtocolError("bad magic number (not a kvfabric store control client or server?)");
      return false;
    }
    frame_.type = static_cast<uint16_t>(Get(h + 4, 2));
    length_ = static_cast<uint32_t>(Get(h + 8, 4));
    frame_.id = Get(h + 12, 8);
    frame_.payload.clear();
    *error = check(frame_.type, length_);
    if (!error->ok()) return false;
    begin_ += kHeaderSize;
    in_frame_ = true;
  }
  // Grows with the bytes received, not with the length announced.
  const size_t take = std::min<size_t>(length_ - frame_.payload.size(), end_ - begin_);
  frame_.payload.append(buffer_.data() + begin_, take);
  begin_ += take;
  if (frame_.payload.size() < length_) return false;
  in_frame_ = false;
  *out = std::move(frame_);
  frame_ = Frame();
  return true;
}

Status FrameReader::Read(int fd, const HeaderCheck& check, const FrameSink& sink) {
  if (buffer_.size() < kReadBlock) buffer_.resize(kReadBlock);
  Frame frame;
  Status error;
  while (Next(check, &frame, &error))  // what a sink that stopped left
    if (!sink(std::move(frame))) return Status::OK();
  if (!error.ok()) return error;
  for (int round = 0; round < kReadsPerCall; ++round) {
    if (begin_ > 0) {  // what Next left is part of a header: keep it, at the front
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    const ssize_t n = recv(fd, buffer_.data() + end_, buffer_.size() - end_, MSG_DONTWAIT);
    if (n == 0) return Status::NetworkError("connection closed by the peer");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
      return Status::NetworkError(std::string("receive failed: ") + std::strerror(errno));
    }
    end_ += static_cast<size_t>(n);
    while (Next(check, &frame, &error))
      if (!sink(std::move(frame))) return Status::OK();
    if (!error.ok()) return error;
  }
  return Status::OK();
}

void FrameReader::Reset() { *this = FrameReader(); }

void FrameWriter::Push(uint16_t type, uint64_t id, std::string payload) {
  Out& o = frames_.emplace_back();
  Put(o.header, kMagic, 4);
  Put(o.header + 4, type, 2);
  Put(o.header + 6, 0, 2);
  Put(o.header + 8, payload.size(), 4);
  Put(o.header + 12, id, 8);
  bytes_ += kHeaderSize + payload.size();
  o.payload = std::move(payload);
}

Status FrameWriter::Flush(int fd) {
  while (bytes_ > 0) {
    iovec iov[2 * kFramesPerSend];
    size_t n = 0, skip = sent_;
    for (auto it = frames_.begin(); it != frames_.end() && n + 2 <= std::size(iov); ++it, skip = 0) {
      if (skip < kHeaderSize) iov[n++] = {it->header + skip, kHeaderSize - skip};
      const size_t from = skip > kHeaderSize ? skip - kHeaderSize : 0;
      if (from < it->payload.size()) iov[n++] = {it->payload.data() + from, it->payload.size() - from};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
      return Status::NetworkError(std::string("send failed: ") + std::strerror(errno));
    }
    bytes_ -= static_cast<size_t>(sent);
    sent_ += static_cast<size_t>(sent);
    while (!frames_.empty() && sent_ >= kHeaderSize + frames_.front().payload.size()) {
      sent_ -= kHeaderSize + frames_.front().payload.size();
      frames_.pop_front();
    }
  }
  return Status::OK();
}

void FrameWriter::Reset() {
  frames_.clear();
  sent_ = bytes_ = 0;
}

Status OpenEpoll(int* epoll_fd, int* wake_fd, uint64_t wake_key) {
  *epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  *wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (*epoll_fd < 0 || *wake_fd < 0)
    return Status::Unavailable(std::string("cannot create an epoll instance or an eventfd: ") + std::strerror(errno) +
                               " (raise the open-file limit, ulimit -n)");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = wake_key;
  epoll_ctl(*epoll_fd, EPOLL_CTL_ADD, *wake_fd, &ev);
  return Status::OK();
}

void Wake(int wake_fd) {
  const uint64_t one = 1;
  ssize_t r = write(wake_fd, &one, sizeof(one));
  (void)r;  // a full counter still wakes the loop
}

void Watch(int epoll_fd, int fd, uint64_t key, bool in, bool out) {
  epoll_event ev{};
  ev.events = (in ? uint32_t{EPOLLIN} : 0u) | (out ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = key;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
}

void WatchOutput(int epoll_fd, int fd, uint64_t key, bool out) { Watch(epoll_fd, fd, key, true, out); }

void DrainWake(int wake_fd) {
  uint64_t value = 0;
  ssize_t r = read(wake_fd, &value, sizeof(value));
  (void)r;
}

int TimeoutMs(net::Deadline deadline) {
  if (deadline == net::Deadline::max()) return -1;
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= left.zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

bool Discard(int fd) {
  char sink[4096];
  for (;;) {
    const ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

}  // namespace kvfabric::store::control
