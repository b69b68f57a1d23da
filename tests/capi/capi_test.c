/* The C API from a C program, against a second process.
 *
 * usage: capi_test PROTOCOL   (tcp or shm)
 *
 * The child is the target: it registers a buffer filled with a known pattern,
 * sends its segment name and buffer address up a pipe, and answers "check"
 * requests by comparing its own memory with what the parent says it wrote.
 * The parent writes, reads back, checks the target's memory and every error
 * path the header documents. Exit status 0 means every check passed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kvfabric.h"

#define BUF (8u << 20)
#define BLOCK (256u << 10)

struct check_cmd {
  uint64_t off, len;
  uint32_t seed;
};

static int run_target(const char* protocol, int up, int down) {
  const kvf_config cfg = config_for(protocol, NULL);
  kvf_engine* e = NULL;
  if (kvf_engine_create(&cfg, &e) != KVF_OK) {
    fprintf(stderr, "target: %s\n", kvf_last_error());
    return 1;
  }
  uint8_t* buf = aligned_alloc(4096, BUF);
  fill(buf, 0, BUF, 1);
  if (kvf_register_memory(e, buf, BUF, "cpu:0") != KVF_OK) {
    fprintf(stderr, "target: %s\n", kvf_last_error());
    return 1;
  }
  char hello[128];
  memset(hello, 0, sizeof(hello));
  snprintf(hello, sizeof(hello), "%s %llu", kvf_engine_name(e), (unsigned long long)(uintptr_t)buf);
  write_all(up, hello, sizeof(hello));
  struct check_cmd c;
  while (read_all(down, &c, sizeof(c)) == 0) {
    uint64_t ok = c.off + c.len <= BUF ? matching(buf + c.off, c.off, c.len, c.seed) : 0;
    write_all(up, &ok, sizeof(ok));
  }
  kvf_unregister_memory(e, buf);
  kvf_engine_destroy(e);
  free(buf);
  return 0;
}

static uint64_t target_check(int up, int down, uint64_t off, uint64_t len, unsigned seed) {
  struct check_cmd c = {off, len, seed};
  uint64_t ok = 0;
  if (write_all(down, &c, sizeof(c)) != 0 || read_all(up, &ok, sizeof(ok)) != 0) return UINT64_MAX;
  return ok;
}

/* An engine with `setting` (one NAME=value) over `protocol`, a BLOCK of
 * registered memory filled with `fill`, the peer's segment open and warm,
 * and a batch of one request: 0, or -1 after a failed check (the engine,
 * if made, is destroyed). */
static int open_one_request(const char* protocol, const char* setting, const char* peer, int fill, kvf_engine** e,
                            uint8_t** local, kvf_segment* seg, kvf_batch* b) {
  const char* settings[] = {setting, NULL};
  const kvf_config cfg = config_for(protocol, settings);
  int rc = kvf_engine_create(&cfg, e);
  CHECK(rc == KVF_OK, "kvf_engine_create: %d", rc);
  if (rc != KVF_OK) return -1;
  *local = aligned_alloc(4096, BLOCK);
  memset(*local, fill, BLOCK);
  rc = kvf_register_memory(*e, *local, BLOCK, NULL);
  CHECK(rc == KVF_OK, "kvf_register_memory: %d", rc);
  rc = kvf_open_segment(*e, peer, seg);
  CHECK(rc == KVF_OK, "kvf_open_segment: %d", rc);
  rc = kvf_warmup(*e, peer);
  CHECK(rc == KVF_OK, "kvf_warmup: %d", rc);
  rc = kvf_batch_allocate(*e, 1, b);
  CHECK(rc == KVF_OK, "kvf_batch_allocate: %d", rc);
  return 0;
}

/* SIGSTOP, then waits until every thread of `pid` has stopped (until then
 * its progress thread may still serve a request): 0, or -1 after 5 s. */
static int stop_process(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return -1;
  char dir[64];
  snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
  for (int tries = 0; tries < 1000; ++tries) {
    DIR* d = opendir(dir);
    if (d == NULL) return -1;
    int all = 1, seen = 0;
    for (struct dirent* t; (t = readdir(d)) != NULL;) {
      if (t->d_name[0] == '.') continue;
      char path[400], buf[512];
      snprintf(path, sizeof(path), "%s/%s/stat", dir, t->d_name);
      FILE* f = fopen(path, "r");
      if (f == NULL) continue; /* a thread that ended meanwhile */
      const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      buf[n] = '\0';
      const char* close = strrchr(buf, ')');
      ++seen;
      if (close == NULL || (close[2] != 'T' && close[2] != 't')) all = 0;
    }
    closedir(d);
    if (seen > 0 && all) return 0;
    usleep(5000);
  }
  return -1;
}

