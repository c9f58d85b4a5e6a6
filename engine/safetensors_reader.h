/*
 * safetensors_reader.h: finds one tensor in a .safetensors file's header (internal).
 *
 * A .safetensors file is an 8-byte little-endian header length N, N bytes of JSON (an object
 * mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional
 * "__metadata__" entry), then the data; offsets count from the start of the data. Every length
 * and offset comes from a file someone else wrote, so these functions bound each one before it
 * is used. The first two are pure (no I/O), so the fuzz target (tests/fuzz/safetensors_fuzz.c)
 * feeds them arbitrary bytes; recap__safetensors_locate reads a header with them, for the spec
 * check (which reads no data) and the binder (which then reads the data at the offset).
 *
 *   recap__safetensors_want want = {RECAP_DTYPE_F32, 2, shape, 64};
 *   uint64_t at;   // the tensor's first byte, counted from the start of the file
 *   RECAP_TRY(recap__safetensors_locate(f, path, file_size, "w", &want, &at));
 *
 * which is, spelled out:
 *
 *   unsigned char prefix[8];  fread(prefix, 1, 8, f);
 *   uint64_t header_len;
 *   RECAP_TRY(recap__safetensors_header_length(prefix, file_size, path, &header_len));
 *   ... read header_len bytes into `header` ...
 *   RECAP_TRY(recap__safetensors_find(header, header_len, file_size, path, "w", &want, &at));
 *
 * Failures return RECAP_STATUS_IO_ERROR with a detail message naming `path` (used in messages
 * only) and the problem, or RECAP_STATUS_OUT_OF_MEMORY; outputs are then untouched.
 */
#ifndef RECAP_ENGINE_SAFETENSORS_READER_H
#define RECAP_ENGINE_SAFETENSORS_READER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format bounds its JSON header at 100 MB; so do we. */
#define RECAP_SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)

/* What the spec expects of the tensor: dtype, shape (ndim values, ndim <= RECAP_MAX_DIMS) and
 * its size in bytes. */
typedef struct {
  recap_dtype dtype;
  int ndim;
  const int64_t *shape;
  uint64_t bytes;
} recap__safetensors_want;

/* The header length N stored in the first 8 bytes of a file of `file_size` bytes. Fails when
 * the file is shorter than 8 bytes, or N is 0, above RECAP_SAFETENSORS_MAX_HEADER or runs past
 * the end of the file. */
recap_status recap__safetensors_header_length(const unsigned char prefix[8], uint64_t file_size,
                                              const char *path, uint64_t *header_len);

/* Parses the JSON header (`header_len` bytes, not NUL-terminated; header_len must be what
 * recap__safetensors_header_length accepted for `file_size`) and finds tensor `key`: it must
 * be an object with a string dtype equal to want->dtype's safetensors name (F32, F16, BF16,
 * I32, I64), a shape equal to want->shape, and data_offsets [begin, end] with
 * 0 <= begin <= end <= the data's size and end - begin == want->bytes. Duplicate keys make the
 * header invalid. On success *data_offset = 8 + header_len + begin, so
 * [*data_offset, *data_offset + want->bytes) lies inside the file. */
recap_status recap__safetensors_find(const char *header, size_t header_len, uint64_t file_size,
                                     const char *path, const char *key,
                                     const recap__safetensors_want *want, uint64_t *data_offset);

/* Reads the header of `f` (a regular file of `file_size` bytes, positioned at its start) and
 * finds `key` as recap__safetensors_find does. Also RECAP_STATUS_IO_ERROR when the file ends
 * inside its header. The file position is left after the header. */
recap_status recap__safetensors_locate(FILE *f, const char *path, uint64_t file_size,
                                       const char *key, const recap__safetensors_want *want,
                                       uint64_t *data_offset);

#ifdef __cplusplus
}
#endif

#endif
