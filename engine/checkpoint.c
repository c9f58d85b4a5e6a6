/* checkpoint.c: a checkpoint's files, their headers parsed once, and one table of their
 * tensors (checkpoint.h). */
#include "engine/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/names.h"
#include "runtime/error.h"
#include "runtime/file.h"

/* FNV-1a, 64 bits: enough to tell a header that changed from the one that was checked. */
static uint64_t hash_bytes(const unsigned char *p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
static const uint64_t HASH_SEED = 0xcbf29ce484222325ull;

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- one .safetensors file ------------------------------------------------------------- */

/* Reads the length prefix and the JSON header of the open file fd into a malloc'd buffer
 * (*text, *len bytes, the prefix included), after checking the length against the size. */
static recap_status read_header_bytes(int fd, const char *path, uint64_t size, unsigned char **text,
                                      uint64_t *len) {
  unsigned char prefix[8] = {0};
  if (size >= 8) RECAP_TRY(recap__file_read_at(fd, path, prefix, 8, 0));
  uint64_t header_len = 0;
  RECAP_TRY(recap__safetensors_header_length(prefix, size, path, &header_len));
  unsigned char *buf = malloc((size_t)(8 + header_len));
  if (!buf) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the header of '%s'", path);
  memcpy(buf, prefix, 8);
  recap_status st = recap__file_read_at(fd, path, buf + 8, (size_t)header_len, 8);
  if (st != RECAP_OK) {
    free(buf);
    return st;
  }
  *text = buf;
  *len = 8 + header_len;
  return RECAP_OK;
}

static recap_status read_file(const char *path, recap__checkpoint_file *f) {
  int fd;
  uint64_t size;
  RECAP_TRY(recap__file_open_regular_fd(path, "checkpoint file", &fd, &size));
  unsigned char *text = NULL;
  uint64_t len = 0;
  recap_status st = read_header_bytes(fd, path, size, &text, &len);
  close(fd);
  if (st == RECAP_OK)
    st =
        recap__safetensors_parse((const char *)text + 8, (size_t)(len - 8), size, path, &f->header);
  if (st == RECAP_OK) {
    f->stamp = (recap__file_stamp){size, len, hash_bytes(text, (size_t)len, HASH_SEED)};
    if (!(f->path = strdup(path))) {
      recap__safetensors_header_free(&f->header);
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for checkpoint '%s'", path);
    }
  }
  free(text);
  return st;
}

recap_status recap__checkpoint_check_stamp(int fd, const char *path,
                                           const recap__file_stamp *stamp) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot stat '%s': %s", path, strerror(errno));
  if ((uint64_t)st.st_size != stamp->size)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "'%s' changed since it was checked: it had %llu bytes, now %llu "
                      "(truncated or rewritten after the spec was loaded)",
                      path, (unsigned long long)stamp->size, (unsigned long long)st.st_size);
  if (stamp->header_bytes == 0) return RECAP_OK;
  unsigned char *buf = malloc((size_t)stamp->header_bytes);
  if (!buf) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to re-check '%s'", path);
  recap_status rs = recap__file_read_at(fd, path, buf, (size_t)stamp->header_bytes, 0);
  if (rs == RECAP_OK &&
      hash_bytes(buf, (size_t)stamp->header_bytes, HASH_SEED) != stamp->header_hash)
    rs = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                    "'%s' changed since it was checked: its safetensors header differs "
                    "(rewritten after the spec was loaded)",
                    path);
  free(buf);
  return rs;
}

/* ---- the index ------------------------------------------------------------------------- */

void recap__checkpoint_index_free(recap__checkpoint_index *ix) {
  if (!ix) return;
  for (size_t i = 0; i < ix->num_shards; ++i) free(ix->shards[i]);
  for (size_t i = 0; i < ix->num_keys; ++i) free(ix->keys[i]);
  free(ix->shards);
  free(ix->keys);
  free(ix->key_shard);
  memset(ix, 0, sizeof *ix);
}

/* A shard name the index may give: relative, no `..` component, no NUL byte, not empty. */
static bool shard_name_ok(const char *name, size_t len) {
  if (len == 0 || len > PATH_MAX || strlen(name) != len || name[0] == '/') return false;
  for (const char *p = name; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    p += n;
    if (*p == '/') ++p;
  }
  return true;
}

