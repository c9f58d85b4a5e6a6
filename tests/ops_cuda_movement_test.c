/*
 * ops_cuda_movement_test.c: shape and data movement ops on CUDA against the host reference
 * (ops_cuda_util.h), bit for bit: the copy family and its fast paths, concat, fill in every
 * dtype, embedding, and rope for both position forms, float theta and Llama 3 scaling.
 *
 * The CUDA suite is inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"

/* ------------------------------------------------------------------------------------------
 * Shape and data movement
 * ---------------------------------------------------------------------------------------- */

static const recap_dtype kAllTypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16,
                                        RECAP_DTYPE_I32, RECAP_DTYPE_I64};
enum { NUM_ALL_TYPES = 5 };

static tbuf any_input(recap_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides) {
  bool integer = dtype == RECAP_DTYPE_I32 || dtype == RECAP_DTYPE_I64;
  return make_input(dtype, ndim, shape, strides, 0, integer ? FILL_INTEGERS : FILL_UNIFORM,
                    integer ? -1000000 : -3, integer ? 1000000 : 3);
}

static void test_copy_family_moves_every_element_exactly(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    recap_dtype dtype = kAllTypes[t];
    const int64_t s2[] = {6, 35}, s4[] = {2, 3, 5, 7}, big[] = {33, 1025}, s3[] = {4, 7, 9};
    const int64_t tshape[] = {129, 37}, tstrides[] = {1, 129}, wide[] = {10, 1023};
    op_case c = {.attrs = no_attrs(), .num_inputs = 1, .exact = true};

    c.op = "reshape";
    c.in[0] = any_input(dtype, 2, s2, NULL);
    set_sizes(&c.attrs, 3, (const int64_t[]){5, 7, 6});
    run_case(&c);
    c.in[0] = any_input(dtype, 2, tshape, tstrides); /* reshape of a non-contiguous view */
    set_sizes(&c.attrs, 1, (const int64_t[]){129 * 37});
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "permute";
    c.in[0] = any_input(dtype, 4, s4, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){2, 0, 3, 1});
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "transpose";
    c.in[0] = any_input(dtype, 2, big, NULL);
    c.attrs.sizes[0] = 0;
    c.attrs.sizes[1] = 1;
    run_case(&c);
    c.in[0] = any_input(dtype, 3, s3, NULL);
    c.attrs.sizes[0] = -2;
    c.attrs.sizes[1] = -1;
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "slice";
    c.in[0] = any_input(dtype, 2, wide, NULL);
    c.attrs.dim = 1;
    c.attrs.start = 3;
    c.attrs.end = 1000;
    run_case(&c);
    c.attrs.dim = 0;
    c.attrs.start = 2;
    c.attrs.end = 9;
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "split";
    c.in[0] = any_input(dtype, 2, (const int64_t[]){7, 100}, NULL);
    c.attrs.dim = 1;
    set_sizes(&c.attrs, 3, (const int64_t[]){30, 1, 69});
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "copy";
    c.in[0] = any_input(dtype, 2, tshape, tstrides);
    run_case(&c);
    c.in[0] = any_input(dtype, 1, (const int64_t[]){(1 << 20) + 1}, NULL);
    run_case(&c);
    release_all();
  }
}

/* The copy kernels' fast paths, for every dtype: rows (last dim contiguous on both sides, in
 * 16-, 8-, 4-byte words or elements as the row length and offsets allow), tiled transposes
 * (edges that are not multiples of the tile, outer dims along the grid), and concat slabs. */
