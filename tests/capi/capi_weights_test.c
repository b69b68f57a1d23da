/* The weight sync's C API (kvf_weights_*) from a C program.
 *
 * usage: capi_weights_test PROTOCOL   (tcp or shm)
 *
 * The sender in this process and two receivers, forked children, each on
 * its own engine made with the C API. Each child sends its description up
 * its pipe; the parent sends every member's descriptions down to each; all
 * connect (on one host the receivers form a chain behind the sender). Two
 * versions of a model of mixed dtypes and sizes (one tensor larger than a
 * bucket, an empty one) go from the sender to both; each receiver checks
 * every tensor's name, dtype, shape and bytes. Bad input fails alone and
 * changes nothing. Exit status 0 means every check passed. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kvfabric.h"

#define MEMBERS 3
#define TENSORS 6
#define DESC 4096

static const char* const kNames[TENSORS] = {"embed", "layer.0.norm", "layer.0.qkv", "empty", "layer.1.bias", "head"};
static const char* const kDtypes[TENSORS] = {"bfloat16", "float32", "bfloat16", "float32", "int8", "bfloat16"};
/* bytes: 300 KiB (larger than the 256 KiB buckets), small ones, none, 200 KiB. */
static const int64_t kShapes[TENSORS][2] = {{600, 256}, {257, 1}, {96, 160}, {0, 1}, {3, 1}, {400, 256}};
static const uint64_t kElement[TENSORS] = {2, 4, 2, 4, 1, 2};

static uint64_t bytes_of(int i) { return (uint64_t)kShapes[i][0] * (uint64_t)kShapes[i][1] * kElement[i]; }

static const char* kQuiet[] = {"KVF_LOG_LEVEL=error", NULL};

static kvf_weights* make_sync(const char* protocol, kvf_engine** engine) {
  kvf_config cfg = config_for(protocol, kQuiet);
  CHECK(kvf_engine_create(&cfg, engine) == KVF_OK, "engine");
  kvf_weights_options o;
  kvf_weights_options_init(&o);
  CHECK(o.bucket_bytes == 64u << 20 && o.slots == 2 && o.timeout_ms == 30000, "defaults");
  o.bucket_bytes = 256u << 10;
  o.manifest_bytes = 16u << 10;
  o.timeout_ms = 10000;
  kvf_weights* w = NULL;
  CHECK(kvf_weights_create(*engine, &o, &w) == KVF_OK, "create");
  return w;
}

/* The members' descriptions as the parent sends them down: count, then each length and bytes. */
static int read_members(int fd, char members[MEMBERS][DESC]) {
  for (int i = 0; i < MEMBERS; ++i) {
    size_t n = 0;
    if (read_all(fd, &n, sizeof n) != 0 || n > DESC || read_all(fd, members[i], n) != 0) return -1;
  }
  return 0;
}

static int receive(kvf_weights* w, uint64_t version) {
  CHECK(kvf_weights_begin_receive(w, version) == KVF_OK, "begin_receive %llu", (unsigned long long)version);
  int i = 0;
  for (;;) {
    kvf_tensor t;
    int done = 0;
    const int rc = kvf_weights_next(w, &t, &done);
    CHECK(rc == KVF_OK, "next %d of version %llu: %d", i, (unsigned long long)version, rc);
    if (rc != KVF_OK || done) break;
    CHECK(i < TENSORS && strcmp(t.name, kNames[i]) == 0 && strcmp(t.dtype, kDtypes[i]) == 0, "tensor %d: %s %s", i,
          t.name, t.dtype);
    CHECK(i < TENSORS && t.ndim == 2 && t.shape[0] == kShapes[i][0] && t.shape[1] == kShapes[i][1] &&
              t.bytes == bytes_of(i),
          "tensor %d's shape or size", i);
    if (i < TENSORS && t.bytes > 0)
      CHECK(matching(t.data, 0, t.bytes, (unsigned)(version * 10 + i)) == t.bytes, "tensor %d's bytes", i);
    ++i;
  }
  CHECK(i == TENSORS, "%d tensors of version %llu", i, (unsigned long long)version);
  return 0;
}

