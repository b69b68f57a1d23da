// The store's C API (kvf_store_* in include/kvfabric.h) over kvfabric::Store:
// the handle, the flat C batches turned into the C++ calls' lists, and the
// statuses per key turned back into codes and messages.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capi/handles.h"
#include "kvfabric.h"
#include "kvfabric/store.h"

// The handle: the store, a use of its engine's handle (so the engine's
// object outlives the store whatever the order of destroys), and a count of
// its own users, as for kvf_engine.
struct kvf_store {
  std::unique_ptr<kvfabric::Store> store;
  kvf_engine* engine = nullptr;      // a use of it, released with this handle
  std::atomic<int64_t> users{1};     // the creator's reference (destroy drops it) + calls under way
  std::atomic<bool> closed{false};   // kvf_store_close or kvf_store_destroy began
  const pid_t owner = ::getpid();    // the process that created it

  // A forked child's copy: the node's threads, membership and pool are the parent's.
  bool forked() const { return ::getpid() != owner; }

  ~kvf_store() {
    if (forked()) (void)store.release();  // leaked on purpose, like the engine's copy
    store.reset();
    if (engine != nullptr) kvfabric::capi::Release(engine);
  }
};

namespace {

using kvfabric::Status;
using kvfabric::Store;
using kvfabric::capi::Acquire;
using kvfabric::capi::LastError;
using kvfabric::capi::Release;

static_assert(sizeof(size_t) >= sizeof(uint64_t), "kvf_store_buffer lengths are uint64_t; size_t must hold them");

int Code(const Status& s) { return -static_cast<int>(s.code()); }

// The messages of the keys that failed in this thread's last batch call, by
// index, in order (kvf_store_key_error).
std::vector<std::pair<size_t, std::string>>& KeyErrors() {
  thread_local std::vector<std::pair<size_t, std::string>> errors;
  return errors;
}

// "node 127.0.0.1:7400", or "client on engine 127.0.0.1:15000".
std::string Describe(const kvf_store& h) {
  const std::string& name = h.store->name();
  return name.empty() ? "client on engine " + h.engine->engine->name() : "node " + name;
}

// Whether calls may use the store: not closed, not a forked copy, its engine open.
Status CheckOpen(const kvf_store& h) {
  if (h.forked())
    return Status::Closed("store " + Describe(h) + " belongs to process " + std::to_string(h.owner) +
                          "; this is a fork of it: create a new engine and store in the child");
  if (h.closed.load()) return Status::Closed("store " + Describe(h) + " is closed; create a new store");
  if (h.engine->engine->closed())
    return Status::Closed("store " + Describe(h) + ": its engine " + h.engine->engine->name() +
                          " is closed; close stores before their engine (kvf_store_destroy, then kvf_engine_destroy)");
  return Status::OK();
}

// A call on a store: f(handle) with a use of it held, if the store is open.
// Each call starts with no key messages.
template <typename F>
int WithStore(kvf_store* s, F&& f) {
  KeyErrors().clear();
  return kvfabric::capi::WithHandle(s, "store", [&](kvf_store& h) -> Status {
    KVF_RETURN_IF_ERROR(CheckOpen(h));
    return f(h);
  });
}

void CloseStore(kvf_store& h) {
  h.closed.store(true);
  if (!h.forked()) h.store->Close();  // waits for the calls under way
}

// No array holds more than PTRDIFF_MAX bytes: a larger count (a negative
// number passed as size_t) is refused before anything is read or allocated.
Status CheckCount(const char* what, size_t count, size_t entry_bytes) {
  if (count <= static_cast<size_t>(PTRDIFF_MAX) / entry_bytes) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " " + std::to_string(count) +
                                 " is more entries than any array holds (a negative number passed as size_t?)");
}