static void test_copy_fast_paths_move_every_element_exactly(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    recap_dtype dtype = kAllTypes[t];
    op_case c = {.attrs = no_attrs(), .num_inputs = 1, .exact = true};

    /* [B, S, H, Dh] -> [B, H, S, Dh] for several head sizes. */
    static const int64_t dh[] = {64, 63, 2, 6, 1};
    for (size_t i = 0; i < sizeof dh / sizeof dh[0]; ++i) {
      c.attrs = no_attrs();
      c.op = "permute";
      c.in[0] = any_input(dtype, 4, (const int64_t[]){2, 33, 5, dh[i]}, NULL);
      set_sizes(&c.attrs, 4, (const int64_t[]){0, 2, 1, 3});
      run_case(&c);
    }
    /* The last dim moved: tiled transposes, with and without outer dims. */
    c.attrs = no_attrs();
    c.op = "transpose";
    c.in[0] = any_input(dtype, 2, (const int64_t[]){33, 65}, NULL);
    c.attrs.sizes[0] = 0;
    c.attrs.sizes[1] = 1;
    run_case(&c);
    c.in[0] = any_input(dtype, 3, (const int64_t[]){3, 40, 70}, NULL);
    c.attrs.sizes[0] = 1;
    c.attrs.sizes[1] = 2;
    run_case(&c);
    c.attrs = no_attrs();
    c.op = "permute";
    c.in[0] = any_input(dtype, 4, (const int64_t[]){2, 3, 5, 7}, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){3, 1, 0, 2});
    run_case(&c);
    c.in[0] = any_input(dtype, 4, (const int64_t[]){4, 9, 3, 130}, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){3, 0, 2, 1});
    run_case(&c);
    c.in[0] = any_input(dtype, 3, (const int64_t[]){64, 256, 96}, NULL);
    set_sizes(&c.attrs, 3, (const int64_t[]){2, 0, 1});
    run_case(&c);

    /* Slices of the last dim starting 0-3 and 8 elements in. */
    for (int64_t start = 0; start < 9; start += start == 3 ? 5 : 1) {
      c.attrs = no_attrs();
      c.op = "slice";
      c.in[0] = any_input(dtype, 2, (const int64_t[]){9, 200}, NULL);
      c.attrs.dim = 1;
      c.attrs.start = start;
      c.attrs.end = start + 128;
      run_case(&c);
    }
    /* A fused QKV projection split into its three parts. */
    c.attrs = no_attrs();
    c.op = "split";
    c.in[0] = any_input(dtype, 3, (const int64_t[]){4, 128, 3 * 96}, NULL);
    c.attrs.dim = 2;
    set_sizes(&c.attrs, 3, (const int64_t[]){96, 96, 96});
    run_case(&c);
    /* Large enough for many blocks per path. */
    c.attrs = no_attrs();
    c.op = "permute";
    c.in[0] = any_input(dtype, 4, (const int64_t[]){4, 128, 16, 64}, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){0, 2, 1, 3});
    run_case(&c);
    c.op = "transpose";
    c.attrs = no_attrs();
    c.in[0] = any_input(dtype, 2, (const int64_t[]){1000, 1030}, NULL);
    c.attrs.sizes[0] = 0;
    c.attrs.sizes[1] = 1;
    run_case(&c);
    release_all();

    /* Concat along the last dim (row slabs) and along a middle dim. */
    op_case k = {.op = "concat", .attrs = no_attrs(), .num_inputs = 2, .exact = true};
    k.attrs.dim = 1;
    k.in[0] = any_input(dtype, 2, (const int64_t[]){40, 64}, NULL);
    k.in[1] = any_input(dtype, 2, (const int64_t[]){40, 72}, NULL);
    run_case(&k);
    k.in[1] = any_input(dtype, 2, (const int64_t[]){40, 3}, NULL);
    run_case(&k);
    k.in[0] = any_input(dtype, 3, (const int64_t[]){3, 5, 16}, NULL);
    k.in[1] = any_input(dtype, 3, (const int64_t[]){3, 7, 16}, NULL);
    run_case(&k);
    release_all();
  }
}

static void test_concat_matches_host(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    recap_dtype dtype = kAllTypes[t];
    op_case c = {.op = "concat", .attrs = no_attrs(), .num_inputs = 3, .exact = true};
    c.attrs.dim = 1;
    c.in[0] = any_input(dtype, 2, (const int64_t[]){4, 7}, NULL);
    c.in[1] = any_input(dtype, 2, (const int64_t[]){4, 1}, NULL);
    c.in[2] = any_input(dtype, 2, (const int64_t[]){4, 1023}, (const int64_t[]){1, 4});
    run_case(&c);
    c.attrs.dim = 0;
    c.num_inputs = 2;
    c.in[0] = any_input(dtype, 2, (const int64_t[]){2, 5}, NULL);
    c.in[1] = any_input(dtype, 2, (const int64_t[]){3, 5}, NULL);
    run_case(&c);
    release_all();
  }
}

static void test_fill_matches_host_for_every_dtype(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    bool integer = kAllTypes[t] == RECAP_DTYPE_I32 || kAllTypes[t] == RECAP_DTYPE_I64;
    const int64_t shapes[][2] = {{1, 1}, {1, 1023}, {4097, 3}};
    for (int s = 0; s < 3; ++s) {
      op_case c = {.op = "fill", .attrs = no_attrs(), .num_inputs = 0, .exact = true};
      c.attrs.dtype = kAllTypes[t];
      c.attrs.value = integer ? -7 : 2.71828;
      set_sizes(&c.attrs, 2, shapes[s]);
      run_case(&c);
    }
  }
  release_all();
}

