/* kvfabric C API: the engine, the KV-cache store over it (kvf_store_*,
 * below the engine's calls) and the weight sync for RL (kvf_weights_*), for
 * C programs and other languages' bindings.
 *
 * Every call that can fail returns an int: 0 (KVF_OK) on success, otherwise a
 * negative KVF_E* code, and kvf_last_error() then gives the engine's message
 * (what failed, where, what to do) for the calling thread. A failed call has
 * changed nothing.
 *
 *   kvf_engine* e;
 *   kvf_config cfg = {0};                 // p2p handshake on 127.0.0.1, protocol auto
 *   if (kvf_engine_create(&cfg, &e) != KVF_OK) puts(kvf_last_error());
 *   kvf_register_memory(e, buf, len, NULL);
 *   kvf_segment peer;  kvf_open_segment(e, "10.0.0.2:15000", &peer);
 *   kvf_request r = {KVF_WRITE, buf, peer, remote_addr, len};
 *   kvf_transfer(e, &r, 1);
 *   kvf_engine_destroy(e);
 *
 * Threads: every call may be made from any thread at once, kvf_engine_close
 * and kvf_engine_destroy included:
 *   - kvf_engine_close stops the engine: calls under way on other threads
 *     return first (a kvf_batch_wait or kvf_transfer waiting for requests is
 *     woken and returns KVF_ECLOSED), and every later call returns
 *     KVF_ECLOSED. The handle stays valid until kvf_engine_destroy.
 *   - kvf_engine_destroy closes the engine the same way and releases the
 *     handle; calls still inside return KVF_ECLOSED and the last of them
 *     (or of the stores made on the engine: see the store's Threads below)
 *     frees it. A call that STARTS after kvf_engine_destroy returned uses a
 *     freed handle: when threads may still call, kvf_engine_close first, stop
 *     (join) those threads, then destroy.
 *   - After fork(), the child's copy of an engine is inert: every call
 *     returns KVF_ECLOSED ("create a new engine in the child"), and
 *     kvf_engine_close/destroy leave the parent's published segment,
 *     connections and shared memory alone (the copy is leaked, on purpose).
 */
#ifndef KVFABRIC_H_
#define KVFABRIC_H_

#include <stddef.h>
#include <stdint.h>

#include "kvfabric/codes.h"
#include "kvfabric/store_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes: KVF_OK (0), or a kvfabric::Status code negated: one constant
 * per row of KVF_STATUS_CODES in kvfabric/codes.h, which gives each its
 * meaning. KVF_EINVAL = -1, KVF_ENOTFOUND, KVF_ERANGE, KVF_EBUSY, KVF_ETIMEOUT,
 * KVF_EFABRIC, KVF_ENETWORK, KVF_EPROTOCOL, KVF_EUNAVAILABLE, KVF_EINTERNAL,
 * KVF_EPERM, KVF_ECLOSED = -12. */
#define KVF_STATUS_CONSTANT_(number, Name, C_NAME, meaning) KVF_##C_NAME = -(number),
enum { KVF_OK = 0, KVF_STATUS_CODES(KVF_STATUS_CONSTANT_) };
#undef KVF_STATUS_CONSTANT_

typedef struct kvf_engine kvf_engine;
typedef int64_t kvf_segment; /* from kvf_open_segment */
typedef uint64_t kvf_batch;  /* from kvf_batch_allocate */

typedef struct kvf_config {
  const char* local_server_name; /* host:port to bind and advertise; NULL: "127.0.0.1:0" */
  const char* metadata;          /* "p2p" (or "P2PHANDSHAKE"); NULL: "p2p" */
  const char* protocol;          /* efa, tcp, shm, verbs, sockets or auto; NULL: "auto" */
  const char* nic_filter;        /* comma-separated domain names; NULL: automatic */
  /* NULL-terminated "KVF_NAME=value" strings, applied over the KVF_*
   * environment variables; NULL for none. */
  const char* const* settings;
} kvf_config;

/* Op codes, the rows of KVF_OP_CODES: KVF_READ = 0, KVF_WRITE = 1. */
#define KVF_OP_CODE_CONSTANT_(number, Name, C_NAME, meaning) KVF_##C_NAME = (number),
enum { KVF_OP_CODES(KVF_OP_CODE_CONSTANT_) };
#undef KVF_OP_CODE_CONSTANT_

typedef struct kvf_request {
  int opcode;           /* KVF_READ or KVF_WRITE */
  void* local;          /* registered local memory */
  kvf_segment target;   /* an opened segment */
  uint64_t remote_addr; /* address in the target's registered memory */
  uint64_t length;
} kvf_request;

