/*
 * tune_file.c: the GEMM tuning cache's table, file format, bounded parser, atomic writer and
 * counters (tune.h). Plain C: it builds and is tested without CUDA.
 *
 * The file is text, one record per line (docs/perf/tuning.md has the full description):
 *
 *   # comments and blank lines are skipped
 *   recap-gemm-tune 1
 *   versions recap=0.1.0 cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132
 *            cc=90                                                           (one line)
 *   gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1
 *        bias=1 act=gelu beta=0 align=16 choice=skinny:8,1 us=112.5      (one line)
 *
 * Other people's editors, crashes and disks may corrupt it, so the parser trusts nothing: it
 * reads at most RECAP_TUNE_MAX_FILE_BYTES, never looks past a line's end, copies each line
 * into a fixed buffer before tokenizing, parses numbers with explicit bounds, and skips
 * (with one warning naming file:line) every line it does not fully understand. Entries only
 * count under a versions line equal to the process's own: a new recap, cuBLASLt, CUDA runtime
 * or GPU makes the old measurements meaningless.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tune.h"
#include "runtime/error.h"
#include "runtime/file.h"

enum { FORMAT_VERSION = 1, MAX_TOKENS = 24 };

static const char MAGIC[] = "recap-gemm-tune";

/* ---- keys and choices ---------------------------------------------------------------------- */

bool recap__tune_key_equal(const recap__tune_key *a, const recap__tune_key *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->batch == b->batch && a->op == b->op &&
         a->a_type == b->a_type && a->b_type == b->b_type && a->c_type == b->c_type &&
         a->compute == b->compute && a->trans_a == b->trans_a && a->trans_b == b->trans_b &&
         a->bias == b->bias && a->act == b->act && a->has_c == b->has_c && a->align == b->align;
}

int recap__tune_choice_values(int32_t kind) {
  switch (kind) {
    case RECAP_TUNE_CAND_LT:
      return RECAP_TUNE_CONFIG_MAX;
    case RECAP_TUNE_CAND_SKINNY:
      return 2;
    case RECAP_TUNE_CAND_HOPPER:
      return 1;
    default:
      return 0;
  }
}

bool recap__tune_choice_equal(const recap__tune_choice *a, const recap__tune_choice *b) {
  if (a->kind != b->kind) return false;
  for (int i = 0; i < recap__tune_choice_values(a->kind); ++i)
    if (a->config[i] != b->config[i]) return false;
  return true;
}

static bool gemm_dtype(int32_t t) {
  return t == RECAP_DTYPE_F32 || t == RECAP_DTYPE_F16 || t == RECAP_DTYPE_BF16;
}

static bool power_of_two_upto(int64_t v, int64_t max) {
  return v >= 1 && v <= max && (v & (v - 1)) == 0;
}

/* Dimensions beyond 2^40 elements fit no device; the bound keeps every product finite. */
#define MAX_DIM ((int64_t)1 << 40)

bool recap__tune_entry_valid(const recap__tune_entry *e) {
  const recap__tune_key *k = &e->key;
  if (k->m < 1 || k->m > MAX_DIM || k->n < 1 || k->n > MAX_DIM || k->k < 1 || k->k > MAX_DIM ||
      k->batch < 1 || k->batch > INT32_MAX)
    return false;
  if ((k->op != RECAP_TUNE_OP_MATMUL && k->op != RECAP_TUNE_OP_LINEAR) || !gemm_dtype(k->a_type) ||
      !gemm_dtype(k->b_type) || !gemm_dtype(k->c_type) ||
      (k->compute != RECAP_TUNE_COMPUTE_F32 && k->compute != RECAP_TUNE_COMPUTE_TF32) ||
      (k->trans_a != 0 && k->trans_a != 1) || (k->trans_b != 0 && k->trans_b != 1) ||
      (k->bias != 0 && k->bias != 1) || k->act < RECAP_ACT_NONE || k->act > RECAP_ACT_TANH ||
      (k->has_c != 0 && k->has_c != 1) || !power_of_two_upto(k->align, 16))
    return false;
  const recap__tune_choice *c = &e->choice;
  if (c->kind == RECAP_TUNE_CAND_LT) {
    for (int i = 0; i < RECAP_TUNE_CONFIG_MAX; ++i)
      if (c->config[i] < 0) return false;
  } else if (c->kind == RECAP_TUNE_CAND_SKINNY) {
    if (!power_of_two_upto(c->config[0], 16) || c->config[1] < 0 || c->config[1] > 4) return false;
  } else if (c->kind == RECAP_TUNE_CAND_HOPPER) {
    if (c->config[0] < 0 || c->config[0] >= RECAP_TUNE_HOPPER_CONFIGS) return false;
  } else {
    return false;
  }
  return isfinite(e->us) && e->us >= 0.0f && e->us < 1e9f;
}

