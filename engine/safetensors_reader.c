/* safetensors_reader.c: a bounds-checked table of a .safetensors header (see
 * safetensors_reader.h). The JSON is parsed by jansson, never by hand. */
#include "engine/safetensors_reader.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

static atomic_size_t parses;

size_t recap__safetensors_parses(void) {
  return atomic_load(&parses);
}

/* Every dtype of the format whose element size is whole bytes; `dtype` is recap's, or -1. */
static const struct {
  const char *name;
  unsigned size;
  int dtype;
} known_dtypes[] = {
    {"F32", 4, RECAP_DTYPE_F32},
    {"F16", 2, RECAP_DTYPE_F16},
    {"BF16", 2, RECAP_DTYPE_BF16},
    {"I32", 4, RECAP_DTYPE_I32},
    {"I64", 8, RECAP_DTYPE_I64},
    {"F64", 8, -1},
    {"I8", 1, -1},
    {"U8", 1, -1},
    {"I16", 2, -1},
    {"U16", 2, -1},
    {"U32", 4, -1},
    {"U64", 8, -1},
    {"BOOL", 1, -1},
    {"F8_E4M3", 1, -1},
    {"F8_E5M2", 1, -1},
};

const char *recap__safetensors_dtype_name(recap_dtype dtype) {
  for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; ++i)
    if (known_dtypes[i].dtype == (int)dtype) return known_dtypes[i].name;
  return "?";
}

recap_status recap__safetensors_header_length(const unsigned char prefix[8], uint64_t file_size,
                                              const char *path, uint64_t *header_len) {
  if (file_size < 8)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s' is too short for a safetensors file", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | prefix[i];
  if (n == 0 || n > RECAP_SAFETENSORS_MAX_HEADER || n > file_size - 8)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "'%s': safetensors header length %llu is outside the file (%llu bytes) "
                      "or above the format's 100 MB",
                      path, (unsigned long long)n, (unsigned long long)file_size);
  *header_len = n;
  return RECAP_OK;
}

void recap__safetensors_header_free(recap__safetensors_header *h) {
  if (!h) return;
  for (size_t i = 0; i < h->count; ++i) free(h->entries[i].name);
  free(h->entries);
  h->entries = NULL;
  h->count = 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const recap__safetensors_entry *)a)->name,
                ((const recap__safetensors_entry *)b)->name);
}

const recap__safetensors_entry *recap__safetensors_lookup(const recap__safetensors_header *h,
                                                          const char *name) {
  if (!h || !h->count) return NULL;
  recap__safetensors_entry key = {.name = (char *)name};
  return bsearch(&key, h->entries, h->count, sizeof key, by_name);
}