/* Task states, the rows of KVF_TASK_STATES: KVF_PENDING = 0, KVF_COMPLETED,
 * KVF_FAILED, KVF_TIMEOUT = 3. */
#define KVF_TASK_STATE_CONSTANT_(number, Name, C_NAME, meaning) KVF_##C_NAME = (number),
enum { KVF_TASK_STATES(KVF_TASK_STATE_CONSTANT_) };
#undef KVF_TASK_STATE_CONSTANT_

typedef struct kvf_transfer_status {
  int state;                  /* KVF_PENDING, KVF_COMPLETED, KVF_FAILED, KVF_TIMEOUT */
  uint64_t transferred_bytes;
  int error;                  /* KVF_OK, or the code of the failure */
} kvf_transfer_status;

typedef struct kvf_remote_buffer {
  uint64_t addr;
  uint64_t length;
} kvf_remote_buffer;

/* The message of this thread's last failed call ("" when none). Valid until
 * the thread's next kvf_* call. */
const char* kvf_last_error(void);
/* "OK", "InvalidArgument", ... for a KVF_* code. */
const char* kvf_code_name(int code);

int kvf_engine_create(const kvf_config* config, kvf_engine** out);
/* Stops the engine; the handle stays valid (see Threads above). Idempotent. */
void kvf_engine_close(kvf_engine* engine);
/* Closes the engine and releases the handle (see Threads above). */
void kvf_engine_destroy(kvf_engine* engine);
/* The name peers open this engine by ("host:port"); owned by the engine. */
const char* kvf_engine_name(const kvf_engine* engine);

/* location: "cpu:N", "cuda:N" or "*" (detect: device memory the CUDA driver
 * knows becomes cuda:N, anything else cpu:<its NUMA node>); NULL means "*". */
int kvf_register_memory(kvf_engine* engine, void* addr, size_t length, const char* location);
int kvf_unregister_memory(kvf_engine* engine, void* addr);
int kvf_register_memory_batch(kvf_engine* engine, void* const* addrs, const size_t* lengths, size_t count,
                              const char* location);
int kvf_unregister_memory_batch(kvf_engine* engine, void* const* addrs, size_t count);

int kvf_open_segment(kvf_engine* engine, const char* name, kvf_segment* out);
int kvf_close_segment(kvf_engine* engine, kvf_segment segment);
/* Fetches the peer's registered buffers: fills up to `capacity` entries and
 * sets *count to how many the peer has (call with capacity 0 to size). */
int kvf_segment_buffers(kvf_engine* engine, kvf_segment segment, kvf_remote_buffer* out, size_t capacity,
                        size_t* count);
int kvf_warmup(kvf_engine* engine, const char* name);

/* capacity: 1 to 2^20 requests. */
int kvf_batch_allocate(kvf_engine* engine, size_t capacity, kvf_batch* out);
/* Every request is checked before any is posted. */
int kvf_batch_submit(kvf_engine* engine, kvf_batch batch, const kvf_request* requests, size_t count);
int kvf_task_status(kvf_engine* engine, kvf_batch batch, size_t task, kvf_transfer_status* out);
int kvf_batch_status(kvf_engine* engine, kvf_batch batch, kvf_transfer_status* out);
/* Waits up to timeout_ms (negative, or INT64_MAX and other limits beyond
 * the steady clock's range: no limit) for every task to end. */
int kvf_batch_wait(kvf_engine* engine, kvf_batch batch, int64_t timeout_ms, kvf_transfer_status* out);
/* Ends every task of the batch still pending now, as its deadline would:
 * TIMEOUT (FAILED when one of its operations had failed already). Where the
 * provider allows it (tcp and verbs; not with KVF_CLOSE_CONNECTIONS=off),
 * the connections that carry their operations are closed first: once this
 * returns none of them writes local memory, and the buffers may hold other
 * data. On efa an operation the device still holds may complete later. KVF_EBUSY while a submit on
 * another thread uses the batch. */
int kvf_batch_expire(kvf_engine* engine, kvf_batch batch);
/* KVF_EBUSY while a task is pending or a submit on another thread uses the batch. */
int kvf_batch_free(kvf_engine* engine, kvf_batch batch);
/* Submits and waits for every request; returns the first failure. */
int kvf_transfer(kvf_engine* engine, const kvf_request* requests, size_t count);

