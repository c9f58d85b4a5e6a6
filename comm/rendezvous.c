/*
 * comm_rendezvous.c: rank 0 hands a small payload (the NCCL unique id) to every other rank
 * (comm/comm.h).
 *
 * Both transports carry the same record: magic, kind, world size, generation, payload length,
 * payload, FNV-1a checksum. A reader never trusts a length it has not bounded: records are at
 * most RECAP__RV_HEADER_BYTES + RECAP_RENDEZVOUS_MAX_PAYLOAD + 4 bytes, and anything longer,
 * shorter, of another kind or with a bad checksum is rejected with a message that says which.
 *
 * file://PATH: rank 0 writes the record to a temporary file beside PATH and renames it into
 * place, so a reader sees either nothing or the whole record. Other ranks poll for it. A
 * record of another generation is a stale file from an earlier job: readers keep waiting for
 * the current one (rank 0 replaces it).
 * tcp://HOST:PORT: rank 0 listens; each other rank connects (retrying while rank 0 is not up
 * yet), sends a hello naming its rank, and reads the reply. Rank 0 serves connections from one
 * poll() loop, drops a connection that sends a bad or oversized hello (and says so if the
 * deadline then passes), and returns once every rank has been answered.
 * Every wait is bounded by the deadline: poll() timeouts, never a blocking read.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "runtime/error.h"
#include "runtime/file.h"

enum {
  RECORD_MAX = RECAP__RV_HEADER_BYTES + RECAP_RENDEZVOUS_MAX_PAYLOAD + 4,
  HELLO_BYTES = RECAP__RV_HEADER_BYTES + 4 + 4,
  POLL_MS = 20,
  MAX_PENDING = 64, /* connections rank 0 holds open at once */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds left before the deadline, for poll(): at least 0. */
static int ms_left(double deadline) {
  double left = (deadline - now_s()) * 1e3;
  return left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- the record ---- */

static uint32_t fnv1a(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

size_t recap__rv_encode(uint32_t kind, uint32_t world, uint64_t generation, const void *payload,
                        uint32_t len, uint8_t *buf, size_t capacity) {
  size_t size = RECAP__RV_HEADER_BYTES + (size_t)len + 4;
  if (len > RECAP_RENDEZVOUS_MAX_PAYLOAD || size > capacity) return 0;
  memcpy(buf, RECAP__RV_MAGIC, 8);
  put32(buf + 8, kind);
  put32(buf + 12, world);
  put64(buf + 16, generation);
  put32(buf + 24, len);
  if (len) memcpy(buf + RECAP__RV_HEADER_BYTES, payload, len);
  put32(buf + size - 4, fnv1a(buf, size - 4));
  return size;
}

recap_status recap__rv_decode(const uint8_t *buf, size_t size, uint32_t kind, uint32_t world,
                              uint64_t generation, const uint8_t **payload, uint32_t *len) {
  if (size < RECAP__RV_HEADER_BYTES + 4)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "truncated rendezvous record (%zu bytes)", size);
  if (memcmp(buf, RECAP__RV_MAGIC, 8) != 0)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "not a recap rendezvous record (bad magic)");
  uint32_t n = get32(buf + 24);
  if (n > RECAP_RENDEZVOUS_MAX_PAYLOAD)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "rendezvous record claims %u payload bytes (at most %d)", n,
                      RECAP_RENDEZVOUS_MAX_PAYLOAD);
  if (size != RECAP__RV_HEADER_BYTES + (size_t)n + 4)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "rendezvous record of %zu bytes, its header says %zu (truncated or "
                      "trailing bytes)",
                      size, RECAP__RV_HEADER_BYTES + (size_t)n + 4);
  if (get32(buf + size - 4) != fnv1a(buf, size - 4))
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous record fails its checksum");
  if (get32(buf + 8) != kind)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous record of kind %u, expected %u",
                      get32(buf + 8), kind);
  /* A record of another generation is not this job's: the caller decides whether to wait. */
  if (get64(buf + 16) != generation)
    return RECAP_FAIL(RECAP_STATUS_NOT_READY,
                      "rendezvous record of generation %llu, this job's is %llu",
                      (unsigned long long)get64(buf + 16), (unsigned long long)generation);
  if (get32(buf + 12) != world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rendezvous record for a world of %u, this rank expects %u (mismatched "
                      "--world?)",
                      get32(buf + 12), world);
  *payload = buf + RECAP__RV_HEADER_BYTES;
  *len = n;
  return RECAP_OK;
}

/* ---- URLs ---- */