/* A wait longer than the clock can count (INT64_MAX ms) has no limit: it
 * must not return at once with the batch still PENDING, as it would if now +
 * the timeout in nanoseconds wrapped into the past. The target is stopped
 * (SIGSTOP), so a WRITE to it stays pending until this engine's transfer
 * timeout (1 s) ends it with TIMEOUT. */
static void check_endless_wait(const char* protocol, const char* peer, uint64_t raddr, pid_t target) {
  kvf_engine* e = NULL;
  uint8_t* local = NULL;
  kvf_segment seg = -1;
  kvf_batch b = 0;
  if (open_one_request(protocol, "KVF_TRANSFER_TIMEOUT_MS=1000", peer, 0x5a, &e, &local, &seg, &b) != 0) return;
  int rc;
  CHECK(stop_process(target) == 0, "the target did not stop");
  kvf_request w = {KVF_WRITE, local, seg, raddr, BLOCK};
  rc = kvf_batch_submit(e, b, &w, 1);
  CHECK(rc == KVF_OK, "kvf_batch_submit: %d", rc);
  kvf_transfer_status st;
  memset(&st, 0, sizeof(st));
  const double t0 = now_s();
  rc = kvf_batch_wait(e, b, INT64_MAX, &st);
  const double waited = now_s() - t0;
  kill(target, SIGCONT);
  CHECK(rc == KVF_OK && st.state == KVF_TIMEOUT && waited > 0.8,
        "kvf_batch_wait(INT64_MAX) on a stopped target: rc %d, state %d after %.3f s (want TIMEOUT after the 1 s "
        "transfer timeout)", rc, st.state, waited);
  rc = kvf_batch_free(e, b);
  CHECK(rc == KVF_OK, "kvf_batch_free: %d", rc);
  kvf_engine_destroy(e);
  free(local);
}


/* kvf_batch_expire ends a READ from a stopped target at once, long before
 * its 30 s deadline, and nothing of it lands in the buffer after: the
 * target resumes and serves it, and the buffer keeps what the caller wrote
 * into it after the expiry. Over tcp (shm copies a READ within its post:
 * none stays pending). */
static void check_expire(const char* protocol, const char* peer, uint64_t raddr, pid_t target) {
  kvf_engine* e = NULL;
  uint8_t* local = NULL;
  kvf_segment seg = -1;
  kvf_batch b = 0;
  if (open_one_request(protocol, "KVF_TRANSFER_TIMEOUT_MS=30000", peer, 0, &e, &local, &seg, &b) != 0) return;
  int rc;
  rc = kvf_batch_expire(e, b);
  CHECK(rc == KVF_OK, "kvf_batch_expire of a batch with nothing submitted: %d", rc);
  CHECK(stop_process(target) == 0, "the target did not stop");
  kvf_request r = {KVF_READ, local, seg, raddr, BLOCK};
  rc = kvf_batch_submit(e, b, &r, 1);
  CHECK(rc == KVF_OK, "kvf_batch_submit: %d", rc);
  kvf_transfer_status st;
  memset(&st, 0, sizeof(st));
  rc = kvf_batch_wait(e, b, 300, &st);
  CHECK(rc == KVF_OK && st.state == KVF_PENDING, "a READ from a stopped target: rc %d, state %d (want PENDING)", rc,
        st.state);
  const double t0 = now_s();
  rc = kvf_batch_expire(e, b);
  CHECK(rc == KVF_OK, "kvf_batch_expire: %d (%s)", rc, kvf_last_error());
  rc = kvf_batch_status(e, b, &st);
  const double took = now_s() - t0;
  CHECK(rc == KVF_OK && st.state == KVF_TIMEOUT && took < 5.0,
        "kvf_batch_status after kvf_batch_expire: rc %d, state %d after %.3f s (want TIMEOUT at once)", rc, st.state,
        took);
  CHECK(kvf_batch_expire(e, UINT64_MAX) == KVF_ENOTFOUND, "kvf_batch_expire of an unknown batch");
  memset(local, 0x77, BLOCK);  /* the caller's buffer holds other data now */
  kill(target, SIGCONT);
  usleep(500 * 1000);  /* the target serves what it had been sent */
  size_t changed = 0;
  for (size_t i = 0; i < BLOCK; ++i) changed += local[i] != 0x77;
  CHECK(changed == 0, "%zu bytes of the expired READ landed after kvf_batch_expire returned", changed);
  rc = kvf_batch_free(e, b);
  CHECK(rc == KVF_OK, "kvf_batch_free: %d", rc);
  kvf_engine_destroy(e);
  free(local);
}