// A C batch in the C++ calls' terms: the keys that are not NULL go to the
// call; a NULL key fails alone, and Publish lines the results up again.
class Batch {
 public:
  Status ReadKeys(const char* const* keys, size_t count) {
    if (keys == nullptr && count > 0) return Status::InvalidArgument("keys is NULL");
    KVF_RETURN_IF_ERROR(CheckCount("count", count, sizeof(const char*)));
    c_keys_ = keys;
    count_ = count;
    first_null_ = count;
    keys_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (keys[i] != nullptr) keys_.emplace_back(keys[i]);
      else if (first_null_ == count_) first_null_ = i;
    }
    return Status::OK();
  }

  // Key i's buffers are the next buffer_counts[i] entries of `buffers`.
  Status ReadBuffers(const size_t* buffer_counts, const kvf_store_buffer* buffers, size_t buffer_total) {
    if (count_ > 0 && buffer_counts == nullptr) return Status::InvalidArgument("buffer_counts is NULL");
    if (buffer_total > 0 && buffers == nullptr) return Status::InvalidArgument("buffers is NULL");
    KVF_RETURN_IF_ERROR(CheckCount("buffer_total", buffer_total, sizeof(kvf_store_buffer)));
    buffers_.reserve(keys_.size());
    size_t at = 0;
    for (size_t i = 0; i < count_; ++i) {
      if (buffer_counts[i] > buffer_total - at)
        return Status::InvalidArgument(
            "buffer_counts add up to more than buffer_total (" + std::to_string(buffer_total) + "): key " +
            std::to_string(i) + "'s " + std::to_string(buffer_counts[i]) + " buffers would start at entry " +
            std::to_string(at) + "; buffer_total is the number of entries of buffers");
      if (c_keys_[i] != nullptr) {
        std::vector<kvfabric::StoreBuffer>& mine = buffers_.emplace_back(buffer_counts[i]);
        for (size_t b = 0; b < buffer_counts[i]; ++b)
          mine[b] = {buffers[at + b].addr, static_cast<size_t>(buffers[at + b].length)};
      }
      at += buffer_counts[i];
    }
    if (at != buffer_total)
      return Status::InvalidArgument("buffer_counts add up to " + std::to_string(at) + " but buffer_total is " +
                                     std::to_string(buffer_total) +
                                     "; buffer_total is the number of entries of buffers, one per key's buffer");
    return Status::OK();
  }

  // For the calls with no result per key: a NULL key fails the call.
  Status RequireAllKeys() const {
    if (first_null_ == count_) return Status::OK();
    return Status::InvalidArgument("key " + std::to_string(first_null_) + " is NULL");
  }

  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<std::vector<kvfabric::StoreBuffer>>& buffers() const { return buffers_; }

  // Writes each C key's code (the C++ result of its key, or InvalidArgument
  // for a NULL key) and, with `lengths`, its page length (0 when it failed);
  // keeps the messages of the keys that failed, the first in kvf_last_error().
  // Everything that allocates comes first: an exception leaves the outputs
  // untouched.
  void Publish(const std::vector<Status>& passed, const std::vector<uint64_t>* passed_lengths, int* results,
               uint64_t* lengths) const {
    std::vector<int> codes(count_);
    std::vector<uint64_t> got(lengths != nullptr ? count_ : 0);
    std::vector<std::pair<size_t, std::string>> failed;
    std::string first;
    size_t j = 0;  // the key's index among those passed
    for (size_t i = 0; i < count_; ++i) {
      const Status s = c_keys_[i] == nullptr ? Status::InvalidArgument("the key is NULL") : passed[j];
      if (lengths != nullptr && s.ok()) got[i] = (*passed_lengths)[j];
      if (c_keys_[i] != nullptr) ++j;
      codes[i] = Code(s);
      if (s.ok()) continue;
      failed.emplace_back(i, s.ToString());
      if (first.empty())
        first = "key " + std::to_string(i) + " of " + std::to_string(count_) + ": " + failed.back().second;
    }
    std::copy(codes.begin(), codes.end(), results);
    std::copy(got.begin(), got.end(), lengths);
    KeyErrors().swap(failed);
    LastError().swap(first);
  }

 private:
  const char* const* c_keys_ = nullptr;
  size_t count_ = 0;
  size_t first_null_ = 0;  // the first NULL key's index; count_ when none
  std::vector<std::string> keys_;
  std::vector<std::vector<kvfabric::StoreBuffer>> buffers_;
};

// The checks every per-key call makes of its outputs.
Status CheckResults(size_t count, const int* results) {
  if (count > 0 && results == nullptr) return Status::InvalidArgument("results is NULL");
  return Status::OK();
}

// kvf_store_batch_put and _get: keys with their buffers.
template <typename Call>
int BufferBatch(kvf_store* s, const char* const* keys, const size_t* buffer_counts, size_t count,
                const kvf_store_buffer* buffers, size_t buffer_total, int* results, Call&& call) {
  return WithStore(s, [&](kvf_store& h) -> Status {
    KVF_RETURN_IF_ERROR(CheckResults(count, results));
    Batch b;
    KVF_RETURN_IF_ERROR(b.ReadKeys(keys, count));
    KVF_RETURN_IF_ERROR(b.ReadBuffers(buffer_counts, buffers, buffer_total));
    return call(*h.store, b);
  });
}

