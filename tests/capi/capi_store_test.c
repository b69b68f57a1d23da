/* The store's C API (kvf_store_*) from a C program, with real nodes.
 *
 * usage: capi_store_test PROTOCOL   (tcp or shm)
 *
 * Two nodes, both made with the C API: a forked child (its own engine and a
 * kvf_store with a pool) and one in this process (another engine, another
 * pool). The child sends its name up a pipe and answers each "stats" request
 * with its kvf_store_stats, so the pages and pins of both pools can be
 * counted. A client (a third engine, a kvf_store without a pool, both nodes
 * in its KVF_STORE_MEMBERS) puts pages of mixed sizes in one to three
 * buffers and gets every byte back; it checks exists, remove, pins, remove
 * all, the counters, bad input failing its key alone, a forked copy of the
 * store, close while threads call, and an engine destroyed before its
 * store. Exit status 0 means every check passed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kvfabric.h"

#define REGION (24u << 20)    /* each of the client's source and destination */
#define POOL "32MiB"          /* each node's */
#define MAX_PAGES 48
#define MAX_BUFFERS (MAX_PAGES * 3)

/* Short deadlines so a failure shows quickly. */
#define STORE_TIMES "KVF_STORE_DEADLINE_MS=2000", "KVF_STORE_READ_WINDOW_MS=5000", "KVF_STORE_DOWN_RETRY_MS=300"

/* Pages laid out one after another in the source region, each as one to
 * three buffers, and the same layout in the destination region: the flat
 * buffer arrays the batch calls take. */
struct pages {
  size_t n;
  char text[MAX_PAGES][32];
  const char* keys[MAX_PAGES];
  size_t counts[MAX_PAGES];   /* buffers per page */
  size_t first[MAX_PAGES];    /* its first buffer */
  uint64_t length[MAX_PAGES];
  size_t total;               /* buffers of all pages */
  uint64_t bytes;             /* of all pages */
  kvf_store_buffer src[MAX_BUFFERS];
  kvf_store_buffer dst[MAX_BUFFERS];
};

static uint64_t next_random(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 33;
}

/* n pages of 1 B to 512 KiB named prefix0.., from `at` bytes into the regions. */
static void make_pages(struct pages* p, size_t n, const char* prefix, uint8_t* src, uint8_t* dst, size_t at,
                       unsigned seed) {
  uint64_t rng = seed;
  const size_t start = at;
  memset(p, 0, sizeof(*p));
  p->n = n;
  for (size_t i = 0; i < n; ++i) {
    snprintf(p->text[i], sizeof(p->text[i]), "%s%zu", prefix, i);
    p->keys[i] = p->text[i];
    const uint64_t sizes[] = {1, 4095, 4097, 65536, 131072, 1 + next_random(&rng) % (512u << 10)};
    const uint64_t len = sizes[next_random(&rng) % 6];
    const size_t parts = len < 3 ? (size_t)len : 1 + (size_t)(next_random(&rng) % 3);
    p->length[i] = len;
    p->counts[i] = parts;
    p->first[i] = p->total;
    uint64_t left = len;
    for (size_t k = 0; k < parts; ++k) {
      const uint64_t piece = k + 1 == parts ? left : left / (parts - k);
      p->src[p->total] = (kvf_store_buffer){src + at, piece};
      p->dst[p->total] = (kvf_store_buffer){dst + at, piece};
      ++p->total;
      at += piece;
      left -= piece;
    }
    p->bytes += len;
  }
  CHECK(at <= REGION, "the pages take %zu bytes, more than a region", at);
  fill(src + start, start, at - start, seed);
}

/* Whether page i's destination buffers hold its source bytes; reports the first difference. */
static int page_matches(const struct pages* p, size_t i) {
  for (size_t b = p->first[i]; b < p->first[i] + p->counts[i]; ++b) {
    const uint8_t* want = p->src[b].addr;
    const uint8_t* got = p->dst[b].addr;
    for (uint64_t k = 0; k < p->src[b].length; ++k) {
      if (want[k] != got[k]) {
        fprintf(stderr, "page %s, buffer %zu, byte %llu: 0x%02x, want 0x%02x\n", p->keys[i], b - p->first[i],
                (unsigned long long)k, got[k], want[k]);
        return 0;
      }
    }
  }
  return 1;
}

/* Puts every page; how many succeeded. */
static size_t put_pages(kvf_store* s, const struct pages* p) {
  int results[MAX_PAGES];
  int rc = kvf_store_batch_put(s, p->keys, p->counts, p->n, p->src, p->total, results);
  CHECK(rc == KVF_OK, "kvf_store_batch_put: %d", rc);
  size_t ok = 0;
  for (size_t i = 0; rc == KVF_OK && i < p->n; ++i) {
    CHECK(results[i] == KVF_OK, "put %s: %d (%s)", p->keys[i], results[i], kvf_store_key_error(i));
    ok += results[i] == KVF_OK;
  }
  return ok;
}