static int run_receiver(const char* protocol, int up, int down, int me) {
  kvf_engine* engine = NULL;
  kvf_weights* w = make_sync(protocol, &engine);
  char desc[DESC];
  size_t n = 0;
  CHECK(kvf_weights_describe(w, desc, sizeof desc, &n) == KVF_OK && n == strlen(desc) + 1, "describe");
  if (write_all(up, &n, sizeof n) != 0 || write_all(up, desc, n) != 0) return 1;
  char members[MEMBERS][DESC];
  if (read_members(down, members) != 0) return 1;
  const char* list[MEMBERS] = {members[0], members[1], members[2]};
  CHECK(kvf_weights_connect(w, list, MEMBERS, me) == KVF_OK, "connect %d", me);
  CHECK(kvf_weights_begin_send(w, 1) == KVF_EINVAL, "a receiver cannot send");
  for (uint64_t v = 1; v <= 2; ++v) receive(w, v);
  kvf_weights_destroy(w);
  kvf_engine_destroy(engine);
  return failures == 0 ? 0 : 1;
}

static int run_first(const char* protocol, int up, int down) { return run_receiver(protocol, up, down, 1); }
static int run_second(const char* protocol, int up, int down) { return run_receiver(protocol, up, down, 2); }

static void send_version(kvf_weights* w, uint64_t version) {
  CHECK(kvf_weights_begin_send(w, version) == KVF_OK, "begin_send %llu", (unsigned long long)version);
  for (int i = 0; i < TENSORS; ++i) {
    uint8_t* data = malloc(bytes_of(i) + 1);
    fill(data, 0, bytes_of(i), (unsigned)(version * 10 + i));
    const kvf_tensor t = {kNames[i], kDtypes[i], kShapes[i], 2, data, bytes_of(i)};
    CHECK(kvf_weights_send(w, &t) == KVF_OK, "send tensor %d", i);
    free(data);
  }
  CHECK(kvf_weights_end_send(w) == KVF_OK, "end_send %llu", (unsigned long long)version);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s tcp|shm\n", argv[0]);
    return 2;
  }
  const char* protocol = argv[1];
  struct child children[2];
  CHECK(start_child(&children[0], run_first, protocol) == 0, "fork");
  CHECK(start_child(&children[1], run_second, protocol) == 0, "fork");
  kvf_engine* engine = NULL;
  kvf_weights* w = make_sync(protocol, &engine);

  /* Bad input: a clear error, nothing changed. */
  size_t need = 0;
  CHECK(kvf_weights_describe(w, NULL, 0, &need) == KVF_OK && need > 1, "describe sizes");
  char small[8];
  CHECK(kvf_weights_describe(w, small, sizeof small, &need) == KVF_ERANGE, "too small a buffer");
  CHECK(kvf_weights_describe(NULL, small, sizeof small, &need) == KVF_EINVAL, "NULL handle");
  CHECK(kvf_weights_create(engine, NULL, NULL) == KVF_EINVAL, "NULL out");

  char members[MEMBERS][DESC];
  size_t n = 0;
  CHECK(kvf_weights_describe(w, members[0], DESC, &n) == KVF_OK, "describe");
  for (int c = 0; c < 2; ++c)
    CHECK(read_all(children[c].up, &n, sizeof n) == 0 && n <= DESC && read_all(children[c].up, members[c + 1], n) == 0,
          "child %d's description", c);
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < MEMBERS; ++i) {
      n = strlen(members[i]) + 1;
      CHECK(write_all(children[c].down, &n, sizeof n) == 0 && write_all(children[c].down, members[i], n) == 0,
            "to child %d", c);
    }
  const char* list[MEMBERS] = {members[0], members[1], members[2]};
  CHECK(kvf_weights_connect(w, list, MEMBERS, 7) == KVF_EINVAL, "no member 7");
  CHECK(kvf_weights_connect(w, list, MEMBERS, 0) == KVF_OK, "connect");
  const kvf_tensor nameless = {NULL, "float32", NULL, 0, NULL, 0};
  CHECK(kvf_weights_send(w, &nameless) == KVF_EINVAL, "a tensor without a name");
  int done = 0;
  CHECK(kvf_weights_begin_receive(w, 1) == KVF_EINVAL, "the sender does not receive");
  CHECK(kvf_weights_next(w, NULL, &done) == KVF_EINVAL, "NULL out");
  for (uint64_t v = 1; v <= 2; ++v) send_version(w, v);
  for (int c = 0; c < 2; ++c) stop_child(&children[c]);
  kvf_weights_destroy(w);
  kvf_engine_destroy(engine);
  if (failures == 0) printf("capi weights (%s): every check passed\n", protocol);
  return failures == 0 ? 0 : 1;
}