using KeyCall = Status (Store::*)(const std::vector<std::string>&, std::vector<Status>*);

// kvf_store_batch_remove, _pin and _unpin: keys alone, a code each.
int KeyBatch(kvf_store* s, KeyCall call, const char* const* keys, size_t count, int* results) {
  return WithStore(s, [&](kvf_store& h) -> Status {
    KVF_RETURN_IF_ERROR(CheckResults(count, results));
    Batch b;
    KVF_RETURN_IF_ERROR(b.ReadKeys(keys, count));
    std::vector<Status> st;
    KVF_RETURN_IF_ERROR(((*h.store).*call)(b.keys(), &st));
    b.Publish(st, nullptr, results, nullptr);
    return Status::OK();
  });
}

kvf_store_stats ToC(const kvfabric::StoreStats& s) {
  kvf_store_stats out{};
#define KVF_STORE_STAT_COPY_(name, meaning) out.name = s.name;
  KVF_STORE_STATS(KVF_STORE_STAT_COPY_)
#undef KVF_STORE_STAT_COPY_
  return out;
}

}  // namespace

extern "C" {

int kvf_store_create(kvf_engine* engine, const char* const* settings, kvf_store** out) {
  return kvfabric::capi::WithHandle(engine, "engine", [&](kvf_engine& e) -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    *out = nullptr;
    if (!e.engine || e.engine->closed())
      return Status::Closed("create a store: the engine is closed (or belongs to the parent of this forked "
                            "process); create the store on an open engine");
    kvfabric::Settings s = e.engine->settings();
    KVF_RETURN_IF_ERROR(kvfabric::capi::AssignSettings(settings, &s));
    auto h = std::make_unique<kvf_store>();
    KVF_RETURN_IF_ERROR(Store::Create(e.engine.get(), s, &h->store));
    Acquire(&e);  // the store's use of its engine, released when the store's handle is freed
    h->engine = &e;
    *out = h.release();
    return Status::OK();
  });
}

void kvf_store_close(kvf_store* store) {
  if (store == nullptr) return;
  Acquire(store);
  CloseStore(*store);
  Release(store);
}

void kvf_store_destroy(kvf_store* store) {
  if (store == nullptr) return;
  CloseStore(*store);
  Release(store);
}

const char* kvf_store_name(const kvf_store* store) {
  return store != nullptr && store->store ? store->store->name().c_str() : "";
}

const char* kvf_store_key_error(size_t index) {
  const auto& errors = KeyErrors();
  auto it = std::lower_bound(errors.begin(), errors.end(), index,
                             [](const std::pair<size_t, std::string>& e, size_t i) { return e.first < i; });
  return it != errors.end() && it->first == index ? it->second.c_str() : "";
}

int kvf_store_batch_put(kvf_store* store, const char* const* keys, const size_t* buffer_counts, size_t count,
                        const kvf_store_buffer* buffers, size_t buffer_total, int* results) {
  return BufferBatch(store, keys, buffer_counts, count, buffers, buffer_total, results,
                     [&](Store& st, const Batch& b) -> Status {
                       std::vector<Status> per_key;
                       KVF_RETURN_IF_ERROR(st.BatchPut(b.keys(), b.buffers(), &per_key));
                       b.Publish(per_key, nullptr, results, nullptr);
                       return Status::OK();
                     });
}

int kvf_store_batch_get(kvf_store* store, const char* const* keys, const size_t* buffer_counts, size_t count,
                        const kvf_store_buffer* buffers, size_t buffer_total, int* results, uint64_t* lengths) {
  return BufferBatch(store, keys, buffer_counts, count, buffers, buffer_total, results,
                     [&](Store& st, const Batch& b) -> Status {
                       std::vector<Status> per_key;
                       std::vector<uint64_t> got;
                       KVF_RETURN_IF_ERROR(st.BatchGet(b.keys(), b.buffers(), &per_key, &got));
                       b.Publish(per_key, &got, results, lengths);
                       return Status::OK();
                     });
}