recap_status recap__checkpoint_parse_index(const char *text, size_t len, const char *path,
                                           recap__checkpoint_index *out) {
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root && json_error_code(&jerr) == json_error_out_of_memory)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to parse index '%s'", path);
  json_t *map = root ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(root) || !json_is_object(map)) {
    recap_status st =
        root ? RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                          "index '%s' has no \"weight_map\" object (a JSON object mapping each "
                          "tensor to its shard)",
                          path)
             : RECAP_FAIL(RECAP_STATUS_IO_ERROR, "index '%s' is not valid JSON: %s", path,
                          jerr.text);
    json_decref(root);
    return st;
  }
  recap__checkpoint_index ix = {0};
  recap__names shards = {0};
  recap_status st = RECAP_OK;
  size_t n = json_object_size(map);
  ix.shards = calloc(n ? n : 1, sizeof *ix.shards);
  ix.keys = calloc(n ? n : 1, sizeof *ix.keys);
  ix.key_shard = calloc(n ? n : 1, sizeof *ix.key_shard);
  if (!ix.shards || !ix.keys || !ix.key_shard) goto oom;
  const char *key;
  json_t *v;
  json_object_foreach(map, key, v) {
    if (!json_is_string(v) || !shard_name_ok(json_string_value(v), json_string_length(v))) {
      st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "index '%s': tensor '%.200s' names the shard %s%.200s%s; a shard is a "
                      "relative file name inside the index's folder (no '/' first, no '..', no "
                      "NUL)",
                      path, key, json_is_string(v) ? "'" : "",
                      json_is_string(v) ? json_string_value(v) : "(not a string)",
                      json_is_string(v) ? "'" : "");
      goto fail;
    }
    if (!(ix.keys[ix.num_keys] = strdup(key))) goto oom;
    ix.num_keys++;
    int shard = recap__names_get(&shards, json_string_value(v));
    if (shard < 0) {
      if (!(ix.shards[ix.num_shards] = strdup(json_string_value(v)))) goto oom;
      shard = (int)ix.num_shards++;
      int previous;
      if (!recap__names_put(&shards, ix.shards[shard], shard, &previous)) goto oom;
    }
    ix.key_shard[ix.num_keys - 1] = (size_t)shard;
  }
  recap__names_free(&shards);
  json_decref(root);
  *out = ix;
  return RECAP_OK;
oom:
  st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for index '%s'", path);
fail:
  recap__names_free(&shards);
  recap__checkpoint_index_free(&ix);
  json_decref(root);
  return st;
}

/* ---- the checkpoint -------------------------------------------------------------------- */

void recap__checkpoint_destroy(recap__checkpoint *c) {
  if (!c) return;
  for (size_t i = 0; i < c->num_files; ++i) {
    free(c->files[i].path);
    recap__safetensors_header_free(&c->files[i].header);
  }
  free(c->files);
  free(c->tensors);
  free(c->path);
  free(c);
}

static int tensor_by_name(const void *a, const void *b) {
  return strcmp(((const recap__checkpoint_tensor *)a)->entry->name,
                ((const recap__checkpoint_tensor *)b)->entry->name);
}

const recap__checkpoint_tensor *recap__checkpoint_find(const recap__checkpoint *c,
                                                       const char *name) {
  if (!c || !c->num_tensors || !name) return NULL;
  recap__safetensors_entry e = {.name = (char *)name};
  recap__checkpoint_tensor key = {.entry = &e};
  return bsearch(&key, c->tensors, c->num_tensors, sizeof key, tensor_by_name);
}

/* Every file's tensors in one sorted table; a name in two files is an error. */
static recap_status build_table(recap__checkpoint *c) {
  size_t total = 0;
  for (size_t f = 0; f < c->num_files; ++f) total += c->files[f].header.count;
  c->tensors = calloc(total ? total : 1, sizeof *c->tensors);
  if (!c->tensors) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for '%s'", c->path);
  for (size_t f = 0; f < c->num_files; ++f)
    for (size_t i = 0; i < c->files[f].header.count; ++i)
      c->tensors[c->num_tensors++] = (recap__checkpoint_tensor){&c->files[f].header.entries[i], f};
  qsort(c->tensors, c->num_tensors, sizeof *c->tensors, tensor_by_name);
  for (size_t i = 1; i < c->num_tensors; ++i)
    if (strcmp(c->tensors[i].entry->name, c->tensors[i - 1].entry->name) == 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                        "checkpoint '%s': tensor '%.200s' is in two shards, '%s' and '%s'", c->path,
                        c->tensors[i].entry->name, c->files[c->tensors[i - 1].file].path,
                        c->files[c->tensors[i].file].path);
  return RECAP_OK;
}

