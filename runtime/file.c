/*
 * file.c: the non-blocking open of the files recap reads (see file.h).
 */
#include "runtime/file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"

static const char *kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/* Returns st with errno set to e: formatting the message may change errno, and callers read
 * it (ENOENT: the file is missing, which caches and rendezvous treat as "not yet"). */
static recap_status with_errno(int e, recap_status st) {
  errno = e;
  return st;
}

recap_status recap__file_open_regular_fd(const char *path, const char *what, int *fd,
                                         uint64_t *size) {
  RECAP_CHECK_ARG(path && what && fd && size);
  *fd = -1;
  int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (d < 0) {
    int e = errno;
    return with_errno(
        e, RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot open %s '%s': %s", what, path, strerror(e)));
  }
  struct stat st;
  if (fstat(d, &st) != 0) {
    int e = errno;
    close(d);
    return with_errno(
        e, RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot stat %s '%s': %s", what, path, strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    close(d);
    return with_errno(EINVAL, RECAP_FAIL(RECAP_STATUS_IO_ERROR, "%s '%s' is %s, not a regular file",
                                         what, path, kind_of(st.st_mode)));
  }
  /* Regular files never block; clearing the flag keeps later reads plain anyway. */
  int flags = fcntl(d, F_GETFL);
  if (flags < 0 || fcntl(d, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(d);
    return with_errno(
        e, RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot read %s '%s': %s", what, path, strerror(e)));
  }
  *fd = d;
  *size = (uint64_t)st.st_size;
  return RECAP_OK;
}

recap_status recap__file_open_regular(const char *path, const char *what, FILE **out,
                                      uint64_t *size) {
  RECAP_CHECK_ARG(out);
  *out = NULL;
  int fd;
  RECAP_TRY(recap__file_open_regular_fd(path, what, &fd, size));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return with_errno(
        e, RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot read %s '%s': %s", what, path, strerror(e)));
  }
  *out = f;
  return RECAP_OK;
}

recap_status recap__file_read_at(int fd, const char *path, void *buf, size_t bytes,
                                 uint64_t offset) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = pread(fd, (char *)buf + done, bytes - done, (off_t)(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot read '%s' at byte %llu: %s", path,
                        (unsigned long long)(offset + done), strerror(errno));
    if (n == 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s' ended at byte %llu (expected %llu)", path,
                        (unsigned long long)(offset + done), (unsigned long long)(offset + bytes));
    done += (size_t)n;
  }
  return RECAP_OK;
}

bool recap__path_is_inside(const char *path, const char *base) {
  size_t n = strlen(base);
  if (n == 1 && base[0] == '/') return true;
  return strncmp(path, base, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

char *recap__path_folder(const char *path) {
  char *dir = strdup(path);
  if (!dir) return NULL;
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    strcpy(dir, ".");
  return dir;
}
