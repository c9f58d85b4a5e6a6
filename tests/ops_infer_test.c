/*
 * ops_infer_test.c: the op registry and shape/dtype inference. Bad shapes, dtypes and
 * attributes are rejected with RECAP_STATUS_INVALID_ARGUMENT and a message that names the op
 * and the offending input or attribute; good calls get the right output descriptions.
 * Host-only code: nothing here launches anything.
 */
#include <math.h>
#include <string.h>

#include "kernels/op.h"
#include "kernels/rope.h"
#include "tests/test_util.h"

/* ---- helpers ---- */

static recap_tensor desc(recap_dtype dt, int ndim, const int64_t *shape) {
  recap_tensor t = {.dtype = dt, .ndim = ndim};
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

#define SHAPE(...)                                                         \
  (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { \
    __VA_ARGS__                                                            \
  }
#define F32(...) desc(RECAP_DTYPE_F32, SHAPE(__VA_ARGS__))
#define I32(...) desc(RECAP_DTYPE_I32, SHAPE(__VA_ARGS__))

static recap__op_call new_call(const char *op) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) fprintf(stderr, "\n  %s\n", recap_last_error());
  CU_ASSERT_PTR_NOT_NULL_FATAL(call.def);
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  return call;
}

static void add(recap__op_call *call, recap_tensor t) {
  call->inputs[call->num_inputs++] = t;
}

static void set_sizes(recap__op_attrs *a, int n, const int64_t *sizes) {
  a->num_sizes = n;
  for (int i = 0; i < n; ++i) a->sizes[i] = sizes[i];
}

/* Infer must fail with INVALID_ARGUMENT and a message naming the op and `needle`. */
static void expect_rejected(recap__op_call *call, const char *needle) {
  CHECK_STATUS(recap__op_infer(call), RECAP_STATUS_INVALID_ARGUMENT);
  char op[64];
  snprintf(op, sizeof op, "op '%s'", call->def->name);
  CHECK_ERROR_MENTIONS(op);
  CHECK_ERROR_MENTIONS(needle);
}

/* ---- registry ---- */

static void test_op_list_holds_every_op_once_with_complete_defs(void) {
  static const char *names[] = {"matmul",
                                "linear",
                                "relu",
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
                                "concat",
                                "copy",
                                "fill",
                                "embedding",
                                "rope",
                                "kv_append",
                                "attention",
                                "argmax",
                                "sample",
                                "random_uniform",
                                "random_normal",
                                "all_reduce",
                                "all_gather",
                                "reduce_scatter",
                                "broadcast",
                                "expr",
                                "seq_positions",
                                "seq_last_tokens",
                                "paged_kv_write",
                                "paged_rope_kv_write",
                                "paged_attention",
                                "paged_rope_attention",
                                "decode_advance"};
  size_t count = 0;
  const recap__op_def *const *ops = recap__op_list(&count);
  CU_ASSERT_EQUAL(count, sizeof names / sizeof names[0]);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    int found = 0;
    for (size_t j = 0; j < count; ++j) found += strcmp(ops[j]->name, names[i]) == 0;
    if (found != 1) fprintf(stderr, "\n  op %s listed %d times\n", names[i], found);
    CU_ASSERT_EQUAL(found, 1);
  }
  for (size_t j = 0; j < count; ++j) {
    const recap__op_def *d = ops[j];
    CU_ASSERT_PTR_EQUAL(recap__op_find(d->name), d);
    CU_ASSERT_PTR_NOT_NULL(d->summary);
    CU_ASSERT_PTR_NOT_NULL(d->input_names);
    CU_ASSERT_PTR_NOT_NULL(d->attrs);
    CU_ASSERT_PTR_NOT_NULL(d->infer);
    CU_ASSERT_PTR_NOT_NULL(d->run_host);
    CU_ASSERT(d->dtype_mask != 0);
    CU_ASSERT(d->num_outputs >= 1 && d->num_outputs <= RECAP_OP_MAX_OUTPUTS);
    CU_ASSERT(d->min_inputs <= d->max_inputs && d->max_inputs <= RECAP_OP_MAX_INPUTS);
    int named = 0;
    while (d->input_names[named]) ++named;
    CU_ASSERT_EQUAL(named, d->max_inputs);
    /* A CUDA build has a CUDA entry point for every op, a host-only build none. */
    CU_ASSERT_EQUAL(d->launch_cuda != NULL, recap_backend_compiled(RECAP_BACKEND_CUDA) != 0);
  }
}

