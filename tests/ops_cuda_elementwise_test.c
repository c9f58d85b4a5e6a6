/*
 * ops_cuda_elementwise_test.c: the elementwise ops on CUDA against the host reference
 * (ops_cuda_util.h): unary ops, casts between every float pair, binary ops with broadcasting
 * and views, the dense paths at offsets and odd sizes, and the broadcast fast paths.
 *
 * The CUDA suite is inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"

/* ------------------------------------------------------------------------------------------
 * Elementwise
 * ---------------------------------------------------------------------------------------- */

/* The unary inputs: odd sizes (one above 2^20), a transposed view, and a view one element
 * into its storage (so the vector path must not be taken). */
static void unary_inputs(recap_dtype dtype, tbuf *out, int *count) {
  static const int64_t sizes[] = {1, 7, 1023, 4097, (1 << 20) + 5};
  int n = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    out[n++] = make_contiguous(dtype, 1, &sizes[i], -3, 3);
  const int64_t tshape[] = {129, 37}, tstrides[] = {1, 129};
  out[n++] = make_input(dtype, 2, tshape, tstrides, 0, FILL_UNIFORM, -3, 3);
  const int64_t oshape[] = {3, 1025};
  out[n++] = make_input(dtype, 2, oshape, NULL, 1, FILL_UNIFORM, -3, 3);
  *count = n;
}

static void test_unary_ops_match_host(void) {
  static const char *const ops[] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid",
                                    "tanh", "exp",  "neg",       "scale"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    tbuf inputs[8];
    int count = 0;
    unary_inputs(kFloatTypes[t], inputs, &count);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o)
      for (int i = 0; i < count; ++i) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 1, .scale = SCALE_REF};
        c.attrs.scale = 0.37;
        c.in[0] = inputs[i];
        run_case(&c);
      }
    release_all();
  }
}

static void test_cast_between_every_float_pair_matches_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    tbuf inputs[8];
    int count = 0;
    unary_inputs(kFloatTypes[t], inputs, &count);
    for (int u = 0; u < NUM_FLOAT_TYPES; ++u)
      for (int i = 0; i < count; ++i) {
        op_case c = {.op = "cast", .attrs = no_attrs(), .num_inputs = 1, .exact = true};
        c.attrs.dtype = kFloatTypes[u];
        c.in[0] = inputs[i];
        run_case(&c);
      }
    release_all();
  }
}

static void test_binary_ops_broadcast_and_views_match_host(void) {
  static const char *const ops[] = {"add", "sub", "mul", "div"};
  /* {a ndim, a shape, b ndim, b shape}; a transposed `a` in the last pair. */
  static const struct {
    int an;
    int64_t as[4];
    int bn;
    int64_t bs[4];
    bool a_transposed;
  } shapes[] = {
      {1, {1}, 1, {1}, false},
      {1, {4097}, 1, {4097}, false},
      {1, {(1 << 20) + 3}, 1, {(1 << 20) + 3}, false},
      {2, {7, 1023}, 1, {1023}, false},
      {2, {64, 1024}, 2, {1, 1024}, false},
      {1, {1024}, 2, {16, 1024}, false},
      {2, {33, 1}, 2, {1, 65}, false},
      {4, {2, 3, 5, 7}, 3, {3, 1, 7}, false},
      {1, {5}, 4, {2, 3, 1, 5}, false},
      {2, {129, 37}, 1, {37}, true},
  };
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 2, .scale = SCALE_REF};
        const int64_t tstrides[] = {1, 129};
        c.in[0] = make_input(kFloatTypes[t], shapes[s].an, shapes[s].as,
                             shapes[s].a_transposed ? tstrides : NULL, 0, FILL_UNIFORM, -3, 3);
        c.in[1] =
            make_input(kFloatTypes[t], shapes[s].bn, shapes[s].bs, NULL, 0, FILL_AWAY, 0.5, 2);
        run_case(&c);
        release_all();
      }
}

/* The dense kernels' vector path: sizes around and between multiples of the vector (8 halves,
 * 4 floats), inputs and outputs starting 0-3 elements into their allocations (2/4/6 bytes for
 * halves): equal offsets take the scalar head then vectors, unequal ones the element path. */