/* ---- The KV-cache store (C++: kvfabric/store.h; how it works: docs/design/store.md)
 *
 * A store over an engine: a node when KVF_STORE_POOL_BYTES is set (that much
 * host memory is registered with the engine and offered to the others),
 * else a client that holds no pages. Members come from the engine's metadata
 * backend (etcd, kvfabric-metadata-server) or, with p2p metadata, from
 * KVF_STORE_MEMBERS.
 *
 *   const char* set[] = {"KVF_STORE_MEMBERS=10.0.0.2:7400,10.0.0.3:7400", NULL};
 *   kvf_store* s;
 *   if (kvf_store_create(e, set, &s) != KVF_OK) puts(kvf_last_error());
 *   const char* keys[] = {"req7/layer0", "req7/layer1"};
 *   size_t counts[] = {2, 2};                       // each page: its k and v
 *   kvf_store_buffer bufs[] = {{k0, 65536}, {v0, 65536}, {k1, 65536}, {v1, 65536}};
 *   int rc[2];                                      // bufs: registered with e
 *   kvf_store_batch_put(s, keys, counts, 2, bufs, 4, rc);  // rc[i]: 0 or KVF_E*
 *   kvf_store_destroy(s);                           // before kvf_engine_destroy(e)
 *
 * Batches: `count` keys, NUL-terminated strings. Put and get take the
 * buffers of every key in one flat array: key i's page is the next
 * buffer_counts[i] entries of `buffers`, their bytes in order (several
 * buffers, e.g. a layer's k and v, make one page); the counts add up to
 * buffer_total, the array's length. A batch call returns KVF_OK when it
 * ran, with a code per key in results[i] (KVF_OK or a negative KVF_E*);
 * or, when the call itself is wrong (a NULL array, counts that do not add up
 * to buffer_total, the store closed), that code, with nothing written to
 * results. A NULL key fails alone with KVF_EINVAL, except in
 * kvf_store_batch_exists, which has no code per key: there it fails the
 * call. No call waits longer than KVF_STORE_DEADLINE_MS for a member: the
 * keys of one that is dead or slow fail with KVF_ENETWORK or KVF_ETIMEOUT
 * and the others complete.
 *
 * Per-key messages: after a batch call that returned KVF_OK with keys that
 * failed, kvf_store_key_error(i) gives the message of key i (until the
 * thread's next kvf_store_* call), and kvf_last_error() the first failure's
 * ("key 3 of 8: NotFound: store: no page under key 'x'").
 *
 * Threads: every kvf_store_* call may be made from any thread at once,
 * kvf_store_close and kvf_store_destroy included:
 *   - kvf_store_close leaves the membership, stops serving (peers' calls to
 *     this node fail from then on) and unregisters the pool. Calls under way
 *     finish first (each within KVF_STORE_DEADLINE_MS); every later call
 *     returns KVF_ECLOSED. The handle stays valid until kvf_store_destroy.
 *   - kvf_store_destroy closes the store the same way and releases the
 *     handle; as for the engine, the last call still inside frees it, and a
 *     call that STARTS after kvf_store_destroy returned uses a freed handle.
 *   - A store holds a use of its engine's handle: close or destroy stores
 *     before their engine. An engine closed or destroyed first makes every
 *     call of its stores return KVF_ECLOSED ("... close stores before their
 *     engine"); destroy them still: the last one frees the engine's handle.
 *   - After fork(), the child's copy of a store is inert, like its engine's:
 *     every call returns KVF_ECLOSED, and kvf_store_close/destroy leave the
 *     parent's node (membership, threads, pool) alone: the copy is leaked. */

typedef struct kvf_store kvf_store;

typedef struct kvf_store_buffer {
  void* addr;      /* memory registered with the store's engine */
  uint64_t length;
} kvf_store_buffer;

/* kvfabric::StoreStats. */
/* A field per row of KVF_STORE_STATS (kvfabric/store_stats.h, which says
 * what each counts): this process's calls, this node's pool (zero for a
 * client), the members in placement now. */
typedef struct kvf_store_stats {
#define KVF_STORE_STAT_FIELD_(name, meaning) uint64_t name;
  KVF_STORE_STATS(KVF_STORE_STAT_FIELD_)
#undef KVF_STORE_STAT_FIELD_
} kvf_store_stats;

/* settings: NULL-terminated "KVF_NAME=value" strings (the KVF_STORE_* of
 * docs/settings.md) applied over the engine's settings; NULL for none. */
int kvf_store_create(kvf_engine* engine, const char* const* settings, kvf_store** out);
/* Stops the store; the handle stays valid (see Threads above). Idempotent. */
void kvf_store_close(kvf_store* store);
/* Closes the store and releases the handle (see Threads above). */
void kvf_store_destroy(kvf_store* store);
/* This node's control address ("host:port"), its name among the members;
 * "" for a client. Owned by the store. */