static void test_op_find_unknown_name_returns_null_with_message(void) {
  CU_ASSERT_PTR_NULL(recap__op_find("nope"));
  CHECK_ERROR_MENTIONS("unknown op 'nope'");
  CU_ASSERT_PTR_NULL(recap__op_find("sofmax"));
  CHECK_ERROR_MENTIONS("did you mean 'softmax'");
  CU_ASSERT_PTR_NULL(recap__op_find(NULL));
}

static void test_attr_defaults_are_applied(void) {
  recap__op_attrs a;
  memset(&a, 0, sizeof a);
  recap__op_attrs_set_defaults(recap__op_find("layernorm"), &a);
  CU_ASSERT_DOUBLE_EQUAL(a.eps, 1e-5, 0);
  recap__op_attrs_set_defaults(recap__op_find("transpose"), &a);
  CU_ASSERT_EQUAL(a.sizes[0], -2);
  CU_ASSERT_EQUAL(a.sizes[1], -1);
  /* rope's theta and base default to "not given" (then 10000, kernels/rope.h), so that giving
   * both can be refused; llama3 scaling is off. */
  recap__op_attrs_set_defaults(recap__op_find("rope"), &a);
  CU_ASSERT_EQUAL(a.rope_base, 0);
  CU_ASSERT_DOUBLE_EQUAL(a.rope_theta, 0, 0);
  CU_ASSERT_EQUAL(a.rope_llama3, 0);
  CU_ASSERT_DOUBLE_EQUAL(recap__rope_theta(&a), 10000, 0);
  recap__op_attrs_set_defaults(recap__op_find("random_uniform"), &a);
  CU_ASSERT_DOUBLE_EQUAL(a.high, 1, 0);
  CU_ASSERT_EQUAL(a.dtype, RECAP_DTYPE_F32);
}

/* ---- dtypes ---- */

