/* kvfabric C API: the engine for C programs and for other languages' bindings.
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
/* KVF_EBUSY while a task is pending or a submit on another thread uses the batch. */
int kvf_batch_free(kvf_engine* engine, kvf_batch batch);
/* Submits and waits for every request; returns the first failure. */
int kvf_transfer(kvf_engine* engine, const kvf_request* requests, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* KVFABRIC_H_ */