/* ---- the table ----------------------------------------------------------------------------- */

struct recap__tune_table {
  recap__tune_entry *entries;
  size_t count, capacity;
};

recap_status recap__tune_table_create(recap__tune_table **out) {
  RECAP_CHECK_ARG(out);
  *out = calloc(1, sizeof **out);
  if (!*out) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm tuning: no memory for a table");
  return RECAP_OK;
}

void recap__tune_table_destroy(recap__tune_table *table) {
  if (!table) return;
  free(table->entries);
  free(table);
}

void recap__tune_table_clear(recap__tune_table *table) {
  if (table) table->count = 0;
}

size_t recap__tune_table_count(const recap__tune_table *table) {
  return table ? table->count : 0;
}

static recap__tune_entry *find_mutable(const recap__tune_table *table, const recap__tune_key *key) {
  for (size_t i = 0; i < table->count; ++i)
    if (recap__tune_key_equal(&table->entries[i].key, key)) return &table->entries[i];
  return NULL;
}

const recap__tune_entry *recap__tune_table_find(const recap__tune_table *table,
                                                const recap__tune_key *key) {
  return table && key ? find_mutable(table, key) : NULL;
}

const recap__tune_entry *recap__tune_table_at(const recap__tune_table *table, size_t i) {
  return table && i < table->count ? &table->entries[i] : NULL;
}

recap_status recap__tune_table_put(recap__tune_table *table, const recap__tune_entry *entry) {
  RECAP_CHECK_ARG(table && entry);
  if (!recap__tune_entry_valid(entry))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm tuning: an entry with fields out of "
                      "range (m=%lld n=%lld k=%lld, choice kind %d)",
                      (long long)entry->key.m, (long long)entry->key.n, (long long)entry->key.k,
                      (int)entry->choice.kind);
  recap__tune_entry *same = find_mutable(table, &entry->key);
  if (same) {
    *same = *entry;
    return RECAP_OK;
  }
  if (table->count >= RECAP_TUNE_MAX_ENTRIES)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm tuning: the table holds %d entries, "
                      "the most a tuning file may",
                      RECAP_TUNE_MAX_ENTRIES);
  if (table->count == table->capacity) {
    size_t cap = table->capacity ? table->capacity * 2 : 16;
    if (cap > RECAP_TUNE_MAX_ENTRIES) cap = RECAP_TUNE_MAX_ENTRIES;
    recap__tune_entry *grown = realloc(table->entries, cap * sizeof *grown);
    if (!grown) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm tuning: no memory for entries");
    table->entries = grown;
    table->capacity = cap;
  }
  table->entries[table->count++] = *entry;
  return RECAP_OK;
}

/* ---- names in the file ----------------------------------------------------------------------- */

static const char *const act_names[] = {"none", "relu",    "gelu", "gelu_tanh",
                                        "silu", "sigmoid", "tanh"};
static const char *const op_names[] = {"matmul", "linear"};
static const char *const compute_names[] = {"f32", "tf32"};

static const char *dtype_text(int32_t t) {
  switch (t) {
    case RECAP_DTYPE_F32:
      return "f32";
    case RECAP_DTYPE_F16:
      return "f16";
    case RECAP_DTYPE_BF16:
      return "bf16";
    default:
      return "?";
  }
}

/* ---- the writer ------------------------------------------------------------------------------ */