int kvf_store_batch_exists(kvf_store* store, const char* const* keys, size_t count, uint8_t* found,
                           size_t* leading_hits) {
  return WithStore(store, [&](kvf_store& h) -> Status {
    Batch b;
    KVF_RETURN_IF_ERROR(b.ReadKeys(keys, count));
    KVF_RETURN_IF_ERROR(b.RequireAllKeys().Annotate("exists has no result per key to fail it alone"));
    std::vector<bool> has;
    size_t leading = 0;
    KVF_RETURN_IF_ERROR(h.store->BatchExists(b.keys(), &has, &leading));
    if (found != nullptr)
      for (size_t i = 0; i < count; ++i) found[i] = has[i] ? 1 : 0;
    if (leading_hits != nullptr) *leading_hits = leading;
    return Status::OK();
  });
}

int kvf_store_batch_locate(kvf_store* store, const char* const* keys, size_t count, int* results,
                           kvf_store_page* pages) {
  return WithStore(store, [&](kvf_store& h) -> Status {
    KVF_RETURN_IF_ERROR(CheckResults(count, results));
    if (count > 0 && pages == nullptr) return Status::InvalidArgument("pages is NULL");
    Batch b;
    KVF_RETURN_IF_ERROR(b.ReadKeys(keys, count));
    std::vector<kvfabric::StorePage> where;
    std::vector<Status> st;
    KVF_RETURN_IF_ERROR(h.store->BatchLocate(b.keys(), &where, &st));
    // Each page's segment, opened in the store's engine: the caller READs through it.
    std::vector<kvf_store_page> out(count, kvf_store_page{-1, 0, 0, 0});
    for (size_t i = 0, j = 0; i < count; ++i) {
      if (keys[i] == nullptr) continue;
      if (st[j].ok()) {
        kvfabric::SegmentHandle segment = -1;
        const Status opened = h.engine->engine->OpenSegment(where[j].segment, &segment);
        if (opened.ok()) out[i] = kvf_store_page{segment, where[j].addr, where[j].length, where[j].valid_ms};
        else st[j] = opened.Annotate("store: opening the segment of key " + std::to_string(i));
      }
      ++j;
    }
    b.Publish(st, nullptr, results, nullptr);
    std::copy(out.begin(), out.end(), pages);
    return Status::OK();
  });
}

int kvf_store_batch_remove(kvf_store* store, const char* const* keys, size_t count, int* results) {
  return KeyBatch(store, &Store::BatchRemove, keys, count, results);
}

int kvf_store_batch_pin(kvf_store* store, const char* const* keys, size_t count, int* results) {
  return KeyBatch(store, &Store::BatchPin, keys, count, results);
}

int kvf_store_batch_unpin(kvf_store* store, const char* const* keys, size_t count, int* results) {
  return KeyBatch(store, &Store::BatchUnpin, keys, count, results);
}

int kvf_store_remove_all(kvf_store* store, uint64_t* removed) {
  return WithStore(store, [&](kvf_store& h) -> Status {
    uint64_t n = 0;
    const Status s = h.store->RemoveAll(&n);
    if (removed != nullptr) *removed = n;  // also on failure: the members reached were emptied
    return s;
  });
}

int kvf_store_get_stats(kvf_store* store, kvf_store_stats* out) {
  return WithStore(store, [&](kvf_store& h) -> Status {
    if (out == nullptr) return Status::InvalidArgument("out is NULL");
    const kvfabric::StoreStats s = h.store->Stats();
    KVF_RETURN_IF_ERROR(CheckOpen(h));  // closed meanwhile: Stats() may have given zeros
    *out = ToC(s);
    return Status::OK();
  });
}

int kvf_store_members(kvf_store* store, char* names, size_t capacity, size_t* count, size_t* size) {
  return WithStore(store, [&](kvf_store& h) -> Status {
    if (count == nullptr || size == nullptr) return Status::InvalidArgument("count or size is NULL");
    if (capacity > 0 && names == nullptr) return Status::InvalidArgument("names is NULL with a capacity");
    const std::vector<std::string> members = h.store->Members();
    KVF_RETURN_IF_ERROR(CheckOpen(h));  // closed meanwhile: Members() may have given none
    size_t need = 0;
    bool fits = true;
    for (const std::string& m : members) {
      const size_t n = m.size() + 1;
      fits = fits && need + n <= capacity;
      if (fits) std::memcpy(names + need, m.c_str(), n);
      need += n;
    }
    *count = members.size();
    *size = need;
    return Status::OK();
  });
}

}  // extern "C"
