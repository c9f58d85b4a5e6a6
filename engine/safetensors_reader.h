/*
 * safetensors_reader.h: a .safetensors file's header parsed into a table of its tensors
 * (internal).
 *
 * A .safetensors file is an 8-byte little-endian header length N, N bytes of JSON (an object
 * mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional
 * "__metadata__" entry), then the data; offsets count from the start of the data. Every length
 * and offset comes from a file someone else wrote, so each one is bounded before it is used.
 * Both functions are pure (no I/O), so the fuzz target (tests/fuzz/safetensors_fuzz.c) feeds
 * them arbitrary bytes; engine/checkpoint.c reads headers with them, once per file.
 *
 *   unsigned char prefix[8];   ... the file's first 8 bytes ...
 *   uint64_t header_len;
 *   RECAP_TRY(recap__safetensors_header_length(prefix, file_size, path, &header_len));
 *   ... read header_len bytes into `text` ...
 *   recap__safetensors_header h;
 *   RECAP_TRY(recap__safetensors_parse(text, header_len, file_size, path, &h));
 *   const recap__safetensors_entry *w = recap__safetensors_lookup(&h, "w");
 *   ... w->dtype, w->shape, [w->offset, w->offset + w->bytes) lies inside the file ...
 *   recap__safetensors_header_free(&h);
 *
 * Failures return RECAP_STATUS_IO_ERROR with a detail message naming `path` (used in messages
 * only) and the problem, or RECAP_STATUS_OUT_OF_MEMORY; outputs are then untouched.
 */
#ifndef RECAP_ENGINE_SAFETENSORS_READER_H
#define RECAP_ENGINE_SAFETENSORS_READER_H

#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format bounds its JSON header at 100 MB; so do we. */
#define RECAP_SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)
/* Dims a header entry may have (recap's tensors have at most RECAP_MAX_DIMS). */
enum { RECAP__SAFETENSORS_MAX_NDIM = 64 };

/* One tensor of a header. */
typedef struct {
  char *name;                    /* owned; may be any JSON string without NUL bytes */
  char dtype_name[16];           /* as the header spells it ("F64", "F8_E4M3"), for messages */
  int dtype;                     /* a recap_dtype, or -1 when recap has none for dtype_name */
  int ndim;                      /* as in the header, up to RECAP__SAFETENSORS_MAX_NDIM */
  int64_t shape[RECAP_MAX_DIMS]; /* the first RECAP_MAX_DIMS extents */
  uint64_t offset;               /* its first byte, counted from the start of the file */
  uint64_t bytes;                /* numel * element size for every dtype of known size */
} recap__safetensors_entry;

typedef struct {
  recap__safetensors_entry *entries; /* sorted by name (strcmp) */
  size_t count;
} recap__safetensors_header;

/* The header length N stored in the first 8 bytes of a file of `file_size` bytes. Fails when
 * the file is shorter than 8 bytes, or N is 0, above RECAP_SAFETENSORS_MAX_HEADER or runs past
 * the end of the file. */
recap_status recap__safetensors_header_length(const unsigned char prefix[8], uint64_t file_size,
                                              const char *path, uint64_t *header_len);

/* Parses the JSON header (`header_len` bytes, not NUL-terminated; header_len must be what
 * recap__safetensors_header_length accepted for `file_size`). The header is well-formed when
 * it is a JSON object without duplicate keys whose every entry but "__metadata__" is an object
 * with a string dtype, a shape array of at most RECAP__SAFETENSORS_MAX_NDIM non-negative
 * integers and integer data_offsets [begin, end] with 0 <= begin <= end <= the data's size;
 * for a dtype of known element size (recap's five and F64, I8, U8, I16, U16, U32, U64, BOOL,
 * F8_E4M3, F8_E5M2), end - begin must be numel * that size. Entries of other dtypes are kept
 * (dtype -1): a checkpoint may hold tensors recap never reads. Counts one parse
 * (recap__safetensors_parses). */
recap_status recap__safetensors_parse(const char *header, size_t header_len, uint64_t file_size,
                                      const char *path, recap__safetensors_header *out);

/* The entry named `name`, or NULL. */
const recap__safetensors_entry *recap__safetensors_lookup(const recap__safetensors_header *h,
                                                          const char *name);

/* Frees the entries; the header is then empty. */
void recap__safetensors_header_free(recap__safetensors_header *h);

/* The safetensors name of a recap dtype ("F32", "F16", "BF16", "I32", "I64"). */
const char *recap__safetensors_dtype_name(recap_dtype dtype);

/* Headers parsed so far in this process (the loader parses each file's once). */
size_t recap__safetensors_parses(void);

#ifdef __cplusplus
}
#endif

#endif
