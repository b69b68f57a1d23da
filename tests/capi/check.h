/* What the C API's test programs share: CHECK, which counts failures and
 * goes on, byte patterns, whole reads and writes on the pipes to their
 * forked processes, the processes themselves, a clock, and an engine
 * configuration. */
#ifndef KVFABRIC_TESTS_CAPI_CHECK_H_
#define KVFABRIC_TESTS_CAPI_CHECK_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvfabric.h"

/* Failed checks of this program; it exits 1 when any failed. */
static int failures = 0;

#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, " [last error: %s]\n", kvf_last_error());        \
      ++failures;                                                       \
    }                                                                   \
  } while (0)

static inline uint8_t pattern(size_t i, unsigned seed) {
  return (uint8_t)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

static inline void fill(uint8_t* p, size_t off, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern(off + i, seed);
}

/* How many of the n bytes at p hold pattern `seed` from offset `off`. */
static inline size_t matching(const uint8_t* p, size_t off, size_t n, unsigned seed) {
  size_t ok = 0;
  for (size_t i = 0; i < n; ++i) ok += p[i] == pattern(off + i, seed);
  return ok;
}

static inline int write_all(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t r = write(fd, c, n);
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

static inline int read_all(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A configuration for `protocol` with `settings` (NULL-terminated, or NULL). */
static inline kvf_config config_for(const char* protocol, const char** settings) {
  kvf_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.protocol = protocol;
  cfg.settings = settings;
  return cfg;
}

/* A forked process that runs run(protocol, up, down) and exits with what it
 * returns: it writes to the parent on `up` and reads from it on `down`. */
struct child {
  pid_t pid;
  int up;    /* the parent reads the child's messages here */
  int down;  /* and writes to it here; closing it tells the child to end */
};

static inline int start_child(struct child* c, int (*run)(const char* protocol, int up, int down),
                              const char* protocol) {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) return -1;
  c->pid = fork();
  if (c->pid < 0) return -1;
  if (c->pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(run(protocol, up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  c->up = up[0];
  c->down = down[1];
  return 0;
}

/* Closes the child's pipe, waits for it, and checks that it exited with 0. */
static inline void stop_child(struct child* c) {
  close(c->down);
  int status = 0;
  waitpid(c->pid, &status, 0);
  close(c->up);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child process %d: exit status %d", (int)c->pid, status);
}

#endif /* KVFABRIC_TESTS_CAPI_CHECK_H_ */
