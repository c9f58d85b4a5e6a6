/* safetensors.c: the .safetensors writer behind --save-tensors (header built with jansson). */
#include "cli/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_code(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F32: return "F32";
    case RECAP_DTYPE_F16: return "F16";
    case RECAP_DTYPE_BF16: return "BF16";
    case RECAP_DTYPE_I32: return "I32";
    case RECAP_DTYPE_I64: return "I64";
    default: return NULL;
  }
}

/* The header's JSON text, or NULL with a message. */
static char *build_header(const cli_safetensor *tensors, size_t count,
                          const char *const *metadata) {
  json_t *root = json_object();
  char *text = NULL;
  if (!root) goto oom;
  if (metadata && metadata[0]) {
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta) != 0) goto oom;
    for (const char *const *kv = metadata; kv[0] && kv[1]; kv += 2)
      if (json_object_set_new(meta, kv[0], json_string(kv[1])) != 0) goto oom;
  }
  size_t offset = 0;
  for (size_t i = 0; i < count; i++) {
    const cli_safetensor *t = &tensors[i];
    const char *code = dtype_code(t->dtype);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
    if (!code || numel * recap_dtype_size(t->dtype) != t->bytes) {
      fprintf(stderr, "safetensors: tensor '%s': %zu bytes do not match its dtype and shape\n",
              t->name, t->bytes);
      goto fail;
    }
    if (strcmp(t->name, "__metadata__") == 0 || json_object_get(root, t->name)) {
      fprintf(stderr, "safetensors: tensor name '%s' used twice or reserved\n", t->name);
      goto fail;
    }
    json_t *entry = json_object(), *shape = json_array(), *offsets = json_array();
    if (!entry || !shape || !offsets) {
      json_decref(entry);
      json_decref(shape);
      json_decref(offsets);
      goto oom;
    }
    json_object_set_new(entry, "dtype", json_string(code));
    for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    json_object_set_new(entry, "shape", shape);
    json_array_append_new(offsets, json_integer((json_int_t)offset));
    json_array_append_new(offsets, json_integer((json_int_t)(offset + t->bytes)));
    json_object_set_new(entry, "data_offsets", offsets);
    if (json_object_set_new(root, t->name, entry) != 0) goto oom;
    offset += t->bytes;
  }
  /* Entries keep insertion order, so the data section follows the header's order. */
  text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!text) goto oom;
  json_decref(root);
  return text;
oom:
  fprintf(stderr, "safetensors: out of memory building the header\n");
fail:
  json_decref(root);
  return NULL;
}

bool cli_safetensors_write(const char *path, const cli_safetensor *tensors, size_t count,
                           const char *const *metadata) {
  char *header = build_header(tensors, count, metadata);
  if (!header) return false;
  size_t len = strlen(header);
  size_t padded = (len + 7) / 8 * 8; /* keeps the data 8-byte aligned in the file */
  FILE *f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "safetensors: cannot write %s\n", path);
    free(header);
    return false;
  }
  unsigned char size_le[8];
  for (int i = 0; i < 8; i++) size_le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  bool ok = fwrite(size_le, 1, 8, f) == 8 && fwrite(header, 1, len, f) == len;
  for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
  for (size_t i = 0; ok && i < count; i++)
    ok = tensors[i].bytes == 0 || fwrite(tensors[i].data, 1, tensors[i].bytes, f) == tensors[i].bytes;
  if (fclose(f) != 0) ok = false;
  free(header);
  if (!ok) {
    fprintf(stderr, "safetensors: writing %s failed\n", path);
    remove(path);
  }
  return ok;
}