bool recap__tune_format_entry(const recap__tune_entry *e, char *buf, size_t size) {
  if (!e || !buf || !recap__tune_entry_valid(e)) return false;
  const recap__tune_key *k = &e->key;
  char choice[160];
  int c;
  if (e->choice.kind == RECAP_TUNE_CAND_LT) {
    const int32_t *v = e->choice.config;
    c = snprintf(choice, sizeof choice, "lt:%d,%d,%d,%d,%d,%d,%d,%d,%d", v[0], v[1], v[2], v[3],
                 v[4], v[5], v[6], v[7], v[8]);
  } else if (e->choice.kind == RECAP_TUNE_CAND_HOPPER) {
    c = snprintf(choice, sizeof choice, "hopper:%d", e->choice.config[0]);
  } else {
    c = snprintf(choice, sizeof choice, "skinny:%d,%d", e->choice.config[0], e->choice.config[1]);
  }
  if (c < 0 || (size_t)c >= sizeof choice) return false;
  const int n = snprintf(
      buf, size,
      "gemm op=%s a=%s b=%s c=%s compute=%s ta=%c tb=%c m=%lld n=%lld k=%lld batch=%lld bias=%d "
      "act=%s beta=%d align=%d choice=%s us=%.2f",
      op_names[k->op], dtype_text(k->a_type), dtype_text(k->b_type), dtype_text(k->c_type),
      compute_names[k->compute], k->trans_a ? 'T' : 'N', k->trans_b ? 'T' : 'N', (long long)k->m,
      (long long)k->n, (long long)k->k, (long long)k->batch, k->bias, act_names[k->act], k->has_c,
      k->align, choice, (double)e->us);
  return n >= 0 && (size_t)n < size && n < RECAP_TUNE_MAX_LINE;
}

static void sanitize_device(const char *in, char *out, size_t size) {
  size_t i = 0;
  for (; in[i] && i + 1 < size; ++i) {
    const char ch = in[i];
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    out[i] = ok ? ch : '_';
  }
  out[i] = '\0';
  if (i == 0 && size > 1) { /* an empty name would leave "device=" with no value */
    out[0] = '_';
    out[1] = '\0';
  }
}

/* "recap=X " for a process that knows its version, "" otherwise (an old file's reading). */
static void recap_field(const recap__tune_versions *v, char *buf, size_t size) {
  char recap[RECAP_TUNE_RECAP_VERSION];
  sanitize_device(v->recap, recap, sizeof recap);
  if (v->recap[0])
    snprintf(buf, size, "recap=%s ", recap);
  else
    buf[0] = '\0';
}

static bool format_versions(const recap__tune_versions *v, char *buf, size_t size) {
  char device[RECAP_TUNE_DEVICE_NAME], recap[RECAP_TUNE_RECAP_VERSION + 8];
  sanitize_device(v->device, device, sizeof device);
  recap_field(v, recap, sizeof recap);
  const int n = snprintf(buf, size, "versions %scublaslt=%d cudart=%d device=%s sms=%d cc=%d",
                         recap, v->cublaslt, v->cudart, device, v->sms, v->cc);
  return n >= 0 && (size_t)n < size;
}

static recap_status write_all(int fd, const char *text, size_t n, const char *path) {
  while (n > 0) {
    const ssize_t w = write(fd, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "gemm tuning: writing a temp file for %s: %s", path,
                        strerror(errno));
    text += w;
    n -= (size_t)w;
  }
  return RECAP_OK;
}

static recap_status write_file(const recap__tune_table *t, const char *path, const char *tmp,
                               const recap__tune_versions *v) {
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "gemm tuning: cannot create %s: %s", tmp,
                      strerror(errno));
  recap_status st = RECAP_OK;
  char line[RECAP_TUNE_MAX_LINE + 2];
  const char header[] =
      "# recap GEMM tuning cache (RECAP_TUNE=1 writes it; format: docs/perf/tuning.md).\n"
      "# Safe to delete. Entries count only under a versions line equal to the process's.\n";
  RECAP_TRY_GOTO(st, write_all(fd, header, sizeof header - 1, path), done);
  int n = snprintf(line, sizeof line, "%s %d\n", MAGIC, FORMAT_VERSION);
  RECAP_TRY_GOTO(st, write_all(fd, line, (size_t)n, path), done);
  if (!format_versions(v, line, sizeof line - 1)) {
    st = RECAP_FAIL(RECAP_STATUS_INTERNAL, "gemm tuning: the versions line does not fit");
    goto done;
  }
  strcat(line, "\n");
  RECAP_TRY_GOTO(st, write_all(fd, line, strlen(line), path), done);
  for (size_t i = 0; i < t->count; ++i) {
    if (!recap__tune_format_entry(&t->entries[i], line, sizeof line - 1)) continue;
    strcat(line, "\n");
    RECAP_TRY_GOTO(st, write_all(fd, line, strlen(line), path), done);
  }
  if (fsync(fd) != 0)
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "gemm tuning: fsync of %s: %s", tmp, strerror(errno));
done:
  if (close(fd) != 0 && st == RECAP_OK)
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "gemm tuning: closing %s: %s", tmp, strerror(errno));
  return st;
}