static recap_status read_index_text(const char *path, char **text, size_t *len) {
  int fd;
  uint64_t size;
  RECAP_TRY(recap__file_open_regular_fd(path, "checkpoint index", &fd, &size));
  recap_status st = RECAP_OK;
  if (size > RECAP__CHECKPOINT_MAX_INDEX)
    st =
        RECAP_FAIL(RECAP_STATUS_IO_ERROR, "index '%s' has %llu bytes, more than the limit of %llu",
                   path, (unsigned long long)size, (unsigned long long)RECAP__CHECKPOINT_MAX_INDEX);
  char *buf = st == RECAP_OK ? malloc(size ? (size_t)size : 1) : NULL;
  if (st == RECAP_OK && !buf)
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to read index '%s'", path);
  if (st == RECAP_OK) st = recap__file_read_at(fd, path, buf, (size_t)size, 0);
  close(fd);
  if (st != RECAP_OK) {
    free(buf);
    return st;
  }
  *text = buf;
  *len = (size_t)size;
  return RECAP_OK;
}

/* Where the files of the checkpoint in `folder` (resolved) may lead: the folder itself, or,
 * for a Hugging Face cache snapshot (<cache>/models--org--name/snapshots/<revision>, whose files
 * are links to ../../blobs/<hash>), the model's cache entry models--org--name, which holds the
 * blobs and nothing of another model. malloc'd; NULL when out of memory. */
static char *confinement_root(const char *folder) {
  char *revision_parent = recap__path_folder(folder);
  char *entry = revision_parent ? recap__path_folder(revision_parent) : NULL;
  const char *last = revision_parent ? strrchr(revision_parent, '/') : NULL;
  bool snapshot = false;
  if (entry && last && strcmp(last + 1, "snapshots") == 0 && strcmp(entry, "/") != 0) {
    size_t n = strlen(entry) + sizeof "/blobs";
    char *blobs = malloc(n);
    struct stat st;
    if (blobs) {
      snprintf(blobs, n, "%s/blobs", entry);
      snapshot = lstat(blobs, &st) == 0 && S_ISDIR(st.st_mode);
      free(blobs);
    }
  }
  free(revision_parent);
  if (snapshot) return entry;
  free(entry);
  return strdup(folder);
}

/* The shard's path, symbolic links resolved, if it lies inside `root` (confinement_root of
 * `folder`, both resolved); `index` names the file that gave the name, for messages. */
static recap_status confine_shard(const char *index, const char *folder, const char *root,
                                  const char *shard, char **out) {
  size_t n = strlen(folder) + strlen(shard) + 2;
  char *full = malloc(n);
  if (!full) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for shard '%s'", shard);
  snprintf(full, n, "%s/%s", folder, shard);
  char *real = realpath(full, NULL);
  if (!real) {
    int e = errno;
    recap_status st =
        RECAP_FAIL(RECAP_STATUS_IO_ERROR, "'%s': shard '%s' cannot be opened (%s): %s", index,
                   shard, full, strerror(e));
    free(full);
    return st;
  }
  free(full);
  if (!recap__path_is_inside(real, root)) {
    recap_status st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                                 "'%s': shard '%s' leads out of the checkpoint's folder "
                                 "'%s' (to '%s')",
                                 index, shard, root, real);
    free(real);
    return st;
  }
  *out = real;
  return RECAP_OK;
}

