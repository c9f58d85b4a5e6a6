/*
 * gemm_tune_test.c: the GEMM tuning cache (kernels/gemm/tune.h). On the host: the file's
 * round trip, and every kind of damage (corrupt, oversized, truncated, binary garbage, other
 * versions, unknown candidates) ignored with a warning naming file:line, never a crash; the
 * atomic write. With a GPU (RECAP_TUNE=1, kernels/gemm/choose.c): the first run times every
 * candidate (>= 8) of a 4096^3 bf16 GEMM and of a skinny decode layer, the tuned results equal
 * the untuned ones element by element, a second run (in-memory state reset) does no timing,
 * a changed version invalidates the file's entries, and a capture never tunes.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tune.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/half.h"
#include "tests/test_util.h"

#if RECAP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- helpers ------------------------------------------------------------------------------- */

static const recap__tune_versions host_versions = {
    .cublaslt = 130100, .cudart = 13000, .device = "NVIDIA H100 80GB HBM3", .sms = 132, .cc = 90};

static char tmp_dir[256];

static int make_tmp_dir(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "%s/recap_tune_XXXXXX",
           getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  return mkdtemp(tmp_dir) == NULL;
}

static void tmp_path(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", tmp_dir, name);
}

static void write_text(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(text, 1, len, f), len);
  fclose(f);
}

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  *len = fread(buf, 1, (size_t)n, f);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

static recap__tune_entry sample_entry(int64_t m, bool skinny) {
  recap__tune_entry e = {.key = {.m = m,
                                 .n = 4096,
                                 .k = 4096,
                                 .batch = 1,
                                 .op = RECAP_TUNE_OP_LINEAR,
                                 .a_type = RECAP_DTYPE_BF16,
                                 .b_type = RECAP_DTYPE_BF16,
                                 .c_type = RECAP_DTYPE_BF16,
                                 .compute = RECAP_TUNE_COMPUTE_F32,
                                 .trans_a = 1,
                                 .trans_b = 0,
                                 .bias = 1,
                                 .act = RECAP_ACT_GELU,
                                 .has_c = 0,
                                 .align = 16},
                         .us = 12.5f};
  if (skinny) {
    e.choice.kind = RECAP_TUNE_CAND_SKINNY;
    e.choice.config[0] = 8;
    e.choice.config[1] = 1;
  } else {
    e.choice.kind = RECAP_TUNE_CAND_LT;
    for (int i = 0; i < RECAP_TUNE_CONFIG_MAX; ++i) e.choice.config[i] = 3 * i + (int)m;
  }
  return e;
}

/* The header lines a valid file for host_versions starts with. */
static const char good_head[] =
    "recap-gemm-tune 1\n"
    "versions cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 cc=90\n";

static const char good_entry[] =
    "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 bias=1 "
    "act=gelu beta=0 align=16 choice=skinny:8,1 us=12.50\n";

/* Parses text quietly; returns the report; the table gets what loaded. */
static recap__tune_load_report parse_text(recap__tune_table *t, const char *text, size_t len) {
  recap__tune_load_report r;
  memset(&r, 0, sizeof r);
  CHECK_OK(recap__tune_parse(t, text, len, "test.txt", &host_versions, true, &r));
  return r;
}

/* ---- host: the file ------------------------------------------------------------------------ */

static void test_tune_file_round_trips_entries_through_save_and_load(void) {
  recap__tune_table *t = NULL, *back = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  CHECK_OK(recap__tune_table_create(&back));
  const recap__tune_entry e1 = sample_entry(8, true), e2 = sample_entry(4096, false);
  recap__tune_entry e3 = sample_entry(16, false);
  e3.key.op = RECAP_TUNE_OP_MATMUL;
  e3.key.compute = RECAP_TUNE_COMPUTE_TF32;
  e3.key.a_type = e3.key.b_type = e3.key.c_type = RECAP_DTYPE_F32;
  e3.key.has_c = 1;
  e3.key.bias = 0;
  e3.key.act = RECAP_ACT_NONE;
  e3.key.batch = 12;
  e3.key.align = 4;
  recap__tune_entry e4 = sample_entry(1024, false);
  e4.choice = (recap__tune_choice){.kind = RECAP_TUNE_CAND_HOPPER, .config = {3}};
  CHECK_OK(recap__tune_table_put(t, &e1));
  CHECK_OK(recap__tune_table_put(t, &e2));
  CHECK_OK(recap__tune_table_put(t, &e3));
  CHECK_OK(recap__tune_table_put(t, &e4));
  char path[512];
  tmp_path(path, sizeof path, "round_trip.txt");
  unlink(path);
  CHECK_OK(recap__tune_save(t, path, &host_versions));
  recap__tune_load_report r;
  CHECK_OK(recap__tune_load(back, path, &host_versions, false, &r));
  CU_ASSERT_TRUE(r.found);
  CU_ASSERT_EQUAL(r.loaded, 4);
  CU_ASSERT_EQUAL(r.warnings, 0);
  CU_ASSERT_EQUAL(r.ignored, 0);
  const recap__tune_entry *entries[4] = {&e1, &e2, &e3, &e4};
  for (int i = 0; i < 4; ++i) {
    const recap__tune_entry *got = recap__tune_table_find(back, &entries[i]->key);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_TRUE(recap__tune_choice_equal(&got->choice, &entries[i]->choice));
    CU_ASSERT_TRUE(fabsf(got->us - entries[i]->us) < 0.01f);
  }
  recap__tune_table_destroy(t);
  recap__tune_table_destroy(back);
}

static void test_tune_table_put_replaces_an_equal_key(void) {
  recap__tune_table *t = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  recap__tune_entry e = sample_entry(8, true);
  CHECK_OK(recap__tune_table_put(t, &e));
  e.choice.config[0] = 16;
  CHECK_OK(recap__tune_table_put(t, &e));
  CU_ASSERT_EQUAL(recap__tune_table_count(t), 1);
  CU_ASSERT_EQUAL(recap__tune_table_find(t, &e.key)->choice.config[0], 16);
  /* An entry the file could not hold is refused. */
  e.choice.config[0] = 3;
  CHECK_STATUS(recap__tune_table_put(t, &e), RECAP_STATUS_INVALID_ARGUMENT);
  recap__tune_table_destroy(t);
  recap__tune_table_destroy(NULL);
}