typedef struct {
  bool tcp;
  char path[4096]; /* file: the path; tcp: the host */
  char port[16];
  uint64_t generation;
} rv_url;

static recap_status parse_url(const char *url, rv_url *out) {
  memset(out, 0, sizeof *out);
  if (!url) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "no rendezvous URL given");
  const char *rest;
  if (strncmp(url, "file://", 7) == 0) {
    rest = url + 7;
  } else if (strncmp(url, "tcp://", 6) == 0) {
    rest = url + 6;
    out->tcp = true;
  } else {
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rendezvous URL '%s': expected file:///PATH or tcp://HOST:PORT", url);
  }
  const char *q = strchr(rest, '?');
  size_t n = q ? (size_t)(q - rest) : strlen(rest);
  if (q) {
    const char *g = q + 1;
    char *end = NULL;
    errno = 0;
    if (strncmp(g, "generation=", 11) != 0 || !(g[11] >= '0' && g[11] <= '9'))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "rendezvous URL '%s': the only query is ?generation=N", url);
    out->generation = strtoull(g + 11, &end, 10);
    if (*end != '\0' || errno == ERANGE)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "rendezvous URL '%s': generation must be an unsigned integer", url);
  }
  if (!out->tcp) {
    if (n == 0 || rest[0] != '/' || n >= sizeof out->path - 32)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "rendezvous URL '%s': file:// needs an absolute path (file:///tmp/x)", url);
    memcpy(out->path, rest, n);
    return RECAP_OK;
  }
  /* host:port, the host possibly in [brackets] for IPv6. */
  const char *colon = NULL;
  const char *host = rest;
  size_t host_len;
  if (n > 0 && rest[0] == '[') {
    const char *close = memchr(rest, ']', n);
    if (!close || close + 1 >= rest + n || close[1] != ':')
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rendezvous URL '%s': bad [host]:port", url);
    host = rest + 1;
    host_len = (size_t)(close - host);
    colon = close + 1;
  } else {
    for (const char *c = rest; c < rest + n; ++c)
      if (*c == ':') colon = c;
    host_len = colon ? (size_t)(colon - rest) : 0;
  }
  size_t port_len = colon ? (size_t)(rest + n - colon - 1) : 0;
  if (!colon || host_len == 0 || host_len >= sizeof out->path || port_len == 0 ||
      port_len >= sizeof out->port)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rendezvous URL '%s': tcp:// needs HOST:PORT", url);
  memcpy(out->path, host, host_len);
  memcpy(out->port, colon + 1, port_len);
  char *end;
  long port = strtol(out->port, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rendezvous URL '%s': port must be 1 to 65535", url);
  return RECAP_OK;
}

/* ---- file:// ---- */

static recap_status file_publish(const rv_url *u, int world, const void *payload, size_t len) {
  uint8_t rec[RECORD_MAX];
  size_t size = recap__rv_encode(RECAP__RV_KIND_FILE, (uint32_t)world, u->generation, payload,
                                 (uint32_t)len, rec, sizeof rec);
  if (!size) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rendezvous payload too large");
  char tmp[sizeof u->path + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", u->path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: cannot create %s: %s", tmp,
                      strerror(errno));
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, rec + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      recap_status st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: writing %s: %s", tmp,
                                   strerror(errno));
      close(fd);
      unlink(tmp);
      return st;
    }
    done += (size_t)w;
  }
  if (close(fd) != 0 || rename(tmp, u->path) != 0) {
    recap_status st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: publishing %s: %s", u->path,
                                 strerror(errno));
    unlink(tmp);
    return st;
  }
  return RECAP_OK;
}

/* One look at the file: RECAP_OK with the payload, NOT_READY while it is absent or stale,
 * or a definite failure. */
