/*
 * checkpoint.h: a checkpoint's tensors, one header parse per file (internal to the engine).
 *
 * A checkpoint is one .safetensors file, a sharded set of them listed by a
 * model.safetensors.index.json ({"weight_map": {tensor name: shard file name}}), or a folder
 * holding either (the index wins when both are there). Opening one reads and parses every
 * file's header once and builds one table, name -> {file, dtype, shape, offset, bytes}; no
 * tensor data is read. The spec check opens each checkpoint a spec names once (spec.h) and the
 * IR looks tensors up in it; the binder later re-checks each file against the stamp taken here
 * (recap__checkpoint_check_stamp), so a file changed or truncated in between is an error, not
 * wrong weights.
 *
 *   recap__checkpoint *c;
 *   RECAP_TRY(recap__checkpoint_open("/models/m", &c));     // folder, index or file
 *   const recap__checkpoint_tensor *t = recap__checkpoint_find(c, "lm_head.weight");
 *   if (t) ... t->entry->dtype, ->shape, ->offset; c->files[t->file].path ...
 *   recap__checkpoint_destroy(c);
 *
 * Shard names come from the index, which is untrusted: a name must be relative, without a
 * `..` component or a NUL byte, and the file it names, symbolic links resolved, must lie
 * inside the index's folder. A tensor found in two shards, or listed in the index for a shard
 * that does not hold it, makes the checkpoint invalid. Failures are RECAP_STATUS_IO_ERROR
 * with a message naming the file (and the tensor or shard), or RECAP_STATUS_OUT_OF_MEMORY;
 * nothing is left allocated.
 */
#ifndef RECAP_ENGINE_CHECKPOINT_H
#define RECAP_ENGINE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/safetensors_reader.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The index file a checkpoint folder may hold, and the single file it may hold instead. */
#define RECAP__CHECKPOINT_INDEX_NAME "model.safetensors.index.json"
#define RECAP__CHECKPOINT_FILE_NAME "model.safetensors"
/* Index files above this size are refused before they are read. */
#define RECAP__CHECKPOINT_MAX_INDEX ((uint64_t)64 << 20)

/* What a file was like when it was checked: its size and a hash of its first header_bytes
 * bytes (the 8-byte length and the JSON header of a .safetensors file; 0 for a raw file). */
typedef struct {
  uint64_t size;
  uint64_t header_bytes;
  uint64_t header_hash;
} recap__file_stamp;

typedef struct {
  char *path; /* absolute, symbolic links resolved */
  recap__file_stamp stamp;
  recap__safetensors_header header;
} recap__checkpoint_file;

typedef struct {
  const recap__safetensors_entry *entry; /* in files[file].header */
  size_t file;
} recap__checkpoint_tensor;

typedef struct recap__checkpoint {
  char *path; /* what was opened (resolved): the file, the index or the folder */
  recap__checkpoint_file *files;
  size_t num_files;
  recap__checkpoint_tensor *tensors; /* every file's tensors, sorted by name */
  size_t num_tensors;
} recap__checkpoint;

/* Opens the checkpoint at `path`: a folder, a .json index or a .safetensors file (any other
 * name is read as a .safetensors file). */
recap_status recap__checkpoint_open(const char *path, recap__checkpoint **out);
/* The tensor named `name`, or NULL. */
const recap__checkpoint_tensor *recap__checkpoint_find(const recap__checkpoint *c,
                                                       const char *name);
/* NULL is accepted. */
void recap__checkpoint_destroy(recap__checkpoint *c);

/* An index file's content (pure: the fuzz target's entry point). */
typedef struct {
  char **shards; /* distinct shard names, in order of first mention, each checked as above */
  size_t num_shards;
  char **keys;       /* the weight_map's tensor names */
  size_t *key_shard; /* per key: its index into shards */
  size_t num_keys;
} recap__checkpoint_index;

/* Parses `len` bytes of index JSON: an object whose "weight_map" is an object of strings
 * (other keys, such as "metadata", are ignored). Shard names are checked (relative, no `..`,
 * no NUL) but not opened. RECAP_STATUS_IO_ERROR naming `path`, or RECAP_STATUS_OUT_OF_MEMORY. */
recap_status recap__checkpoint_parse_index(const char *text, size_t len, const char *path,
                                           recap__checkpoint_index *out);
void recap__checkpoint_index_free(recap__checkpoint_index *index);

/* Whether the open file fd (at `path`, for messages) is still what `stamp` recorded: the
 * same size and the same header bytes. RECAP_STATUS_IO_ERROR "'<path>' changed since it was
 * checked ..." when not. Reads header_bytes bytes; parses nothing. */
recap_status recap__checkpoint_check_stamp(int fd, const char *path,
                                           const recap__file_stamp *stamp);

#ifdef __cplusplus
}
#endif

#endif