/* Gets every page into the zeroed destination; checks each that came back
 * byte for byte and its length. `results`: each page's code. */
static void get_pages(kvf_store* s, const struct pages* p, int* results) {
  for (size_t b = 0; b < p->total; ++b) memset(p->dst[b].addr, 0, p->dst[b].length);
  uint64_t lengths[MAX_PAGES];
  int rc = kvf_store_batch_get(s, p->keys, p->counts, p->n, p->dst, p->total, results, lengths);
  CHECK(rc == KVF_OK, "kvf_store_batch_get: %d", rc);
  for (size_t i = 0; rc == KVF_OK && i < p->n; ++i) {
    if (results[i] != KVF_OK) {
      CHECK(lengths[i] == 0, "failed get %s: length %llu", p->keys[i], (unsigned long long)lengths[i]);
      continue;
    }
    CHECK(lengths[i] == p->length[i], "get %s: length %llu, want %llu", p->keys[i], (unsigned long long)lengths[i],
          (unsigned long long)p->length[i]);
    CHECK(page_matches(p, i), "get %s: the bytes differ", p->keys[i]);
  }
}

/* An engine for `protocol` that logs warnings and errors only; NULL (and the
 * message on stderr) when it cannot start. */
static kvf_engine* new_engine(const char* protocol, const char* whose) {
  const char* settings[] = {"KVF_LOG_LEVEL=warn", NULL};
  const kvf_config cfg = config_for(protocol, settings);
  kvf_engine* e = NULL;
  const int rc = kvf_engine_create(&cfg, &e);
  CHECK(rc == KVF_OK, "%s engine: %d", whose, rc);
  return e;
}

/* A node's store on `e`, with a pool; NULL when it cannot start. */
static kvf_store* new_node(kvf_engine* e, const char* whose) {
  const char* settings[] = {"KVF_STORE_POOL_BYTES=" POOL, STORE_TIMES, NULL};
  kvf_store* s = NULL;
  const int rc = e != NULL ? kvf_store_create(e, settings, &s) : KVF_EINVAL;
  CHECK(rc == KVF_OK, "%s store: %d", whose, rc);
  return s;
}

/* ---- The node in the forked child: its name up the pipe, then its
 * counters on each request, until the pipe closes. */

static int run_node(const char* protocol, int up, int down) {
  kvf_engine* e = new_engine(protocol, "the forked node's");
  kvf_store* s = new_node(e, "the forked node's");
  if (s == NULL) return 1;
  char name[128];
  memset(name, 0, sizeof(name));
  snprintf(name, sizeof(name), "%s", kvf_store_name(s));
  write_all(up, name, sizeof(name));
  char cmd;
  while (read_all(down, &cmd, 1) == 0) {
    kvf_store_stats st;
    memset(&st, 0, sizeof(st));
    if (kvf_store_get_stats(s, &st) != KVF_OK) fprintf(stderr, "node: %s\n", kvf_last_error());
    write_all(up, &st, sizeof(st));
  }
  kvf_store_destroy(s);
  kvf_engine_destroy(e);
  return 0;
}

struct nodes {
  int up, down;         /* the child's pipes */
  kvf_store* local;     /* the node in this process */
};

/* Pages and pinned pages of both pools. */
static void pool_counts(const struct nodes* n, uint64_t* pages, uint64_t* pinned) {
  kvf_store_stats child, local;
  memset(&child, 0, sizeof(child));
  char cmd = 's';
  CHECK(write_all(n->down, &cmd, 1) == 0 && read_all(n->up, &child, sizeof(child)) == 0, "the child's stats");
  int rc = kvf_store_get_stats(n->local, &local);
  CHECK(rc == KVF_OK, "kvf_store_get_stats of the local node: %d", rc);
  *pages = child.pages + local.pages;
  *pinned = child.pinned_pages + local.pinned_pages;
}

/* ---- The client's checks. */

static kvf_store_stats stats_of(kvf_store* s) {
  kvf_store_stats st;
  memset(&st, 0, sizeof(st));
  int rc = kvf_store_get_stats(s, &st);
  CHECK(rc == KVF_OK, "kvf_store_get_stats: %d", rc);
  return st;
}