static recap_status file_try_read(const rv_url *u, int world, void *payload, size_t *len,
                                  size_t capacity) {
  /* Opened without blocking: a FIFO at the path would otherwise hold this rank past its
   * deadline (it is refused as not a regular file). */
  int fd;
  uint64_t file_bytes;
  if (recap__file_open_regular_fd(u->path, "rendezvous file", &fd, &file_bytes) != RECAP_OK) {
    if (errno == ENOENT)
      return RECAP_FAIL(RECAP_STATUS_NOT_READY, "no file at %s yet", u->path);
    return recap__error_context(RECAP_STATUS_IO_ERROR, "rendezvous: ");
  }
  (void)file_bytes; /* the read below is bounded by the record size */
  /* One byte more than a record may have: an oversized file is then seen as such. */
  uint8_t rec[RECORD_MAX + 1];
  size_t size = 0;
  while (size < sizeof rec) {
    ssize_t r = read(fd, rec + size, sizeof rec - size);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      recap_status st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: reading %s: %s", u->path,
                                   strerror(errno));
      close(fd);
      return st;
    }
    if (r == 0) break;
    size += (size_t)r;
  }
  close(fd);
  if (size > RECORD_MAX)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "rendezvous file %s is larger than any record (%d bytes at most)", u->path,
                      RECORD_MAX);
  const uint8_t *p;
  uint32_t n;
  recap_status st =
      recap__rv_decode(rec, size, RECAP__RV_KIND_FILE, (uint32_t)world, u->generation, &p, &n);
  if (st != RECAP_OK) return recap__error_context(st, "rendezvous file %s: ", u->path);
  if (n > capacity)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous file %s: payload of %u bytes, room for %zu",
                      u->path, n, capacity);
  memcpy(payload, p, n);
  *len = n;
  return RECAP_OK;
}

static recap_status file_wait(const rv_url *u, int world, int rank, double deadline,
                              double timeout_s, void *payload, size_t *len, size_t capacity) {
  char last[512] = "";
  for (;;) {
    recap_status st = file_try_read(u, world, payload, len, capacity);
    if (st != RECAP_STATUS_NOT_READY) return st;
    snprintf(last, sizeof last, "%s", recap_last_error());
    if (now_s() >= deadline) break;
    sleep_ms(POLL_MS);
  }
  return RECAP_FAIL(RECAP_STATUS_TIMEOUT,
                    "rank %d: no rendezvous record from rank 0 at %s within %.1f s (is rank 0 "
                    "running? last look: %s)",
                    rank, u->path, timeout_s, last);
}

/* ---- tcp:// ---- */

static recap_status resolve(const rv_url *u, bool passive, struct addrinfo **out) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  int rc = getaddrinfo(u->path, u->port, &hints, out);
  if (rc != 0)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: cannot resolve %s:%s: %s", u->path,
                      u->port, gai_strerror(rc));
  return RECAP_OK;
}

static int set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* Writes all of buf before the deadline (the socket is non-blocking). */
static recap_status send_all(int fd, const uint8_t *buf, size_t size, double deadline) {
  size_t done = 0;
  while (done < size) {
    ssize_t w = send(fd, buf + done, size - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {fd, POLLOUT, 0};
      if (poll(&p, 1, ms_left(deadline)) <= 0)
        return RECAP_FAIL(RECAP_STATUS_TIMEOUT, "rendezvous: send timed out");
      continue;
    }
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: send failed: %s", strerror(errno));
  }
  return RECAP_OK;
}

/* Reads exactly `size` bytes before the deadline; a peer that closes first is a truncated
 * message. */