/* A thread calling an engine until it is closed. */
struct caller {
  pthread_t thread;
  kvf_engine* e;
  kvf_request req;
  int loop;   /* call again after each success */
  int calls;  /* successful calls */
  int rc;     /* the call that ended the loop */
};

static void* call_until_closed(void* arg) {
  struct caller* c = arg;
  do {
    c->rc = kvf_transfer(c->e, &c->req, 1);
    if (c->rc == KVF_OK) ++c->calls;
  } while (c->loop && c->rc == KVF_OK);
  return NULL;
}

/* kvf_engine_close while four threads transfer: each returns KVF_ECLOSED,
 * and so does every later call, until kvf_engine_destroy. */
static void close_while_threads_call(const kvf_config* cfg, const char* peer, uint64_t raddr, uint8_t* local) {
  kvf_engine* e = NULL;
  int rc = kvf_engine_create(cfg, &e);
  CHECK(rc == KVF_OK, "kvf_engine_create: %d", rc);
  if (rc != KVF_OK) return;
  kvf_segment seg = -1;
  CHECK(kvf_register_memory(e, local, BUF, NULL) == KVF_OK, "register");
  CHECK(kvf_open_segment(e, peer, &seg) == KVF_OK, "open %s", peer);
  struct caller callers[4];
  for (int i = 0; i < 4; ++i) {
    kvf_request r = {KVF_WRITE, local + i * BLOCK, seg, raddr + 20ull * BLOCK + i * BLOCK, BLOCK};
    callers[i] = (struct caller){.e = e, .req = r, .loop = 1};
    pthread_create(&callers[i].thread, NULL, call_until_closed, &callers[i]);
  }
  usleep(50 * 1000);
  kvf_engine_close(e);
  for (int i = 0; i < 4; ++i) {
    pthread_join(callers[i].thread, NULL);
    CHECK(callers[i].rc == KVF_ECLOSED, "thread %d ended with %d after %d calls", i, callers[i].rc, callers[i].calls);
  }
  kvf_request r = {KVF_WRITE, local, seg, raddr, 4096};
  rc = kvf_transfer(e, &r, 1);
  CHECK(rc == KVF_ECLOSED && strstr(kvf_last_error(), "is closed") != NULL, "transfer after close: %d", rc);
  kvf_batch b;
  rc = kvf_batch_allocate(e, 1, &b);
  CHECK(rc == KVF_ECLOSED, "allocate after close: %d", rc);
  CHECK(strchr(kvf_engine_name(e), ':') != NULL, "the name after close: '%s'", kvf_engine_name(e));
  kvf_engine_close(e); /* again: nothing */
  kvf_engine_destroy(e);
}

/* kvf_engine_destroy while a thread waits inside kvf_transfer for a target
 * that is stopped: the call returns KVF_ECLOSED at once, and the last one
 * out frees the handle. */
static void destroy_while_a_thread_waits(kvf_engine* e, kvf_segment seg, uint64_t raddr, uint8_t* local,
                                         pid_t target) {
  CHECK(stop_process(target) == 0, "the target did not stop");
  kvf_request r = {KVF_WRITE, local, seg, raddr, BUF};
  struct caller c = {.e = e, .req = r, .loop = 0};
  pthread_create(&c.thread, NULL, call_until_closed, &c);
  usleep(300 * 1000); /* inside, waiting: nothing completes */
  const double t0 = now_s();
  kvf_engine_destroy(e);
  pthread_join(c.thread, NULL);
  const double took = now_s() - t0;
  CHECK(took < 5, "destroy and the waiting call took %.1f s", took);
  CHECK(c.rc == KVF_ECLOSED, "the waiting transfer returned %d", c.rc);
  kill(target, SIGCONT);
}

