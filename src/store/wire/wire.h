// The store's control messages are built and read with these two: integers
// little-endian, byte strings as a u32 length and the bytes. The reader
// never reads past its input: every Get fails (false) once the input is
// short, and stays failed, so a decoder checks once at its end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kvfabric::store {

class WireWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Fixed(v); }
  void U64(uint64_t v) { Fixed(v); }
  void Bytes(std::string_view b) {
    U32(static_cast<uint32_t>(b.size()));
    out_.append(b);
  }
  std::string Take() { return std::move(out_); }

 private:
  template <typename T>
  void Fixed(T v) {
    char b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_.append(b, sizeof(T));
  }
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v) { return Fixed(v); }
  bool U32(uint32_t* v) { return Fixed(v); }
  bool U64(uint64_t* v) { return Fixed(v); }
  // A view into the input: valid while the input is.
  bool Bytes(std::string_view* b) {
    uint32_t n = 0;
    if (!U32(&n) || n > in_.size() - pos_) return Fail();
    *b = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // A count of items that each take at least `min_item_bytes` of what is
  // left: a count the input cannot hold fails here, before anything is
  // reserved for it.
  bool Count(size_t min_item_bytes, uint32_t* n) {
    if (!U32(n)) return false;
    if (min_item_bytes > 0 && *n > (in_.size() - pos_) / min_item_bytes) return Fail();
    return true;
  }
  bool ok() const { return ok_; }
  // Whether everything was read and nothing failed.
  bool done() const { return ok_ && pos_ == in_.size(); }

 private:
  template <typename T>
  bool Fixed(T* v) {
    if (!ok_ || in_.size() - pos_ < sizeof(T)) return Fail();
    T r = 0;
    for (size_t i = 0; i < sizeof(T); ++i) r |= static_cast<T>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    *v = r;
    return true;
  }
  bool Fail() {
    ok_ = false;
    return false;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kvfabric::store