static void check_members(kvf_store* client, const char* child_name, const char* local_name) {
  size_t count = 0, size = 0;
  int rc = kvf_store_members(client, NULL, 0, &count, &size);
  const size_t want = strlen(child_name) + strlen(local_name) + 2;
  CHECK(rc == KVF_OK && count == 2 && size == want,
        "sizing kvf_store_members: rc %d, %zu members, %zu bytes (want 2, %zu)", rc, count, size, want);
  char names[512];
  memset(names, 'x', sizeof(names));
  rc = kvf_store_members(client, names, sizeof(names), &count, &size);
  CHECK(rc == KVF_OK && count == 2 && size == want, "kvf_store_members: rc %d, %zu members", rc, count);
  const char* first = names;
  const char* second = names + strlen(names) + 1;
  CHECK((strcmp(first, child_name) == 0 && strcmp(second, local_name) == 0) ||
            (strcmp(first, local_name) == 0 && strcmp(second, child_name) == 0),
        "members '%s' and '%s', want '%s' and '%s'", first, second, child_name, local_name);
  /* Room for the first name alone: it is written whole, the second not at all. */
  const size_t one = strlen(first) + 1;
  memset(names, 'x', sizeof(names));
  rc = kvf_store_members(client, names, one + 3, &count, &size);
  CHECK(rc == KVF_OK && count == 2 && size == want && strlen(names) + 1 == one && names[one] == 'x',
        "kvf_store_members into %zu bytes: rc %d, %zu bytes", one + 3, rc, size);
  rc = kvf_store_members(client, NULL, 16, &count, &size);
  CHECK(rc == KVF_EINVAL, "kvf_store_members into NULL with a capacity: %d", rc);
}

/* exists over pages 0-9, a key never put, and page 10, with `removed` gone
 * (a page's index, NONE, or ALL): the leading run ends at the first absent key. */
#define NONE ((size_t)-1)
#define ALL ((size_t)-2)
static void check_exists(kvf_store* client, const struct pages* p, size_t removed) {
  const size_t want_leading = removed == NONE ? 10 : removed == ALL ? 0 : removed;
  const char* keys[12];
  for (size_t i = 0; i < 10; ++i) keys[i] = p->keys[i];
  keys[10] = "never-put";
  keys[11] = p->keys[10];
  uint8_t found[12];
  memset(found, 7, sizeof(found));
  size_t leading = 99;
  int rc = kvf_store_batch_exists(client, keys, 12, found, &leading);
  CHECK(rc == KVF_OK && leading == want_leading, "exists: rc %d, %zu leading hits (want %zu)", rc, leading,
        want_leading);
  CHECK(found[10] == 0 && found[11] == (removed != ALL), "exists: never-put %d, %s %d", found[10], keys[11],
        found[11]);
  for (size_t i = 0; i < 10; ++i)
    CHECK(found[i] == (removed != ALL && removed != i), "exists %s: %d", keys[i], found[i]);
  rc = kvf_store_batch_exists(client, keys, 12, NULL, &leading);
  CHECK(rc == KVF_OK && leading == want_leading, "exists without found: rc %d, %zu", rc, leading);
}

/* Pins count: two pins of a page need two unpins. */
static void check_pins(kvf_store* client, const struct nodes* n, const struct pages* p) {
  const char* keys[6] = {p->keys[0], p->keys[1], p->keys[2], p->keys[3], p->keys[4], "never-put"};
  int results[6];
  int rc = kvf_store_batch_pin(client, keys, 6, results);
  CHECK(rc == KVF_OK, "kvf_store_batch_pin: %d", rc);
  for (size_t i = 0; rc == KVF_OK && i < 5; ++i) CHECK(results[i] == KVF_OK, "pin %s: %d", keys[i], results[i]);
  CHECK(rc != KVF_OK || results[5] == KVF_ENOTFOUND, "pin never-put: %d", results[5]);
  uint64_t pages = 0, pinned = 0;
  pool_counts(n, &pages, &pinned);
  CHECK(pinned == 5, "%llu pinned pages after pinning 5", (unsigned long long)pinned);
  rc = kvf_store_batch_pin(client, keys, 1, results);
  CHECK(rc == KVF_OK && results[0] == KVF_OK, "pin %s again: %d, %d", keys[0], rc, results[0]);
  rc = kvf_store_batch_unpin(client, keys, 5, results);
  CHECK(rc == KVF_OK, "kvf_store_batch_unpin: %d", rc);
  for (size_t i = 0; rc == KVF_OK && i < 5; ++i) CHECK(results[i] == KVF_OK, "unpin %s: %d", keys[i], results[i]);
  pool_counts(n, &pages, &pinned);
  CHECK(pinned == 1, "%llu pinned pages with %s pinned twice and unpinned once", (unsigned long long)pinned,
        keys[0]);
  rc = kvf_store_batch_unpin(client, keys, 1, results);
  CHECK(rc == KVF_OK && results[0] == KVF_OK, "the second unpin of %s: %d, %d", keys[0], rc, results[0]);
  rc = kvf_store_batch_unpin(client, keys, 1, results);
  CHECK(rc == KVF_OK && results[0] == KVF_ENOTFOUND && strstr(kvf_store_key_error(0), "no pinned page") != NULL,
        "a third unpin of %s: %d, %d '%s'", keys[0], rc, results[0], kvf_store_key_error(0));
  pool_counts(n, &pages, &pinned);
  CHECK(pinned == 0, "%llu pinned pages after every unpin", (unsigned long long)pinned);
}