static void test_dtype_names_sizes_and_parse(void) {
  static const struct {
    recap_dtype dt;
    const char *name;
    size_t size;
    int is_float;
  } expect[] = {{RECAP_DTYPE_F32, "f32", 4, 1},
                {RECAP_DTYPE_F16, "f16", 2, 1},
                {RECAP_DTYPE_BF16, "bf16", 2, 1},
                {RECAP_DTYPE_I32, "i32", 4, 0},
                {RECAP_DTYPE_I64, "i64", 8, 0}};
  for (size_t i = 0; i < 5; ++i) {
    CU_ASSERT_STRING_EQUAL(recap_dtype_name(expect[i].dt), expect[i].name);
    CU_ASSERT_EQUAL(recap_dtype_size(expect[i].dt), expect[i].size);
    CU_ASSERT_EQUAL(recap_dtype_is_float(expect[i].dt), expect[i].is_float);
    recap_dtype parsed = RECAP_DTYPE_COUNT;
    CHECK_OK(recap_dtype_parse(expect[i].name, &parsed));
    CU_ASSERT_EQUAL(parsed, expect[i].dt);
  }
  /* PyTorch's names parse too; recap_dtype_name keeps the short ones. */
  static const char *const long_names[] = {"float32", "float16", "bfloat16", "int32", "int64"};
  for (size_t i = 0; i < 5; ++i) {
    CU_ASSERT_STRING_EQUAL(recap_dtype_long_name(expect[i].dt), long_names[i]);
    recap_dtype parsed = RECAP_DTYPE_COUNT;
    CHECK_OK(recap_dtype_parse(long_names[i], &parsed));
    CU_ASSERT_EQUAL(parsed, expect[i].dt);
  }
  CU_ASSERT_PTR_NULL(recap_dtype_long_name(RECAP_DTYPE_COUNT));
  CU_ASSERT_PTR_NULL(recap_dtype_name(RECAP_DTYPE_COUNT));
  CU_ASSERT_PTR_NULL(recap_dtype_name((recap_dtype)-1));
  CU_ASSERT_EQUAL(recap_dtype_size(RECAP_DTYPE_COUNT), 0);
  CU_ASSERT_EQUAL(recap_dtype_is_float(RECAP_DTYPE_COUNT), 0);
  recap_dtype untouched = RECAP_DTYPE_I64;
  CHECK_STATUS(recap_dtype_parse("f8", &untouched), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("'f8'");
  CHECK_ERROR_MENTIONS("f32, f16, bf16, i32 or i64");
  CHECK_ERROR_MENTIONS("float32, float16, bfloat16, int32 or int64");
  CU_ASSERT_EQUAL(untouched, RECAP_DTYPE_I64);
  CHECK_STATUS(recap_dtype_parse(NULL, &untouched), RECAP_STATUS_INVALID_ARGUMENT);
}

/* ---- checks every op shares (recap__op_infer) ---- */

static void test_wrong_input_count_is_rejected(void) {
  recap__op_call call = new_call("softmax");
  add(&call, F32(3, 4));
  add(&call, F32(3, 4));
  expect_rejected(&call, "takes 1 input (x), got 2");
  recap__op_call ln = new_call("layernorm");
  add(&ln, F32(3, 4));
  expect_rejected(&ln, "takes 2 to 3 inputs");
}

static void test_unsupported_dtype_is_rejected(void) {
  recap__op_call call = new_call("softmax");
  add(&call, I32(3, 4));
  expect_rejected(&call, "input 'x' has dtype i32");
  CHECK_ERROR_MENTIONS("supported: f32, f16, bf16");
  recap__op_call r = new_call("random_normal");
  set_sizes(&r.attrs, SHAPE(4));
  r.attrs.dtype = RECAP_DTYPE_I64;
  expect_rejected(&r, "'dtype' = i64");
  recap__op_call bad = new_call("relu");
  add(&bad, F32(3));
  bad.inputs[0].dtype = (recap_dtype)42;
  expect_rejected(&bad, "invalid dtype");
}

static void test_malformed_input_shapes_are_rejected(void) {
  recap__op_call zero = new_call("relu");
  add(&zero, F32(3, 0));
  expect_rejected(&zero, "input 'x' [3, 0]");
  CHECK_ERROR_MENTIONS("size 0");
  recap__op_call no_dims = new_call("relu");
  add(&no_dims, F32(3));
  no_dims.inputs[0].ndim = 0;
  expect_rejected(&no_dims, "0 dims");
  recap__op_call five = new_call("relu");
  add(&five, F32(3));
  five.inputs[0].ndim = 5;
  expect_rejected(&five, "5 dims");
}

static void test_element_count_overflow_is_rejected(void) {
  recap__op_call call = new_call("relu");
  add(&call, F32((int64_t)1 << 31, (int64_t)1 << 31)); /* 2^62 elements */
  expect_rejected(&call, "input 'x'");
  CHECK_ERROR_MENTIONS("2^62");
  recap__op_call ok = new_call("relu");
  add(&ok, F32((int64_t)1 << 31, ((int64_t)1 << 31) - 1));
  CHECK_OK(recap__op_infer(&ok));
  /* An output built from attributes is bounded too. */
  recap__op_call fill = new_call("fill");
  set_sizes(&fill.attrs, SHAPE((int64_t)1 << 21, (int64_t)1 << 21, (int64_t)1 << 21));
  expect_rejected(&fill, "output 0");
  CHECK_ERROR_MENTIONS("2^62");
}

/* ---- elementwise ---- */

static void test_binary_shapes_must_broadcast(void) {
  recap__op_call call = new_call("add");
  add(&call, F32(3, 4));
  add(&call, F32(5));
  expect_rejected(&call, "inputs 'a' [3, 4] and 'b' [5] are not broadcastable");

  recap__op_call good = new_call("mul");
  add(&good, F32(2, 1, 4, 1));
  add(&good, F32(3, 1, 5));
  CHECK_OK(recap__op_infer(&good));
  CU_ASSERT_EQUAL(good.outputs[0].ndim, 4);
  int64_t expect[4] = {2, 3, 4, 5}, strides[4] = {60, 20, 5, 1};
  CU_ASSERT_EQUAL(memcmp(good.outputs[0].shape, expect, sizeof expect), 0);
  CU_ASSERT_EQUAL(memcmp(good.outputs[0].strides, strides, sizeof strides), 0);

  recap__op_call mixed = new_call("sub");
  add(&mixed, F32(3));
  add(&mixed, desc(RECAP_DTYPE_F16, SHAPE(3)));
  expect_rejected(&mixed, "input 'b' has dtype f16");
}

static void test_cast_needs_a_float_target(void) {
  recap__op_call call = new_call("cast");
  add(&call, F32(3));
  call.attrs.dtype = RECAP_DTYPE_I32;
  expect_rejected(&call, "attribute 'dtype' = i32");
  call.attrs.dtype = RECAP_DTYPE_BF16;
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].dtype, RECAP_DTYPE_BF16);
  CU_ASSERT_EQUAL(call.def->in_place_input, -1);
}

