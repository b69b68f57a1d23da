#include "kvfabric/status.h"

namespace kvfabric {

std::string_view Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
#define KVF_STATUS_NAME_(number, Name, C_NAME, meaning) \
  case Code::k##Name: return #Name;
    KVF_STATUS_CODES(KVF_STATUS_NAME_)
#undef KVF_STATUS_NAME_
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace kvfabric