static void test_tune_file_missing_is_an_empty_cache_without_warning(void) {
  recap__tune_table *t = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  char path[512];
  tmp_path(path, sizeof path, "does_not_exist.txt");
  recap__tune_load_report r;
  CHECK_OK(recap__tune_load(t, path, &host_versions, false, &r));
  CU_ASSERT_FALSE(r.found);
  CU_ASSERT_EQUAL(r.warnings, 0);
  CU_ASSERT_EQUAL(recap__tune_table_count(t), 0);
  recap__tune_table_destroy(t);
}

/* Each bad line is skipped with one warning naming its line; the good entries around it load. */
static void test_tune_file_malformed_lines_are_ignored_with_a_warning_each(void) {
  static const char *const bad_lines[] = {
      "gemm op=conv a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 bias=1 "
      "act=gelu beta=0 align=16 choice=skinny:8,1 us=1\n", /* unknown op */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=-8 n=4096 k=4096 batch=1 "
      "bias=1 act=gelu beta=0 align=16 choice=skinny:8,1 us=1\n", /* negative m */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=99999999999999999999999 "
      "n=4096 k=4096 batch=1 bias=1 act=gelu beta=0 align=16 choice=skinny:8,1 us=1\n", /* huge */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 "
      "bias=1 act=gelu beta=0 align=16 us=1\n", /* choice missing */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 "
      "bias=1 act=gelu beta=0 align=16 choice=skinny:8,1 us=1 color=red\n", /* unknown field */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 m=9 n=4096 k=4096 batch=1 "
      "bias=1 act=gelu beta=0 align=16 choice=skinny:8,1 us=1\n", /* duplicate field */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 "
      "bias=1 act=gelu beta=0 align=12 choice=skinny:8,1 us=1\n", /* align not 2^i */
      "gemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 "
      "bias=1 act=gelu beta=0 align=16 choice=skinny:8,1 us=nan\n", /* bad time */
      "frobnicate 1 2 3\n",                                         /* unknown record */
      "gemm\n",                                                     /* empty entry */
      "= = = = =\n",
  };
  for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; ++i) {
    char text[2048];
    const int n = snprintf(text, sizeof text, "%s%s%s", good_head, bad_lines[i], good_entry);
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, text, (size_t)n);
    if (r.warnings != 1 || r.loaded != 1)
      fprintf(stderr, "\n  bad line %zu: %zu warnings, %zu loaded (%s)", i, r.warnings, r.loaded,
              r.first_warning);
    CU_ASSERT_EQUAL(r.warnings, 1);
    CU_ASSERT_EQUAL(r.ignored, 1);
    CU_ASSERT_EQUAL(r.loaded, 1);
    recap__tune_table_destroy(t);
  }
}

static void test_tune_file_unknown_candidates_are_ignored_with_a_warning(void) {
  static const char *const choices[] = {"cutlass:1,2",
                                        "lt:1,2,3",
                                        "lt:1,2,3,4,5,6,7,8,9,10",
                                        "skinny:3,1",
                                        "skinny:8,9",
                                        "skinny:8",
                                        "lt:",
                                        "lt:1,,3,4,5,6,7,8,9",
                                        "skinny:8,1,",
                                        "lt:a,b,c,d,e,f,g,h,i",
                                        "hopper:",
                                        "hopper:-1",
                                        "hopper:64",
                                        "hopper:1,2",
                                        "hopper:x"};
  for (size_t i = 0; i < sizeof choices / sizeof choices[0]; ++i) {
    char text[2048];
    const int n = snprintf(
        text, sizeof text,
        "%sgemm op=linear a=bf16 b=bf16 c=bf16 compute=f32 ta=T tb=N m=8 n=4096 k=4096 batch=1 "
        "bias=1 act=gelu beta=0 align=16 choice=%s us=1\n",
        good_head, choices[i]);
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, text, (size_t)n);
    CU_ASSERT_EQUAL(r.warnings, 1);
    CU_ASSERT_EQUAL(r.loaded, 0);
    recap__tune_table_destroy(t);
  }
}

/* The warning names the file and the line: printed to stderr, so look at the report's text
 * and at what a non-quiet load prints through a temporary stderr. */
