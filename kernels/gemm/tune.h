/*
 * tune.h: the GEMM tuning cache (internal to kernels/): what RECAP_TUNE chose for each
 * GEMM problem, kept in memory and in a text file that survives the process.
 *
 * This half is plain C and builds everywhere (the file format, its bounded parser and atomic
 * writer, the counters); choose.c does the timing and decides when to look up. The file
 * format, its limits and the RECAP_TUNE modes are documented in docs/perf/tuning.md.
 *
 *   recap__tune_versions v = {...};              // the process's library and device
 *   recap__tune_table *t = NULL;
 *   RECAP_TRY(recap__tune_table_create(&t));
 *   recap__tune_load_report r;
 *   recap__tune_load(t, "recap_tune.txt", &v, false, &r);   // never fails on bad content
 *   const recap__tune_entry *e = recap__tune_table_find(t, &key);
 *   ...
 *   RECAP_TRY(recap__tune_table_put(t, &entry));
 *   RECAP_TRY(recap__tune_save(t, "recap_tune.txt", &v));   // temp file + rename
 *   recap__tune_table_destroy(t);
 *
 * Nothing here is thread-safe by itself: choose.c serializes access to its table.
 */
#ifndef RECAP_KERNELS_GEMM_TUNE_H
#define RECAP_KERNELS_GEMM_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of the file (a file others may edit or corrupt is read within these, and the writer
 * never produces more): bytes read at most (the rest is ignored with a warning), bytes per
 * line, entries kept, warning lines printed per load. */
enum {
  RECAP_TUNE_MAX_FILE_BYTES = 1 << 20,
  RECAP_TUNE_MAX_LINE = 512,
  RECAP_TUNE_MAX_ENTRIES = 4096,
  RECAP_TUNE_MAX_WARNINGS = 10,
  RECAP_TUNE_DEVICE_NAME = 64,
  RECAP_TUNE_RECAP_VERSION = 32,
  RECAP_TUNE_CONFIG_MAX = 9,
};

/* What the entries of a file were measured with; a file whose versions differ from the
 * process's is ignored (its entries are stale), with a warning naming what differs. device
 * and recap hold only [A-Za-z0-9._-] (the writer replaces other bytes with '_'). recap is the
 * library's version (RECAP_VERSION_STRING): a new recap may change its kernels, so its
 * measurements start afresh; a file written before the field existed reads as "" and is stale
 * for any process that sets it. */
typedef struct {
  char recap[RECAP_TUNE_RECAP_VERSION];
  int cublaslt; /* cublasLtGetVersion() */
  int cudart;   /* cudaRuntimeGetVersion() */
  char device[RECAP_TUNE_DEVICE_NAME];
  int sms; /* multiprocessor count */
  int cc;  /* compute capability, major * 10 + minor */
} recap__tune_versions;

typedef enum { RECAP_TUNE_OP_MATMUL = 0, RECAP_TUNE_OP_LINEAR = 1 } recap__tune_op;
typedef enum { RECAP_TUNE_COMPUTE_F32 = 0, RECAP_TUNE_COMPUTE_TF32 = 1 } recap__tune_compute;

/* One GEMM problem as the tuner sees it. Transposes are the library's (cuBLAS's column-major
 * view: 0 = N, 1 = T); align is the largest power of two up to 16 dividing every operand's
 * address and batch step in bytes. Compare with recap__tune_key_equal. */
typedef struct {
  int64_t m, n, k, batch;
  int32_t op;                     /* recap__tune_op */
  int32_t a_type, b_type, c_type; /* recap_dtype */
  int32_t compute;                /* recap__tune_compute */
  int32_t trans_a, trans_b;
  int32_t bias;  /* 0 or 1 */
  int32_t act;   /* recap__activation */
  int32_t has_c; /* beta * c is added: 0 or 1 */
  int32_t align; /* 2, 4, 8 or 16 */
} recap__tune_key;

/* A candidate. LT: a cuBLASLt algorithm, named by its 9 configuration attributes (ALGO_ID,
 * TILE_ID, STAGES_ID, SPLITK_NUM, REDUCTION_SCHEME, CTA_SWIZZLING, CUSTOM_OPTION,
 * INNER_SHAPE_ID, CLUSTER_SHAPE_ID; RECAP_TUNE_LT_SPLITK is SPLITK_NUM's index); SKINNY: skinny.cu
 * with config {warps per block, load scheme pipe 0..4 (see recap__cuda_gemm_skinny_default)};
 * HOPPER: hopper.cu with config {tile configuration 0..RECAP_TUNE_HOPPER_CONFIGS-1}. */
enum { RECAP_TUNE_LT_SPLITK = 3 };
typedef enum {
  RECAP_TUNE_CAND_LT = 1,
  RECAP_TUNE_CAND_SKINNY = 2,
  RECAP_TUNE_CAND_HOPPER = 3
} recap__tune_kind;
/* An upper bound on the Hopper kernel's configurations, for validating file entries (the
 * kernel checks the exact count when one is used). */
#define RECAP_TUNE_HOPPER_CONFIGS 64
typedef struct {
  int32_t kind; /* recap__tune_kind */
  int32_t config[RECAP_TUNE_CONFIG_MAX];
} recap__tune_choice;

typedef struct {
  recap__tune_key key;
  recap__tune_choice choice;
  float us; /* the winner's median time, for people reading the file */
} recap__tune_entry;

typedef struct recap__tune_table recap__tune_table;