static void test_embedding_gathers_rows_like_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    recap_dtype dtype = kFloatTypes[t];
    op_case c = {.op = "embedding", .attrs = no_attrs(), .num_inputs = 2, .exact = true};
    c.in[0] = make_contiguous(dtype, 2, (const int64_t[]){1000, 129}, -1, 1);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 2, (const int64_t[]){7, 13}, NULL, 0, FILL_INTEGERS, 0, 1000);
    run_case(&c);
    c.in[1] =
        make_input(RECAP_DTYPE_I64, 1, (const int64_t[]){1023}, NULL, 0, FILL_INTEGERS, 0, 1000);
    run_case(&c);
    /* A transposed table view and strided ids. */
    c.in[0] = make_input(dtype, 2, (const int64_t[]){500, 7}, (const int64_t[]){1, 500}, 0,
                         FILL_UNIFORM, -1, 1);
    c.in[1] = make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){9}, (const int64_t[]){3}, 0,
                         FILL_INTEGERS, 0, 500);
    run_case(&c);
    release_all();
  }
}

static void test_rope_matches_host_for_both_position_forms(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    recap_dtype dtype = kFloatTypes[t];
    op_case c = {.op = "rope", .attrs = no_attrs(), .num_inputs = 2, .scale = SCALE_ROPE};
    c.attrs.rope_base = 10000;
    /* [B, S, H, Dh] with a position per row, up to 5000 (large angles). */
    c.in[0] = make_contiguous(dtype, 4, (const int64_t[]){2, 9, 4, 64}, -2, 2);
    c.in[1] = make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){9}, NULL, 0, FILL_INTEGERS, 0, 5000);
    run_case(&c);
    /* [S, H, Dh] with a start position. */
    c.in[0] = make_contiguous(dtype, 3, (const int64_t[]){17, 3, 128}, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){1}, NULL, 0, FILL_INTEGERS, 100, 4000);
    run_case(&c);
    /* A [B, H, S, Dh] buffer read as [B, S, H, Dh] (strided), Dh = 6, another base. */
    c.attrs.rope_base = 500000;
    c.in[0] = make_input(dtype, 4, (const int64_t[]){3, 5, 2, 6}, (const int64_t[]){60, 6, 30, 1},
                         0, FILL_UNIFORM, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){5}, NULL, 0, FILL_INTEGERS, 0, 100000);
    run_case(&c);
    /* A float theta (Qwen's 1e6 plus a fraction), Dh = 128. */
    c.attrs = no_attrs();
    c.attrs.rope_theta = 1000000.5;
    c.in[0] = make_contiguous(dtype, 4, (const int64_t[]){1, 11, 4, 128}, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){11}, NULL, 0, FILL_INTEGERS, 0, 40000);
    run_case(&c);
    /* Llama 3.2's scaling, every band of Dh = 64 and 128 (theta 500000: pairs below about
     * 0.44 Dh/2 keep their frequency, above about 0.55 Dh/2 are divided, the rest blend): the
     * same f32 steps on both sides (kernels/rope.h), so the angles agree bit for bit. */
    c.attrs = no_attrs();
    c.attrs.rope_theta = 500000.0;
    c.attrs.rope_llama3 = 1;
    c.attrs.rope_factor = 32;
    c.attrs.rope_low_freq_factor = 1;
    c.attrs.rope_high_freq_factor = 4;
    c.attrs.rope_original_max = 8192;
    c.in[0] = make_contiguous(dtype, 4, (const int64_t[]){2, 13, 3, 64}, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){13}, NULL, 0, FILL_INTEGERS, 0, 131072);
    run_case(&c);
    c.in[0] = make_contiguous(dtype, 3, (const int64_t[]){9, 2, 128}, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){1}, NULL, 0, FILL_INTEGERS, 1000, 9000);
    run_case(&c);
    release_all();
  }
}

int main(void) {
  CU_pSuite gpu =
      test_add_cuda_suite("ops_cuda_movement/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_copy_family_moves_every_element_exactly);
  CU_ADD_TEST(gpu, test_copy_fast_paths_move_every_element_exactly);
  CU_ADD_TEST(gpu, test_concat_matches_host);
  CU_ADD_TEST(gpu, test_fill_matches_host_for_every_dtype);
  CU_ADD_TEST(gpu, test_embedding_gathers_rows_like_host);
  CU_ADD_TEST(gpu, test_rope_matches_host_for_both_position_forms);
  return test_run_all();
}