static void test_tune_file_warning_names_file_and_line(void) {
  char path[512], log[512];
  tmp_path(path, sizeof path, "warn.txt");
  tmp_path(log, sizeof log, "warn.log");
  char text[2048];
  const int n = snprintf(text, sizeof text, "%s# comment\n\nbogus line\n%s", good_head, good_entry);
  write_text(path, text, (size_t)n);
  fflush(stderr);
  const int saved = dup(2);
  FILE *f = fopen(log, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  dup2(fileno(f), 2);
  recap__tune_table *t = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  recap__tune_load_report r;
  const recap_status st = recap__tune_load(t, path, &host_versions, false, &r);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fclose(f);
  CHECK_OK(st);
  size_t len = 0;
  char *printed = read_text(log, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(printed);
  char want[600];
  snprintf(want, sizeof want, "recap: warning: %s:5: unknown record 'bogus'", path);
  if (!strstr(printed, want)) fprintf(stderr, "\n  printed: %s\n  wanted: %s", printed, want);
  CU_ASSERT_PTR_NOT_NULL(strstr(printed, want));
  /* One warning line, not one per byte or per field. */
  int lines = 0;
  for (const char *p = printed; (p = strstr(p, "recap: warning:")); ++p) ++lines;
  CU_ASSERT_EQUAL(lines, 1);
  CU_ASSERT_EQUAL(r.loaded, 1);
  free(printed);
  recap__tune_table_destroy(t);
}

static void test_tune_file_other_versions_are_stale_and_ignored(void) {
  static const char *const versions[] = {
      "versions cublaslt=130000 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 cc=90\n",
      "versions cublaslt=130100 cudart=12080 device=NVIDIA_H100_80GB_HBM3 sms=132 cc=90\n",
      "versions cublaslt=130100 cudart=13000 device=NVIDIA_H200 sms=132 cc=90\n",
      "versions cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=114 cc=90\n",
      "versions cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 cc=80\n",
  };
  for (size_t i = 0; i < sizeof versions / sizeof versions[0]; ++i) {
    char text[2048];
    const int n = snprintf(text, sizeof text, "recap-gemm-tune 1\n%s%s%s", versions[i], good_entry,
                           good_entry);
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, text, (size_t)n);
    CU_ASSERT_EQUAL(r.loaded, 0);
    CU_ASSERT_EQUAL(r.stale, 2);
    CU_ASSERT_EQUAL(r.warnings, 1); /* one for the section, not one per entry */
    CU_ASSERT_PTR_NOT_NULL(strstr(r.first_warning, "ignored"));
    recap__tune_table_destroy(t);
  }
  /* A later section of the right versions still loads. */
  char text[2048];
  const int n = snprintf(text, sizeof text, "recap-gemm-tune 1\n%s%s%s", versions[0], good_entry,
                         good_head + strlen("recap-gemm-tune 1\n"));
  char full[4096];
  const int m = snprintf(full, sizeof full, "%.*s%s", n, text, good_entry);
  recap__tune_table *t = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  const recap__tune_load_report r = parse_text(t, full, (size_t)m);
  CU_ASSERT_EQUAL(r.loaded, 1);
  CU_ASSERT_EQUAL(r.stale, 1);
  recap__tune_table_destroy(t);
}

/* The key includes recap's version (a process always sets it: choose.c): a file of another
 * version, or one written before the field existed, is stale with a warning naming the field
 * and both values; the writer records the version. Other fields' warnings name them too. */
static void test_tune_file_recap_version_is_part_of_the_key(void) {
  recap__tune_versions v = host_versions;
  snprintf(v.recap, sizeof v.recap, "0.1.0");
  static const struct {
    const char *line, *warning; /* warning NULL: the entries load */
  } cases[] = {
      {"versions recap=0.1.0 cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 "
       "cc=90\n",
       NULL},
      {"versions recap=0.0.9 cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 "
       "cc=90\n",
       "another recap 0.0.9 (this process: 0.1.0)"},
      {"versions cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 cc=90\n",
       "another recap unset (this process: 0.1.0)"},
      {"versions recap=0.1.0 cublaslt=130000 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 "
       "cc=90\n",
       "another cublaslt 130000 (this process: 130100)"},
      {"versions recap=0.1.0 cublaslt=130100 cudart=13000 device=NVIDIA_H200 sms=132 cc=90\n",
       "another device NVIDIA_H200 (this process: NVIDIA_H100_80GB_HBM3)"},
      {"versions recap=0.1.0 cublaslt=130100 cudart=13000 device=NVIDIA_H100_80GB_HBM3 sms=132 "
       "cc=80\n",
       "another compute capability 80 (this process: 90)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    char text[2048];
    const int n = snprintf(text, sizeof text, "recap-gemm-tune 1\n%s%s", cases[i].line, good_entry);
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    recap__tune_load_report r;
    memset(&r, 0, sizeof r);
    CHECK_OK(recap__tune_parse(t, text, (size_t)n, "test.txt", &v, true, &r));
    CU_ASSERT_EQUAL(r.loaded, cases[i].warning ? 0 : 1);
    CU_ASSERT_EQUAL(r.stale, cases[i].warning ? 1 : 0);
    if (cases[i].warning) {
      CU_ASSERT_PTR_NOT_NULL(strstr(r.first_warning, cases[i].warning));
      if (!strstr(r.first_warning, cases[i].warning))
        printf("\n  case %zu warned: %s\n", i, r.first_warning);
    } else {
      CU_ASSERT_EQUAL(r.warnings, 0);
    }
    recap__tune_table_destroy(t);
  }
  /* The writer records the version, and the file loads back only for that version. */
  recap__tune_table *t = NULL, *back = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  CHECK_OK(recap__tune_table_create(&back));
  const recap__tune_entry e = sample_entry(8, true);
  CHECK_OK(recap__tune_table_put(t, &e));
  char path[512];
  tmp_path(path, sizeof path, "recap_version.txt");
  unlink(path);
  CHECK_OK(recap__tune_save(t, path, &v));
  FILE *f = fopen(path, "r");
  char text[4096] = {0};
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT(fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nversions recap=0.1.0 cublaslt=130100 "));
  recap__tune_load_report r;
  CHECK_OK(recap__tune_load(back, path, &v, true, &r));
  CU_ASSERT_EQUAL(r.loaded, 1);
  recap__tune_table_clear(back);
  snprintf(v.recap, sizeof v.recap, "0.2.0");
  CHECK_OK(recap__tune_load(back, path, &v, true, &r));
  CU_ASSERT_EQUAL(r.loaded, 0);
  CU_ASSERT_EQUAL(r.stale, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(r.first_warning, "recap 0.1.0 (this process: 0.2.0)"));
  recap__tune_table_destroy(t);
  recap__tune_table_destroy(back);
}

static void test_tune_file_wrong_magic_or_format_version_is_ignored_whole(void) {
  static const char *const heads[] = {"recap-gemm-tune 2\n", "recap-gemm-tune\n", "hello\n",
                                      "recap-gemm-tune 1 extra\n"};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; ++i) {
    char text[2048];
    const int n = snprintf(text, sizeof text, "%s%s%s", heads[i],
                           good_head + strlen("recap-gemm-tune 1\n"), good_entry);
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, text, (size_t)n);
    CU_ASSERT_EQUAL(r.loaded, 0);
    CU_ASSERT_EQUAL(r.warnings, 1);
    recap__tune_table_destroy(t);
  }
}

static void test_tune_file_truncated_last_line_is_ignored(void) {
  char text[2048];
  const int n = snprintf(text, sizeof text, "%s%s%s", good_head, good_entry, good_entry);
  /* Every cut point inside the second entry: the first entry loads, the cut one never does. */
  const size_t second = strlen(good_head) + strlen(good_entry);
  for (size_t cut = second + 1; cut < (size_t)n; ++cut) {
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, text, cut);
    CU_ASSERT_EQUAL(r.loaded, 1);
    CU_ASSERT_EQUAL(r.warnings, 1);
    recap__tune_table_destroy(t);
  }
  /* Cut anywhere at all: never a crash, never more than the whole entries (the two are the
   * same key, so the table holds one). */
  for (size_t cut = 0; cut <= (size_t)n; ++cut) {
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, text, cut);
    CU_ASSERT(r.loaded <= (cut == (size_t)n ? 2u : 1u));
    CU_ASSERT(recap__tune_table_count(t) <= 1);
    recap__tune_table_destroy(t);
  }
}