recap_status recap__tune_save(const recap__tune_table *table, const char *path,
                              const recap__tune_versions *versions) {
  RECAP_CHECK_ARG(table && path && path[0] && versions);
  /* Another process may have added entries since this one loaded the file: keep them. */
  recap__tune_table *merged = NULL;
  RECAP_TRY(recap__tune_table_create(&merged));
  recap__tune_load_report report;
  recap_status st = recap__tune_load(merged, path, versions, true, &report);
  for (size_t i = 0; st == RECAP_OK && i < table->count; ++i) {
    st = recap__tune_table_put(merged, &table->entries[i]);
    /* A full file keeps what it has; this process's extra choices stay in memory only. */
    if (st == RECAP_STATUS_INVALID_ARGUMENT) st = RECAP_OK;
  }
  if (st != RECAP_OK) goto done;
  static atomic_uint serial;
  char tmp[4096];
  const int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
                         atomic_fetch_add(&serial, 1));
  if (n < 0 || (size_t)n >= sizeof tmp) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "gemm tuning: path too long: %s", path);
    goto done;
  }
  st = write_file(merged, path, tmp, versions);
  if (st == RECAP_OK && rename(tmp, path) != 0)
    st = RECAP_FAIL(RECAP_STATUS_IO_ERROR, "gemm tuning: renaming %s to %s: %s", tmp, path,
                    strerror(errno));
  if (st != RECAP_OK) unlink(tmp);
done:
  recap__tune_table_destroy(merged);
  return st;
}