static void run_initiator(const char* protocol, const char* peer, uint64_t raddr, int up, int down, pid_t target) {
  const char* settings[] = {"KVF_TRANSFER_TIMEOUT_MS=20000", NULL};
  const kvf_config cfg = config_for(protocol, settings);
  kvf_engine* e = NULL;
  int rc = kvf_engine_create(&cfg, &e);
  CHECK(rc == KVF_OK, "kvf_engine_create: %d", rc);
  if (rc != KVF_OK) return;
  CHECK(strchr(kvf_engine_name(e), ':') != NULL, "engine name '%s'", kvf_engine_name(e));

  uint8_t* local = aligned_alloc(4096, BUF);
  uint8_t* back = aligned_alloc(4096, BUF);
  memset(back, 0, BUF);
  void* addrs[2] = {local, back};
  size_t lens[2] = {BUF, BUF};
  rc = kvf_register_memory_batch(e, addrs, lens, 2, NULL);
  CHECK(rc == KVF_OK, "kvf_register_memory_batch: %d", rc);

  kvf_segment seg = -1;
  rc = kvf_open_segment(e, peer, &seg);
  CHECK(rc == KVF_OK, "kvf_open_segment(%s): %d", peer, rc);
  rc = kvf_warmup(e, peer);
  CHECK(rc == KVF_OK, "kvf_warmup: %d", rc);
  rc = kvf_warmup(e, peer);
  CHECK(rc == KVF_OK, "kvf_warmup again: %d", rc);

  kvf_remote_buffer rb[4];
  size_t count = 0;
  rc = kvf_segment_buffers(e, seg, rb, 4, &count);
  CHECK(rc == KVF_OK && count == 1 && rb[0].addr == raddr && rb[0].length == BUF,
        "kvf_segment_buffers: rc %d, %zu buffers", rc, count);

  /* A batch of 16 writes, waited for. */
  fill(local, 0, BUF, 9);
  kvf_request reqs[16];
  for (unsigned i = 0; i < 16; ++i) {
    kvf_request r = {KVF_WRITE, local + i * BLOCK, seg, raddr + i * BLOCK, BLOCK};
    reqs[i] = r;
  }
  kvf_batch b = 0;
  rc = kvf_batch_allocate(e, 16, &b);
  CHECK(rc == KVF_OK, "kvf_batch_allocate: %d", rc);
  rc = kvf_batch_submit(e, b, reqs, 16);
  CHECK(rc == KVF_OK, "kvf_batch_submit: %d", rc);
  kvf_transfer_status st;
  rc = kvf_batch_wait(e, b, 30000, &st);
  CHECK(rc == KVF_OK && st.state == KVF_COMPLETED && st.transferred_bytes == 16ull * BLOCK,
        "kvf_batch_wait: rc %d state %d bytes %llu", rc, st.state, (unsigned long long)st.transferred_bytes);
  for (size_t t = 0; t < 16; ++t) {
    rc = kvf_task_status(e, b, t, &st);
    CHECK(rc == KVF_OK && st.state == KVF_COMPLETED && st.error == KVF_OK, "task %zu: state %d", t, st.state);
  }
  rc = kvf_batch_free(e, b);
  CHECK(rc == KVF_OK, "kvf_batch_free: %d", rc);
  uint64_t ok = target_check(up, down, 0, 16ull * BLOCK, 9);
  CHECK(ok == 16ull * BLOCK, "target memory after the writes: %llu of %llu bytes match",
        (unsigned long long)ok, 16ull * BLOCK);

  /* Blocking read of the untouched rest: the target's own pattern. */
  kvf_request rd = {KVF_READ, back, seg, raddr + 16ull * BLOCK, BUF - 16ull * BLOCK};
  rc = kvf_transfer(e, &rd, 1);
  CHECK(rc == KVF_OK, "kvf_transfer READ: %d", rc);
  CHECK(matching(back, 16ull * BLOCK, BUF - 16ull * BLOCK, 1) == BUF - 16ull * BLOCK, "read bytes differ");

  /* Errors: each returns its code, a message, and changes nothing. */
  kvf_request bad = {KVF_WRITE, local, seg, raddr + BUF - 16, 4096};
  rc = kvf_transfer(e, &bad, 1);
  CHECK(rc == KVF_ERANGE && strstr(kvf_last_error(), "OutOfRange") != NULL, "out-of-range remote: %d", rc);
  char stack_buf[64];
  kvf_request unreg = {KVF_WRITE, stack_buf, seg, raddr, sizeof(stack_buf)};
  rc = kvf_transfer(e, &unreg, 1);
  CHECK(rc < 0 && kvf_last_error()[0] != '\0', "unregistered local: %d", rc);
  kvf_request badop = {7, local, seg, raddr, 16};
  rc = kvf_transfer(e, &badop, 1);
  CHECK(rc == KVF_EINVAL, "bad opcode: %d", rc);
  kvf_request unknown = {KVF_WRITE, local, 12345, raddr, 16};
  rc = kvf_transfer(e, &unknown, 1);
  CHECK(rc == KVF_ENOTFOUND, "unknown segment: %d", rc);
  rc = kvf_batch_allocate(e, 1, &b);
  CHECK(rc == KVF_OK, "kvf_batch_allocate: %d", rc);
  rc = kvf_batch_submit(e, b, reqs, 2);
  CHECK(rc < 0, "2 requests into a batch of 1: %d", rc);
  kvf_batch_free(e, b);
  rc = kvf_batch_free(e, 999999);
  CHECK(rc == KVF_ENOTFOUND, "unknown batch: %d", rc);
  kvf_segment nobody;
  rc = kvf_open_segment(e, "127.0.0.1:1", &nobody);
  CHECK(rc == KVF_ENETWORK || rc == KVF_ENOTFOUND, "open a segment nobody serves: %d", rc);
  rc = kvf_register_memory(NULL, local, 16, NULL);
  CHECK(rc == KVF_EINVAL, "NULL engine: %d", rc);
  CHECK(strcmp(kvf_code_name(KVF_ERANGE), "OutOfRange") == 0, "code name %s", kvf_code_name(KVF_ERANGE));
  /* Every code of kvfabric/codes.h: its C constant and kvf_code_name. */
#define CHECK_CODE(number, Name, C_NAME, meaning)                                                \
  CHECK(KVF_##C_NAME == -(number) && strcmp(kvf_code_name(KVF_##C_NAME), #Name) == 0, "KVF_%s: %d %s", \
        #C_NAME, KVF_##C_NAME, kvf_code_name(KVF_##C_NAME));
  KVF_STATUS_CODES(CHECK_CODE)
#undef CHECK_CODE
  CHECK(strcmp(kvf_code_name(KVF_OK), "OK") == 0 && strcmp(kvf_code_name(-1000), "Unknown") == 0 &&
            strcmp(kvf_code_name(1), "Unknown") == 0,
        "code names of OK, -1000, 1");
  /* Lengths, addresses and counts at the ends of their
   * types are refused with a message, and change nothing. */
  rc = kvf_register_memory(e, back, SIZE_MAX, NULL);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "wraps") != NULL, "register SIZE_MAX bytes: %d", rc);
  rc = kvf_register_memory(e, (void*)(uintptr_t)(UINT64_MAX - 4095), 8192, NULL);
  CHECK(rc == KVF_EINVAL, "register across the top of the address space: %d", rc);
  rc = kvf_register_memory(e, stack_buf, 0, NULL);
  CHECK(rc == KVF_EINVAL, "register 0 bytes: %d", rc);
  const uint64_t edges[][2] = {{raddr, UINT64_MAX}, {raddr, 1ull << 63}, {UINT64_MAX - 15, 16},
                               {UINT64_MAX, 1}, {raddr + BUF - 1, UINT64_MAX}};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); ++i) {
    kvf_request edge = {KVF_WRITE, local, seg, edges[i][0], edges[i][1]};
    rc = kvf_transfer(e, &edge, 1);
    CHECK(rc == KVF_ERANGE && kvf_last_error()[0] != '\0', "WRITE of %llu bytes to 0x%llx: %d",
          (unsigned long long)edges[i][1], (unsigned long long)edges[i][0], rc);
  }
  kvf_request zero = {KVF_WRITE, local, seg, raddr, 0};
  rc = kvf_transfer(e, &zero, 1);
  CHECK(rc == KVF_EINVAL, "WRITE of 0 bytes: %d", rc);
  rc = kvf_batch_allocate(e, SIZE_MAX, &b);
  CHECK(rc == KVF_EINVAL, "a batch of SIZE_MAX requests: %d", rc);
  rc = kvf_batch_allocate(e, 0, &b);
  CHECK(rc == KVF_EINVAL, "a batch of 0 requests: %d", rc);
  rc = kvf_batch_allocate(e, 1, &b);
  CHECK(rc == KVF_OK, "kvf_batch_allocate: %d", rc);
  rc = kvf_task_status(e, b, SIZE_MAX, &st);
  CHECK(rc == KVF_ERANGE, "task SIZE_MAX of a batch: %d", rc);
  rc = kvf_batch_wait(e, b, INT64_MIN, &st);  /* nothing submitted: ends at once */
  CHECK(rc == KVF_OK && st.state == KVF_COMPLETED, "wait INT64_MIN on an empty batch: %d, state %d", rc, st.state);
  kvf_batch_free(e, b);
  rc = kvf_batch_wait(e, UINT64_MAX, 0, &st);
  CHECK(rc == KVF_ENOTFOUND, "wait on batch UINT64_MAX: %d", rc);
  rc = kvf_close_segment(e, INT64_MIN);
  CHECK(rc < 0 && kvf_last_error()[0] != '\0', "close segment INT64_MIN: %d", rc);
  ok = target_check(up, down, 16ull * BLOCK, BUF - 16ull * BLOCK, 1);
  CHECK(ok == BUF - 16ull * BLOCK, "the failed requests changed target memory");

  const char* bad_settings[] = {"KVF_NO_SUCH=1", NULL};
  kvf_config bad_cfg = cfg;
  bad_cfg.settings = bad_settings;
  kvf_engine* e2 = NULL;
  rc = kvf_engine_create(&bad_cfg, &e2);
  CHECK(rc == KVF_ENOTFOUND && e2 == NULL && strstr(kvf_last_error(), "KVF_NO_SUCH") != NULL,
        "unknown setting: %d", rc);

  rc = kvf_unregister_memory_batch(e, addrs, 2);
  CHECK(rc == KVF_OK, "kvf_unregister_memory_batch: %d", rc);
  rc = kvf_unregister_memory(e, local);
  CHECK(rc == KVF_ENOTFOUND, "unregister twice: %d", rc);
  rc = kvf_close_segment(e, seg);
  CHECK(rc == KVF_OK, "kvf_close_segment: %d", rc);

  close_while_threads_call(&cfg, peer, raddr, local);
  CHECK(kvf_register_memory(e, local, BUF, NULL) == KVF_OK, "register again");
  CHECK(kvf_open_segment(e, peer, &seg) == KVF_OK, "open again");
  /* Over tcp only: a stopped shm target that resumes after its initiator
   * closed with a write in flight crashes inside libfabric's shm progress
   * (libfabric 1.17), which would fail the target, not the engine here. */
  if (strcmp(protocol, "tcp") == 0) destroy_while_a_thread_waits(e, seg, raddr, local, target);
  else kvf_engine_destroy(e);
  free(local);
  free(back);
}