/* ---- reductions ---- */

static void test_reductions_need_unit_stride_last_dim(void) {
  recap__op_call call = new_call("softmax");
  recap_tensor x = F32(4, 3);
  x.strides[0] = 1; /* a transposed view: the last dim has stride 4 */
  x.strides[1] = 4;
  add(&call, x);
  expect_rejected(&call, "input 'x' has stride 4 in its last dimension");
}

static void test_layernorm_weight_must_match_last_dim(void) {
  recap__op_call call = new_call("layernorm");
  add(&call, F32(2, 4));
  add(&call, F32(5));
  expect_rejected(&call, "input 'weight' has shape [5], expected [4]");
  recap__op_call bias = new_call("layernorm");
  add(&bias, F32(2, 4));
  add(&bias, F32(4));
  add(&bias, F32(1, 4));
  expect_rejected(&bias, "input 'bias' has shape [1, 4]");
  recap__op_call eps = new_call("rmsnorm");
  add(&eps, F32(2, 4));
  add(&eps, F32(4));
  eps.attrs.eps = -1;
  expect_rejected(&eps, "'eps'");
  recap__op_call dtype = new_call("rmsnorm");
  add(&dtype, F32(2, 4));
  add(&dtype, desc(RECAP_DTYPE_BF16, SHAPE(4)));
  expect_rejected(&dtype, "input 'weight' has dtype bf16");
}

static void test_sum_drops_the_last_dim(void) {
  recap__op_call call = new_call("sum");
  add(&call, F32(2, 3, 5));
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].ndim, 2);
  CU_ASSERT_EQUAL(call.outputs[0].shape[1], 3);
  recap__op_call one = new_call("mean");
  add(&one, F32(7));
  CHECK_OK(recap__op_infer(&one));
  CU_ASSERT_EQUAL(one.outputs[0].ndim, 1);
  CU_ASSERT_EQUAL(one.outputs[0].shape[0], 1);
}

/* ---- shape ops ---- */

static void test_reshape_checks_element_count(void) {
  recap__op_call call = new_call("reshape");
  add(&call, F32(3, 4));
  set_sizes(&call.attrs, SHAPE(5, 2));
  expect_rejected(&call, "attribute 'shape' has 10 elements, input 'x' [3, 4] has 12");
  set_sizes(&call.attrs, SHAPE(-1, -1));
  expect_rejected(&call, "entry 1 is -1");
  set_sizes(&call.attrs, SHAPE(5, -1));
  expect_rejected(&call, "not a multiple of 5");
  set_sizes(&call.attrs, SHAPE((int64_t)1 << 40, -1));
  expect_rejected(&call, "more elements");
  set_sizes(&call.attrs, SHAPE(2, -1, 3));
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].shape[1], 2);
}

static void test_permute_needs_a_permutation(void) {
  recap__op_call call = new_call("permute");
  add(&call, F32(2, 3, 4));
  set_sizes(&call.attrs, SHAPE(0, 1));
  expect_rejected(&call, "'dims' has 2 entries");
  set_sizes(&call.attrs, SHAPE(0, 2, -1));
  expect_rejected(&call, "names axis 2 twice");
  set_sizes(&call.attrs, SHAPE(0, 3, 1));
  expect_rejected(&call, "'dims' = 3 is out of range");
  set_sizes(&call.attrs, SHAPE(2, 0, 1));
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].shape[0], 4);
  recap__op_call t = new_call("transpose");
  add(&t, F32(5));
  expect_rejected(&t, "'dim0' = -2 is out of range");
}

