// Status: the error value of the kvfabric C++ API (LevelDB style).
// Every fallible call returns one; the first function that decides a failure
// builds it with a message saying what failed, where, and what to do. It is
// [[nodiscard]]: a caller that means to ignore one says so with (void).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "kvfabric/codes.h"

namespace kvfabric {

class [[nodiscard]] Status {
 public:
  // The numbers and names come from KVF_STATUS_CODES (kvfabric/codes.h);
  // they are stable: the C API returns the negated code.
  enum class Code : int {
    kOk = 0,
#define KVF_STATUS_ENUMERATOR_(number, Name, C_NAME, meaning) k##Name = number,
    KVF_STATUS_CODES(KVF_STATUS_ENUMERATOR_)
#undef KVF_STATUS_ENUMERATOR_
  };

  Status() = default;
  static Status OK() { return Status(); }
  // Status::InvalidArgument("..."), Status::NotFound("..."), ...: one per code.
#define KVF_STATUS_FACTORY_(number, Name, C_NAME, meaning) \
  static Status Name(std::string m) { return {Code::k##Name, std::move(m)}; }
  KVF_STATUS_CODES(KVF_STATUS_FACTORY_)
#undef KVF_STATUS_FACTORY_

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;
  // "OK", "InvalidArgument", ... ("Unknown" for a number that is no code).
  // The view is of a NUL-terminated string literal.
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