/* Fills e from one header entry; fails, naming the file and the tensor, when it is malformed. */
static recap_status parse_entry(const char *path, const char *name, const json_t *v,
                                uint64_t data_size, uint64_t data_start,
                                recap__safetensors_entry *e) {
  json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
  json_t *offsets = json_object_get(v, "data_offsets");
  if (!json_is_object(v) || !json_is_string(dtype) || !json_is_array(shape) ||
      !json_is_array(offsets) || json_array_size(offsets) != 2 ||
      !json_is_integer(json_array_get(offsets, 0)) || !json_is_integer(json_array_get(offsets, 1)))
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "'%s': tensor '%.200s' lacks a string dtype, a shape array or two integer "
                      "data_offsets",
                      path, name);
  /* A JSON string may hold NUL bytes: the name is compared with its length. */
  const char *dt = json_string_value(dtype);
  size_t dt_len = json_string_length(dtype);
  snprintf(e->dtype_name, sizeof e->dtype_name, "%.*s", (int)(dt_len < 15 ? dt_len : 15), dt);
  e->dtype = -1;
  unsigned esize = 0;
  for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; ++i)
    if (strlen(known_dtypes[i].name) == dt_len && memcmp(known_dtypes[i].name, dt, dt_len) == 0) {
      e->dtype = known_dtypes[i].dtype;
      esize = known_dtypes[i].size;
    }
  size_t ndim = json_array_size(shape);
  if (ndim > RECAP__SAFETENSORS_MAX_NDIM)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s': tensor '%.200s' has %zu dims, more than %d",
                      path, name, ndim, RECAP__SAFETENSORS_MAX_NDIM);
  e->ndim = (int)ndim;
  /* numel saturates at UINT64_MAX, past any file's size. */
  uint64_t numel = 1;
  for (size_t d = 0; d < ndim; ++d) {
    const json_t *x = json_array_get(shape, d);
    json_int_t n = json_is_integer(x) ? json_integer_value(x) : -1;
    if (n < 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                        "'%s': tensor '%.200s' has a shape entry that is not a non-negative "
                        "integer",
                        path, name);
    if (d < RECAP_MAX_DIMS) e->shape[d] = n;
    uint64_t product;
    if (n == 0 || numel == 0)
      numel = 0;
    else if (numel == UINT64_MAX || __builtin_mul_overflow(numel, (uint64_t)n, &product))
      numel = UINT64_MAX;
    else
      numel = product;
  }
  json_int_t begin = json_integer_value(json_array_get(offsets, 0));
  json_int_t end = json_integer_value(json_array_get(offsets, 1));
  /* Which rule the offsets break, so that a truncated file reads as one, and a shape that does
   * not match the bytes says how many it needs. */
  const char *what = NULL;
  char detail[160] = "";
  if (begin < 0 || end < begin) {
    what = "must be ascending, from 0 on";
  } else if ((uint64_t)end > data_size) {
    what = "run past the end of the file";
    snprintf(detail, sizeof detail,
             " (its data holds %llu bytes: is the file truncated, or a header of another file?)",
             (unsigned long long)data_size);
  } else if (esize && (numel > UINT64_MAX / esize || (uint64_t)(end - begin) != numel * esize)) {
    what = "do not span its shape";
    if (numel <= UINT64_MAX / esize)
      snprintf(detail, sizeof detail, " (%lld bytes; %llu elements of %u bytes need %llu)",
               (long long)(end - begin), (unsigned long long)numel, esize,
               (unsigned long long)(numel * esize));
  }
  if (what)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "'%s': tensor '%.200s' (dtype %s) has data_offsets [%lld, %lld], which %s%s",
                      path, name, e->dtype_name, (long long)begin, (long long)end, what, detail);
  e->offset = data_start + (uint64_t)begin;
  e->bytes = (uint64_t)(end - begin);
  return RECAP_OK;
}

recap_status recap__safetensors_parse(const char *header, size_t header_len, uint64_t file_size,
                                      const char *path, recap__safetensors_header *out) {
  if (header_len == 0 || header_len > RECAP_SAFETENSORS_MAX_HEADER || file_size < 8 ||
      header_len > file_size - 8)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "'%s': header of %zu bytes does not fit a file of %llu bytes", path,
                      header_len, (unsigned long long)file_size);
  atomic_fetch_add(&parses, 1);
  json_error_t jerr;
  json_t *root = json_loadb(header, header_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root && json_error_code(&jerr) == json_error_out_of_memory)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to parse the header of '%s'", path);
  if (!root || !json_is_object(root)) {
    /* Jansson reads integers into 64 signed bits: a larger offset is a range error, not bad
     * JSON. */
    const bool too_big = !root && strstr(jerr.text, "too big") != NULL;
    recap_status st =
        RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s': safetensors header %s: %s", path,
                   root      ? "is JSON but not an object"
                   : too_big ? "holds a number past 2^63 (offsets and sizes must be below it)"
                             : "is not valid JSON",
                   root ? (json_is_array(root) ? "an array" : "a single value") : jerr.text);
    json_decref(root);
    return st;
  }
  recap__safetensors_header h = {0};
  recap_status st = RECAP_OK;
  h.entries = calloc(json_object_size(root) ? json_object_size(root) : 1, sizeof *h.entries);
  if (!h.entries) st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for '%s''s table", path);
  const char *name;
  json_t *v;
  uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  json_object_foreach(root, name, v) {
    if (st != RECAP_OK) break;
    if (strcmp(name, "__metadata__") == 0) continue;
    recap__safetensors_entry *e = &h.entries[h.count];
    st = parse_entry(path, name, v, data_size, data_start, e);
    if (st != RECAP_OK) break;
    if (!(e->name = strdup(name))) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for '%s''s table", path);
      break;
    }
    h.count++;
  }
  json_decref(root);
  if (st != RECAP_OK) {
    recap__safetensors_header_free(&h);
    return st;
  }
  qsort(h.entries, h.count, sizeof *h.entries, by_name);
  *out = h;
  return RECAP_OK;
}