const char* kvf_store_name(const kvf_store* store);
/* The message of key `index` of this thread's last batch call ("" when that
 * key succeeded, or there is no such key). Valid until the thread's next
 * kvf_store_* call. */
const char* kvf_store_key_error(size_t index);

/* Stores each page, replacing an older page of its key; the buffers must not
 * change until the call returns. Per key: KVF_OK; KVF_EINVAL (NULL or empty
 * key, a NULL or empty buffer, no buffers, larger than
 * KVF_STORE_MAX_PAGE_BYTES, memory not registered with the engine, GPU memory
 * no rail exposes larger than KVF_STORE_BOUNCE_BYTES); KVF_EBUSY (the member's pool is full of pages in use: pinned, or
 * read moments ago); KVF_EUNAVAILABLE (no member has a pool); KVF_ENETWORK,
 * KVF_ETIMEOUT. */
int kvf_store_batch_put(kvf_store* store, const char* const* keys, const size_t* buffer_counts, size_t count,
                        const kvf_store_buffer* buffers, size_t buffer_total, int* results);
/* Reads each page into its buffers, which it fills in order (they must hold
 * the whole page). Per key: KVF_OK with lengths[i] the page's length;
 * KVF_ENOTFOUND, a miss (absent, evicted, or read but not verified: the
 * key's message says which); KVF_EINVAL (buffers too small or not
 * registered); KVF_ENETWORK, KVF_ETIMEOUT. lengths may be NULL; it is 0 for
 * a key that failed, and the bytes of such a key are unspecified. */
int kvf_store_batch_get(kvf_store* store, const char* const* keys, const size_t* buffer_counts, size_t count,
                        const kvf_store_buffer* buffers, size_t buffer_total, int* results, uint64_t* lengths);
/* found[i]: 1 when key i has a page, else 0 (the keys of a member that
 * cannot be reached count as absent); *leading_hits: how many keys from the
 * first all have one (the prefix a cache can reuse). Either may be NULL. */
int kvf_store_batch_exists(kvf_store* store, const char* const* keys, size_t count, uint8_t* found,
                           size_t* leading_hits);
/* Where a page is (kvf_store_batch_locate): its member's segment, opened
 * in the store's engine, the page's address there, its length, and how long
 * from the call (ms) the member keeps the page's slot for it. */
typedef struct kvf_store_page {
  kvf_segment segment; /* -1 for a key that failed */
  uint64_t addr;
  uint64_t length;
  uint64_t valid_ms;
} kvf_store_page;
/* Where each key's page is now, for READs of parts of it (kvf_transfer with
 * KVF_READ within [addr, addr + length)): a layer-wise load reads each
 * layer's range of every page. READs that end within valid_ms of the call
 * see the page whole, even if the key is overwritten or evicted meanwhile;
 * parts are not checksummed. Per key: KVF_OK, KVF_ENOTFOUND, or the
 * member's failure; pages[i] is written for every key. */
int kvf_store_batch_locate(kvf_store* store, const char* const* keys, size_t count, int* results,
                           kvf_store_page* pages);
/* Per key: KVF_OK (removed) or KVF_ENOTFOUND (there was none), or the
 * member's failure. */
int kvf_store_batch_remove(kvf_store* store, const char* const* keys, size_t count, int* results);
/* Pins keep pages from eviction while a caller uses them; n pins need n
 * unpins. Per key: KVF_OK, or KVF_ENOTFOUND (no page; for unpin, not pinned). */
int kvf_store_batch_pin(kvf_store* store, const char* const* keys, size_t count, int* results);
int kvf_store_batch_unpin(kvf_store* store, const char* const* keys, size_t count, int* results);
/* Removes every page of every member; *removed (may be NULL) counts them. A
 * member that could not be reached fails the call (naming it) after the
 * others were emptied: the one failed call that may have changed something;
 * *removed then counts what was removed. */
int kvf_store_remove_all(kvf_store* store, uint64_t* removed);
/* This process's counters, and a node's pool (kvf_store_stats above). */
int kvf_store_get_stats(kvf_store* store, kvf_store_stats* out);
/* The members now in placement, by name: as many whole names as fit in
 * `capacity` bytes of `names`, one after another, each NUL-terminated; sets
 * *count to how many members there are and *size to the bytes all their
 * names take (call with capacity 0 to size; names may then be NULL). */
int kvf_store_members(kvf_store* store, char* names, size_t capacity, size_t* count, size_t* size);

