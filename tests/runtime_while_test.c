/* runtime_while_test.c: WHILE conditional nodes on the host backend: the loop's semantics
 * (condition 1 at each launch, set by a kernel in the body, nested loops, exec update) and
 * CUDA's rules for a body, which the emulated capture enforces. */
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/host_fault.h"
#include "tests/test_util.h"

static const recap_device host_device = {RECAP_BACKEND_HOST, 0};

static const recap__backend *host(void) {
  return recap__backend_get(RECAP_BACKEND_HOST);
}

static recap_stream *stream_new(void) {
  recap_stream *s = NULL;
  CU_ASSERT_EQUAL(recap_stream_create(host_device, 0, RECAP_STREAM_NON_BLOCKING, &s), RECAP_OK);
  return s;
}

/* ---- kernels (host functions launched as kernels) ---- */

/* counter[0] += 1; flag = counter[0] < limit[0]: a loop of `limit` iterations. */
typedef struct {
  int32_t *counter, *flag;
  const int32_t *limit;
} step_args;

static recap_status step_fn(void *p) {
  step_args *a = p;
  a->counter[0] += 1;
  a->flag[0] = a->counter[0] < a->limit[0];
  return RECAP_OK;
}

static recap_status step_kernel(recap_stream *s, int32_t *counter, int32_t *flag,
                                const int32_t *limit) {
  step_args a = {counter, flag, limit};
  return host()->launch_kernel(s, step_fn, &a, sizeof a);
}

/* total[0] += 1 */
typedef struct {
  int32_t *total;
} bump_args;

static recap_status bump_fn(void *p) {
  bump_args *a = p;
  a->total[0] += 1;
  return RECAP_OK;
}

static recap_status nothing_fn(void *p) {
  (void)p;
  return RECAP_OK;
}

/* Device memory: counter, flag, limit, total, scratch[4]. */
typedef struct {
  int32_t *counter, *flag, *limit, *total, *scratch;
} device_ints;

static device_ints ints_new(void) {
  int32_t *p = NULL;
  CU_ASSERT_EQUAL_FATAL(host()->mem_alloc(0, 8 * sizeof *p, (void **)&p), RECAP_OK);
  memset(p, 0, 8 * sizeof *p);
  device_ints d = {p, p + 1, p + 2, p + 3, p + 4};
  return d;
}

static void ints_free(device_ints *d) {
  CU_ASSERT_EQUAL(host()->mem_free(0, d->counter), RECAP_OK);
}

/* Captures: memset(counter) ; WHILE { step } ; and instantiates. */
static recap__graph_exec *capture_counting_loop(recap_stream *s, recap_stream *body, device_ints *d,
                                                uint64_t *handle) {
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->memset_async(d->counter, 0, sizeof(int32_t), s));
  CHECK_OK(host()->while_begin(s, body, handle));
  CHECK_OK(step_kernel(body, d->counter, d->flag, d->limit));
  CHECK_OK(host()->condition_set(body, *handle, d->flag));
  CHECK_OK(host()->while_end(body));
  CHECK_OK(recap__capture_end(s, &graph));
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  host()->graph_destroy(graph);
  return exec;
}

static void test_while_runs_body_until_condition_kernel_sets_zero(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  device_ints d = ints_new();
  uint64_t handle = 0;
  recap__graph_exec *exec = capture_counting_loop(s, body, &d, &handle);
  CU_ASSERT_EQUAL(d.counter[0], 0); /* captured, not run */
  d.limit[0] = 7;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.counter[0], 7);
  /* The condition is 1 again at the next launch (cudaGraphCondAssignDefault), and the body
   * reads the limit when it runs. */
  d.limit[0] = 3;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.counter[0], 3);
  /* A limit already reached still runs the body once: the default value enters the loop. */
  d.limit[0] = 0;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.counter[0], 1);
  host()->graph_exec_destroy(exec);
  ints_free(&d);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

/* counter[0] += 1, then the condition set from inside the kernel (condition_store, the host's
 * cudaGraphSetConditional): a body of one kernel. */
typedef struct {
  int32_t *counter;
  const int32_t *limit;
  uint64_t handle;
} self_step_args;

