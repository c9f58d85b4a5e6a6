/* safetensors_reader.c: bounds-checked lookup of one tensor in a .safetensors header (see
 * safetensors_reader.h). The JSON is parsed by jansson, never by hand. */
#include "engine/safetensors_reader.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

static const char *safetensors_dtype(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F32:
      return "F32";
    case RECAP_DTYPE_F16:
      return "F16";
    case RECAP_DTYPE_BF16:
      return "BF16";
    case RECAP_DTYPE_I32:
      return "I32";
    case RECAP_DTYPE_I64:
      return "I64";
    default:
      return "?";
  }
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

static bool shape_matches(const json_t *shape, const recap__safetensors_want *want) {
  if (json_array_size(shape) != (size_t)want->ndim) return false;
  for (int d = 0; d < want->ndim; ++d) {
    const json_t *v = json_array_get(shape, (size_t)d);
    if (!json_is_integer(v) || json_integer_value(v) != want->shape[d]) return false;
  }
  return true;
}

recap_status recap__safetensors_find(const char *header, size_t header_len, uint64_t file_size,
                                     const char *path, const char *key,
                                     const recap__safetensors_want *want, uint64_t *data_offset) {
  if (header_len == 0 || header_len > RECAP_SAFETENSORS_MAX_HEADER || file_size < 8 ||
      header_len > file_size - 8)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "'%s': header of %zu bytes does not fit a file of %llu bytes", path,
                      header_len, (unsigned long long)file_size);
  recap_status st = RECAP_OK;
  json_error_t jerr;
  json_t *root = json_loadb(header, header_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root && json_error_code(&jerr) == json_error_out_of_memory)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to parse the header of '%s'", path);
  if (!root || !json_is_object(root)) {
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s': safetensors header is not a JSON object: %s",
                    path, root ? "another JSON value" : jerr.text);
    goto done;
  }
  json_t *entry = json_object_get(root, key);
  if (!entry || !json_is_object(entry)) {
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s' has no tensor '%s'", path, key);
    goto done;
  }
  json_t *dtype = json_object_get(entry, "dtype"), *shape = json_object_get(entry, "shape");
  json_t *offsets = json_object_get(entry, "data_offsets");
  if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets) ||
      json_array_size(offsets) != 2 || !json_is_integer(json_array_get(offsets, 0)) ||
      !json_is_integer(json_array_get(offsets, 1))) {
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                    "'%s': tensor '%s' lacks a string dtype, a shape array or two integer "
                    "data_offsets",
                    path, key);
    goto done;
  }
  /* The dtype is compared with its length: a JSON string may hold NUL bytes. */
  const char *expected = safetensors_dtype(want->dtype);
  if (json_string_length(dtype) != strlen(expected) ||
      memcmp(json_string_value(dtype), expected, strlen(expected)) != 0) {
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                    "'%s': tensor '%s' has dtype %.32s, the spec says %s (%s)", path, key,
                    json_string_value(dtype), recap_dtype_name(want->dtype), expected);
    goto done;
  }
  if (!shape_matches(shape, want)) {
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                    "'%s': tensor '%s' has another shape than the spec's (%d dims)", path, key,
                    want->ndim);
    goto done;
  }
  json_int_t begin = json_integer_value(json_array_get(offsets, 0));
  json_int_t end = json_integer_value(json_array_get(offsets, 1));
  uint64_t data_size = file_size - 8 - header_len;
  if (begin < 0 || end < begin || (uint64_t)end > data_size ||
      (uint64_t)(end - begin) != want->bytes) {
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                    "'%s': tensor '%s' has data_offsets [%lld, %lld], which must span %llu "
                    "bytes inside the %llu bytes of data",
                    path, key, (long long)begin, (long long)end, (unsigned long long)want->bytes,
                    (unsigned long long)data_size);
    goto done;
  }
  *data_offset = 8 + header_len + (uint64_t)begin;
done:
  json_decref(root);
  return st;
}

recap_status recap__safetensors_locate(FILE *f, const char *path, uint64_t file_size,
                                       const char *key, const recap__safetensors_want *want,
                                       uint64_t *data_offset) {
  unsigned char prefix[8] = {0};
  uint64_t header_len = 0;
  if (file_size >= 8 && fread(prefix, 1, 8, f) != 8)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot read the header length of '%s'", path);
  RECAP_TRY(recap__safetensors_header_length(prefix, file_size, path, &header_len));
  char *text = malloc((size_t)header_len);
  if (!text)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the header of '%s'", path);
  recap_status st;
  if (fread(text, 1, (size_t)header_len, f) != header_len)
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s' ended inside its safetensors header", path);
  else
    st = recap__safetensors_find(text, (size_t)header_len, file_size, path, key, want,
                                 data_offset);
  free(text);
  return st;
}