static void test_unary_dense_paths_handle_offsets_and_odd_sizes(void) {
  static const int64_t sizes[] = {1, 8, 9, 15, 17, 33, 1000, 4103, 65541};
  static const int64_t offsets[][2] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {1, 0}, {0, 3}, {2, 1}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
      for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; ++o) {
        op_case c = {.op = "gelu", .attrs = no_attrs(), .num_inputs = 1, .scale = SCALE_REF};
        c.in[0] = make_input(kFloatTypes[t], 1, &sizes[s], NULL, offsets[o][0], FILL_UNIFORM, -3,
                             3);
        c.out_offset = offsets[o][1];
        run_case(&c);
        /* A cast changes the element size: the output's vector is 8 or 32 bytes. */
        op_case k = {.op = "cast", .attrs = no_attrs(), .num_inputs = 1, .exact = true};
        k.attrs.dtype = kFloatTypes[(t + 1) % NUM_FLOAT_TYPES];
        k.in[0] = c.in[0];
        k.out_offset = offsets[o][1];
        run_case(&k);
        release_all();
      }
}

static void test_binary_dense_paths_handle_offsets_and_odd_sizes(void) {
  static const int64_t sizes[] = {1, 9, 17, 1001, 4103, 65539};
  /* {a, b, out} element offsets. */
  static const int64_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3},
                                       {1, 0, 0}, {0, 2, 0}, {0, 0, 3}, {1, 2, 3}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
      for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; ++o) {
        op_case c = {.op = (s + o) % 2 ? "div" : "sub", .attrs = no_attrs(), .num_inputs = 2,
                     .scale = SCALE_REF};
        c.in[0] = make_input(kFloatTypes[t], 1, &sizes[s], NULL, offsets[o][0], FILL_UNIFORM, -3,
                             3);
        c.in[1] = make_input(kFloatTypes[t], 1, &sizes[s], NULL, offsets[o][1], FILL_AWAY, 0.5, 2);
        c.out_offset = offsets[o][2];
        run_case(&c);
        release_all();
      }
}

/* The broadcast fast paths: a one-element operand on either side (dense kernel), a row
 * repeated over the leading dims on either side (row kernel: vectors when the row length is a
 * multiple of the vector and the pointers aligned, else element by element; rows wider and
 * narrower than a block), with offsets that turn vectors off. */
static void test_binary_broadcast_fast_paths_match_host(void) {
  static const struct {
    int an;
    int64_t as[4];
    int bn;
    int64_t bs[4];
    int64_t a_off, b_off, out_off;
  } shapes[] = {
      {2, {33, 65}, 1, {1}, 0, 0, 0},          {1, {1}, 2, {7, 4099}, 0, 0, 0},
      {2, {1, 1}, 1, {4103}, 0, 0, 1},         {2, {5, 1001}, 2, {1, 1}, 3, 1, 3},
      {2, {300, 1024}, 1, {1024}, 0, 0, 0},    {2, {77, 1000}, 1, {1000}, 0, 0, 0},
      {1, {64}, 3, {3, 5, 64}, 0, 0, 0},       {2, {77, 37}, 1, {37}, 0, 0, 0},
      {2, {9, 4104}, 2, {1, 4104}, 0, 0, 0},   {2, {300, 1024}, 1, {1024}, 0, 1, 0},
      {2, {300, 1024}, 1, {1024}, 2, 0, 0},    {3, {2, 3, 8}, 1, {8}, 0, 0, 0},
      {2, {1000, 16}, 1, {16}, 0, 0, 0},       {2, {3, 131072}, 1, {131072}, 0, 0, 0},
  };
  static const char *const ops[] = {"add", "sub", "mul", "div"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 2, .scale = SCALE_REF};
        c.in[0] = make_input(kFloatTypes[t], shapes[s].an, shapes[s].as, NULL, shapes[s].a_off,
                             FILL_UNIFORM, -3, 3);
        c.in[1] = make_input(kFloatTypes[t], shapes[s].bn, shapes[s].bs, NULL, shapes[s].b_off,
                             FILL_AWAY, 0.5, 2);
        c.out_offset = shapes[s].out_off;
        run_case(&c);
        release_all();
      }
}

int main(void) {
  CU_pSuite gpu = test_add_cuda_suite("ops_cuda_elementwise/vs_host", cuda_suite_init,
                                      cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_unary_ops_match_host);
  CU_ADD_TEST(gpu, test_cast_between_every_float_pair_matches_host);
  CU_ADD_TEST(gpu, test_binary_ops_broadcast_and_views_match_host);
  CU_ADD_TEST(gpu, test_unary_dense_paths_handle_offsets_and_odd_sizes);
  CU_ADD_TEST(gpu, test_binary_dense_paths_handle_offsets_and_odd_sizes);
  CU_ADD_TEST(gpu, test_binary_broadcast_fast_paths_match_host);
  return test_run_all();
}