static void test_slice_out_of_range_is_rejected(void) {
  recap__op_call call = new_call("slice");
  add(&call, F32(2, 7));
  call.attrs.dim = 1;
  call.attrs.start = 5;
  call.attrs.end = 9;
  expect_rejected(&call, "slice [5, 9) is out of range for dimension 1 of input 'x' [2, 7]");
  call.attrs.start = 4;
  call.attrs.end = 4;
  expect_rejected(&call, "out of range");
  call.attrs.dim = 2;
  expect_rejected(&call, "attribute 'dim' = 2");
  call.attrs.dim = -1;
  call.attrs.start = -3;
  call.attrs.end = 7;
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].shape[1], 3);
  CU_ASSERT_EQUAL(call.attrs.start, 4); /* normalized for the launchers */
  CU_ASSERT_EQUAL(call.attrs.dim, 1);
}

static void test_split_sizes_must_sum_to_the_dim(void) {
  recap__op_call call = new_call("split");
  add(&call, F32(6, 2));
  set_sizes(&call.attrs, SHAPE(2, 3));
  expect_rejected(&call, "sums to 5");
  set_sizes(&call.attrs, SHAPE(2, 5));
  expect_rejected(&call, "entry 1 is 5");
  set_sizes(&call.attrs, SHAPE(1, 1, 1, 3));
  call.attrs.num_sizes = 5; /* more parts than outputs (and than `sizes` holds) */
  expect_rejected(&call, "5 entries");
  set_sizes(&call.attrs, SHAPE(1, 2, 3));
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.num_outputs, 3);
  CU_ASSERT_EQUAL(call.outputs[2].shape[0], 3);
}

static void test_concat_needs_matching_dims(void) {
  recap__op_call call = new_call("concat");
  add(&call, F32(2, 4));
  add(&call, F32(2, 5));
  call.attrs.dim = 0;
  expect_rejected(&call, "input 'x1' [2, 5] does not match input 'x0' [2, 4] in dimension 1");
  recap__op_call rank = new_call("concat");
  add(&rank, F32(2, 4));
  add(&rank, F32(2, 4, 1));
  expect_rejected(&rank, "input 'x1' [2, 4, 1] has 3 dims");
  recap__op_call one = new_call("concat");
  add(&one, F32(2, 4));
  expect_rejected(&one, "takes 2 to 8 inputs");
  recap__op_call good = new_call("concat");
  add(&good, F32(2, 4));
  add(&good, F32(2, 5));
  add(&good, F32(2, 1));
  good.attrs.dim = -1;
  CHECK_OK(recap__op_infer(&good));
  CU_ASSERT_EQUAL(good.outputs[0].shape[1], 10);
}

static void test_fill_value_must_fit_an_integer_dtype(void) {
  recap__op_call call = new_call("fill");
  set_sizes(&call.attrs, SHAPE(3));
  call.attrs.dtype = RECAP_DTYPE_I32;
  call.attrs.value = 1.5;
  expect_rejected(&call, "'value' = 1.5 is not an i32 value");
  call.attrs.value = 3e9;
  expect_rejected(&call, "not an i32 value");
  call.attrs.value = -7;
  CHECK_OK(recap__op_infer(&call));
  set_sizes(&call.attrs, SHAPE(3, 0));
  expect_rejected(&call, "'shape' entry 1 is 0");
}

/* A finite value that the output's float type would turn into inf is refused (f16's largest
 * finite value is 65504, and 65520 is where rounding to nearest reaches 2^16 = inf); an
 * explicit infinity stays allowed, as a mask is written. */
