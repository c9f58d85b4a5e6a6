/*
 * ops_cuda_registry_test.c: the op registry's CUDA entry points, and the CUDA op benchmark.
 *
 * The registry suite always runs: it checks that each op's CUDA slot points at the entry point
 * the kernels contract assigns it (and is NULL in host-only builds). `ops_cuda_registry_test
 * --bench` times the ops on CUDA instead (not a test; docs/perf/kernels.md).
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"

/* ------------------------------------------------------------------------------------------
 * Registry: CUDA entry points
 * ---------------------------------------------------------------------------------------- */

typedef recap_status (*cuda_entry)(const recap__op_call *, void *);

/* The op -> entry point table of the kernels contract; NULL entry = host-only build or an op
 * added after the contract (expr, the collectives), whose launcher is its own file's. */
static cuda_entry expected_entry(const char *name) {
#if RECAP_WITH_CUDA
  static const struct {
    const char *name;
    cuda_entry fn;
  } table[] = {
      {"relu", recap__cuda_unary},
      {"gelu", recap__cuda_unary},
      {"gelu_tanh", recap__cuda_unary},
      {"silu", recap__cuda_unary},
      {"sigmoid", recap__cuda_unary},
      {"tanh", recap__cuda_unary},
      {"exp", recap__cuda_unary},
      {"neg", recap__cuda_unary},
      {"scale", recap__cuda_unary},
      {"cast", recap__cuda_unary},
      {"add", recap__cuda_binary},
      {"sub", recap__cuda_binary},
      {"mul", recap__cuda_binary},
      {"div", recap__cuda_binary},
      {"softmax", recap__cuda_softmax},
      {"layernorm", recap__cuda_layernorm},
      {"rmsnorm", recap__cuda_rmsnorm},
      {"sum", recap__cuda_reduce_last},
      {"mean", recap__cuda_reduce_last},
      {"reshape", recap__cuda_copy_strided},
      {"permute", recap__cuda_copy_strided},
      {"transpose", recap__cuda_copy_strided},
      {"slice", recap__cuda_copy_strided},
      {"split", recap__cuda_copy_strided},
      {"copy", recap__cuda_copy_strided},
      {"concat", recap__cuda_concat},
      {"fill", recap__cuda_fill},
      {"embedding", recap__cuda_embedding},
      {"rope", recap__cuda_rope},
      {"kv_append", recap__cuda_kv_append},
      {"attention", recap__cuda_attention},
      {"seq_positions", recap__cuda_seq_positions},
      {"seq_last_tokens", recap__cuda_seq_last_tokens},
      {"paged_kv_write", recap__cuda_paged_kv_write},
      {"paged_rope_kv_write", recap__cuda_paged_rope_kv_write},
      {"paged_attention", recap__cuda_paged_attention},
      {"paged_rope_attention", recap__cuda_paged_rope_attention},
      {"decode_advance", recap__cuda_decode_advance},
      {"argmax", recap__cuda_argmax},
      {"sample", recap__cuda_sample},
      {"random_uniform", recap__cuda_random},
      {"random_normal", recap__cuda_random},
      {"matmul", recap__cuda_gemm},
      {"linear", recap__cuda_gemm},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (strcmp(table[i].name, name) == 0) return table[i].fn;
#else
  (void)name;
#endif
  return NULL;
}

static void test_every_op_points_at_its_contract_cuda_entry(void) {
  size_t count = 0;
  const recap__op_def *const *ops = recap__op_list(&count);
  CU_ASSERT_TRUE_FATAL(count > 0);
  for (size_t i = 0; i < count; ++i) {
    const recap__op_def *def = ops[i];
    cuda_entry want = expected_entry(def->name);
    if (want && (cuda_entry)def->launch_cuda != want) {
      fprintf(stderr, "\n  op '%s': launch_cuda %s the contract's entry point\n", def->name,
              def->launch_cuda ? "is not" : "is NULL instead of");
      CU_FAIL("an op does not launch through its contract entry point");
    }
    if (!RECAP_WITH_CUDA) CU_ASSERT_PTR_NULL((void *)(uintptr_t)def->launch_cuda);
    if (RECAP_WITH_CUDA) CU_ASSERT_PTR_NOT_NULL(def->launch_cuda);
  }
}

static void test_every_contract_op_is_in_the_registry(void) {
  static const char *const names[] = {"relu",
                                      "gelu",
                                      "gelu_tanh",
                                      "silu",
                                      "sigmoid",
                                      "tanh",
                                      "exp",
                                      "neg",
                                      "scale",
                                      "cast",
                                      "add",
                                      "sub",
                                      "mul",
                                      "div",
                                      "softmax",
                                      "layernorm",
                                      "rmsnorm",
                                      "sum",
                                      "mean",
                                      "reshape",
                                      "permute",
                                      "transpose",
                                      "slice",
                                      "split",
                                      "copy",
                                      "concat",
                                      "fill",
                                      "embedding",
                                      "rope",
                                      "kv_append",
                                      "attention",
                                      "argmax",
                                      "sample",
                                      "random_uniform",
                                      "random_normal",
                                      "seq_positions",
                                      "seq_last_tokens",
                                      "paged_kv_write",
                                      "paged_rope_kv_write",
                                      "paged_attention",
                                      "paged_rope_attention",
                                      "decode_advance"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const recap__op_def *def = recap__op_find(names[i]);
    if (!def) fprintf(stderr, "\n  op '%s' missing: %s\n", names[i], recap_last_error());
    CU_ASSERT_PTR_NOT_NULL(def);
  }
}

/* ------------------------------------------------------------------------------------------
 * Benchmark: `ops_cuda_test --bench` (not a test; docs/perf/kernels.md)
 *
 * Per case: `sets` copies of the inputs and outputs (enough to exceed the 50 MB L2, so each
 * launch reads from HBM; RECAP_BENCH_SETS overrides), one launch per set captured into a CUDA
 * graph, the graph replayed RECAP_BENCH_REPS times (default 20) between timing events. Prints
 * microseconds per op and the bandwidth of the bytes the op must move (inputs once, output
 * once). For kernel durations alone run it under
 * `ncu --clock-control none --metrics gpu__time_duration.sum` with RECAP_BENCH_SETS=1 and
 * RECAP_BENCH_REPS=1 (ncu flushes the caches before each kernel).
 * ---------------------------------------------------------------------------------------- */

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

/* One benchmark case: `op` on contiguous inputs of `dtype` with the given shapes. */
static void bench_case(const char *label, const char *op, recap__op_attrs attrs, recap_dtype dtype,
                       int num_inputs, const int *ndims, const int64_t (*shapes)[4]) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) {
    printf("bench %-34s: no op '%s'\n", label, op);
    return;
  }
  call.attrs = attrs;
  call.num_inputs = num_inputs;
  static char placeholder[16];
  size_t set_bytes = 0;
  for (int i = 0; i < num_inputs; ++i) {
    recap_tensor *t = &call.inputs[i];
    t->dtype = dtype;
    t->ndim = ndims[i];
    for (int d = 0; d < ndims[i]; ++d) t->shape[d] = shapes[i][d];
    recap__tensor_set_contiguous(t);
    t->data = placeholder;
    set_bytes += tensor_bytes(t);
  }
  if (recap__op_infer(&call) != RECAP_OK) {
    printf("bench %-34s: infer failed: %s\n", label, recap_last_error());
    return;
  }
  size_t moved = set_bytes;
  for (int o = 0; o < call.num_outputs; ++o) moved += tensor_bytes(&call.outputs[o]);
  int sets = (int)((((size_t)192 << 20) + moved - 1) / moved);
  sets = sets < 1 ? 1 : sets > 64 ? 64 : sets;
  sets = env_int("RECAP_BENCH_SETS", sets);
  const int reps = env_int("RECAP_BENCH_REPS", 20);
  enum { MAX_SETS = 64 };
  recap__op_call calls[MAX_SETS];
  if (sets > MAX_SETS) sets = MAX_SETS;
  for (int i = 0; i < num_inputs; ++i) {
    size_t bytes = tensor_bytes(&call.inputs[i]);
    int64_t n = recap__tensor_numel(&call.inputs[i]);
    float *host = malloc(bytes);
    if (!host) return;
    test_rng rng;
    test_rng_init(&rng);
    for (int64_t k = 0; k < n; ++k) {
      double v = test_rng_uniform(&rng, 0.5, 2.0);
      recap__store_f32(host, dtype, k, (float)(test_rng_next(&rng) & 1 ? -v : v));
    }
    for (int k = 0; k < sets; ++k) {
      if (i == 0) calls[k] = call;
      calls[k].inputs[i].data = dev_alloc(bytes);
      to_device(calls[k].inputs[i].data, host, bytes);
    }
    free(host);
  }
  for (int k = 0; k < sets; ++k)
    for (int o = 0; o < call.num_outputs; ++o)
      calls[k].outputs[o].data = dev_alloc(tensor_bytes(&call.outputs[o]));
  /* Eager warm-up, then one graph of every set's launch. */
  for (int k = 0; k < sets; ++k) CHECK_OK(recap__op_launch(&calls[k], cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  recap_status st = RECAP_OK;
  for (int k = 0; k < sets && st == RECAP_OK; ++k) st = recap__op_launch(&calls[k], cuda_stream);
  recap_status end = recap__capture_end(cuda_stream, &graph);
  CHECK_OK(st);
  CHECK_OK(end);
  CHECK_OK(cuda->graph_instantiate(graph, &exec));
  CHECK_OK(cuda->graph_launch(exec, cuda_stream));
  recap_event *t0 = NULL, *t1 = NULL;
  CHECK_OK(recap_event_create(kCudaDev, RECAP_EVENT_TIMING, &t0));
  CHECK_OK(recap_event_create(kCudaDev, RECAP_EVENT_TIMING, &t1));
  CHECK_OK(recap_event_record(t0, cuda_stream));
  for (int r = 0; r < reps; ++r) CHECK_OK(cuda->graph_launch(exec, cuda_stream));
  CHECK_OK(recap_event_record(t1, cuda_stream));
  CHECK_OK(recap_event_synchronize(t1));
  float ms = 0;
  CHECK_OK(recap_event_elapsed_ms(t0, t1, &ms));
  const double us = ms * 1e3 / ((double)reps * sets);
  printf("bench %-34s %-5s %9.2f us/op %8.1f GB/s  (%.2f MiB moved, %d sets)\n", label,
         recap_dtype_name(dtype), us, (double)moved / (us * 1e3), (double)moved / (1 << 20), sets);
  fflush(stdout);
  recap_event_destroy(t0);
  recap_event_destroy(t1);
  cuda->graph_exec_destroy(exec);
  cuda->graph_destroy(graph);
  release_all();
}

/* Run as the only test of its suite, so that the harness's assertions have a test to fail. */
static void bench_all_cases(void) {
  const recap_dtype h = RECAP_DTYPE_F16, f = RECAP_DTYPE_F32;
  recap__op_attrs none = no_attrs(), ln = no_attrs(), split3 = no_attrs(), perm = no_attrs(),
                  tr = no_attrs();
  ln.eps = 1e-5;
  split3.dim = 1;
  set_sizes(&split3, 3, (const int64_t[]){1024, 1024, 1024});
  set_sizes(&perm, 4, (const int64_t[]){0, 2, 1, 3});
  tr.sizes[0] = 0;
  tr.sizes[1] = 1;
  static const int one[] = {1, 1, 1}, two[] = {2, 2, 2}, two_one[] = {2, 1, 1}, four[] = {4, 4, 4};
#define SHAPES(...) ((const int64_t(*)[4])(const int64_t[][4]){__VA_ARGS__})
  /* Transformer-block sizes (B8 S128 D1024: 1M elements). */
  bench_case("add [1024,1024]", "add", none, h, 2, two, SHAPES({1024, 1024}, {1024, 1024}));
  bench_case("add [1024,1024]+[1024]", "add", none, h, 2, two_one, SHAPES({1024, 1024}, {1024}));
  bench_case("gelu [1024,1024]", "gelu", none, h, 1, two, SHAPES({1024, 1024}));
  bench_case("layernorm [1024,1024]", "layernorm", ln, h, 3, two_one,
             SHAPES({1024, 1024}, {1024}, {1024}));
  bench_case("rmsnorm [1024,1024]", "rmsnorm", ln, h, 2, two_one, SHAPES({1024, 1024}, {1024}));
  bench_case("softmax [1024,1024]", "softmax", none, h, 1, two, SHAPES({1024, 1024}));
  bench_case("softmax [16384,128]", "softmax", none, h, 1, two, SHAPES({16384, 128}));
  bench_case("permute [8,128,16,64] 0213", "permute", perm, h, 1, four, SHAPES({8, 128, 16, 64}));
  bench_case("transpose [1024,1024]", "transpose", tr, h, 1, two, SHAPES({1024, 1024}));
  bench_case("split [1024,3072] 3 ways", "split", split3, h, 1, two, SHAPES({1024, 3072}));
  /* Large tensors: bandwidth-bound. */
  bench_case("copy (memcpy) [64M]", "copy", none, h, 1, one, SHAPES({64 << 20}));
  bench_case("add [8192,8192]", "add", none, h, 2, two, SHAPES({8192, 8192}, {8192, 8192}));
  bench_case("add [65536,1024]+[1024]", "add", none, h, 2, two_one, SHAPES({65536, 1024}, {1024}));
  bench_case("gelu [8192,8192]", "gelu", none, h, 1, two, SHAPES({8192, 8192}));
  bench_case("relu [4096,8192]", "relu", none, f, 1, two, SHAPES({4096, 8192}));
  bench_case("layernorm [65536,1024]", "layernorm", ln, h, 3, two_one,
             SHAPES({65536, 1024}, {1024}, {1024}));
  bench_case("rmsnorm [65536,1024]", "rmsnorm", ln, h, 2, two_one, SHAPES({65536, 1024}, {1024}));
  bench_case("softmax [65536,1024]", "softmax", none, h, 1, two, SHAPES({65536, 1024}));
  bench_case("layernorm [16384,4096]", "layernorm", ln, h, 3, two_one,
             SHAPES({16384, 4096}, {4096}, {4096}));
  bench_case("softmax [16384,4096]", "softmax", none, h, 1, two, SHAPES({16384, 4096}));
  bench_case("layernorm [32768,1024]", "layernorm", ln, f, 3, two_one,
             SHAPES({32768, 1024}, {1024}, {1024}));
  bench_case("permute [32,1024,16,64] 0213", "permute", perm, h, 1, four,
             SHAPES({32, 1024, 16, 64}));
  bench_case("transpose [8192,8192]", "transpose", tr, h, 1, two, SHAPES({8192, 8192}));
  bench_case("split [16384,3072] 3 ways", "split", split3, h, 1, two, SHAPES({16384, 3072}));
#undef SHAPES
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--bench") == 0) {
    CU_pSuite bench = test_add_cuda_suite("ops_cuda/bench", cuda_suite_init, cuda_suite_cleanup);
    CU_ADD_TEST(bench, bench_all_cases);
    return test_run_all();
  }

  CU_pSuite registry = test_add_suite("ops_cuda/registry", NULL, NULL);
  CU_ADD_TEST(registry, test_every_op_points_at_its_contract_cuda_entry);
  CU_ADD_TEST(registry, test_every_contract_op_is_in_the_registry);
  return test_run_all();
}