static recap_status self_step_fn(void *p) {
  self_step_args *a = p;
  a->counter[0] += 1;
  return host()->condition_store(a->handle, a->counter[0] < a->limit[0]);
}

static void test_while_kernel_sets_its_own_condition(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  device_ints d = ints_new();
  uint64_t handle = 0;
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->memset_async(d.counter, 0, sizeof(int32_t), s));
  CHECK_OK(host()->while_begin(s, body, &handle));
  self_step_args a = {d.counter, d.limit, handle};
  CHECK_OK(host()->launch_kernel(body, self_step_fn, &a, sizeof a));
  CHECK_OK(host()->while_end(body));
  CHECK_OK(recap__capture_end(s, &graph));
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  host()->graph_destroy(graph);
  d.limit[0] = 5;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.counter[0], 5);
  d.limit[0] = 2;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.counter[0], 2);
  host()->graph_exec_destroy(exec);
  /* Outside its WHILE node the kernel faults, as cudaGraphSetConditional outside its graph. */
  CU_ASSERT_NOT_EQUAL(host()->launch_kernel(s, self_step_fn, &a, sizeof a), RECAP_OK);
  recap_status st = recap_stream_synchronize(s);
  CU_ASSERT_NOT_EQUAL(st, RECAP_OK);
  CHECK_ERROR_MENTIONS("outside that handle's WHILE node");
  recap__host_backend_reset_fault_for_testing();
  ints_free(&d);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_nested_loops_multiply_iterations(void) {
  recap_stream *s = stream_new(), *outer_body = stream_new(), *inner_body = stream_new();
  device_ints d = ints_new();
  int32_t *outer_counter = d.scratch, *outer_flag = d.scratch + 1, *outer_limit = d.scratch + 2;
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  uint64_t outer = 0, inner = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->memset_async(outer_counter, 0, sizeof(int32_t), s));
  CHECK_OK(host()->memset_async(d.total, 0, sizeof(int32_t), s));
  CHECK_OK(host()->while_begin(s, outer_body, &outer));
  CHECK_OK(host()->memset_async(d.counter, 0, sizeof(int32_t), outer_body));
  CHECK_OK(host()->while_begin(outer_body, inner_body, &inner));
  CU_ASSERT_NOT_EQUAL(inner, outer);
  bump_args b = {d.total};
  CHECK_OK(host()->launch_kernel(inner_body, bump_fn, &b, sizeof b));
  CHECK_OK(step_kernel(inner_body, d.counter, d.flag, d.limit));
  CHECK_OK(host()->condition_set(inner_body, inner, d.flag));
  CHECK_OK(host()->while_end(inner_body));
  CHECK_OK(step_kernel(outer_body, outer_counter, outer_flag, outer_limit));
  CHECK_OK(host()->condition_set(outer_body, outer, outer_flag));
  CHECK_OK(host()->while_end(outer_body));
  CHECK_OK(recap__capture_end(s, &graph));
  size_t nodes = 0;
  CHECK_OK(host()->graph_node_count(graph, &nodes));
  /* Work nodes: 2 memsets + the outer WHILE + its body (memset, the inner WHILE, its 3
   * kernels, step, cond). */
  CU_ASSERT_EQUAL(nodes, 10);
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  host()->graph_destroy(graph);
  d.limit[0] = 4;
  outer_limit[0] = 5;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.total[0], 20);
  CU_ASSERT_EQUAL(outer_counter[0], 5);
  host()->graph_exec_destroy(exec);
  ints_free(&d);
  recap_stream_destroy(inner_body);
  recap_stream_destroy(outer_body);
  recap_stream_destroy(s);
}

/* Two captures making the same calls give graphs one exec can be updated between: the
 * updated exec runs the second graph's parameters, loop and condition kernel included. */
static void test_while_exec_update_takes_second_capture(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  device_ints a = ints_new(), b = ints_new();
  uint64_t handle_a = 0, handle_b = 0;
  recap__graph_exec *exec = capture_counting_loop(s, body, &a, &handle_a);
  recap__graph *second = NULL;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->memset_async(b.counter, 0, sizeof(int32_t), s));
  CHECK_OK(host()->while_begin(s, body, &handle_b));
  CHECK_OK(step_kernel(body, b.counter, b.flag, b.limit));
  CHECK_OK(host()->condition_set(body, handle_b, b.flag));
  CHECK_OK(host()->while_end(body));
  CHECK_OK(recap__capture_end(s, &second));
  CHECK_OK(host()->graph_exec_update(exec, second));
  host()->graph_destroy(second);
  a.limit[0] = 2;
  b.limit[0] = 6;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(a.counter[0], 0);
  CU_ASSERT_EQUAL(b.counter[0], 6);
  host()->graph_exec_destroy(exec);
  ints_free(&a);
  ints_free(&b);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

