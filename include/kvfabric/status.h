// Status: the error value of the kvfabric C++ API (LevelDB style).
// Every fallible call returns one; the first function that decides a failure
// builds it with a message saying what failed, where, and what to do.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace kvfabric {

class Status {
 public:
  // Stable numbering: the C API returns the negated code.
  enum class Code : int {
    kOk = 0,
    kInvalidArgument = 1,   // bad input from the caller; nothing was changed
    kNotFound = 2,          // unknown segment, buffer, batch or peer
    kOutOfRange = 3,        // remote or local range outside registered memory
    kBusy = 4,              // the object still has work in flight
    kTimeout = 5,           // a deadline passed
    kFabricError = 6,       // libfabric returned an error
    kNetworkError = 7,      // handshake connection failed or broke
    kProtocolError = 8,     // a peer sent a malformed message
    kUnavailable = 9,       // the requested provider/feature is absent here
    kInternal = 10,         // a bug: please report it
    kPermissionDenied = 11, // the peer refused us (auth)
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
  static Status FabricError(std::string m) { return {Code::kFabricError, std::move(m)}; }
  static Status NetworkError(std::string m) { return {Code::kNetworkError, std::move(m)}; }
  static Status ProtocolError(std::string m) { return {Code::kProtocolError, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;
  static std::string_view CodeName(Code c);

  // Prefixes context: Status::NotFound("x").Annotate("open segment a:1")
  // gives "open segment a:1: x".
  Status Annotate(std::string_view context) const;

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace kvfabric

#define KVF_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::kvfabric::Status _kvf_s = (expr);      \
    if (!_kvf_s.ok()) return _kvf_s;         \
  } while (0)
