/*
 * abi_options_test.c: the size-prefixed option structs (recap.h's conventions: struct_size).
 * A program compiled against an older recap.h passes a smaller struct: recap must read none of
 * the bytes past its struct_size (the struct here ends at a page that faults when touched, or
 * is followed by garbage) and give the fields the program does not have their defaults. A
 * newer program's larger struct is accepted while its unknown fields are left at zero.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "include/recap.h"
#include "tests/test_util.h"

/* An elementwise chain the fusion pass folds (its default) unless no_fusion is set. */
static const char *const kChain =
    "name: chain\n"
    "device: host\n"
    "dtype: f32\n"
    "dims: {N: 64}\n"
    "tensors:\n"
    "  x: {shape: [2, N], role: input, init: uniform, low: -1, high: 1}\n"
    "ops:\n"
    "  - {op: relu, in: [x], out: a}\n"
    "  - {op: tanh, in: [a], out: b}\n"
    "  - {op: sigmoid, in: [b], out: y}\n"
    "outputs: [y]\n";

/* The layout of an older recap.h: recap_pipeline_options up to (without) no_fusion, entry and
 * share, the fields added last. */
static const size_t kOldSize = offsetof(recap_pipeline_options, no_fusion);

/* Two pages, the second inaccessible: `size` bytes placed to end where the second begins, so
 * that reading one byte past them faults. */
typedef struct {
  unsigned char *pages;
  size_t page;
} guarded;

static void *guarded_tail(guarded *g, size_t size) {
  g->page = (size_t)sysconf(_SC_PAGESIZE);
  void *p = mmap(NULL, 2 * g->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CU_ASSERT_FATAL(p != MAP_FAILED);
  g->pages = p;
  CU_ASSERT_FATAL(mprotect(g->pages + g->page, g->page, PROT_NONE) == 0);
  return g->pages + g->page - size;
}

static void guarded_free(guarded *g) {
  munmap(g->pages, 2 * g->page);
}

/* The fields an older program sets, written into `o` (whose size may be kOldSize only). */
static void set_old_fields(recap_pipeline_options *o, size_t struct_size) {
  memset(o, 0, struct_size);
  o->struct_size = struct_size;
  o->override_device = 1;
  o->device = (recap_device){RECAP_BACKEND_HOST, 0};
  o->override_mode = 1;
  o->mode = RECAP_MODE_EAGER;
}

static void check_old_fields_honoured_and_new_ones_default(recap_pipeline *p) {
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  CU_ASSERT_EQUAL(info.mode, RECAP_MODE_EAGER);             /* a field the program has */
  CU_ASSERT_EQUAL(info.device.backend, RECAP_BACKEND_HOST); /* another */
  CU_ASSERT(info.fused_ops >= 2);                           /* no_fusion's default: fusion on */
  CU_ASSERT_PTR_NULL(info.entry);                           /* entry's default: none */
  CHECK_OK(recap_pipeline_run(p, 0));
}

static void test_an_older_struct_ending_at_a_guard_page_is_read_within_its_size(void) {
  guarded g;
  recap_pipeline_options *o = guarded_tail(&g, kOldSize);
  set_old_fields(o, kOldSize);
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(kChain, strlen(kChain), "chain", o, &p));
  check_old_fields_honoured_and_new_ones_default(p);
  recap_pipeline *clone = NULL;
  CHECK_OK(recap_pipeline_clone(p, o, &clone));
  CHECK_OK(recap_pipeline_destroy(clone));
  CHECK_OK(recap_pipeline_destroy(p));
  guarded_free(&g);
}

static void test_garbage_past_an_older_struct_is_ignored(void) {
  recap_pipeline_options full;
  memset(&full, 0xA5, sizeof full); /* no_fusion, entry and share: nonzero junk */
  set_old_fields(&full, kOldSize);
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(kChain, strlen(kChain), "chain", &full, &p));
  check_old_fields_honoured_and_new_ones_default(p);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_a_struct_without_its_initializer_is_refused(void) {
  recap_pipeline_options o;
  memset(&o, 0, sizeof o);
  recap_pipeline *p = NULL;
  CHECK_STATUS(recap_pipeline_create_string(kChain, strlen(kChain), "chain", &o, &p),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("RECAP_PIPELINE_OPTIONS_INIT");
  CU_ASSERT_PTR_NULL(p);
  o.struct_size = (size_t)1 << 40; /* an uninitialized field, not a struct */
  CHECK_STATUS(recap_pipeline_create_string(kChain, strlen(kChain), "chain", &o, &p),
               RECAP_STATUS_INVALID_ARGUMENT);
  recap_generator_options go;
  memset(&go, 0, sizeof go);
  recap_generator *g = NULL;
  CHECK_STATUS(recap_generator_create("no-such-spec.yaml", &go, &g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("RECAP_GENERATOR_OPTIONS_INIT");
  CU_ASSERT_PTR_NULL(g);
}

/* A newer recap.h's struct: this one followed by fields this library does not know. */
typedef struct {
  recap_pipeline_options known;
  int64_t added_later;
} newer_options;

static void test_a_newer_struct_is_accepted_only_with_its_new_fields_at_their_defaults(void) {
  newer_options n;
  memset(&n, 0, sizeof n);
  n.known.struct_size = sizeof n;
  n.known.override_mode = 1;
  n.known.mode = RECAP_MODE_EAGER;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(kChain, strlen(kChain), "chain", &n.known, &p));
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  CU_ASSERT_EQUAL(info.mode, RECAP_MODE_EAGER);
  CHECK_OK(recap_pipeline_destroy(p));
  p = NULL;
  n.added_later = 7;
  CHECK_STATUS(recap_pipeline_create_string(kChain, strlen(kChain), "chain", &n.known, &p),
               RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("does not know");
  CU_ASSERT_PTR_NULL(p);
}

static void test_the_initializers_set_this_headers_sizes(void) {
  recap_pipeline_options po = RECAP_PIPELINE_OPTIONS_INIT;
  recap_generator_options go = RECAP_GENERATOR_OPTIONS_INIT;
  recap_request r = RECAP_REQUEST_INIT;
  CU_ASSERT_EQUAL(po.struct_size, sizeof po);
  CU_ASSERT_EQUAL(go.struct_size, sizeof go);
  CU_ASSERT_EQUAL(r.struct_size, sizeof r);
  CU_ASSERT_EQUAL(po.override_device, 0);
  CU_ASSERT_PTR_NULL(po.share);
  CU_ASSERT_PTR_NULL(r.on_token);
}

int main(void) {
  CU_pSuite s = test_add_suite("abi/options", NULL, NULL);
  CU_ADD_TEST(s, test_an_older_struct_ending_at_a_guard_page_is_read_within_its_size);
  CU_ADD_TEST(s, test_garbage_past_an_older_struct_is_ignored);
  CU_ADD_TEST(s, test_a_struct_without_its_initializer_is_refused);
  CU_ADD_TEST(s, test_a_newer_struct_is_accepted_only_with_its_new_fields_at_their_defaults);
  CU_ADD_TEST(s, test_the_initializers_set_this_headers_sizes);
  return test_run_all();
}