/* A graph replayed inside the body is a child-graph node, which a body may hold. */
static void test_while_body_may_launch_a_graph_and_copy_to_mapped_memory(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  device_ints d = ints_new();
  int32_t *ring = NULL;
  CHECK_OK(host()->host_alloc_mapped(0, 64 * sizeof *ring, (void **)&ring));
  CU_ASSERT_EQUAL(ring[0], 0);
  recap__graph *inner = NULL, *graph = NULL;
  recap__graph_exec *inner_exec = NULL, *exec = NULL;
  bump_args b = {d.total};
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->launch_kernel(s, bump_fn, &b, sizeof b));
  CHECK_OK(recap__capture_end(s, &inner));
  CHECK_OK(host()->graph_instantiate(inner, &inner_exec));
  host()->graph_destroy(inner);

  uint64_t handle = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->memset_async(d.counter, 0, sizeof(int32_t), s));
  CHECK_OK(host()->while_begin(s, body, &handle));
  CHECK_OK(host()->graph_launch(inner_exec, body));
  CHECK_OK(step_kernel(body, d.counter, d.flag, d.limit));
  CHECK_OK(host()->memcpy_async(ring, d.total, sizeof(int32_t), body));
  CHECK_OK(host()->memset_async(ring + 1, 0x7f, 1, body));
  CHECK_OK(host()->condition_set(body, handle, d.flag));
  CHECK_OK(host()->while_end(body));
  CHECK_OK(recap__capture_end(s, &graph));
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  host()->graph_destroy(graph);
  d.limit[0] = 5;
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(d.total[0], 5);
  CU_ASSERT_EQUAL(ring[0], 5);
  CU_ASSERT_EQUAL(((unsigned char *)ring)[4], 0x7f);
  host()->graph_exec_destroy(exec);
  host()->graph_exec_destroy(inner_exec);
  CHECK_OK(host()->host_free_mapped(0, ring));
  ints_free(&d);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

/* Begins capture on s and a WHILE body on `body`. */
static uint64_t begin_loop(recap_stream *s, recap_stream *body) {
  uint64_t handle = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->while_begin(s, body, &handle));
  return handle;
}