static recap_status recv_exact(int fd, uint8_t *buf, size_t size, double deadline) {
  size_t done = 0;
  while (done < size) {
    struct pollfd p = {fd, POLLIN, 0};
    int rc = poll(&p, 1, ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return RECAP_FAIL(RECAP_STATUS_TIMEOUT, "rendezvous: reply timed out");
    ssize_t r = recv(fd, buf + done, size - done, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r < 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: recv failed: %s", strerror(errno));
    if (r == 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                        "rendezvous: truncated message (%zu of %zu bytes before the peer closed)",
                        done, size);
    done += (size_t)r;
  }
  return RECAP_OK;
}

typedef struct {
  int fd;
  size_t have;
  uint8_t buf[HELLO_BYTES];
} pending_conn;

static recap_status tcp_serve(const rv_url *u, int world, double deadline, double timeout_s,
                              const void *payload, size_t len) {
  uint8_t reply[RECORD_MAX];
  size_t reply_size = recap__rv_encode(RECAP__RV_KIND_REPLY, (uint32_t)world, u->generation,
                                       payload, (uint32_t)len, reply, sizeof reply);
  if (!reply_size) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rendezvous payload too large");
  struct addrinfo *ai = NULL;
  RECAP_TRY(resolve(u, true, &ai));
  int lfd = -1;
  recap_status st = RECAP_OK;
  for (struct addrinfo *a = ai; a && lfd < 0; a = a->ai_next) {
    lfd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (lfd < 0) continue;
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, a->ai_addr, a->ai_addrlen) != 0 || listen(lfd, 128) != 0 ||
        set_nonblocking(lfd) != 0) {
      st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: cannot listen on %s:%s: %s", u->path,
                      u->port, strerror(errno));
      close(lfd);
      lfd = -1;
    }
  }
  freeaddrinfo(ai);
  if (lfd < 0)
    return st != RECAP_OK ? st
                          : RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: no socket for %s:%s",
                                       u->path, u->port);

  bool *served = calloc((size_t)world, sizeof *served);
  pending_conn *conns = calloc(MAX_PENDING, sizeof *conns);
  if (!served || !conns) {
    free(served);
    free(conns);
    close(lfd);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "rendezvous: no memory");
  }
  for (int i = 0; i < MAX_PENDING; ++i) conns[i].fd = -1;
  int remaining = world - 1;
  char rejected[512] = "";
  while (remaining > 0) {
    struct pollfd fds[MAX_PENDING + 1];
    int map[MAX_PENDING + 1];
    int nfds = 0;
    fds[nfds] = (struct pollfd){lfd, POLLIN, 0};
    map[nfds++] = -1;
    for (int i = 0; i < MAX_PENDING; ++i)
      if (conns[i].fd >= 0) {
        fds[nfds] = (struct pollfd){conns[i].fd, POLLIN, 0};
        map[nfds++] = i;
      }
    int timeout = ms_left(deadline);
    if (timeout == 0) break;
    int rc = poll(fds, (nfds_t)nfds, timeout);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous: poll failed: %s", strerror(errno));
      goto done;
    }
    for (int k = 0; k < nfds; ++k) {
      if (!fds[k].revents) continue;
      if (map[k] < 0) {
        int cfd = accept(lfd, NULL, NULL);
        if (cfd < 0) continue;
        int slot = -1;
        for (int i = 0; i < MAX_PENDING && slot < 0; ++i)
          if (conns[i].fd < 0) slot = i;
        if (slot < 0 || set_nonblocking(cfd) != 0) {
          close(cfd); /* too many half-open connections: a real rank will retry */
          continue;
        }
        conns[slot].fd = cfd;
        conns[slot].have = 0;
        continue;
      }
      pending_conn *c = &conns[map[k]];
      ssize_t r = recv(c->fd, c->buf + c->have, HELLO_BYTES - c->have, 0);
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) {
        if (r < 0 || c->have > 0)
          snprintf(rejected, sizeof rejected, "%s",
                   r < 0 ? "connection error" : "truncated hello (the peer closed early)");
        close(c->fd);
        c->fd = -1;
        continue;
      }
      c->have += (size_t)r;
      if (c->have < HELLO_BYTES) continue;
      /* Complete. A sender with more bytes queued sent something longer than a hello. */
      uint8_t extra[1];
      const uint8_t *p;
      uint32_t n;
      if (recv(c->fd, extra, 1, MSG_DONTWAIT) > 0) {
        snprintf(rejected, sizeof rejected, "oversized hello");
      } else if (recap__rv_decode(c->buf, HELLO_BYTES, RECAP__RV_KIND_HELLO, (uint32_t)world,
                                  u->generation, &p, &n) != RECAP_OK) {
        snprintf(rejected, sizeof rejected, "%s", recap_last_error());
      } else if (n != 4 || (int)get32(p) < 1 || (int)get32(p) >= world) {
        snprintf(rejected, sizeof rejected, "hello from rank %d outside 1..%d", (int)get32(p),
                 world - 1);
      } else if (served[get32(p)]) {
        snprintf(rejected, sizeof rejected, "rank %u arrived twice", get32(p));
      } else if (send_all(c->fd, reply, reply_size, deadline) == RECAP_OK) {
        served[get32(p)] = true;
        remaining--;
      } else {
        snprintf(rejected, sizeof rejected, "%s", recap_last_error());
      }
      close(c->fd);
      c->fd = -1;
    }
  }
  if (remaining > 0) {
    char missing[256] = "";
    size_t used = 0;
    for (int r = 1; r < world && used + 16 < sizeof missing; ++r)
      if (!served[r]) used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                               used ? "," : "", r);
    st = RECAP_FAIL(RECAP_STATUS_TIMEOUT,
                    "rank 0: %d of %d ranks reached tcp://%s:%s within %.1f s (missing: %s)%s%s",
                    world - 1 - remaining, world - 1, u->path, u->port, timeout_s, missing,
                    rejected[0] ? "; last rejected message: " : "", rejected);
  }
done:
  for (int i = 0; i < MAX_PENDING; ++i)
    if (conns[i].fd >= 0) close(conns[i].fd);
  free(conns);
  free(served);
  close(lfd);
  return st;
}