/* ---- the parser ------------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  size_t line;
  bool quiet;
  recap__tune_load_report *report;
} parse_ctx;

static void warn(parse_ctx *p, const char *fmt, ...) RECAP__PRINTF(2, 3);

static void warn(parse_ctx *p, const char *fmt, ...) {
  char text[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  recap__tune_load_report *r = p->report;
  if (r->warnings == 0) snprintf(r->first_warning, sizeof r->first_warning, "%s", text);
  ++r->warnings;
  if (p->quiet) return;
  if (r->warnings <= RECAP_TUNE_MAX_WARNINGS)
    fprintf(stderr, "recap: warning: %s:%zu: %s\n", p->name, p->line, text);
}

/* A decimal integer in [0, max], the whole token. */
static bool parse_uint(const char *s, int64_t max, int64_t *out) {
  if (!*s) return false;
  int64_t v = 0;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return false;
    const int d = *s - '0';
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

static bool parse_int32(const char *s, int32_t *out) {
  int64_t v;
  if (!parse_uint(s, INT32_MAX, &v)) return false;
  *out = (int32_t)v;
  return true;
}

static int name_index(const char *s, const char *const *names, int count) {
  for (int i = 0; i < count; ++i)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static bool parse_dtype(const char *s, int32_t *out) {
  static const char *const names[] = {"f32", "f16", "bf16"};
  static const int32_t types[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};
  const int i = name_index(s, names, 3);
  if (i < 0) return false;
  *out = types[i];
  return true;
}

/* "lt:v0,...,v8", "skinny:w,p" or "hopper:c". */
static bool parse_choice(const char *s, recap__tune_choice *out) {
  memset(out, 0, sizeof *out);
  const char *colon = strchr(s, ':');
  if (!colon) return false;
  const size_t kind_len = (size_t)(colon - s);
  if (kind_len == 2 && strncmp(s, "lt", 2) == 0)
    out->kind = RECAP_TUNE_CAND_LT;
  else if (kind_len == 6 && strncmp(s, "skinny", 6) == 0)
    out->kind = RECAP_TUNE_CAND_SKINNY;
  else if (kind_len == 6 && strncmp(s, "hopper", 6) == 0)
    out->kind = RECAP_TUNE_CAND_HOPPER;
  else
    return false;
  const int want = recap__tune_choice_values(out->kind);
  const char *p = colon + 1;
  for (int i = 0; i < want; ++i) {
    char num[16];
    size_t len = 0;
    while (p[len] && p[len] != ',') ++len;
    if (len == 0 || len >= sizeof num) return false;
    memcpy(num, p, len);
    num[len] = '\0';
    if (!parse_int32(num, &out->config[i])) return false;
    p += len;
    if (i + 1 < want) {
      if (*p != ',') return false;
      ++p;
    }
  }
  return *p == '\0';
}

/* Splits a NUL-terminated line at spaces and tabs; false when it has more than `max` tokens. */
static bool tokenize(char *line, char **tokens, int max, int *count) {
  int n = 0;
  char *p = line;
  for (;;) {
    while (*p == ' ' || *p == '\t') ++p;
    if (!*p) break;
    if (n == max) return false;
    tokens[n++] = p;
    while (*p && *p != ' ' && *p != '\t') ++p;
    if (*p) *p++ = '\0';
  }
  *count = n;
  return true;
}

/* Finds "key=value" among tokens[1..]; each key must appear exactly once. Returns the value,
 * NULL when absent; *dup set when a key repeats. */
static const char *field(char **tokens, int count, const char *key, bool *dup) {
  const size_t kl = strlen(key);
  const char *found = NULL;
  for (int i = 1; i < count; ++i)
    if (strncmp(tokens[i], key, kl) == 0 && tokens[i][kl] == '=') {
      if (found) *dup = true;
      found = tokens[i] + kl + 1;
    }
  return found;
}

/* Every token after the first must be key=value with a key from `keys`. NULL when all are,
 * else the first offending token. */
static const char *unknown_field(char **tokens, int count, const char *const *keys, int nkeys) {
  for (int i = 1; i < count; ++i) {
    const char *eq = strchr(tokens[i], '=');
    if (!eq) return tokens[i];
    bool known = false;
    for (int k = 0; k < nkeys && !known; ++k)
      known = strlen(keys[k]) == (size_t)(eq - tokens[i]) &&
              strncmp(tokens[i], keys[k], (size_t)(eq - tokens[i])) == 0;
    if (!known) return tokens[i];
  }
  return NULL;
}

static bool parse_versions(parse_ctx *p, char **tokens, int count, recap__tune_versions *v) {
  static const char *const keys[] = {"recap", "cublaslt", "cudart", "device", "sms", "cc"};
  const char *bad = unknown_field(tokens, count, keys, 6);
  if (bad) {
    warn(p, "versions line: unknown field '%.40s'", bad);
    return false;
  }
  bool dup = false;
  const char *lt = field(tokens, count, "cublaslt", &dup),
             *rt = field(tokens, count, "cudart", &dup),
             *dev = field(tokens, count, "device", &dup), *sms = field(tokens, count, "sms", &dup),
             *cc = field(tokens, count, "cc", &dup);
  /* recap= is optional: files written before it existed lack it (and are then stale). */
  const char *recap = field(tokens, count, "recap", &dup);
  int32_t ilt, irt, isms, icc;
  if (dup || !lt || !rt || !dev || !sms || !cc || !parse_int32(lt, &ilt) ||
      !parse_int32(rt, &irt) || !parse_int32(sms, &isms) || !parse_int32(cc, &icc) || !dev[0] ||
      strlen(dev) >= RECAP_TUNE_DEVICE_NAME ||
      (recap && (!recap[0] || strlen(recap) >= RECAP_TUNE_RECAP_VERSION))) {
    warn(p, "malformed versions line (want recap=V cublaslt=N cudart=N device=NAME sms=N cc=N)");
    return false;
  }
  memset(v, 0, sizeof *v);
  if (recap) snprintf(v->recap, sizeof v->recap, "%s", recap);
  v->cublaslt = ilt;
  v->cudart = irt;
  snprintf(v->device, sizeof v->device, "%s", dev);
  v->sms = isms;
  v->cc = icc;
  return true;
}

/* Names the first field in which the file's versions differ from the process's, with both
 * values, into why; "" when they are equal. */
static void versions_diff(const recap__tune_versions *file, const recap__tune_versions *current,
                          char *why, size_t size) {
  char device[RECAP_TUNE_DEVICE_NAME], recap[RECAP_TUNE_RECAP_VERSION];
  sanitize_device(current->device, device, sizeof device);
  if (current->recap[0])
    sanitize_device(current->recap, recap, sizeof recap);
  else
    recap[0] = '\0';
  why[0] = '\0';
  if (strcmp(file->recap, recap) != 0)
    snprintf(why, size, "recap %.20s (this process: %.20s)", file->recap[0] ? file->recap : "unset",
             recap[0] ? recap : "unset");
  else if (file->cublaslt != current->cublaslt)
    snprintf(why, size, "cublaslt %d (this process: %d)", file->cublaslt, current->cublaslt);
  else if (file->cudart != current->cudart)
    snprintf(why, size, "cudart %d (this process: %d)", file->cudart, current->cudart);
  else if (strcmp(file->device, device) != 0)
    snprintf(why, size, "device %.40s (this process: %.40s)", file->device, device);
  else if (file->sms != current->sms)
    snprintf(why, size, "sms %d (this process: %d)", file->sms, current->sms);
  else if (file->cc != current->cc)
    snprintf(why, size, "compute capability %d (this process: %d)", file->cc, current->cc);
}

/* Parses a gemm line into *e; on failure warns with the reason and returns false. */
static bool parse_entry(parse_ctx *p, char **tokens, int count, recap__tune_entry *e) {
  static const char *const keys[] = {"op",  "a",    "b",     "c",      "compute", "ta",
                                     "tb",  "m",    "n",     "k",      "batch",   "bias",
                                     "act", "beta", "align", "choice", "us"};
  enum { NKEYS = sizeof keys / sizeof keys[0] };
  const char *bad = unknown_field(tokens, count, keys, NKEYS);
  if (bad) {
    warn(p, "gemm entry: unknown field '%.40s'; entry ignored", bad);
    return false;
  }
  bool dup = false;
  const char *v[NKEYS];
  for (int i = 0; i < NKEYS; ++i) {
    v[i] = field(tokens, count, keys[i], &dup);
    if (!v[i]) {
      warn(p, "gemm entry: field '%s' missing; entry ignored", keys[i]);
      return false;
    }
  }
  if (dup) {
    warn(p, "gemm entry: a field appears twice; entry ignored");
    return false;
  }
  memset(e, 0, sizeof *e);
  recap__tune_key *k = &e->key;
  int64_t dims[4], bias, has_c, align;
  const int op = name_index(v[0], op_names, 2), compute = name_index(v[4], compute_names, 2),
            act = name_index(v[12], act_names, 7);
  const bool ok = op >= 0 && parse_dtype(v[1], &k->a_type) && parse_dtype(v[2], &k->b_type) &&
                  parse_dtype(v[3], &k->c_type) && compute >= 0 &&
                  (strcmp(v[5], "N") == 0 || strcmp(v[5], "T") == 0) &&
                  (strcmp(v[6], "N") == 0 || strcmp(v[6], "T") == 0) &&
                  parse_uint(v[7], MAX_DIM, &dims[0]) && parse_uint(v[8], MAX_DIM, &dims[1]) &&
                  parse_uint(v[9], MAX_DIM, &dims[2]) && parse_uint(v[10], INT32_MAX, &dims[3]) &&
                  parse_uint(v[11], 1, &bias) && act >= 0 && parse_uint(v[13], 1, &has_c) &&
                  parse_uint(v[14], 16, &align);
  if (!ok) {
    warn(p, "gemm entry: a field's value is malformed or out of range; entry ignored");
    return false;
  }
  k->op = op;
  k->compute = compute;
  k->trans_a = v[5][0] == 'T';
  k->trans_b = v[6][0] == 'T';
  k->m = dims[0];
  k->n = dims[1];
  k->k = dims[2];
  k->batch = dims[3];
  k->bias = (int32_t)bias;
  k->act = act;
  k->has_c = (int32_t)has_c;
  k->align = (int32_t)align;
  if (!parse_choice(v[15], &e->choice)) {
    warn(p,
         "gemm entry: unknown candidate '%.40s' (want lt:9 numbers, skinny:warps,pipe or "
         "hopper:config); "
         "entry ignored",
         v[15]);
    return false;
  }
  char *end = NULL;
  errno = 0;
  const double us = strtod(v[16], &end);
  if (errno || end == v[16] || *end) {
    warn(p, "gemm entry: malformed time 'us=%.20s'; entry ignored", v[16]);
    return false;
  }
  e->us = (float)us;
  if (!recap__tune_entry_valid(e)) {
    warn(p, "gemm entry: a value is out of range; entry ignored");
    return false;
  }
  return true;
}

/* Whether the line (len bytes, no newline) holds only printable ASCII and tabs. */
static bool printable(const char *s, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    const unsigned char c = (unsigned char)s[i];
    if (c != '\t' && (c < 0x20 || c > 0x7e)) return false;
  }
  return true;
}

recap_status recap__tune_parse(recap__tune_table *table, const char *text, size_t size,
                               const char *name, const recap__tune_versions *current, bool quiet,
                               recap__tune_load_report *report) {
  RECAP_CHECK_ARG(table && (text || size == 0) && current && report);
  const bool found = report->found;
  memset(report, 0, sizeof *report);
  report->found = found;
  parse_ctx p = {.name = name ? name : "(tuning cache)", .quiet = quiet, .report = report};
  enum { WANT_MAGIC, NO_SECTION, MATCHING, STALE } state = WANT_MAGIC;
  bool full_warned = false;
  size_t pos = 0;
  while (pos < size) {
    ++p.line;
    const char *start = text + pos;
    const char *nl = memchr(start, '\n', size - pos);
    size_t len = nl ? (size_t)(nl - start) : size - pos;
    pos += len + (nl ? 1 : 0);
    if (!nl) {
      /* Our writer ends every line: a last line without one is a cut-off write. */
      warn(&p, "the last line has no newline (truncated file?); ignored");
      ++report->ignored;
      break;
    }
    if (len > 0 && start[len - 1] == '\r') --len;
    if (len > RECAP_TUNE_MAX_LINE) {
      warn(&p, "line longer than %d bytes; ignored", RECAP_TUNE_MAX_LINE);
      ++report->ignored;
      continue;
    }
    if (!printable(start, len)) {
      warn(&p, "line holds binary (non-printable) bytes; ignored");
      ++report->ignored;
      continue;
    }
    char line[RECAP_TUNE_MAX_LINE + 1];
    memcpy(line, start, len);
    line[len] = '\0';
    char *tokens[MAX_TOKENS];
    int count = 0;
    if (!tokenize(line, tokens, MAX_TOKENS, &count)) {
      warn(&p, "line has more than %d fields; ignored", MAX_TOKENS);
      ++report->ignored;
      continue;
    }
    if (count == 0 || tokens[0][0] == '#') continue;

    if (state == WANT_MAGIC) {
      int64_t version = 0;
      if (count == 2 && strcmp(tokens[0], MAGIC) == 0 && parse_uint(tokens[1], 1000, &version) &&
          version == FORMAT_VERSION) {
        state = NO_SECTION;
        continue;
      }
      if (count == 2 && strcmp(tokens[0], MAGIC) == 0)
        warn(&p, "format version '%.20s' is not supported (this build reads %d); file ignored",
             tokens[1], FORMAT_VERSION);
      else
        warn(&p, "not a recap GEMM tuning file (the first line must be '%s %d'); file ignored",
             MAGIC, FORMAT_VERSION);
      ++report->ignored;
      break;
    }
    if (strcmp(tokens[0], "versions") == 0) {
      recap__tune_versions v;
      if (!parse_versions(&p, tokens, count, &v)) {
        ++report->ignored;
        state = STALE; /* entries under an unreadable versions line cannot be trusted */
      } else {
        char why[120];
        versions_diff(&v, current, why, sizeof why);
        if (!why[0]) {
          state = MATCHING;
        } else {
          warn(&p, "the entries below were measured with another %s; they are ignored", why);
          state = STALE;
        }
      }
      continue;
    }
    if (strcmp(tokens[0], "gemm") != 0) {
      warn(&p, "unknown record '%.40s'; ignored", tokens[0]);
      ++report->ignored;
      continue;
    }
    if (state == NO_SECTION) {
      warn(&p, "gemm entry before any versions line; ignored");
      ++report->ignored;
      continue;
    }
    recap__tune_entry e;
    if (!parse_entry(&p, tokens, count, &e)) {
      ++report->ignored;
      continue;
    }
    if (state == STALE) {
      ++report->stale;
      continue;
    }
    if (!recap__tune_table_find(table, &e.key) &&
        recap__tune_table_count(table) >= RECAP_TUNE_MAX_ENTRIES) {
      if (!full_warned)
        warn(&p, "more than %d entries; the rest are ignored", RECAP_TUNE_MAX_ENTRIES);
      full_warned = true;
      ++report->ignored;
      continue;
    }
    const recap_status st = recap__tune_table_put(table, &e);
    if (st == RECAP_STATUS_OUT_OF_MEMORY) return st;
    if (st == RECAP_OK)
      ++report->loaded;
    else
      ++report->ignored;
  }
  if (!quiet && report->warnings > RECAP_TUNE_MAX_WARNINGS)
    fprintf(stderr, "recap: warning: %s: %zu more warnings not shown\n", p.name,
            report->warnings - RECAP_TUNE_MAX_WARNINGS);
  return RECAP_OK;
}

recap_status recap__tune_load(recap__tune_table *table, const char *path,
                              const recap__tune_versions *current, bool quiet,
                              recap__tune_load_report *report) {
  RECAP_CHECK_ARG(table && path && current && report);
  memset(report, 0, sizeof *report);
  int fd;
  uint64_t file_bytes;
  if (recap__file_open_regular_fd(path, "GEMM tuning cache", &fd, &file_bytes) != RECAP_OK) {
    /* A missing cache is the first run; anything else (unreadable, a FIFO) is warned about. */
    const bool missing = errno == ENOENT;
    if (!missing && !quiet)
      fprintf(stderr, "recap: warning: %s; starting with an empty tuning cache\n",
              recap_last_error());
    if (!missing) report->warnings = 1;
    recap_clear_error();
    return RECAP_OK;
  }
  /* One byte more than the limit tells a file at the limit from a larger one. */
  const size_t cap = RECAP_TUNE_MAX_FILE_BYTES + 1;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm tuning: no memory to read %s", path);
  }
  size_t have = 0;
  bool read_failed = false;
  while (have < cap) {
    const ssize_t r = read(fd, buf + have, cap - have);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) read_failed = true;
    if (r <= 0) break;
    have += (size_t)r;
  }
  close(fd);
  recap_status st = RECAP_OK;
  if (read_failed) {
    if (!quiet)
      fprintf(stderr,
              "recap: warning: %s: reading the GEMM tuning cache failed; starting "
              "empty\n",
              path);
    report->warnings = 1;
    goto done;
  }
  report->found = true;
  size_t size = have;
  bool too_big = false;
  if (have > RECAP_TUNE_MAX_FILE_BYTES) {
    /* Keep whole lines only: the cut line would otherwise read as truncated. */
    too_big = true;
    size = RECAP_TUNE_MAX_FILE_BYTES;
    while (size > 0 && buf[size - 1] != '\n') --size;
  }
  st = recap__tune_parse(table, buf, size, path, current, quiet, report);
  if (too_big) {
    ++report->warnings;
    ++report->ignored;
    if (!quiet)
      fprintf(stderr, "recap: warning: %s: larger than %d bytes; the rest is ignored\n", path,
              RECAP_TUNE_MAX_FILE_BYTES);
    if (report->warnings == 1)
      snprintf(report->first_warning, sizeof report->first_warning, "larger than %d bytes",
               RECAP_TUNE_MAX_FILE_BYTES);
  }