/* The body's capture fails naming the rule, and so does the enclosing one. */
static void expect_body_refused(recap_stream *s, recap_stream *body, const char *rule) {
  CHECK_STATUS(host()->while_end(body), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS(rule);
  recap__graph *graph = NULL;
  CHECK_STATUS(recap__capture_end(s, &graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS(rule);
  CU_ASSERT_PTR_NULL(graph);
}

static void test_while_body_refuses_host_function_node(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  begin_loop(s, body);
  CHECK_STATUS(host()->launch_host(body, nothing_fn, NULL, 0), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("host function node");
  expect_body_refused(s, body, "host function node");
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_body_refuses_host_function_inside_child_graph(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  recap__graph *inner = NULL;
  recap__graph_exec *inner_exec = NULL;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->launch_host(s, nothing_fn, NULL, 0));
  CHECK_OK(recap__capture_end(s, &inner));
  CHECK_OK(host()->graph_instantiate(inner, &inner_exec));
  host()->graph_destroy(inner);
  begin_loop(s, body);
  CHECK_STATUS(host()->graph_launch(inner_exec, body), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  expect_body_refused(s, body, "host function node");
  host()->graph_exec_destroy(inner_exec);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_body_refuses_copy_of_pageable_host_memory(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  device_ints d = ints_new();
  int32_t *pageable = calloc(4, sizeof *pageable);
  begin_loop(s, body);
  CHECK_STATUS(host()->memcpy_async(d.counter, pageable, sizeof(int32_t), body),
               RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  expect_body_refused(s, body, "neither device memory nor mapped host memory");
  /* A fill of pageable memory is refused the same way. */
  begin_loop(s, body);
  CHECK_STATUS(host()->memset_async(pageable, 0, sizeof(int32_t), body),
               RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  expect_body_refused(s, body, "neither device memory nor mapped host memory");
  /* A copy that runs past the end of a device allocation is not device memory either. */
  begin_loop(s, body);
  CHECK_STATUS(host()->memcpy_async(d.counter, d.counter + 4, 8 * sizeof(int32_t), body),
               RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  expect_body_refused(s, body, "neither device memory nor mapped host memory");
  free(pageable);
  ints_free(&d);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_condition_set_outside_its_body_is_refused(void) {
  recap_stream *s = stream_new(), *body = stream_new(), *other = stream_new();
  device_ints d = ints_new();
  CHECK_STATUS(host()->condition_set(s, 1, d.flag), RECAP_STATUS_INVALID_ARGUMENT);
  uint64_t handle = begin_loop(s, body);
  /* Not in the body: the enclosing stream, and a handle of no loop. */
  CHECK_STATUS(host()->condition_set(s, handle, d.flag), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("WHILE body");
  CHECK_STATUS(host()->condition_set(body, handle + 1000, d.flag), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(host()->while_begin(s, s, &handle), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(host()->while_begin(other, body, &handle), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(host()->condition_set(body, handle, d.flag));
  CHECK_OK(host()->while_end(body));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  host()->graph_destroy(graph);
  ints_free(&d);
  recap_stream_destroy(other);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_capture_end_before_body_end_fails_both(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  begin_loop(s, body);
  recap__graph *graph = NULL;
  CHECK_STATUS(recap__capture_end(s, &graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS("still being captured");
  CHECK_STATUS(host()->while_end(body), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS("ended before its body");
  /* Both streams are free again. */
  begin_loop(s, body);
  CHECK_OK(host()->while_end(body));
  CHECK_OK(recap__capture_end(s, &graph));
  host()->graph_destroy(graph);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_graph_holding_a_loop_is_not_a_child_graph(void) {
  recap_stream *s = stream_new(), *body = stream_new();
  device_ints d = ints_new();
  uint64_t handle = 0;
  recap__graph_exec *loop = capture_counting_loop(s, body, &d, &handle);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_STATUS(host()->graph_launch(loop, s), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("may not contain conditional nodes");
  CHECK_STATUS(recap__capture_end(s, &graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  host()->graph_exec_destroy(loop);
  ints_free(&d);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

static void test_while_mapped_free_rejects_foreign_pointer(void) {
  int32_t x = 0;
  CHECK_STATUS(host()->host_free_mapped(0, &x), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(host()->host_free_mapped(0, NULL));
}

/* ---- on either backend: copies and the condition kernel only, so CUDA needs no test kernel ----
 */

static const recap__backend *device_backend(void) {
  return recap__backend_get(test_device.backend);
}

static recap_stream *device_stream(void) {
  recap_stream *s = NULL;
  CU_ASSERT_EQUAL(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &s), RECAP_OK);
  return s;
}

enum { SHIFT_N = 16 };

/* Each iteration shifts buf left by one (through tmp: copies may not overlap) and continues
 * while buf[0] is non-zero: with buf = 1, 1, 1, 0, 5, 6, ... the loop runs 3 times and leaves
 * 0, 5, 6, ... behind. */
static void test_while_shift_loop_runs_until_a_zero(void) {
  const recap__backend *be = device_backend();
  if (!be->while_begin) {
    CU_FAIL("the backend has no WHILE nodes");
    return;
  }
  recap_stream *s = device_stream(), *body = device_stream();
  int32_t *buf = NULL, *tmp = NULL, host[SHIFT_N];
  CHECK_OK(be->mem_alloc(test_device.index, sizeof host, (void **)&buf));
  CHECK_OK(be->mem_alloc(test_device.index, sizeof host, (void **)&tmp));
  for (int i = 0; i < SHIFT_N; i++) host[i] = i < 3 ? 1 : i == 3 ? 0 : i + 1;
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  uint64_t handle = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(be->while_begin(s, body, &handle));
  CHECK_OK(be->memcpy_async(tmp, buf + 1, sizeof(int32_t) * (SHIFT_N - 1), body));
  CHECK_OK(be->memcpy_async(buf, tmp, sizeof(int32_t) * (SHIFT_N - 1), body));
  CHECK_OK(be->condition_set(body, handle, buf));
  CHECK_OK(be->while_end(body));
  CHECK_OK(recap__capture_end(s, &graph));
  CHECK_OK(be->graph_instantiate(graph, &exec));
  be->graph_destroy(graph);
  for (int launch = 0; launch < 2; launch++) { /* the condition is 1 again at each launch */
    CHECK_OK(be->memcpy_async(buf, host, sizeof host, s));
    CHECK_OK(be->graph_launch(exec, s));
    int32_t out[SHIFT_N];
    CHECK_OK(be->memcpy_async(out, buf, sizeof out, s));
    CHECK_OK(be->stream_synchronize(s));
    CU_ASSERT_EQUAL(out[0], 0);
    CU_ASSERT_EQUAL(out[1], 5);
    CU_ASSERT_EQUAL(out[SHIFT_N - 4], SHIFT_N);
  }
  be->graph_exec_destroy(exec);
  CHECK_OK(be->mem_free(test_device.index, buf));
  CHECK_OK(be->mem_free(test_device.index, tmp));
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

/* A host function in the body: refused somewhere between the call and the instantiation (the
 * host backend at the call; CUDA's driver at its own point, which the GPU run reports). */
static void test_while_body_with_host_function_never_instantiates(void) {
  const recap__backend *be = device_backend();
  recap_stream *s = device_stream(), *body = device_stream();
  uint64_t handle = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(be->while_begin(s, body, &handle));
  recap_status launched = be->launch_host(body, nothing_fn, NULL, 0);
  recap_status ended = be->while_end(body);
  recap__graph *graph = NULL;
  recap_status captured = recap__capture_end(s, &graph);
  recap__graph_exec *exec = NULL;
  recap_status made = captured == RECAP_OK ? be->graph_instantiate(graph, &exec) : captured;
  printf(
      "\n  host function in a WHILE body: launch %s, while_end %s, capture_end %s, "
      "instantiate %s: %s\n",
      recap_status_name(launched), recap_status_name(ended), recap_status_name(captured),
      recap_status_name(made), recap_last_error());
  CU_ASSERT(launched != RECAP_OK || ended != RECAP_OK || captured != RECAP_OK || made != RECAP_OK);
  if (exec) be->graph_exec_destroy(exec);
  if (graph) be->graph_destroy(graph);
  recap_stream_destroy(body);
  recap_stream_destroy(s);
}

int main(void) {
  static const test_case both[] = {
      {"shift_loop_runs_until_a_zero", test_while_shift_loop_runs_until_a_zero, true},
      {"body_with_host_function_never_instantiates",
       test_while_body_with_host_function_never_instantiates, true},
  };
  test_add_host_and_cuda_suites("while", both, sizeof both / sizeof both[0]);
  CU_pSuite loops = test_add_suite("while/host", NULL, NULL);
  CU_ADD_TEST(loops, test_while_runs_body_until_condition_kernel_sets_zero);
  CU_ADD_TEST(loops, test_while_kernel_sets_its_own_condition);
  CU_ADD_TEST(loops, test_while_nested_loops_multiply_iterations);
  CU_ADD_TEST(loops, test_while_exec_update_takes_second_capture);
  CU_ADD_TEST(loops, test_while_body_may_launch_a_graph_and_copy_to_mapped_memory);
  CU_pSuite rules = test_add_suite("while/host body rules", NULL, NULL);
  CU_ADD_TEST(rules, test_while_body_refuses_host_function_node);
  CU_ADD_TEST(rules, test_while_body_refuses_host_function_inside_child_graph);
  CU_ADD_TEST(rules, test_while_body_refuses_copy_of_pageable_host_memory);
  CU_ADD_TEST(rules, test_while_condition_set_outside_its_body_is_refused);
  CU_ADD_TEST(rules, test_while_capture_end_before_body_end_fails_both);
  CU_ADD_TEST(rules, test_while_graph_holding_a_loop_is_not_a_child_graph);
  CU_ADD_TEST(rules, test_while_mapped_free_rejects_foreign_pointer);
  return test_run_all();
}