static void test_fill_value_must_stay_finite_in_a_float_dtype(void) {
  recap__op_call call = new_call("fill");
  set_sizes(&call.attrs, SHAPE(3));
  call.attrs.dtype = RECAP_DTYPE_F16;
  call.attrs.value = 1e10;
  expect_rejected(&call, "'value' = 1e+10 becomes inf in f16 (its largest finite value is 65504)");
  call.attrs.value = -65520;
  expect_rejected(&call, "becomes -inf in f16");
  call.attrs.value = 65519;
  CHECK_OK(recap__op_infer(&call));
  call.attrs.value = -INFINITY;
  CHECK_OK(recap__op_infer(&call));
  call.attrs.dtype = RECAP_DTYPE_BF16;
  call.attrs.value = 3.4e38; /* finite in f32 (up to 3.4028e38), past bf16's 3.3895e38 */
  expect_rejected(&call, "becomes inf in bf16");
  call.attrs.dtype = RECAP_DTYPE_F32;
  CHECK_OK(recap__op_infer(&call));
  call.attrs.value = 1e39;
  expect_rejected(&call, "becomes inf in f32");
}

static void test_embedding_needs_integer_ids_and_a_2d_table(void) {
  recap__op_call call = new_call("embedding");
  add(&call, F32(10, 4));
  add(&call, F32(3));
  expect_rejected(&call, "input 'ids' has dtype f32, expected i32 or i64");
  recap__op_call table = new_call("embedding");
  add(&table, F32(10, 4, 2));
  add(&table, I32(3));
  expect_rejected(&table, "input 'table' has 3 dims");
  recap__op_call good = new_call("embedding");
  add(&good, F32(10, 4));
  add(&good, desc(RECAP_DTYPE_I64, SHAPE(2, 3)));
  CHECK_OK(recap__op_infer(&good));
  CU_ASSERT_EQUAL(good.outputs[0].ndim, 3);
  CU_ASSERT_EQUAL(good.outputs[0].shape[2], 4);
}

static void test_rope_needs_even_head_dim_and_matching_positions(void) {
  recap__op_call call = new_call("rope");
  add(&call, F32(2, 5, 3, 7));
  add(&call, I32(5));
  expect_rejected(&call, "odd head dimension 7");
  recap__op_call pos = new_call("rope");
  add(&pos, F32(2, 5, 3, 8));
  add(&pos, I32(4));
  expect_rejected(&pos, "input 'positions' [4] must be [5]");
  recap__op_call dt = new_call("rope");
  add(&dt, F32(5, 3, 8));
  add(&dt, desc(RECAP_DTYPE_I64, SHAPE(5)));
  expect_rejected(&dt, "input 'positions' has dtype i64, expected i32");
}

static recap__op_call rope_call(void) {
  recap__op_call call = new_call("rope");
  add(&call, F32(1, 4, 2, 8));
  add(&call, I32(1));
  return call;
}

static recap__op_call llama3_call(double factor, double low, double high, int64_t original) {
  recap__op_call call = rope_call();
  call.attrs.rope_theta = 500000.0;
  call.attrs.rope_llama3 = 1;
  call.attrs.rope_factor = factor;
  call.attrs.rope_low_freq_factor = low;
  call.attrs.rope_high_freq_factor = high;
  call.attrs.rope_original_max = original;
  return call;
}

static void test_rope_theta_and_base_give_one_theta(void) {
  recap__op_call theta = rope_call();
  theta.attrs.rope_theta = 10000.5;
  CHECK_OK(recap__op_infer(&theta));
  CU_ASSERT_DOUBLE_EQUAL(recap__rope_theta(&theta.attrs), 10000.5, 0);
  recap__op_call base = rope_call();
  base.attrs.rope_base = 1000000;
  CHECK_OK(recap__op_infer(&base));
  CU_ASSERT_DOUBLE_EQUAL(recap__rope_theta(&base.attrs), 1e6, 0);

  recap__op_call both = rope_call();
  both.attrs.rope_theta = 500000.0;
  both.attrs.rope_base = 10000;
  expect_rejected(&both, "attributes 'theta' (500000) and 'base' (10000) are both given");
  recap__op_call one = rope_call();
  one.attrs.rope_theta = 1.0;
  expect_rejected(&one, "attribute 'theta' = 1 must be > 1");
  recap__op_call nan_theta = rope_call();
  nan_theta.attrs.rope_theta = NAN;
  expect_rejected(&nan_theta, "attribute 'theta' = nan must be > 1");
  recap__op_call huge = rope_call();
  huge.attrs.rope_theta = 1e300; /* no f32 holds it */
  expect_rejected(&huge, "attribute 'theta' = 1e+300 must be > 1 (and a finite f32)");
  recap__op_call low_base = rope_call();
  low_base.attrs.rope_base = 1;
  expect_rejected(&low_base, "attribute 'base' = 1 must be >= 2");
}