/* Removes page 3 and a key never put; then page 3 is a miss. */
static void check_remove(kvf_store* client, const struct pages* p) {
  const char* keys[2] = {p->keys[3], "never-put"};
  int results[2] = {1, 1};
  int rc = kvf_store_batch_remove(client, keys, 2, results);
  CHECK(rc == KVF_OK && results[0] == KVF_OK && results[1] == KVF_ENOTFOUND, "remove: %d, %d, %d", rc, results[0],
        results[1]);
  CHECK(kvf_store_key_error(0)[0] == '\0' && strstr(kvf_store_key_error(1), "NotFound") != NULL &&
            strstr(kvf_store_key_error(1), "never-put") != NULL && kvf_store_key_error(2)[0] == '\0',
        "remove's key messages: '%s', '%s'", kvf_store_key_error(0), kvf_store_key_error(1));
  CHECK(strncmp(kvf_last_error(), "key 1 of 2: NotFound", 20) == 0, "remove's last error: '%s'", kvf_last_error());
  uint64_t length = 99;
  rc = kvf_store_batch_get(client, keys, &p->counts[3], 1, &p->dst[p->first[3]], p->counts[3], results, &length);
  CHECK(rc == KVF_OK && results[0] == KVF_ENOTFOUND && length == 0, "get a removed page: %d, %d, length %llu", rc,
        results[0], (unsigned long long)length);
}

/* Bad input fails its key alone, with its code, and stores or reads nothing
 * for it; the good keys beside it complete. */
static void check_bad_keys(kvf_store* client, uint8_t* src, uint8_t* dst, size_t at, const struct pages* p) {
  const size_t unregistered_size = 1u << 20;
  uint8_t* unregistered = malloc(unregistered_size);
  memset(unregistered, 0x33, unregistered_size);
  struct pages good;
  make_pages(&good, 2, "bad-neighbour-", src, dst, at, 29);

  /* PUT: good, NULL, unregistered memory, good, empty key, no buffers. */
  const char* keys[6] = {good.keys[0], NULL, "unregistered", good.keys[1], "", "no-buffers"};
  size_t counts[6] = {good.counts[0], 1, 1, good.counts[1], 1, 0};
  kvf_store_buffer bufs[16];
  size_t total = 0;
  for (size_t b = 0; b < good.counts[0]; ++b) bufs[total++] = good.src[good.first[0] + b];
  bufs[total++] = good.src[0];
  bufs[total++] = (kvf_store_buffer){unregistered, 4096};
  for (size_t b = 0; b < good.counts[1]; ++b) bufs[total++] = good.src[good.first[1] + b];
  bufs[total++] = good.src[0];
  int results[6];
  int rc = kvf_store_batch_put(client, keys, counts, 6, bufs, total, results);
  CHECK(rc == KVF_OK, "put with bad keys: %d", rc);
  if (rc == KVF_OK) {
    CHECK(results[0] == KVF_OK && results[3] == KVF_OK, "the good keys beside bad ones: %d, %d", results[0],
          results[3]);
    CHECK(results[1] == KVF_EINVAL && strstr(kvf_store_key_error(1), "the key is NULL") != NULL,
          "NULL key: %d '%s'", results[1], kvf_store_key_error(1));
    CHECK(results[2] == KVF_EINVAL && strstr(kvf_store_key_error(2), "registered") != NULL,
          "unregistered memory: %d '%s'", results[2], kvf_store_key_error(2));
    CHECK(results[4] == KVF_EINVAL, "empty key: %d '%s'", results[4], kvf_store_key_error(4));
    CHECK(results[5] == KVF_EINVAL && strstr(kvf_store_key_error(5), "no buffers") != NULL, "no buffers: %d '%s'",
          results[5], kvf_store_key_error(5));
    CHECK(strncmp(kvf_last_error(), "key 1 of 6: InvalidArgument", 27) == 0, "last error: '%s'", kvf_last_error());
  }
  const char* bad_names[2] = {"unregistered", "no-buffers"};
  uint8_t found[2] = {1, 1};
  rc = kvf_store_batch_exists(client, bad_names, 2, found, NULL);
  CHECK(rc == KVF_OK && found[0] == 0 && found[1] == 0, "the failed keys were stored: %d %d %d", rc, found[0],
        found[1]);
  int got[MAX_PAGES];
  get_pages(client, &good, got);
  CHECK(got[0] == KVF_OK && got[1] == KVF_OK, "the good neighbours: %d, %d", got[0], got[1]);

  /* GET: buffers one byte short, NULL, into unregistered memory, good
   * (pages other than 3, which was removed). */
  size_t small = 0;
  while (small == 3 || p->length[small] < 2) ++small;
  size_t whole = 0;
  while (whole == 3 || whole == small) ++whole;
  const char* gkeys[4] = {p->keys[small], NULL, p->keys[whole], p->keys[whole]};
  size_t gcounts[4] = {1, 1, 1, p->counts[whole]};
  kvf_store_buffer gbufs[8];
  size_t gtotal = 0;
  gbufs[gtotal++] = (kvf_store_buffer){dst + at - (1u << 20), p->length[small] - 1};
  gbufs[gtotal++] = p->dst[0];
  gbufs[gtotal++] = (kvf_store_buffer){unregistered, unregistered_size};
  for (size_t b = 0; b < p->counts[whole]; ++b) gbufs[gtotal++] = p->dst[p->first[whole] + b];
  for (size_t b = 0; b < p->counts[whole]; ++b) {
    const kvf_store_buffer* d = &p->dst[p->first[whole] + b];
    memset(d->addr, 0, d->length);
  }
  uint64_t lengths[4];
  rc = kvf_store_batch_get(client, gkeys, gcounts, 4, gbufs, gtotal, results, lengths);
  CHECK(rc == KVF_OK, "get with bad keys: %d", rc);
  if (rc == KVF_OK) {
    CHECK(results[0] == KVF_EINVAL && strstr(kvf_store_key_error(0), "more than its buffers hold") != NULL,
          "buffers one byte short: %d '%s'", results[0], kvf_store_key_error(0));
    CHECK(results[1] == KVF_EINVAL, "NULL key: %d", results[1]);
    CHECK(results[2] == KVF_EINVAL && strstr(kvf_store_key_error(2), "register it first") != NULL,
          "into unregistered memory: %d '%s'", results[2], kvf_store_key_error(2));
    CHECK(results[3] == KVF_OK && lengths[3] == p->length[whole] && page_matches(p, whole),
          "the good key beside them: %d, length %llu", results[3], (unsigned long long)lengths[3]);
    CHECK(lengths[0] == 0 && lengths[1] == 0 && lengths[2] == 0, "lengths of failed keys: %llu %llu %llu",
          (unsigned long long)lengths[0], (unsigned long long)lengths[1], (unsigned long long)lengths[2]);
  }
  free(unregistered);
}

