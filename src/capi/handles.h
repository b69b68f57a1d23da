// What the C API's files share (include/kvfabric.h): the engine handle, the
// calling thread's message, the wrapper that turns a kvfabric::Status into a
// negative KVF_E* code, and the counted uses that keep a handle alive while
// calls are inside it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "kvfabric.h"
#include "kvfabric/engine.h"
#include "kvfabric/settings.h"
#include "kvfabric/status.h"

// The handle: the engine and a count of its users, so kvf_engine_destroy
// may run while other threads are inside calls: the engine closes (their
// calls return KVF_ECLOSED), and the last one out frees the handle. A store
// made on the engine holds a use until its own handle is freed.
struct kvf_engine {
  std::unique_ptr<kvfabric::Engine> engine;
  std::atomic<int64_t> users{1};  // the creator's reference (destroy drops it) + calls under way + stores
};

// What follows is the library's own, templates included: hidden, so that
// libkvfabric.so exports the kvf_* functions only.
#pragma GCC visibility push(hidden)
namespace kvfabric::capi {

// The message kvf_last_error() returns, of the calling thread.
std::string& LastError();

// KVF_OK, or the negated code with the message kept for kvf_last_error().
int Report(const Status& s);

// A C caller cannot catch C++ exceptions: allocation failures and the like
// become KVF_EINTERNAL with their message.
template <typename F>
int Guard(F&& f) {
  LastError().clear();
  try {
    return Report(f());
  } catch (const std::exception& e) {
    return Report(Status::Internal(std::string("unexpected exception: ") + e.what()));
  }
}

// A handle's users (kvf_engine, kvf_store): its creator's reference, one per
// call under way, one per handle that depends on it. The last Release frees it.
template <typename Handle>
void Acquire(Handle* h) {
  h->users.fetch_add(1, std::memory_order_relaxed);
}
template <typename Handle>
void Release(Handle* h) {
  if (h->users.fetch_sub(1, std::memory_order_acq_rel) == 1) delete h;
}

// A call on a handle: f(*h) with a use of it held, its Status turned into a
// code. `what` names the handle in the error for a NULL one ("engine").
template <typename Handle, typename F>
int WithHandle(Handle* h, const char* what, F&& f) {
  if (h == nullptr) return Guard([&] { return Status::InvalidArgument(std::string(what) + " is NULL"); });
  Acquire(h);
  const int rc = Guard([&]() -> Status { return f(*h); });
  Release(h);
  return rc;
}

// Assigns each "KVF_NAME=value" of a NULL-terminated list (NULL: none) over
// `settings`, in order; the first that does not parse is the error.
Status AssignSettings(const char* const* list, Settings* settings);

}  // namespace kvfabric::capi
#pragma GCC visibility pop