static void test_rope_llama3_needs_valid_parameters(void) {
  recap__op_call good = llama3_call(32, 1, 4, 8192);
  CHECK_OK(recap__op_infer(&good));

  recap__op_call missing = llama3_call(8, 1, 4, 8192);
  missing.attrs.rope_factor = 0;
  expect_rejected(&missing, "attribute 'factor' = 0 must be > 0");
  CHECK_ERROR_MENTIONS(
      "llama3 needs factor, low_freq_factor, high_freq_factor and "
      "original_max_positions");
  recap__op_call negative = llama3_call(-8, 1, 4, 8192);
  expect_rejected(&negative, "attribute 'factor' = -8 must be > 0");
  recap__op_call low = llama3_call(8, 0, 4, 8192);
  expect_rejected(&low, "attribute 'low_freq_factor' = 0 must be > 0");
  recap__op_call order = llama3_call(8, 4, 4, 8192);
  expect_rejected(&order,
                  "attribute 'high_freq_factor' = 4 must be greater than 'low_freq_factor' = 4");
  recap__op_call swapped = llama3_call(8, 4, 1, 8192);
  expect_rejected(&swapped, "attribute 'high_freq_factor' = 1 must be greater than");
  recap__op_call original = llama3_call(8, 1, 4, -1);
  expect_rejected(&original, "attribute 'original_max_positions' = -1 must be > 0");
  recap__op_call nan_high = llama3_call(8, 1, NAN, 8192);
  expect_rejected(&nan_high, "attribute 'high_freq_factor' = nan must be > 0");

  /* The scaling's parameters without llama3 would be ignored: refused instead. */
  recap__op_call stray = rope_call();
  stray.attrs.rope_factor = 8;
  expect_rejected(&stray, "attribute 'factor' applies only with llama3: true");
  recap__op_call stray_max = rope_call();
  stray_max.attrs.rope_original_max = 8192;
  expect_rejected(&stray_max, "attribute 'original_max_positions' applies only with llama3: true");
}

static void test_kv_append_checks_cache_rows_and_position(void) {
  recap__op_call call = new_call("kv_append");
  add(&call, F32(1, 16, 4, 8));
  add(&call, F32(1, 2, 3, 8));
  add(&call, I32(1));
  expect_rejected(&call,
                  "input 'new' [1, 2, 3, 8] does not match input 'cache' [1, 16, 4, 8] "
                  "in dimension 2");
  recap__op_call pos = new_call("kv_append");
  add(&pos, F32(1, 16, 4, 8));
  add(&pos, F32(1, 2, 4, 8));
  add(&pos, I32(2));
  expect_rejected(&pos, "input 'pos' has shape [2], expected [1]");
  recap__op_call big = new_call("kv_append");
  add(&big, F32(1, 16, 4, 8));
  add(&big, F32(1, 17, 4, 8));
  add(&big, I32(1));
  expect_rejected(&big, "more rows");
  recap__op_call good = new_call("kv_append");
  add(&good, F32(1, 16, 4, 8));
  add(&good, F32(1, 2, 4, 8));
  add(&good, I32(1));
  CHECK_OK(recap__op_infer(&good));
  CU_ASSERT_EQUAL(good.outputs[0].shape[1], 16); /* the output is the cache */
  CU_ASSERT_EQUAL(good.def->in_place_input, 0);
}