static recap_status open_index(recap__checkpoint *c, const char *index) {
  char *text = NULL;
  size_t len = 0;
  RECAP_TRY(read_index_text(index, &text, &len));
  recap__checkpoint_index ix = {0};
  recap_status st = recap__checkpoint_parse_index(text, len, index, &ix);
  free(text);
  RECAP_TRY(st);
  /* Shards are confined to the folder the index was named in, its links resolved. */
  char *folder = NULL, *root = NULL, *dir = recap__path_folder(index);
  if (dir) folder = realpath(dir, NULL);
  int resolve_errno = errno;
  if (folder) root = confinement_root(folder);
  c->files = calloc(ix.num_shards ? ix.num_shards : 1, sizeof *c->files);
  if (!dir || !c->files || (folder && !root))
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for checkpoint '%s'", index);
  else if (!folder)
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot resolve the folder of index '%s': %s", index,
                    strerror(resolve_errno));
  for (size_t s = 0; st == RECAP_OK && s < ix.num_shards; ++s) {
    char *shard = NULL;
    st = confine_shard(index, folder, root, ix.shards[s], &shard);
    if (st == RECAP_OK) st = read_file(shard, &c->files[c->num_files]);
    if (st == RECAP_OK) c->num_files++;
    free(shard);
  }
  if (st == RECAP_OK) st = build_table(c);
  for (size_t k = 0; st == RECAP_OK && k < ix.num_keys; ++k) {
    const recap__checkpoint_tensor *t = recap__checkpoint_find(c, ix.keys[k]);
    if (!t || t->file != ix.key_shard[k])
      st = RECAP_FAIL(RECAP_STATUS_IO_ERROR,
                      "index '%s' puts tensor '%.200s' in shard '%s', which does not hold it",
                      index, ix.keys[k], ix.shards[ix.key_shard[k]]);
  }
  free(root);
  free(folder);
  free(dir);
  recap__checkpoint_index_free(&ix);
  return st;
}

static recap_status open_file(recap__checkpoint *c, const char *path) {
  c->files = calloc(1, sizeof *c->files);
  if (!c->files) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for '%s'", path);
  RECAP_TRY(read_file(path, &c->files[0]));
  c->num_files = 1;
  return build_table(c);
}

/* A folder: its index if it has one, else its model.safetensors; either must lie inside the
 * folder (or its Hugging Face cache entry) once links are resolved, as shards do. */
static recap_status open_folder(recap__checkpoint *c, const char *path) {
  char *folder = realpath(path, NULL);
  if (!folder)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot resolve checkpoint folder '%s': %s", path,
                      strerror(errno));
  char *root = confinement_root(folder);
  if (!root) {
    free(folder);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for '%s'", path);
  }
  const char *names[] = {RECAP__CHECKPOINT_INDEX_NAME, RECAP__CHECKPOINT_FILE_NAME};
  recap_status rs = RECAP_OK;
  bool found = false;
  for (int i = 0; i < 2 && !found && rs == RECAP_OK; ++i) {
    size_t n = strlen(folder) + strlen(names[i]) + 2;
    char *full = malloc(n), *real = NULL;
    if (!full) {
      rs = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for '%s'", path);
      break;
    }
    snprintf(full, n, "%s/%s", folder, names[i]);
    struct stat st;
    found = lstat(full, &st) == 0;
    if (found) rs = confine_shard(path, folder, root, names[i], &real);
    if (found && rs == RECAP_OK) rs = i == 0 ? open_index(c, full) : open_file(c, real);
    free(real);
    free(full);
  }
  free(root);
  free(folder);
  if (!found && rs == RECAP_OK)
    rs = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "checkpoint folder '%s' holds neither %s nor %s", path,
                    RECAP__CHECKPOINT_INDEX_NAME, RECAP__CHECKPOINT_FILE_NAME);
  return rs;
}

recap_status recap__checkpoint_open(const char *path, recap__checkpoint **out) {
  RECAP_CHECK_ARG(path && out);
  recap__checkpoint *c = calloc(1, sizeof *c);
  if (!c || !(c->path = strdup(path))) {
    free(c);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for checkpoint '%s'", path);
  }
  struct stat st;
  recap_status rs;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    rs = open_folder(c, path);
  else if (has_suffix(path, ".json"))
    rs = open_index(c, path);
  else
    rs = open_file(c, path);
  if (rs != RECAP_OK) {
    recap__checkpoint_destroy(c);
    return rs;
  }
  *out = c;
  return RECAP_OK;
}
