/*
 * safetensors.h: writing tensors as a .safetensors file (the CLI's --save-tensors).
 *
 * The format (huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
 * JSON {"__metadata__": {string: string}, NAME: {"dtype": "BF16", "shape": [..],
 * "data_offsets": [begin, end]}, ...} padded with spaces to a multiple of 8, then the raw
 * little-endian data; offsets are relative to the end of the header and cover the data
 * section exactly, in entry order. PyTorch loads it with safetensors.torch.load_file.
 *
 *   cli_safetensor t[] = {{"x", RECAP_DTYPE_BF16, 2, shape, host_x, bytes}};
 *   const char *meta[] = {"seed", "42", NULL};
 *   if (!cli_safetensors_write("run.safetensors", t, 1, meta)) ... message on stderr ...
 */
#ifndef RECAP_CLI_SAFETENSORS_H
#define RECAP_CLI_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

typedef struct {
  const char *name; /* unique among the entries, not "__metadata__" */
  recap_dtype dtype;
  int ndim;
  const int64_t *shape;
  const void *data; /* host memory, `bytes` long (numel * dtype size) */
  size_t bytes;
} cli_safetensor;

/* Writes the file (replacing it). metadata: key, value, ..., NULL (may be NULL). False with a
 * message on stderr when a name repeats, sizes disagree with shapes, or writing fails; a
 * partly written file is removed. */
bool cli_safetensors_write(const char *path, const cli_safetensor *tensors, size_t count,
                           const char *const *metadata);

#endif
