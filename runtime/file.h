/*
 * file.h: opening the files recap reads (specs, param files, checkpoints, allocator
 * snapshots, tuning and kernel caches) without ever blocking (internal).
 *
 *   FILE *f;
 *   uint64_t size;
 *   RECAP_TRY(recap__file_open_regular(path, "spec", &f, &size));
 *   ...
 *   fclose(f);
 *
 * A plain open() of a FIFO waits for a writer, forever if there is none, so the regular-file
 * check must come after an open that cannot block: the path is opened with O_NONBLOCK,
 * anything but a regular file (a FIFO, a device, a directory, a socket) is refused, and the
 * descriptor is then switched back to blocking reads.
 */
#ifndef RECAP_RUNTIME_FILE_H
#define RECAP_RUNTIME_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens `path` for reading as a descriptor and gives its size. `what` names the file in the
 * message ("spec", "param file"). RECAP_STATUS_IO_ERROR if it cannot be opened or is not a
 * regular file; *fd is then -1 and errno says why (ENOENT: no such file; EINVAL: not a regular
 * file), so a caller that treats a missing file as "not yet" needs no second look. The caller
 * closes the descriptor. */
recap_status recap__file_open_regular_fd(const char *path, const char *what, int *fd,
                                         uint64_t *size);

/* The same as a stdio stream ("rb"); *out is NULL on failure. The caller fcloses it. */
recap_status recap__file_open_regular(const char *path, const char *what, FILE **out,
                                      uint64_t *size);

/* The folder of `path` as a new string (malloc'd; NULL when out of memory): "a/b" -> "a",
 * "/b" -> "/", "b" -> ".". */
char *recap__path_folder(const char *path);

/* Whether the absolute, normalized `path` is `base` or lies below it (both without trailing
 * '/', except the root "/", which holds everything). Compares text only: resolve links first
 * (realpath) when they matter. */
bool recap__path_is_inside(const char *path, const char *base);

/* Reads `bytes` bytes at `offset` of descriptor fd (pread: no shared file position, so
 * threads may read one descriptor at once), retrying short and interrupted reads. A file that
 * ends early is RECAP_STATUS_IO_ERROR "'<path>' ended at byte N (expected M)" (a file truncated
 * after its size was checked gives this, never a signal); a failing read names errno's text.
 * `path` is for messages only. */
recap_status recap__file_read_at(int fd, const char *path, void *buf, size_t bytes,
                                 uint64_t offset);

#ifdef __cplusplus
}
#endif

#endif