/* A call that is wrong as a whole fails with nothing written. */
static void check_bad_calls(kvf_engine* engine, kvf_store* client, const struct pages* p) {
  int results[MAX_PAGES];
  for (size_t i = 0; i < MAX_PAGES; ++i) results[i] = 77;
  uint64_t lengths[MAX_PAGES] = {0};
  int rc = kvf_store_batch_put(client, p->keys, p->counts, p->n, p->src, p->total - 1, results);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "buffer_total") != NULL, "buffers one short of the counts: %d",
        rc);
  rc = kvf_store_batch_get(client, p->keys, p->counts, p->n, p->dst, p->total + 1, results, lengths);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "add up to") != NULL, "buffers one more than the counts: %d",
        rc);
  rc = kvf_store_batch_put(client, p->keys, NULL, p->n, p->src, p->total, results);
  CHECK(rc == KVF_EINVAL, "NULL buffer_counts: %d", rc);
  rc = kvf_store_batch_put(client, NULL, p->counts, p->n, p->src, p->total, results);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "keys is NULL") != NULL, "NULL keys: %d", rc);
  rc = kvf_store_batch_get(client, p->keys, p->counts, p->n, p->dst, p->total, NULL, lengths);
  CHECK(rc == KVF_EINVAL, "NULL results: %d", rc);
  rc = kvf_store_batch_remove(client, p->keys, p->n, NULL);
  CHECK(rc == KVF_EINVAL, "remove with NULL results: %d", rc);
  for (size_t i = 0; i < MAX_PAGES; ++i) CHECK(results[i] == 77 && lengths[i] == 0, "result %zu written", i);
  const char* with_null[3] = {p->keys[0], NULL, p->keys[1]};
  size_t leading = 99;
  rc = kvf_store_batch_exists(client, with_null, 3, NULL, &leading);
  CHECK(rc == KVF_EINVAL && leading == 99 && strstr(kvf_last_error(), "key 1 is NULL") != NULL,
        "exists with a NULL key: %d", rc);
  rc = kvf_store_batch_exists(NULL, p->keys, 1, NULL, &leading);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "store is NULL") != NULL, "NULL store: %d", rc);
  rc = kvf_store_batch_put(client, p->keys, p->counts, 0, NULL, 0, NULL);
  CHECK(rc == KVF_OK, "an empty batch: %d", rc);
  rc = kvf_store_batch_remove(client, p->keys, SIZE_MAX, results);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "count") != NULL, "remove of SIZE_MAX keys: %d (%s)", rc,
        kvf_last_error());
  rc = kvf_store_batch_exists(client, p->keys, (size_t)-1, NULL, &leading);
  CHECK(rc == KVF_EINVAL && leading == 99, "exists of SIZE_MAX keys: %d", rc);
  rc = kvf_store_batch_get(client, p->keys, p->counts, p->n, p->dst, SIZE_MAX, results, lengths);
  CHECK(rc == KVF_EINVAL && strstr(kvf_last_error(), "buffer_total") != NULL, "SIZE_MAX buffers: %d (%s)", rc,
        kvf_last_error());
  for (size_t i = 0; i < MAX_PAGES; ++i) CHECK(results[i] == 77, "result %zu written", i);

  kvf_store* s = (kvf_store*)(uintptr_t)1;  /* set to NULL by a failed create */
  const char* unknown[] = {"KVF_NO_SUCH=1", NULL};
  rc = kvf_store_create(engine, unknown, &s);
  CHECK(rc == KVF_ENOTFOUND && s == NULL && strstr(kvf_last_error(), "KVF_NO_SUCH") != NULL, "unknown setting: %d",
        rc);
  const char* tiny_pool[] = {"KVF_STORE_POOL_BYTES=12", NULL};
  rc = kvf_store_create(engine, tiny_pool, &s);
  CHECK(rc == KVF_EINVAL && s == NULL, "a pool of 12 bytes: %d", rc);
  rc = kvf_store_create(NULL, NULL, &s);
  CHECK(rc == KVF_EINVAL, "NULL engine: %d", rc);
  rc = kvf_store_create(engine, NULL, NULL);
  CHECK(rc == KVF_EINVAL, "NULL out: %d", rc);
}