static void test_tune_file_binary_garbage_never_crashes(void) {
  test_rng rng;
  test_rng_init(&rng);
  enum { SIZE = 8192 };
  char *buf = malloc(SIZE);
  for (int round = 0; round < 200; ++round) {
    size_t len = (size_t)(test_rng_next(&rng) % SIZE);
    for (size_t i = 0; i < len; ++i) buf[i] = (char)(test_rng_next(&rng) & 0xff);
    if (round % 2) memcpy(buf, good_head, len < sizeof good_head - 1 ? len : sizeof good_head - 1);
    recap__tune_table *t = NULL;
    CHECK_OK(recap__tune_table_create(&t));
    const recap__tune_load_report r = parse_text(t, buf, len);
    CU_ASSERT_EQUAL(r.loaded, 0);
    recap__tune_table_destroy(t);
  }
  /* A NUL inside an otherwise good entry makes it binary, not a shorter entry. */
  char text[2048];
  int n = snprintf(text, sizeof text, "%s%s", good_head, good_entry);
  text[strlen(good_head) + 20] = '\0';
  recap__tune_table *t = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  recap__tune_load_report r = parse_text(t, text, (size_t)n);
  CU_ASSERT_EQUAL(r.loaded, 0);
  CU_ASSERT_EQUAL(r.warnings, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(r.first_warning, "binary"));
  recap__tune_table_destroy(t);
  free(buf);
}

static void test_tune_file_oversized_file_lines_and_entry_counts_are_bounded(void) {
  char path[512];
  tmp_path(path, sizeof path, "big.txt");
  /* A line longer than the limit is skipped; the next one loads. */
  const size_t long_len = RECAP_TUNE_MAX_LINE + 100;
  char *text = malloc(strlen(good_head) + long_len + 2 * sizeof good_entry);
  strcpy(text, good_head);
  size_t len = strlen(text);
  memset(text + len, 'x', long_len);
  len += long_len;
  text[len++] = '\n';
  strcpy(text + len, good_entry);
  len += strlen(good_entry);
  recap__tune_table *t = NULL;
  CHECK_OK(recap__tune_table_create(&t));
  recap__tune_load_report r = parse_text(t, text, len);
  CU_ASSERT_EQUAL(r.loaded, 1);
  CU_ASSERT_EQUAL(r.warnings, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(r.first_warning, "longer"));
  recap__tune_table_destroy(t);
  free(text);

  /* More distinct entries than the limit, in a file larger than the size limit: the first
   * RECAP_TUNE_MAX_ENTRIES load, the rest are counted, one warning for the overflow and one
   * for the size; nothing is read past the size limit. */
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(good_head, f);
  const int total = RECAP_TUNE_MAX_ENTRIES + 10000;
  for (int i = 0; i < total; ++i) {
    recap__tune_entry e = sample_entry(1 + i, true);
    char line[RECAP_TUNE_MAX_LINE + 1];
    CU_ASSERT_TRUE_FATAL(recap__tune_format_entry(&e, line, sizeof line));
    fprintf(f, "%s\n", line);
  }
  fclose(f);
  struct stat sb;
  CU_ASSERT_EQUAL_FATAL(stat(path, &sb), 0);
  CU_ASSERT(sb.st_size > RECAP_TUNE_MAX_FILE_BYTES);
  CHECK_OK(recap__tune_table_create(&t));
  CHECK_OK(recap__tune_load(t, path, &host_versions, true, &r));
  CU_ASSERT_EQUAL(r.loaded, RECAP_TUNE_MAX_ENTRIES);
  CU_ASSERT_EQUAL(recap__tune_table_count(t), RECAP_TUNE_MAX_ENTRIES);
  CU_ASSERT_EQUAL(r.warnings, 2);
  CU_ASSERT(r.ignored > 0);
  recap__tune_table_destroy(t);
}

static void test_tune_save_is_atomic_and_merges_with_the_file(void) {
  char path[512];
  tmp_path(path, sizeof path, "atomic.txt");
  unlink(path);
  recap__tune_table *a = NULL, *b = NULL, *back = NULL;
  CHECK_OK(recap__tune_table_create(&a));
  CHECK_OK(recap__tune_table_create(&b));
  CHECK_OK(recap__tune_table_create(&back));
  const recap__tune_entry e1 = sample_entry(1, true), e2 = sample_entry(2, false);
  CHECK_OK(recap__tune_table_put(a, &e1));
  CHECK_OK(recap__tune_table_put(b, &e2));
  /* Two "processes" saving in turn: the second keeps the first's entry. */
  CHECK_OK(recap__tune_save(a, path, &host_versions));
  CHECK_OK(recap__tune_save(b, path, &host_versions));
  recap__tune_load_report r;
  CHECK_OK(recap__tune_load(back, path, &host_versions, true, &r));
  CU_ASSERT_EQUAL(r.loaded, 2);
  CU_ASSERT_EQUAL(r.warnings, 0);
  /* No temp file is left beside it. */
  char tmp_glob[600];
  snprintf(tmp_glob, sizeof tmp_glob, "%s.tmp.%ld.0", path, (long)getpid());
  CU_ASSERT_NOT_EQUAL(access(tmp_glob, F_OK), 0);
  /* A save that cannot create its temp file fails cleanly and leaves the file as it was. */
  size_t before_len = 0, after_len = 0;
  char *before = read_text(path, &before_len);
  char ro_dir[512], ro_path[600];
  tmp_path(ro_dir, sizeof ro_dir, "missing_dir");
  snprintf(ro_path, sizeof ro_path, "%s/cache.txt", ro_dir);
  CHECK_STATUS(recap__tune_save(a, ro_path, &host_versions), RECAP_STATUS_IO_ERROR);
  CHECK_ERROR_MENTIONS("missing_dir");
  char *after = read_text(path, &after_len);
  CU_ASSERT_EQUAL(before_len, after_len);
  CU_ASSERT_EQUAL(memcmp(before, after, before_len), 0);
  free(before);
  free(after);
  /* A stale file is replaced by the current versions, not merged. */
  char text[2048];
  const int n = snprintf(text, sizeof text,
                         "recap-gemm-tune 1\nversions cublaslt=1 cudart=1 "
                         "device=old sms=1 cc=10\n%s",
                         good_entry);
  write_text(path, text, (size_t)n);
  CHECK_OK(recap__tune_save(a, path, &host_versions));
  recap__tune_table_clear(back);
  CHECK_OK(recap__tune_load(back, path, &host_versions, true, &r));
  CU_ASSERT_EQUAL(r.loaded, 1);
  CU_ASSERT_EQUAL(r.stale, 0);
  recap__tune_table_destroy(a);
  recap__tune_table_destroy(b);
  recap__tune_table_destroy(back);
}