done:
  free(buf);
  return st;
}

/* ---- counters -------------------------------------------------------------------------------- */

static _Atomic uint64_t counters[RECAP_TUNE_STAT_COUNT_];

void recap__gemm_tune_count(recap__tune_stat which, uint64_t n) {
  if ((unsigned)which < RECAP_TUNE_STAT_COUNT_) atomic_fetch_add(&counters[which], n);
}

void recap__gemm_tune_stats_clear(void) {
  for (int i = 0; i < RECAP_TUNE_STAT_COUNT_; ++i) atomic_store(&counters[i], 0);
}

recap_status recap_gemm_tune_stats_get(recap_gemm_tune_stats *out) {
  if (!out)
    return recap__fail_plain(RECAP_STATUS_INVALID_ARGUMENT,
                             "recap_gemm_tune_stats_get: out is NULL");
  const recap__gemm_env *env = recap__gemm_env_get();
  memset(out, 0, sizeof *out);
  out->mode = env->tune;
  snprintf(out->tune_file, sizeof out->tune_file, "%s", env->tune_file);
  out->tunings = atomic_load(&counters[RECAP_TUNE_STAT_TUNINGS]);
  out->candidates_timed = atomic_load(&counters[RECAP_TUNE_STAT_CANDIDATES]);
  out->rejected = atomic_load(&counters[RECAP_TUNE_STAT_REJECTED]);
  out->cache_hits = atomic_load(&counters[RECAP_TUNE_STAT_HITS]);
  out->untimed_defaults = atomic_load(&counters[RECAP_TUNE_STAT_UNTIMED]);
  out->stale = atomic_load(&counters[RECAP_TUNE_STAT_STALE]);
  out->file_warnings = atomic_load(&counters[RECAP_TUNE_STAT_FILE_WARNINGS]);
  return RECAP_STATUS_OK;
}

#if !RECAP_WITH_CUDA
/* Without CUDA there are no choices to forget, only counters. */
void recap__gemm_tune_reset(void) {
  recap__gemm_tune_stats_clear();
}
#endif
