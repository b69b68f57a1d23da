#include "kvfabric/status.h"

namespace kvfabric {

std::string_view Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kBusy: return "Busy";
    case Code::kTimeout: return "Timeout";
    case Code::kFabricError: return "FabricError";
    case Code::kNetworkError: return "NetworkError";
    case Code::kProtocolError: return "ProtocolError";
    case Code::kUnavailable: return "Unavailable";
    case Code::kInternal: return "Internal";
    case Code::kPermissionDenied: return "PermissionDenied";
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