static void test_tune_env_is_read_once_until_reloaded(void) {
  setenv("RECAP_TUNE", "2", 1);
  setenv("RECAP_TUNE_FILE", "/nonexistent/x.txt", 1);
  recap__gemm_env_reload();
  CU_ASSERT_EQUAL(recap__gemm_env_get()->tune, RECAP_TUNE_CACHE_ONLY);
  CU_ASSERT_STRING_EQUAL(recap__gemm_env_get()->tune_file, "/nonexistent/x.txt");
  /* Changing the environment alone changes nothing: the launch path never reads it. */
  setenv("RECAP_TUNE", "1", 1);
  setenv("RECAP_GEMM_SKINNY", "0", 1);
  CU_ASSERT_EQUAL(recap__gemm_env_get()->tune, RECAP_TUNE_CACHE_ONLY);
  CU_ASSERT_TRUE(recap__gemm_env_get()->skinny);
  recap__gemm_env_reload();
  CU_ASSERT_EQUAL(recap__gemm_env_get()->tune, RECAP_TUNE_ON);
  CU_ASSERT_FALSE(recap__gemm_env_get()->skinny);
  setenv("RECAP_TUNE", "7", 1); /* unknown: off */
  unsetenv("RECAP_TUNE_FILE");
  unsetenv("RECAP_GEMM_SKINNY");
  recap__gemm_env_reload();
  CU_ASSERT_EQUAL(recap__gemm_env_get()->tune, RECAP_TUNE_OFF);
  CU_ASSERT_STRING_EQUAL(recap__gemm_env_get()->tune_file, "recap_tune.txt");
  unsetenv("RECAP_TUNE");
  recap__gemm_env_reload();
}

/* ---- CUDA ---------------------------------------------------------------------------------- */
#if RECAP_WITH_CUDA

static recap_stream *cs;
static char cache_path[600];

/* A GEMM on the device: inputs random in [-1, 1), output poisoned (NaN). */
typedef struct {
  recap__op_call call;
  void *dev[4];
  size_t out_elems;
} dgemm;

static void *device_random(size_t elems, test_rng *rng) {
  uint16_t *host = malloc(elems * 2);
  for (size_t i = 0; i < elems; ++i)
    host[i] = recap__f32_to_bf16((float)test_rng_uniform(rng, -1.0, 1.0));
  void *dev = NULL;
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dev, elems * 2), cudaSuccess);
  CU_ASSERT_EQUAL_FATAL(cudaMemcpy(dev, host, elems * 2, cudaMemcpyHostToDevice), cudaSuccess);
  /* From pageable memory the copy may return before its DMA lands, on the legacy stream that the
   * test's non-blocking stream does not wait for. */
  CU_ASSERT_EQUAL_FATAL(cudaDeviceSynchronize(), cudaSuccess);
  free(host);
  return dev;
}

/* linear: x [m, k] . W [n, k]^T + bias, erf gelu (the decode layer); matmul: a [m, k] b [k, n]. */
static void dgemm_make(dgemm *g, bool linear, int64_t m, int64_t n, int64_t k, test_rng *rng) {
  memset(g, 0, sizeof *g);
  g->call.def = recap__op_find(linear ? "linear" : "matmul");
  g->call.num_inputs = linear ? 3 : 2;
  recap__op_attrs_set_defaults(g->call.def, &g->call.attrs);
  if (linear) g->call.attrs.act = RECAP_ACT_GELU;
  const int64_t shapes[3][2] = {{m, k}, {linear ? n : k, linear ? k : n}, {n, 0}};
  for (int i = 0; i < g->call.num_inputs; ++i) {
    recap_tensor *t = &g->call.inputs[i];
    *t = (recap_tensor){.dtype = RECAP_DTYPE_BF16, .ndim = i == 2 ? 1 : 2};
    t->shape[0] = shapes[i][0];
    if (i < 2) t->shape[1] = shapes[i][1];
    recap__tensor_set_contiguous(t);
    g->dev[i] = device_random((size_t)recap__tensor_numel(t), rng);
    t->data = g->dev[i];
  }
  CHECK_OK(recap__op_infer(&g->call));
  g->out_elems = (size_t)recap__tensor_numel(&g->call.outputs[0]);
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(&g->dev[3], g->out_elems * 2), cudaSuccess);
  g->call.outputs[0].data = g->dev[3];
}

static void dgemm_free(dgemm *g) {
  for (int i = 0; i < 4; ++i) cudaFree(g->dev[i]);
}