bool recap__tune_key_equal(const recap__tune_key *a, const recap__tune_key *b);
bool recap__tune_choice_equal(const recap__tune_choice *a, const recap__tune_choice *b);
/* The number of config values a kind uses (9 for LT, 2 for SKINNY, 1 for HOPPER, 0 for
 * others). */
int recap__tune_choice_values(int32_t kind);

/* An empty table. RECAP_STATUS_OUT_OF_MEMORY. destroy(NULL) is fine. */
recap_status recap__tune_table_create(recap__tune_table **out);
void recap__tune_table_destroy(recap__tune_table *table);
void recap__tune_table_clear(recap__tune_table *table);
size_t recap__tune_table_count(const recap__tune_table *table);
/* The entry with an equal key, or NULL. The pointer is valid until the next put or clear. */
const recap__tune_entry *recap__tune_table_find(const recap__tune_table *table,
                                                const recap__tune_key *key);
/* The i-th entry (i < count) in insertion order, or NULL; valid until the next put or clear. */
const recap__tune_entry *recap__tune_table_at(const recap__tune_table *table, size_t i);
/* Adds the entry or replaces the one with an equal key. RECAP_STATUS_OUT_OF_MEMORY, or
 * RECAP_STATUS_INVALID_ARGUMENT for a new key when the table holds RECAP_TUNE_MAX_ENTRIES or
 * for an entry that could not be written back (recap__tune_entry_valid). */
recap_status recap__tune_table_put(recap__tune_table *table, const recap__tune_entry *entry);
/* Whether every field is in the range the file format allows. */
bool recap__tune_entry_valid(const recap__tune_entry *entry);

/* What a load found. Warnings go to stderr as "recap: warning: FILE:LINE: what" (at most
 * RECAP_TUNE_MAX_WARNINGS lines, then one line counting the rest), unless quiet. */
typedef struct {
  size_t loaded;           /* entries added to the table */
  size_t ignored;          /* malformed or unknown lines, and entries beyond the limit */
  size_t stale;            /* entries written by other library or device versions */
  size_t warnings;         /* warning lines (printed or, when quiet, not) */
  bool found;              /* the file existed and could be read */
  char first_warning[160]; /* the first warning's text ("" when none) */
} recap__tune_load_report;

/* Parses `size` bytes of file text named `name` (for the warnings) into `table`, keeping the
 * entries whose versions line equals `current`. Never fails on content: anything malformed
 * is counted, warned about and skipped. Returns RECAP_STATUS_OUT_OF_MEMORY only. */
recap_status recap__tune_parse(recap__tune_table *table, const char *text, size_t size,
                               const char *name, const recap__tune_versions *current, bool quiet,
                               recap__tune_load_report *report);
/* Reads the file at `path` (at most RECAP_TUNE_MAX_FILE_BYTES) and parses it. A missing file
 * is an empty cache (RECAP_OK, report->found false); an unreadable one is warned about and
 * treated as empty. RECAP_STATUS_OUT_OF_MEMORY only. */
recap_status recap__tune_load(recap__tune_table *table, const char *path,
                              const recap__tune_versions *current, bool quiet,
                              recap__tune_load_report *report);
/* Writes the table to `path` atomically: the entries of the file as it is now (those of the
 * same versions) merged with the table's (the table wins on equal keys), written to a temp
 * file beside it and renamed over it, so a reader sees the old file or the new one, never a
 * part. RECAP_STATUS_IO_ERROR naming the path (the old file is then untouched). */
recap_status recap__tune_save(const recap__tune_table *table, const char *path,
                              const recap__tune_versions *versions);
/* Writes one entry as its file line (without the newline) into buf; false when it does not
 * fit or the entry is invalid. */
bool recap__tune_format_entry(const recap__tune_entry *entry, char *buf, size_t size);

/* ---- RECAP_TUNE and the counters ---------------------------------------------------------- */

/* RECAP_TUNE: 0 or unset = off (the default algorithm, nothing read or written); 1 = tune:
 * look entries up, time the candidates of a problem without one outside capture, save; 2 =
 * cache only: look entries up, never time, never write. */
typedef enum { RECAP_TUNE_OFF = 0, RECAP_TUNE_ON = 1, RECAP_TUNE_CACHE_ONLY = 2 } recap__tune_mode;

typedef enum {
  RECAP_TUNE_STAT_TUNINGS,
  RECAP_TUNE_STAT_CANDIDATES,
  RECAP_TUNE_STAT_REJECTED,
  RECAP_TUNE_STAT_HITS,
  RECAP_TUNE_STAT_UNTIMED,
  RECAP_TUNE_STAT_STALE,
  RECAP_TUNE_STAT_FILE_WARNINGS,
  RECAP_TUNE_STAT_COUNT_
} recap__tune_stat;

/* The tuner's counters since the last recap__gemm_tune_reset (process-wide, atomic): read
 * them with the public recap_gemm_tune_stats_get. */
void recap__gemm_tune_count(recap__tune_stat which, uint64_t n);
void recap__gemm_tune_stats_clear(void);

/* Forgets every in-memory choice (the next GEMM of each problem resolves again, from the file
 * or by timing) and clears the counters: a second run's state within one process, for tests.
 * choose.c's implementation; the host-only build has no state and only clears counters.
 * Not while GEMMs launch on other threads. */
void recap__gemm_tune_reset(void);

#ifdef __cplusplus
}
#endif

#endif
