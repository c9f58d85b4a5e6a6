/* The public op API of include/recap.h: the registry's info (recap_op_info, recap_op_attr_info)
 * checked against the contracts of a few ops by hand, and single ops run on the host backend
 * (recap_op_run, recap_op_create/launch) against hand-computed values. Uses recap.h only, as an
 * embedder would. */
#include <stdlib.h>
#include <string.h>

#include "include/recap.h"
#include "tests/test_util.h"

static void test_every_op_is_listed_once_and_found_by_its_name(void) {
  size_t count = recap_op_count();
  CU_ASSERT_TRUE(count >= 30);
  for (size_t i = 0; i < count; i++) {
    recap_op_info op, found;
    CHECK_OK(recap_op_info_get(i, &op));
    CU_ASSERT_EQUAL(op.index, i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(op.name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(op.input_names);
    CHECK_OK(recap_op_info_find(op.name, &found));
    CU_ASSERT_EQUAL(found.index, i);
    int named = 0;
    while (op.input_names[named]) named++;
    CU_ASSERT_TRUE(op.min_inputs <= op.max_inputs && op.max_inputs <= named);
    for (size_t a = 0; a < op.num_attrs; a++) {
      recap_op_attr_info attr;
      CHECK_OK(recap_op_attr_info_get(i, a, &attr));
      CU_ASSERT_PTR_NOT_NULL(attr.name);
      CU_ASSERT_TRUE(attr.default_text[0] != '\0');
    }
    CHECK_STATUS(recap_op_attr_info_get(i, op.num_attrs, &(recap_op_attr_info){0}),
                 RECAP_STATUS_INVALID_ARGUMENT);
  }
  CHECK_STATUS(recap_op_info_get(count, &(recap_op_info){0}), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_op_info_get(0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
}

/* linear: x, weight, bias?, residual?, norm_weight?; float dtypes; attributes act (none),
 * residual (false), and the prologues rms_norm (false), eps (1e-6) and glu (none). */
static void test_linear_is_described_as_its_contract_says(void) {
  recap_op_info op;
  CHECK_OK(recap_op_info_find("linear", &op));
  CU_ASSERT_STRING_EQUAL(op.name, "linear");
  CU_ASSERT_PTR_NOT_NULL(strstr(op.summary, "weight"));
  CU_ASSERT_STRING_EQUAL(op.input_names[0], "x");
  CU_ASSERT_STRING_EQUAL(op.input_names[1], "weight");
  CU_ASSERT_STRING_EQUAL(op.input_names[2], "bias?");
  CU_ASSERT_STRING_EQUAL(op.input_names[3], "residual?");
  CU_ASSERT_STRING_EQUAL(op.input_names[4], "norm_weight?");
  CU_ASSERT_PTR_NULL(op.input_names[5]);
  CU_ASSERT_EQUAL(op.min_inputs, 2);
  CU_ASSERT_EQUAL(op.max_inputs, 5);
  CU_ASSERT_EQUAL(op.num_outputs, 1);
  CU_ASSERT_EQUAL(op.dtype_mask,
                  (1u << RECAP_DTYPE_F32) | (1u << RECAP_DTYPE_F16) | (1u << RECAP_DTYPE_BF16));
  CU_ASSERT_EQUAL(op.in_place_input, -1);
  CU_ASSERT_FALSE(op.is_random);
  CU_ASSERT_EQUAL_FATAL(op.num_attrs, 6);
  recap_op_attr_info act, residual;
  CHECK_OK(recap_op_attr_info_get(op.index, 0, &act));
  CU_ASSERT_STRING_EQUAL(act.name, "act");
  CU_ASSERT_EQUAL(act.kind, RECAP_OP_ATTR_ACTIVATION);
  CU_ASSERT_FALSE(act.required);
  CU_ASSERT_EQUAL(act.default_value, 0);
  CU_ASSERT_STRING_EQUAL(act.default_text, "none");
  CU_ASSERT_PTR_NOT_NULL(strstr(act.doc, "gelu_tanh"));
  CHECK_OK(recap_op_attr_info_get(op.index, 1, &residual));
  CU_ASSERT_STRING_EQUAL(residual.name, "residual");
  CU_ASSERT_EQUAL(residual.kind, RECAP_OP_ATTR_BOOL);
  CU_ASSERT_FALSE(residual.required);
  CU_ASSERT_EQUAL(residual.default_value, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(residual.doc, "without a bias"));
  recap_op_attr_info rms_norm, eps, glu;
  CHECK_OK(recap_op_attr_info_get(op.index, 2, &rms_norm));
  CU_ASSERT_STRING_EQUAL(rms_norm.name, "rms_norm");
  CU_ASSERT_EQUAL(rms_norm.kind, RECAP_OP_ATTR_BOOL);
  CU_ASSERT_EQUAL(rms_norm.default_value, 0);
  CHECK_OK(recap_op_attr_info_get(op.index, 3, &eps));
  CU_ASSERT_STRING_EQUAL(eps.name, "eps");
  CU_ASSERT_DOUBLE_EQUAL(eps.default_value, 1e-6, 1e-12);
  CHECK_OK(recap_op_attr_info_get(op.index, 4, &glu));
  CU_ASSERT_STRING_EQUAL(glu.name, "glu");
  CU_ASSERT_EQUAL(glu.kind, RECAP_OP_ATTR_ACTIVATION);
  CU_ASSERT_STRING_EQUAL(glu.default_text, "none");
  recap_op_attr_info gated;
  CHECK_OK(recap_op_attr_info_get(op.index, 5, &gated));
  CU_ASSERT_STRING_EQUAL(gated.name, "gated");
  CU_ASSERT_EQUAL(gated.kind, RECAP_OP_ATTR_ACTIVATION);
  CU_ASSERT_STRING_EQUAL(gated.default_text, "none");
  CU_ASSERT_PTR_NOT_NULL(strstr(gated.doc, "[2F, K]"));
}

/* matmul's attributes: alpha 1, beta 0, trans_a and trans_b false. */
static void test_matmul_attributes_have_their_defaults(void) {
  recap_op_info op;
  CHECK_OK(recap_op_info_find("matmul", &op));
  CU_ASSERT_EQUAL_FATAL(op.num_attrs, 4);
  static const struct {
    const char *name;
    recap_op_attr_kind kind;
    double value;
    const char *text;
  } want[] = {{"alpha", RECAP_OP_ATTR_FLOAT, 1, "1"},
              {"beta", RECAP_OP_ATTR_FLOAT, 0, "0"},
              {"trans_a", RECAP_OP_ATTR_BOOL, 0, "false"},
              {"trans_b", RECAP_OP_ATTR_BOOL, 0, "false"}};
  for (size_t a = 0; a < 4; a++) {
    recap_op_attr_info attr;
    CHECK_OK(recap_op_attr_info_get(op.index, a, &attr));
    CU_ASSERT_STRING_EQUAL(attr.name, want[a].name);
    CU_ASSERT_EQUAL(attr.kind, want[a].kind);
    CU_ASSERT_FALSE(attr.required);
    CU_ASSERT_EQUAL(attr.default_value, want[a].value);
    CU_ASSERT_STRING_EQUAL(attr.default_text, want[a].text);
  }
}

/* An op without inputs that draws random numbers; an unknown name suggests a close one. */
static void test_random_ops_and_unknown_names(void) {
  recap_op_info op;
  CHECK_OK(recap_op_info_find("random_uniform", &op));
  CU_ASSERT_TRUE(op.is_random);
  CU_ASSERT_EQUAL(op.max_inputs, 0);
  CU_ASSERT_PTR_NULL(op.input_names[0]);
  CHECK_STATUS(recap_op_info_find("sofmax", &op), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "softmax"));
  CHECK_STATUS(recap_op_info_find(NULL, &op), RECAP_STATUS_INVALID_ARGUMENT);
}

/* ---- single ops on the host backend ---- */

static recap_stream *host_stream(void) {
  recap_stream *s = NULL;
  recap_device dev = {.backend = RECAP_BACKEND_HOST};
  CHECK_OK(recap_stream_create(dev, 0, RECAP_STREAM_NON_BLOCKING, &s));
  return s;
}

static recap_tensor f32(float *data, int64_t rows, int64_t cols) {
  return (recap_tensor){.data = data,
                        .dtype = RECAP_DTYPE_F32,
                        .ndim = 2,
                        .shape = {rows, cols},
                        .strides = {cols, 1}};
}

static void expect_floats(const float *got, const float *want, int n) {
  for (int i = 0; i < n; i++) CU_ASSERT_DOUBLE_EQUAL(got[i], want[i], 1e-6);
}

/* add and relu, one call each: values, and the output's inferred shape written back. */
static void test_run_add_and_relu(void) {
  recap_stream *s = host_stream();
  float x[6] = {1, -2, 3, -4, 5, -6}, y[6] = {10, 20, 30, 40, 50, 60}, z[6] = {0}, r[6] = {0};
  recap_tensor in[2] = {f32(x, 2, 3), f32(y, 2, 3)}, out = {.data = z};
  recap_op_args args = {.inputs = in, .num_inputs = 2, .outputs = &out, .num_outputs = 1};
  CHECK_OK(recap_op_run("add", &args, s));
  CU_ASSERT_EQUAL(out.dtype, RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(out.ndim, 2);
  CU_ASSERT_EQUAL(out.shape[0], 2);
  CU_ASSERT_EQUAL(out.shape[1], 3);
  CU_ASSERT_EQUAL(out.strides[0], 3);
  CU_ASSERT_EQUAL(out.strides[1], 1);
  CU_ASSERT_PTR_EQUAL(out.data, z);
  recap_tensor relu_out = {.data = r};
  args = (recap_op_args){.inputs = in, .num_inputs = 1, .outputs = &relu_out, .num_outputs = 1};
  CHECK_OK(recap_op_run("relu", &args, s));
  CHECK_OK(recap_stream_synchronize(s));
  expect_floats(z, (const float[]){11, 18, 33, 36, 55, 54}, 6);
  expect_floats(r, (const float[]){1, 0, 3, 0, 5, 0}, 6);
  CHECK_OK(recap_stream_destroy(s));
}

/* Attributes by name: linear's act and residual, matmul's alpha and trans_b, an expression. */
static void test_attributes_are_given_by_name(void) {
  recap_stream *s = host_stream();
  /* linear: [1, -2] x [[1, 2], [3, 4]]^T = [-3, -5]; + bias [1, 10] = [-2, 5]; relu: [0, 5]. */
  float x[2] = {1, -2}, w[4] = {1, 2, 3, 4}, b[2] = {1, 10}, y[2] = {-1, -1};
  recap_tensor in[3] = {
      f32(x, 1, 2),
      f32(w, 2, 2),
      {.data = b, .dtype = RECAP_DTYPE_F32, .ndim = 1, .shape = {2}, .strides = {1}}};
  recap_tensor out = {.data = y};
  recap_op_attr relu[] = {{"act", "relu"}};
  recap_op_args args = {.inputs = in,
                        .num_inputs = 3,
                        .outputs = &out,
                        .num_outputs = 1,
                        .attrs = relu,
                        .num_attrs = 1};
  CHECK_OK(recap_op_run("linear", &args, s));
  /* linear without a bias, its third input the residual: [-3, -5] + [10, 20] = [7, 15]. */
  float r[2] = {10, 20}, yr[2] = {-1, -1};
  in[2] = f32(r, 1, 2);
  recap_tensor rout = {.data = yr};
  recap_op_attr with_residual[] = {{"residual", "true"}};
  args = (recap_op_args){.inputs = in,
                         .num_inputs = 3,
                         .outputs = &rout,
                         .num_outputs = 1,
                         .attrs = with_residual,
                         .num_attrs = 1};
  CHECK_OK(recap_op_run("linear", &args, s));
  /* matmul: 2 * [1, 2] x [[1, 1], [2, 0]]^T = 2 * [3, 2] = [6, 4]. */
  float a[2] = {1, 2}, bm[4] = {1, 1, 2, 0}, m[2] = {0};
  recap_tensor min[2] = {f32(a, 1, 2), f32(bm, 2, 2)}, mout = {.data = m};
  recap_op_attr mattrs[] = {{"trans_b", "true"}, {"alpha", "2"}};
  args = (recap_op_args){.inputs = min,
                         .num_inputs = 2,
                         .outputs = &mout,
                         .num_outputs = 1,
                         .attrs = mattrs,
                         .num_attrs = 2};
  CHECK_OK(recap_op_run("matmul", &args, s));
  /* expr: in0 * 2 + in1 = [1 * 2 + 3, 2 * 2 + 4]. */
  float p[2] = {1, 2}, q[2] = {3, 4}, e[2] = {0};
  recap_tensor ein[2] = {f32(p, 1, 2), f32(q, 1, 2)}, eout = {.data = e};
  recap_op_attr expr[] = {{"expr", "in0 * 2 + in1"}};
  args = (recap_op_args){.inputs = ein,
                         .num_inputs = 2,
                         .outputs = &eout,
                         .num_outputs = 1,
                         .attrs = expr,
                         .num_attrs = 1};
  CHECK_STATUS(recap_op_run("expr", &args, s), RECAP_STATUS_INVALID_ARGUMENT);
  recap_op *op = NULL;
  CHECK_OK(recap_op_create("expr", &args, &op));
  CHECK_OK(recap_op_launch(op, s));
  CHECK_OK(recap_stream_synchronize(s));
  recap_op_destroy(op);
  expect_floats(y, (const float[]){0, 5}, 2);
  expect_floats(yr, (const float[]){7, 15}, 2);
  expect_floats(m, (const float[]){6, 4}, 2);
  expect_floats(e, (const float[]){5, 8}, 2);
  CHECK_OK(recap_stream_destroy(s));
}

/* An op without inputs: its shape and bounds as attributes, its dtype the default (f32). */
static void test_random_uniform_takes_shape_and_bounds(void) {
  recap_stream *s = host_stream();
  float v[6] = {0};
  recap_tensor out = {.data = v};
  recap_op_attr attrs[] = {{"shape", "[2, 3]"}, {"low", "5"}, {"high", "6"}};
  recap_op_args args = {.outputs = &out, .num_outputs = 1, .attrs = attrs, .num_attrs = 3};
  CHECK_OK(recap_op_run("random_uniform", &args, s));
  CHECK_OK(recap_stream_synchronize(s));
  CU_ASSERT_EQUAL(out.dtype, RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(out.ndim, 2);
  CU_ASSERT_EQUAL(out.shape[0], 2);
  CU_ASSERT_EQUAL(out.shape[1], 3);
  for (int i = 0; i < 6; i++) CU_ASSERT_TRUE(v[i] >= 5 && v[i] < 6);
  attrs[0].value = "[2, x]";
  CHECK_STATUS(recap_op_run("random_uniform", &args, s), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_stream_destroy(s));
}

/* Created once (shapes learned with no output memory), launched twice; the errors. */
static void test_create_once_launch_many_and_errors(void) {
  recap_stream *s = host_stream();
  float x[4] = {-1, 2, -3, 4}, y[4] = {0};
  recap_tensor in = f32(x, 2, 2), out = {0};
  recap_op_args args = {.inputs = &in, .num_inputs = 1, .outputs = &out, .num_outputs = 1};
  recap_op *op = NULL;
  CHECK_OK(recap_op_create("neg", &args, &op));
  CU_ASSERT_EQUAL(out.shape[0], 2);
  CU_ASSERT_EQUAL(out.shape[1], 2);
  CHECK_STATUS(recap_op_launch(op, s), RECAP_STATUS_INVALID_ARGUMENT); /* no output memory */
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "output 0 has no memory"));
  recap_op_destroy(op);
  out.data = y;
  CHECK_OK(recap_op_create("neg", &args, &op));
  CHECK_OK(recap_op_launch(op, s));
  CHECK_OK(recap_op_launch(op, s));
  CHECK_OK(recap_stream_synchronize(s));
  expect_floats(y, (const float[]){1, -2, 3, -4}, 4);
  recap_op_destroy(op);
  recap_op_destroy(NULL);

  CHECK_STATUS(recap_op_create("nope", &args, &op), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(op);
  recap_op_attr unknown[] = {{"alpha", "2"}};
  args.attrs = unknown, args.num_attrs = 1;
  CHECK_STATUS(recap_op_create("neg", &args, &op), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "no attribute 'alpha'"));
  recap_tensor two[2] = {in, in};
  args = (recap_op_args){.inputs = two,
                         .num_inputs = 2,
                         .outputs = &out,
                         .num_outputs = 1,
                         .attrs = (recap_op_attr[]){{"alpha", "two"}},
                         .num_attrs = 1};
  CHECK_STATUS(recap_op_create("matmul", &args, &op), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "attribute 'alpha'"));
  args.attrs = (recap_op_attr[]){{NULL, "1"}};
  CHECK_STATUS(recap_op_create("matmul", &args, &op), RECAP_STATUS_INVALID_ARGUMENT);
  args.num_attrs = 0;
  CHECK_STATUS(recap_op_create("expr", &args, &op), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "'expr' is required"));
  args.attrs = (recap_op_attr[]){{"expr", "in0 +"}}, args.num_attrs = 1;
  CHECK_STATUS(recap_op_create("expr", &args, &op), RECAP_STATUS_SPEC_ERROR);
  args.attrs = NULL, args.num_attrs = 0, args.num_outputs = 0;
  CHECK_STATUS(recap_op_create("add", &args, &op), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_stream_destroy(s));
}

/* argmax over rows of Llama 3's 128256 logits: at 2 rows the op asks for call state (its CUDA
 * kernel's row slices), which the first launch allocates; the token is where the hand put the
 * largest logit. Launched the first time inside a capture, such an op is refused. */
static void test_ops_with_call_state_get_it_at_their_first_launch(void) {
  enum { VOCAB = 128256 };
  recap_stream *s = host_stream();
  float *x = calloc(2 * VOCAB, sizeof *x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  x[77777] = 3, x[VOCAB + 5] = 2, x[VOCAB + 128000] = 2; /* row 1: a tie, to the lower id */
  int32_t tokens[2] = {-1, -1};
  recap_tensor in = f32(x, 2, VOCAB), out = {.data = tokens};
  recap_op_args args = {.inputs = &in, .num_inputs = 1, .outputs = &out, .num_outputs = 1};
  recap_op *op = NULL;
  CHECK_OK(recap_op_create("argmax", &args, &op));
  for (int launch = 0; launch < 2; ++launch) {
    tokens[0] = tokens[1] = -1;
    CHECK_OK(recap_op_launch(op, s));
    CHECK_OK(recap_stream_synchronize(s));
    CU_ASSERT_EQUAL(tokens[0], 77777);
    CU_ASSERT_EQUAL(tokens[1], 5);
  }
  recap_op_destroy(op);

  recap_graph *g = NULL;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_op_create("argmax", &args, &op));
  CHECK_OK(recap_graph_capture_begin(g, s, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_STATUS(recap_op_launch(op, s), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "launch it once before capturing"));
  recap_graph_capture_end(g);
  recap_op_destroy(op);
  CHECK_OK(recap_graph_destroy(g));
  free(x);
  CHECK_OK(recap_stream_destroy(s));
}

int main(void) {
  CU_pSuite s = test_add_suite("op_api/info", NULL, NULL);
  CU_ADD_TEST(s, test_every_op_is_listed_once_and_found_by_its_name);
  CU_ADD_TEST(s, test_linear_is_described_as_its_contract_says);
  CU_ADD_TEST(s, test_matmul_attributes_have_their_defaults);
  CU_ADD_TEST(s, test_random_ops_and_unknown_names);
  CU_pSuite run = test_add_suite("op_api/run_host", NULL, NULL);
  CU_ADD_TEST(run, test_run_add_and_relu);
  CU_ADD_TEST(run, test_attributes_are_given_by_name);
  CU_ADD_TEST(run, test_random_uniform_takes_shape_and_bounds);
  CU_ADD_TEST(run, test_create_once_launch_many_and_errors);
  CU_ADD_TEST(run, test_ops_with_call_state_get_it_at_their_first_launch);
  return test_run_all();
}