/* A forked child's copy of the store refuses calls and leaves the parent's
 * store alone when destroyed. */
static void check_fork(kvf_engine* engine, kvf_store* client, const struct pages* p) {
  pid_t child = fork();
  if (child == 0) {
    size_t leading = 0;
    const int rc = kvf_store_batch_exists(client, p->keys, p->n, NULL, &leading);
    const int inert = rc == KVF_ECLOSED && strstr(kvf_last_error(), "fork") != NULL;
    if (!inert) fprintf(stderr, "forked copy: exists returned %d: %s\n", rc, kvf_last_error());
    kvf_store_destroy(client);
    kvf_engine_destroy(engine);
    _exit(inert ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked copy: status %d", status);
  int results[MAX_PAGES];
  get_pages(client, p, results);  /* the parent's store still serves */
  CHECK(results[0] == KVF_OK, "get after a forked copy was destroyed: %d", results[0]);
}

struct caller {
  pthread_t thread;
  kvf_store* store;
  const struct pages* p;
  int calls;
  int rc;
};

static void* exists_until_closed(void* arg) {
  struct caller* c = arg;
  size_t leading = 0;
  do {
    c->rc = kvf_store_batch_exists(c->store, c->p->keys, c->p->n, NULL, &leading);
    c->calls += c->rc == KVF_OK;
  } while (c->rc == KVF_OK);
  return NULL;
}

/* kvf_store_close while two threads call: each ends with KVF_ECLOSED, and
 * so does every later call. */
static void close_while_threads_call(kvf_store* client, const struct pages* p) {
  struct caller callers[2];
  for (int i = 0; i < 2; ++i) {
    callers[i] = (struct caller){.store = client, .p = p};
    pthread_create(&callers[i].thread, NULL, exists_until_closed, &callers[i]);
  }
  usleep(100 * 1000);
  const double t0 = now_s();
  kvf_store_close(client);
  for (int i = 0; i < 2; ++i) {
    pthread_join(callers[i].thread, NULL);
    CHECK(callers[i].rc == KVF_ECLOSED && callers[i].calls > 0, "thread %d ended with %d after %d calls", i,
          callers[i].rc, callers[i].calls);
  }
  CHECK(now_s() - t0 < 3, "close and the callers took %.1f s", now_s() - t0);
  int results[MAX_PAGES];
  uint64_t removed = 0;
  kvf_store_stats st;
  size_t count = 0, size = 0;
  int rc = kvf_store_batch_get(client, p->keys, p->counts, p->n, p->dst, p->total, results, NULL);
  CHECK(rc == KVF_ECLOSED && strstr(kvf_last_error(), "is closed") != NULL, "get after close: %d", rc);
  rc = kvf_store_batch_put(client, p->keys, p->counts, p->n, p->src, p->total, results);
  CHECK(rc == KVF_ECLOSED, "put after close: %d", rc);
  rc = kvf_store_batch_pin(client, p->keys, p->n, results);
  CHECK(rc == KVF_ECLOSED, "pin after close: %d", rc);
  rc = kvf_store_remove_all(client, &removed);
  CHECK(rc == KVF_ECLOSED, "remove all after close: %d", rc);
  rc = kvf_store_get_stats(client, &st);
  CHECK(rc == KVF_ECLOSED, "stats after close: %d", rc);
  rc = kvf_store_members(client, NULL, 0, &count, &size);
  CHECK(rc == KVF_ECLOSED, "members after close: %d", rc);
  CHECK(strcmp(kvf_store_name(client), "") == 0, "a client's name after close: '%s'", kvf_store_name(client));
  kvf_store_close(client);  /* again: nothing */
}

/* The engine destroyed before its store: the store's calls return
 * KVF_ECLOSED, and destroying the store afterwards frees both. */
static void engine_destroyed_first(kvf_engine* engine, kvf_store* node) {
  kvf_engine_destroy(engine);
  const char* keys[] = {"page-0"};
  size_t leading = 0;
  int rc = kvf_store_batch_exists(node, keys, 1, NULL, &leading);
  CHECK(rc == KVF_ECLOSED && strstr(kvf_last_error(), "close stores before their engine") != NULL,
        "exists on a store whose engine was destroyed: %d", rc);
  kvf_store_stats st;
  rc = kvf_store_get_stats(node, &st);
  CHECK(rc == KVF_ECLOSED, "stats on a store whose engine was destroyed: %d", rc);
  CHECK(strchr(kvf_store_name(node), ':') != NULL, "the node's name: '%s'", kvf_store_name(node));
  kvf_store_destroy(node);
}

static void run_client(const char* protocol, const char* child_name, struct nodes* n) {
  kvf_engine* e = new_engine(protocol, "the client's");
  if (e == NULL) return;
  char members[300];
  snprintf(members, sizeof(members), "KVF_STORE_MEMBERS=%s,%s", child_name, kvf_store_name(n->local));
  const char* store_settings[] = {members, STORE_TIMES, NULL};
  kvf_store* client = NULL;
  int rc = kvf_store_create(e, store_settings, &client);
  CHECK(rc == KVF_OK, "the client's store: %d", rc);
  if (rc != KVF_OK) return;
  CHECK(strcmp(kvf_store_name(client), "") == 0, "a client's name: '%s'", kvf_store_name(client));
  check_members(client, child_name, kvf_store_name(n->local));

  uint8_t* src = aligned_alloc(4096, REGION);
  uint8_t* dst = aligned_alloc(4096, REGION);
  rc = kvf_register_memory(e, src, REGION, NULL);
  CHECK(rc == KVF_OK, "register the source: %d", rc);
  rc = kvf_register_memory(e, dst, REGION, NULL);
  CHECK(rc == KVF_OK, "register the destination: %d", rc);

  struct pages* p = malloc(sizeof(*p));
  make_pages(p, 40, "page-", src, dst, 0, 11);
  const size_t used = (size_t)p->bytes;
  CHECK(put_pages(client, p) == p->n, "every page put");
  kvf_store_stats st = stats_of(client);
  CHECK(st.put_keys == p->n && st.put_bytes == p->bytes && st.put_failures == 0 && st.members == 2 &&
            st.pool_bytes == 0,
        "client counters after the put: %llu keys, %llu bytes, %llu failures, %llu members",
        (unsigned long long)st.put_keys, (unsigned long long)st.put_bytes, (unsigned long long)st.put_failures,
        (unsigned long long)st.members);
  uint64_t pages = 0, pinned = 0;
  pool_counts(n, &pages, &pinned);
  const kvf_store_stats local = stats_of(n->local);
  CHECK(pages == p->n && local.pages > 0 && local.pages < p->n, "%llu pages in the pools, %llu in this process's",
        (unsigned long long)pages, (unsigned long long)local.pages);

  int results[MAX_PAGES];
  get_pages(client, p, results);
  for (size_t i = 0; i < p->n; ++i) CHECK(results[i] == KVF_OK, "get %s: %d", p->keys[i], results[i]);
  st = stats_of(client);
  CHECK(st.get_keys == p->n && st.get_hits == p->n && st.get_bytes == p->bytes && st.misses_checksum == 0,
        "client counters after the get: %llu keys, %llu hits, %llu bytes", (unsigned long long)st.get_keys,
        (unsigned long long)st.get_hits, (unsigned long long)st.get_bytes);

  /* A page of three buffers into one larger buffer: its bytes in order. */
  size_t three = 0;
  while (three + 1 < p->n && p->counts[three] < 3) ++three;
  uint64_t length = 0;
  kvf_store_buffer one = {dst + used, p->length[three] + 100};
  size_t one_count = 1;
  memset(one.addr, 0, one.length);
  rc = kvf_store_batch_get(client, &p->keys[three], &one_count, 1, &one, 1, results, &length);
  CHECK(rc == KVF_OK && results[0] == KVF_OK && length == p->length[three], "%s into one buffer: %d, %d, %llu",
        p->keys[three], rc, results[0], (unsigned long long)length);
  CHECK(memcmp(one.addr, p->src[p->first[three]].addr, p->length[three]) == 0,
        "%s into one buffer: the bytes differ", p->keys[three]);

  /* Where page `three` is, and its second half READ from there (a ranged read). */
  {
    const char* where_keys[2] = {p->keys[three], "never-put"};
    kvf_store_page where[2];
    int found[2];
    rc = kvf_store_batch_locate(client, where_keys, 2, found, where);
    CHECK(rc == KVF_OK && found[0] == KVF_OK && found[1] == KVF_ENOTFOUND && where[1].segment == -1,
          "locate: %d, %d, %d", rc, found[0], found[1]);
    CHECK(where[0].length == p->length[three] && where[0].valid_ms > 0, "locate %s: %llu bytes, %llu ms",
          p->keys[three], (unsigned long long)where[0].length, (unsigned long long)where[0].valid_ms);
    const uint64_t from = p->length[three] / 2;
    memset(one.addr, 0, one.length);
    kvf_request part = {KVF_READ, one.addr, where[0].segment, where[0].addr + from, p->length[three] - from};
    rc = kvf_transfer(e, &part, 1);
    CHECK(rc == KVF_OK, "the ranged read: %d", rc);
    uint8_t* whole = malloc(p->length[three]);
    uint64_t at = 0;
    for (size_t b = 0; whole != NULL && b < p->counts[three]; ++b) {
      const kvf_store_buffer* piece = &p->src[p->first[three] + b];
      memcpy(whole + at, piece->addr, piece->length);
      at += piece->length;
    }
    CHECK(whole != NULL && at == p->length[three] && memcmp(one.addr, whole + from, p->length[three] - from) == 0,
          "the ranged read of %s: the bytes differ", p->keys[three]);
    free(whole);
  }

  check_exists(client, p, NONE);
  st = stats_of(client);
  CHECK(st.exists_keys == 24 && st.exists_hits == 22, "exists counters: %llu keys, %llu hits",
        (unsigned long long)st.exists_keys, (unsigned long long)st.exists_hits);
  check_pins(client, n, p);
  check_remove(client, p);
  check_exists(client, p, 3);  /* check_remove removed page 3 */
  st = stats_of(client);
  CHECK(st.misses_absent == 1, "%llu absent misses after getting a removed page", (unsigned long long)st.misses_absent);
  check_bad_keys(client, src, dst, used + (1u << 20), p);
  check_bad_calls(e, client, p);
  check_fork(e, client, p);

  uint64_t removed = 0;
  rc = kvf_store_remove_all(client, &removed);
  CHECK(rc == KVF_OK && removed == p->n - 1 + 2, "remove all: %d, %llu pages (want %zu)", rc,
        (unsigned long long)removed, p->n + 1);
  pool_counts(n, &pages, &pinned);
  CHECK(pages == 0, "%llu pages left after remove all", (unsigned long long)pages);
  check_exists(client, p, ALL);

  close_while_threads_call(client, p);
  kvf_store_destroy(client);
  kvf_engine_destroy(e);
  free(p);
  free(src);
  free(dst);
}

int main(int argc, char** argv) {
  const char* protocol = argc > 1 ? argv[1] : "tcp";
  const double t0 = now_s();
  struct child node;
  if (start_child(&node, run_node, protocol) != 0) return 2;
  kvf_engine* e = new_engine(protocol, "the local node's");
  struct nodes n = {node.up, node.down, new_node(e, "the local node's")};
  char child_name[128];
  if (read_all(node.up, child_name, sizeof(child_name)) != 0) {
    fprintf(stderr, "the node process did not start\n");
    return 1;
  }
  CHECK(strchr(child_name, ':') != NULL && strchr(kvf_store_name(n.local), ':') != NULL, "node names '%s', '%s'",
        child_name, kvf_store_name(n.local));  /* a NULL store's name is "" */
  if (n.local != NULL) {
    run_client(protocol, child_name, &n);
    engine_destroyed_first(e, n.local);
  } else {
    kvf_engine_destroy(e);
  }
  stop_child(&node);  /* the node's loop ends */
  if (failures == 0) printf("capi_store_test %s: all checks passed in %.1f s\n", protocol, now_s() - t0);
  return failures == 0 ? 0 : 1;
}