/* ---- Weight sync for RL (C++: kvfabric/weights.h; how it works:
 * docs/design/weights.md)
 *
 * Member 0 (a trainer rank) sends a version of named tensors; the others
 * (rollout ranks) receive them in the same order, each bucket checked
 * before any of its tensors is handed out, and relayed to the receivers
 * behind them. One kvf_weights per process, each on its own engine.
 *
 *   kvf_weights_options o;
 *   kvf_weights_options_init(&o);              // 64 MiB buckets, 2 slots, 30 s
 *   kvf_weights* w;
 *   kvf_weights_create(e, &o, &w);             // registers its slots with e
 *   char me_desc[1024]; size_t n;
 *   kvf_weights_describe(w, me_desc, sizeof me_desc, &n);
 *   ... gather every member's description, the sender's first, by any means ...
 *   kvf_weights_connect(w, descriptions, members, my_index);
 *   sender:   kvf_weights_begin_send(w, step);
 *             kvf_weights_send(w, &tensor) for each; kvf_weights_end_send(w);
 *   receiver: kvf_weights_begin_receive(w, step);
 *             while (kvf_weights_next(w, &tensor, &done) == KVF_OK && !done) use(tensor);
 *   kvf_weights_destroy(w);                    // before kvf_engine_destroy(e)
 *
 * Errors name the member and the bucket: KVF_EPROTOCOL (a bucket damaged on
 * the way, or a neighbour's failure), KVF_EINVAL (another version than the
 * one asked for, a version begun before the last one completed without a
 * new connect), KVF_ETIMEOUT (the sender died, or a member neither died nor
 * went on), KVF_EUNAVAILABLE (this receiver's parent died and the sender no
 * longer holds what it lacks). A receiver that dies stops no one else.
 *
 * Threads: one thread at a time drives a kvf_weights (its calls wait for
 * the others' buckets and credits). It holds a use of its engine's handle,
 * as a store does: destroy it before its engine. */
typedef struct kvf_weights kvf_weights;

typedef struct kvf_weights_options {
  uint64_t bucket_bytes;   /* tensor bytes per bucket */
  uint64_t manifest_bytes; /* room for a bucket's manifest (its tensors' names, dtypes, shapes) */
  int slots;               /* buckets in flight to each receiver */
  int64_t timeout_ms;      /* longest wait for a bucket or a credit */
  const char* host;        /* this member's host for the relay plan; NULL or "": the engine name's */
  int rails;               /* this member's rails for the relay plan; 0: the engine's */
} kvf_weights_options;

/* A tensor: sent (its bytes are read during kvf_weights_send), or received
 * (name, dtype, shape and bytes owned by the kvf_weights, valid until its
 * next call). dtype: "bfloat16", "float32", "int8", ... as the sender
 * names it. */
typedef struct kvf_tensor {
  const char* name;
  const char* dtype;
  const int64_t* shape;
  size_t ndim;
  const void* data;
  uint64_t bytes;
} kvf_tensor;

/* The defaults: kvfabric::weights::SyncOptions'. */
void kvf_weights_options_init(kvf_weights_options* options);
/* options: NULL for the defaults. Every member must take the same
 * bucket_bytes, manifest_bytes and slots (connect refuses otherwise). */
int kvf_weights_create(kvf_engine* engine, const kvf_weights_options* options, kvf_weights** out);
/* Unregisters the slots and releases the handle (and its use of the engine). */
void kvf_weights_destroy(kvf_weights* weights);
/* This member's description (JSON, NUL-terminated) into `out` when it fits
 * in `capacity` bytes; *size: the bytes it takes, its NUL included (call
 * with capacity 0 to size; out may then be NULL). */
int kvf_weights_describe(kvf_weights* weights, char* out, size_t capacity, size_t* size);
/* Every member's description, the sender's first; `me`: this member's
 * index. Plans the relays and opens the neighbours' segments; after a
 * version that failed, every member connects again before the next. */
int kvf_weights_connect(kvf_weights* weights, const char* const* members, size_t count, int me);
int kvf_weights_begin_send(kvf_weights* weights, uint64_t version);
int kvf_weights_send(kvf_weights* weights, const kvf_tensor* tensor);
/* Sends the last bucket; returns once the receivers it writes to have taken every bucket. */
int kvf_weights_end_send(kvf_weights* weights);
int kvf_weights_begin_receive(kvf_weights* weights, uint64_t version);
/* The next tensor in the sender's order into *out, or *done = 1 once the
 * version is complete. */
int kvf_weights_next(kvf_weights* weights, kvf_tensor* out, int* done);

#ifdef __cplusplus
}
#endif

#endif /* KVFABRIC_H_ */