/* Poisons the output, launches eagerly, returns the output on the host. */
static uint16_t *dgemm_run(dgemm *g) {
  CU_ASSERT_EQUAL(
      cudaMemsetAsync(g->dev[3], 0xff, g->out_elems * 2, (cudaStream_t)recap_stream_native(cs)),
      cudaSuccess);
  CHECK_OK(recap__op_launch(&g->call, cs));
  CHECK_OK(recap_stream_synchronize(cs));
  uint16_t *host = malloc(g->out_elems * 2);
  CU_ASSERT_EQUAL(cudaMemcpy(host, g->dev[3], g->out_elems * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
  return host;
}

/* Elements where two bf16 outputs differ beyond what two roundings and a different summation
 * order allow (the tuner's own check: relative, plus a fraction of the largest |value|). */
static size_t count_disagreements(const uint16_t *want, const uint16_t *got, size_t n,
                                  const char *what) {
  double peak = 0;
  for (size_t i = 0; i < n; ++i) peak = fmax(peak, fabs((double)recap__bf16_to_f32(want[i])));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = recap__bf16_to_f32(want[i]), g = recap__bf16_to_f32(got[i]);
    if (!(fabs(w - g) <= 1.6e-2 * fmax(fabs(w), fabs(g)) + 8e-3 * peak)) {
      if (bad < 4) fprintf(stderr, "\n  %s: element %zu = %g, untuned %g", what, i, g, w);
      ++bad;
    }
  }
  return bad;
}

static void set_tuning(const char *mode) {
  if (mode)
    setenv("RECAP_TUNE", mode, 1);
  else
    unsetenv("RECAP_TUNE");
  setenv("RECAP_TUNE_FILE", cache_path, 1);
  recap__gemm_env_reload(); /* also forgets every in-memory choice and the counters */
}

static recap_gemm_tune_stats stats(void) {
  recap_gemm_tune_stats s;
  CU_ASSERT_EQUAL(recap_gemm_tune_stats_get(&s), RECAP_STATUS_OK);
  return s;
}

static int count_entries(void) {
  size_t len = 0;
  char *text = read_text(cache_path, &len);
  int n = 0;
  for (const char *p = text; p && (p = strstr(p, "\ngemm ")); ++p) ++n;
  free(text);
  return n;
}

/* The two problems of the issue: a 4096^3 bf16 GEMM and a decode layer (m = 8). */
typedef struct {
  dgemm big, skinny;
  uint16_t *big_untuned, *skinny_untuned;
} problems;

static void problems_make(problems *p) {
  test_rng rng;
  test_rng_init(&rng);
  dgemm_make(&p->big, false, 4096, 4096, 4096, &rng);
  dgemm_make(&p->skinny, true, 8, 4096, 4096, &rng);
  set_tuning(NULL);
  p->big_untuned = dgemm_run(&p->big);
  p->skinny_untuned = dgemm_run(&p->skinny);
  CU_ASSERT_EQUAL(stats().tunings, 0);
}

static void problems_free(problems *p) {
  dgemm_free(&p->big);
  dgemm_free(&p->skinny);
  free(p->big_untuned);
  free(p->skinny_untuned);
}

/* Runs both; every element must agree with the untuned result. */
static void problems_check(problems *p, const char *what) {
  uint16_t *big = dgemm_run(&p->big);
  uint16_t *skinny = dgemm_run(&p->skinny);
  CU_ASSERT_EQUAL(count_disagreements(p->big_untuned, big, p->big.out_elems, what), 0);
  CU_ASSERT_EQUAL(count_disagreements(p->skinny_untuned, skinny, p->skinny.out_elems, what), 0);
  free(big);
  free(skinny);
}

static void test_cuda_first_run_times_every_candidate_and_matches_untuned(void) {
  problems p;
  problems_make(&p);
  unlink(cache_path);
  set_tuning("1");
  uint16_t *big = dgemm_run(&p.big);
  recap_gemm_tune_stats s = stats();
  fprintf(stderr, "\n  4096^3 bf16: %llu candidates timed, %llu rejected",
          (unsigned long long)s.candidates_timed, (unsigned long long)s.rejected);
  CU_ASSERT_EQUAL(s.tunings, 1);
  CU_ASSERT(s.candidates_timed >= 8);
  /* More than the default and the heuristic list (at most 16) can be: the variants of the
   * first heuristic results (swizzle, custom option, cluster shape) are timed too. */
  CU_ASSERT(s.candidates_timed + s.rejected > 17);
  CU_ASSERT_EQUAL(s.cache_hits, 0);
  uint16_t *skinny = dgemm_run(&p.skinny);
  const recap_gemm_tune_stats s2 = stats();
  fprintf(stderr, "\n  skinny 8 x 4096 x 4096: %llu candidates timed, %llu rejected",
          (unsigned long long)(s2.candidates_timed - s.candidates_timed),
          (unsigned long long)(s2.rejected - s.rejected));
  CU_ASSERT_EQUAL(s2.tunings, 2);
  CU_ASSERT(s2.candidates_timed - s.candidates_timed >= 8);
  CU_ASSERT_EQUAL(count_disagreements(p.big_untuned, big, p.big.out_elems, "tuned big"), 0);
  CU_ASSERT_EQUAL(count_disagreements(p.skinny_untuned, skinny, p.skinny.out_elems, "tuned skinny"),
                  0);
  /* Later launches in the same process time nothing. */
  problems_check(&p, "tuned again");
  CU_ASSERT_EQUAL(stats().tunings, 2);
  CU_ASSERT_EQUAL(count_entries(), 2);
  free(big);
  free(skinny);
  problems_free(&p);
}

static void test_cuda_second_run_does_no_timing_and_hits_the_cache(void) {
  problems p;
  problems_make(&p);
  unlink(cache_path);
  set_tuning("1");
  problems_check(&p, "first run");
  CU_ASSERT_EQUAL(stats().tunings, 2);
  size_t len1 = 0, len2 = 0;
  char *file1 = read_text(cache_path, &len1);
  /* A second run: no in-memory state, the file alone. */
  set_tuning("1");
  problems_check(&p, "second run");
  const recap_gemm_tune_stats s = stats();
  CU_ASSERT_EQUAL(s.tunings, 0);
  CU_ASSERT_EQUAL(s.candidates_timed, 0);
  CU_ASSERT_EQUAL(s.cache_hits, 2);
  CU_ASSERT_EQUAL(s.stale, 0);
  CU_ASSERT_EQUAL(s.file_warnings, 0);
  /* Nothing was written: the file is as the first run left it. */
  char *file2 = read_text(cache_path, &len2);
  CU_ASSERT_EQUAL(len1, len2);
  CU_ASSERT(file1 && file2 && memcmp(file1, file2, len1) == 0);
  free(file1);
  free(file2);
  /* Cache-only mode on the same file: hits, no timing. */
  set_tuning("2");
  problems_check(&p, "cache only");
  CU_ASSERT_EQUAL(stats().tunings, 0);
  CU_ASSERT_EQUAL(stats().cache_hits, 2);
  problems_free(&p);
}

static void test_cuda_changed_version_invalidates_the_entries(void) {
  problems p;
  problems_make(&p);
  unlink(cache_path);
  set_tuning("1");
  problems_check(&p, "first run");
  size_t len = 0;
  char *text = read_text(cache_path, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  char *lt = strstr(text, "cublaslt=");
  CU_ASSERT_PTR_NOT_NULL_FATAL(lt);
  /* cublaslt=NNNNNN -> cublaslt=1NNNNN: another library version. */
  lt[strlen("cublaslt=")] = lt[strlen("cublaslt=")] == '1' ? '2' : '1';
  write_text(cache_path, text, len);
  free(text);
  set_tuning("1");
  problems_check(&p, "after a version change");
  const recap_gemm_tune_stats s = stats();
  CU_ASSERT_EQUAL(s.cache_hits, 0);
  CU_ASSERT_EQUAL(s.tunings, 2);
  CU_ASSERT_EQUAL(s.file_warnings, 1);
  /* The file now holds this process's versions again: a third run hits. */
  set_tuning("1");
  problems_check(&p, "third run");
  CU_ASSERT_EQUAL(stats().tunings, 0);
  CU_ASSERT_EQUAL(stats().cache_hits, 2);
  problems_free(&p);
}

/* A corrupted file and an entry naming an algorithm cuBLASLt does not offer: warnings, the
 * default or a new timing, never a crash or a wrong result. */
static void test_cuda_corrupt_file_and_unknown_algorithm_are_survived(void) {
  problems p;
  problems_make(&p);
  unlink(cache_path);
  set_tuning("1");
  problems_check(&p, "first run");
  size_t len = 0;
  char *text = read_text(cache_path, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  /* Every cuBLASLt configuration becomes one no library offers (its algorithm id prefixed
   * with 7777), and two broken lines follow. */
  static const char garbage[] = "gemm \x01\x02 garbage\nnot a record\n";
  char *bad = malloc(2 * len + sizeof garbage);
  size_t n = 0;
  for (size_t i = 0; i < len; ++i) {
    bad[n++] = text[i];
    if (i >= 9 && memcmp(text + i - 9, "choice=lt:", 10) == 0) {
      memcpy(bad + n, "7777", 4);
      n += 4;
    }
  }
  memcpy(bad + n, garbage, sizeof garbage - 1);
  write_text(cache_path, bad, n + sizeof garbage - 1);
  set_tuning("1");
  problems_check(&p, "corrupt file");
  const recap_gemm_tune_stats s = stats();
  CU_ASSERT(s.file_warnings >= 2);
  CU_ASSERT(s.stale >= 1);
  CU_ASSERT_EQUAL(s.tunings, s.stale);
  free(text);
  free(bad);
  problems_free(&p);
}

/* An entry naming a skinny shape its problem's m does not fit (the four-stage pipe 4 takes at
 * most 8 rows of x; this problem has 16) is stale: warned about and left for the default,
 * never a failed launch. */
static void test_cuda_entry_with_a_shape_that_does_not_fit_is_stale(void) {
  test_rng rng;
  test_rng_init(&rng);
  dgemm g;
  dgemm_make(&g, true, 16, 4096, 4096, &rng);
  set_tuning(NULL);
  uint16_t *untuned = dgemm_run(&g);
  unlink(cache_path);
  set_tuning("1");
  free(dgemm_run(&g));
  size_t len = 0;
  char *text = read_text(cache_path, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  char *choice = strstr(text, "choice=");
  CU_ASSERT_PTR_NOT_NULL_FATAL(choice);
  char *end = strchr(choice, ' ');
  CU_ASSERT_PTR_NOT_NULL_FATAL(end);
  char *edited = malloc(len + 32);
  const int head = (int)(choice - text);
  const int n = snprintf(edited, len + 32, "%.*schoice=skinny:8,4%s", head, text, end);
  write_text(cache_path, edited, (size_t)n);
  set_tuning("2");
  uint16_t *got = dgemm_run(&g);
  CU_ASSERT_EQUAL(count_disagreements(untuned, got, g.out_elems, "stale skinny entry"), 0);
  const recap_gemm_tune_stats s = stats();
  CU_ASSERT_EQUAL(s.stale, 1);
  CU_ASSERT_EQUAL(s.cache_hits, 0);
  CU_ASSERT_EQUAL(s.tunings, 0);
  free(got);
  free(edited);
  free(text);
  free(untuned);
  dgemm_free(&g);
}

/* With a cold cache, a capture uses the default and times nothing; the capture succeeds and
 * replays the untuned result bit for bit. The eager run after it tunes. */
static void test_cuda_capture_never_tunes(void) {
  test_rng rng;
  test_rng_init(&rng);
  dgemm g, s;
  dgemm_make(&g, false, 1024, 768, 512, &rng);
  dgemm_make(&s, true, 4, 1024, 1024, &rng);
  set_tuning(NULL);
  uint16_t *untuned = dgemm_run(&g), *untuned_skinny = dgemm_run(&s);
  unlink(cache_path);
  set_tuning("1");
  CHECK_OK(recap__gemm_prepare(&g.call, cs)); /* the default algorithm; nothing to time with */
  CU_ASSERT_EQUAL(stats().tunings, 0);
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CU_ASSERT_EQUAL(
      cudaMemsetAsync(g.dev[3], 0xff, g.out_elems * 2, (cudaStream_t)recap_stream_native(cs)),
      cudaSuccess);
  CHECK_OK(recap__capture_begin(cs, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  recap_status launched = recap__op_launch(&g.call, cs);
  if (launched == RECAP_OK) launched = recap__op_launch(&s.call, cs); /* never seen, skinny */
  CHECK_OK(recap__capture_end(cs, &graph));
  CHECK_OK(launched);
  CU_ASSERT_EQUAL(stats().tunings, 0);
  CU_ASSERT_EQUAL(stats().candidates_timed, 0);
  CU_ASSERT_NOT_EQUAL(access(cache_path, F_OK), 0);
  CHECK_OK(cs->backend->graph_instantiate(graph, &exec));
  cs->backend->graph_destroy(graph);
  CHECK_OK(cs->backend->graph_launch(exec, cs));
  CHECK_OK(recap_stream_synchronize(cs));
  uint16_t *replayed = malloc(g.out_elems * 2), *replayed_skinny = malloc(s.out_elems * 2);
  CU_ASSERT_EQUAL(cudaMemcpy(replayed, g.dev[3], g.out_elems * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
  CU_ASSERT_EQUAL(cudaMemcpy(replayed_skinny, s.dev[3], s.out_elems * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
  CU_ASSERT_EQUAL(memcmp(replayed, untuned, g.out_elems * 2), 0);
  CU_ASSERT_EQUAL(memcmp(replayed_skinny, untuned_skinny, s.out_elems * 2), 0);
  cs->backend->graph_exec_destroy(exec);
  /* Outside the capture the same problems are tuned. */
  free(dgemm_run(&g));
  free(dgemm_run(&s));
  CU_ASSERT_EQUAL(stats().tunings, 2);
  free(untuned);
  free(untuned_skinny);
  free(replayed);
  free(replayed_skinny);
  dgemm_free(&g);
  dgemm_free(&s);
}

static int cuda_suite_init(void) {
  if (make_tmp_dir()) return 1;
  tmp_path(cache_path, sizeof cache_path, "cuda_cache.txt");
  return recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING,
                             &cs) != RECAP_OK;
}

static int cuda_suite_cleanup(void) {
  unsetenv("RECAP_TUNE");
  unsetenv("RECAP_TUNE_FILE");
  recap__gemm_env_reload();
  int failed = recap__gemm_release_stream(recap_stream_native(cs)) != RECAP_OK;
  failed |= recap_stream_destroy(cs) != RECAP_OK;
  cs = NULL;
  return failed;
}

static void add_cuda_tests(CU_pSuite suite) {
  CU_ADD_TEST(suite, test_cuda_first_run_times_every_candidate_and_matches_untuned);
  CU_ADD_TEST(suite, test_cuda_second_run_does_no_timing_and_hits_the_cache);
  CU_ADD_TEST(suite, test_cuda_changed_version_invalidates_the_entries);
  CU_ADD_TEST(suite, test_cuda_corrupt_file_and_unknown_algorithm_are_survived);
  CU_ADD_TEST(suite, test_cuda_entry_with_a_shape_that_does_not_fit_is_stale);
  CU_ADD_TEST(suite, test_cuda_capture_never_tunes);
}
#endif /* RECAP_WITH_CUDA */

static int host_suite_init(void) {
  return make_tmp_dir();
}

/* The public stats: the mode and file the environment gave, and each counter in its own
 * field, cleared when the environment is read again. */
static void test_tune_stats_get_reports_mode_file_and_each_counter(void) {
  CU_ASSERT_EQUAL(recap_gemm_tune_stats_get(NULL), RECAP_STATUS_INVALID_ARGUMENT);
  setenv("RECAP_TUNE", "2", 1);
  setenv("RECAP_TUNE_FILE", "/nonexistent/stats.txt", 1);
  recap__gemm_env_reload();
  recap__gemm_tune_count(RECAP_TUNE_STAT_TUNINGS, 1);
  recap__gemm_tune_count(RECAP_TUNE_STAT_CANDIDATES, 2);
  recap__gemm_tune_count(RECAP_TUNE_STAT_REJECTED, 3);
  recap__gemm_tune_count(RECAP_TUNE_STAT_HITS, 4);
  recap__gemm_tune_count(RECAP_TUNE_STAT_UNTIMED, 5);
  recap__gemm_tune_count(RECAP_TUNE_STAT_STALE, 6);
  recap__gemm_tune_count(RECAP_TUNE_STAT_FILE_WARNINGS, 7);
  recap__gemm_tune_count(RECAP_TUNE_STAT_HITS, 10);
  recap_gemm_tune_stats s;
  memset(&s, 0xff, sizeof s);
  CU_ASSERT_EQUAL_FATAL(recap_gemm_tune_stats_get(&s), RECAP_STATUS_OK);
  CU_ASSERT_EQUAL(s.mode, 2);
  CU_ASSERT_STRING_EQUAL(s.tune_file, "/nonexistent/stats.txt");
  CU_ASSERT_EQUAL(s.tunings, 1);
  CU_ASSERT_EQUAL(s.candidates_timed, 2);
  CU_ASSERT_EQUAL(s.rejected, 3);
  CU_ASSERT_EQUAL(s.cache_hits, 14);
  CU_ASSERT_EQUAL(s.untimed_defaults, 5);
  CU_ASSERT_EQUAL(s.stale, 6);
  CU_ASSERT_EQUAL(s.file_warnings, 7);
  unsetenv("RECAP_TUNE");
  unsetenv("RECAP_TUNE_FILE");
  recap__gemm_env_reload();
  CU_ASSERT_EQUAL_FATAL(recap_gemm_tune_stats_get(&s), RECAP_STATUS_OK);
  CU_ASSERT_EQUAL(s.mode, 0);
  CU_ASSERT_STRING_EQUAL(s.tune_file, "recap_tune.txt");
  CU_ASSERT_EQUAL(s.tunings + s.candidates_timed + s.rejected + s.cache_hits + s.untimed_defaults +
                      s.stale + s.file_warnings,
                  0);
}

int main(void) {
  CU_pSuite host = test_add_suite("gemm_tune/host", host_suite_init, NULL);
  CU_ADD_TEST(host, test_tune_file_round_trips_entries_through_save_and_load);
  CU_ADD_TEST(host, test_tune_table_put_replaces_an_equal_key);
  CU_ADD_TEST(host, test_tune_file_missing_is_an_empty_cache_without_warning);
  CU_ADD_TEST(host, test_tune_file_malformed_lines_are_ignored_with_a_warning_each);
  CU_ADD_TEST(host, test_tune_file_unknown_candidates_are_ignored_with_a_warning);
  CU_ADD_TEST(host, test_tune_file_warning_names_file_and_line);
  CU_ADD_TEST(host, test_tune_file_other_versions_are_stale_and_ignored);
  CU_ADD_TEST(host, test_tune_file_recap_version_is_part_of_the_key);
  CU_ADD_TEST(host, test_tune_file_wrong_magic_or_format_version_is_ignored_whole);
  CU_ADD_TEST(host, test_tune_file_truncated_last_line_is_ignored);
  CU_ADD_TEST(host, test_tune_file_binary_garbage_never_crashes);
  CU_ADD_TEST(host, test_tune_file_oversized_file_lines_and_entry_counts_are_bounded);
  CU_ADD_TEST(host, test_tune_save_is_atomic_and_merges_with_the_file);
  CU_ADD_TEST(host, test_tune_env_is_read_once_until_reloaded);
  CU_ADD_TEST(host, test_tune_stats_get_reports_mode_file_and_each_counter);

  CU_pSuite cuda = test_add_cuda_suite("gemm_tune/cuda",
#if RECAP_WITH_CUDA
                                       cuda_suite_init, cuda_suite_cleanup);
  add_cuda_tests(cuda);
#else
                                       NULL, NULL);
  (void)cuda;
#endif
  return test_run_all();
}