int main(int argc, char** argv) {
  const char* protocol = argc > 1 ? argv[1] : "tcp";
  struct child target;
  if (start_child(&target, run_target, protocol) != 0) return 2;
  char hello[128];
  if (read_all(target.up, hello, sizeof(hello)) != 0) {
    fprintf(stderr, "the target process did not start\n");
    return 1;
  }
  char peer[100];
  unsigned long long raddr = 0;
  if (sscanf(hello, "%99s %llu", peer, &raddr) != 2) return 1;
  /* First: the engine that sets FI_AV_REMOVE_CLEANUP (KVF_CLOSE_CONNECTIONS)
   * must be the one that starts libfabric, which reads it once. */
  if (strcmp(protocol, "tcp") == 0) check_expire(protocol, peer, raddr, target.pid);
  run_initiator(protocol, peer, raddr, target.up, target.down, target.pid);
  /* Over tcp only: a WRITE to a stopped tcp target stays pending until its
   * deadline. A stopped shm target, resumed after this initiator's engine
   * was destroyed with the write outstanding, can crash in libfabric's shm
   * progress (fi_cq_read). */
  if (strcmp(protocol, "tcp") == 0) check_endless_wait(protocol, peer, raddr, target.pid);
  stop_child(&target);  /* the target's loop ends */
  if (failures == 0) printf("capi_test %s: all checks passed\n", protocol);
  return failures == 0 ? 0 : 1;
}