static void test_attention_checks_heads_and_kv_shapes(void) {
  recap__op_call call = new_call("attention");
  add(&call, F32(1, 6, 3, 8));
  add(&call, F32(1, 4, 5, 8));
  add(&call, F32(1, 4, 5, 8));
  expect_rejected(&call, "6 heads, not a multiple of the 4 heads");
  recap__op_call kv = new_call("attention");
  add(&kv, F32(1, 4, 3, 8));
  add(&kv, F32(1, 4, 5, 8));
  add(&kv, F32(1, 4, 6, 8));
  expect_rejected(&kv, "inputs 'k' [1, 4, 5, 8] and 'v' [1, 4, 6, 8]");
  recap__op_call hd = new_call("attention");
  add(&hd, F32(1, 4, 3, 8));
  add(&hd, F32(1, 4, 5, 16));
  add(&hd, F32(1, 4, 5, 16));
  expect_rejected(&hd, "batch or head_dim");
  recap__op_call len = new_call("attention");
  add(&len, F32(1, 4, 3, 8));
  add(&len, F32(1, 2, 5, 8));
  add(&len, F32(1, 2, 5, 8));
  add(&len, F32(1));
  expect_rejected(&len, "input 'len' has dtype f32, expected i32");
  len.inputs[3].dtype = RECAP_DTYPE_I32;
  CHECK_OK(recap__op_infer(&len));
  CU_ASSERT_EQUAL(len.outputs[0].shape[1], 4);
}

static void test_random_checks_bounds(void) {
  recap__op_call call = new_call("random_uniform");
  set_sizes(&call.attrs, SHAPE(4, 4));
  call.attrs.low = 2;
  call.attrs.high = 2;
  expect_rejected(&call, "'low' = 2 and 'high' = 2");
  call.attrs.high = INFINITY;
  expect_rejected(&call, "finite");
  recap__op_call normal = new_call("random_normal");
  set_sizes(&normal.attrs, SHAPE(4));
  normal.attrs.std = -1;
  expect_rejected(&normal, "'std' = -1");
  recap__op_call shape = new_call("random_normal");
  expect_rejected(&shape, "'shape' has 0 entries");
}

int main(void) {
  CU_pSuite s = test_add_suite("ops/infer", NULL, NULL);
  CU_ADD_TEST(s, test_op_list_holds_every_op_once_with_complete_defs);
  CU_ADD_TEST(s, test_op_find_unknown_name_returns_null_with_message);
  CU_ADD_TEST(s, test_attr_defaults_are_applied);
  CU_ADD_TEST(s, test_dtype_names_sizes_and_parse);
  CU_ADD_TEST(s, test_wrong_input_count_is_rejected);
  CU_ADD_TEST(s, test_unsupported_dtype_is_rejected);
  CU_ADD_TEST(s, test_malformed_input_shapes_are_rejected);
  CU_ADD_TEST(s, test_element_count_overflow_is_rejected);
  CU_ADD_TEST(s, test_binary_shapes_must_broadcast);
  CU_ADD_TEST(s, test_cast_needs_a_float_target);
  CU_ADD_TEST(s, test_reductions_need_unit_stride_last_dim);
  CU_ADD_TEST(s, test_layernorm_weight_must_match_last_dim);
  CU_ADD_TEST(s, test_sum_drops_the_last_dim);
  CU_ADD_TEST(s, test_reshape_checks_element_count);
  CU_ADD_TEST(s, test_permute_needs_a_permutation);
  CU_ADD_TEST(s, test_slice_out_of_range_is_rejected);
  CU_ADD_TEST(s, test_split_sizes_must_sum_to_the_dim);
  CU_ADD_TEST(s, test_concat_needs_matching_dims);
  CU_ADD_TEST(s, test_fill_value_must_fit_an_integer_dtype);
  CU_ADD_TEST(s, test_fill_value_must_stay_finite_in_a_float_dtype);
  CU_ADD_TEST(s, test_embedding_needs_integer_ids_and_a_2d_table);
  CU_ADD_TEST(s, test_rope_needs_even_head_dim_and_matching_positions);
  CU_ADD_TEST(s, test_rope_theta_and_base_give_one_theta);
  CU_ADD_TEST(s, test_rope_llama3_needs_valid_parameters);
  CU_ADD_TEST(s, test_kv_append_checks_cache_rows_and_position);
  CU_ADD_TEST(s, test_attention_checks_heads_and_kv_shapes);
  CU_ADD_TEST(s, test_random_checks_bounds);
  return test_run_all();
}