/* One connection attempt; NOT_READY when rank 0 is not listening yet. */
static recap_status tcp_connect_once(const rv_url *u, double deadline, int *out) {
  struct addrinfo *ai = NULL;
  RECAP_TRY(resolve(u, false, &ai));
  recap_status st = RECAP_FAIL(RECAP_STATUS_NOT_READY, "rank 0 is not listening yet");
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (set_nonblocking(fd) != 0) {
      close(fd);
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int err = 0;
      socklen_t elen = sizeof err;
      if (poll(&p, 1, ms_left(deadline)) == 1 &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0)
        rc = 0;
    }
    if (rc == 0) {
      *out = fd;
      freeaddrinfo(ai);
      return RECAP_OK;
    }
    close(fd);
  }
  freeaddrinfo(ai);
  return st;
}

static recap_status tcp_fetch(const rv_url *u, int world, int rank, double deadline,
                              double timeout_s, void *payload, size_t *len, size_t capacity) {
  int fd = -1;
  for (;;) {
    recap_status st = tcp_connect_once(u, deadline, &fd);
    if (st == RECAP_OK) break;
    if (st != RECAP_STATUS_NOT_READY) return st;
    if (now_s() >= deadline)
      return RECAP_FAIL(RECAP_STATUS_TIMEOUT,
                        "rank %d: could not reach rank 0 at tcp://%s:%s within %.1f s (is rank 0 "
                        "running?)",
                        rank, u->path, u->port, timeout_s);
    sleep_ms(POLL_MS * 2);
  }
  uint8_t hello[HELLO_BYTES], rank_bytes[4];
  put32(rank_bytes, (uint32_t)rank);
  recap__rv_encode(RECAP__RV_KIND_HELLO, (uint32_t)world, u->generation, rank_bytes, 4, hello,
                   sizeof hello);
  uint8_t rec[RECORD_MAX];
  recap_status st = send_all(fd, hello, sizeof hello, deadline);
  if (st == RECAP_OK) st = recv_exact(fd, rec, RECAP__RV_HEADER_BYTES, deadline);
  uint32_t n = 0;
  if (st == RECAP_OK) {
    n = get32(rec + 24);
    if (memcmp(rec, RECAP__RV_MAGIC, 8) != 0)
      st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "not a recap rendezvous reply (bad magic)");
    else if (n > RECAP_RENDEZVOUS_MAX_PAYLOAD)
      st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous reply claims %u payload bytes (at most %d)",
                      n, RECAP_RENDEZVOUS_MAX_PAYLOAD);
  }
  if (st == RECAP_OK) st = recv_exact(fd, rec + RECAP__RV_HEADER_BYTES, (size_t)n + 4, deadline);
  const uint8_t *p = NULL;
  if (st == RECAP_OK)
    st = recap__rv_decode(rec, RECAP__RV_HEADER_BYTES + (size_t)n + 4, RECAP__RV_KIND_REPLY,
                          (uint32_t)world, u->generation, &p, &n);
  if (st == RECAP_OK && n > capacity)
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "rendezvous reply of %u bytes, room for %zu", n,
                    capacity);
  close(fd);
  if (st != RECAP_OK)
    return recap__error_context(st == RECAP_STATUS_NOT_READY ? RECAP_STATUS_IO_ERROR : st,
                                "rank %d: rendezvous with tcp://%s:%s: ", rank, u->path, u->port);
  memcpy(payload, p, n);
  *len = n;
  return RECAP_OK;
}

recap_status recap__rendezvous(const char *url, int world, int rank, double timeout_s,
                               void *payload, size_t *len, size_t capacity) {
  RECAP_CHECK_ARG(payload && len);
  if (world < 2 || world > 65536 || rank < 0 || rank >= world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rendezvous: rank %d of a world of %d (needs 0 <= rank < world, 2 <= world "
                      "<= 65536)",
                      rank, world);
  if (!(timeout_s > 0 && timeout_s < 1e7))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rendezvous: timeout %g s is not positive",
                      timeout_s);
  if (rank == 0 && *len > RECAP_RENDEZVOUS_MAX_PAYLOAD)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rendezvous payload of %zu bytes (at most %d)",
                      *len, RECAP_RENDEZVOUS_MAX_PAYLOAD);
  rv_url u;
  RECAP_TRY(parse_url(url, &u));
  double deadline = now_s() + timeout_s;
  if (u.tcp)
    return rank == 0 ? tcp_serve(&u, world, deadline, timeout_s, payload, *len)
                     : tcp_fetch(&u, world, rank, deadline, timeout_s, payload, len, capacity);
  return rank == 0 ? file_publish(&u, world, payload, *len)
                   : file_wait(&u, world, rank, deadline, timeout_s, payload, len, capacity);
}
