/*
 * ops_host_paged_test.c: the host backend's paged serving ops (seq_positions, seq_last_tokens,
 * paged_kv_write, paged_rope_kv_write, paged_attention). A sequence in a pool of shuffled blocks
 * matches the contiguous kv_append + attention ops on the same data; a packed batch of decode rows
 * and prefill chunks matches each sequence run alone; padding tokens write nothing and output
 * zeros; a prompt written in two chunks matches one shot; one captured graph replays for new
 * metadata; every rule of the metadata fails with a message naming the row; the CUDA split
 * plan and workspace follow from the shapes; paged_rope_kv_write matches a hand rotation and
 * block addressing, and rope + paged_kv_write byte for byte, and refuses bad inputs. Helpers:
 * ops_host_util.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/op.h"
#include "kernels/paged.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "tests/ops_host_util.h"

/* ---- metadata ---- */

/* An all-zero seqs [rows, RECAP_SEQ_BLOCKS + mb]: every row an unused slot. */
static recap_tensor seqs_tensor(int64_t rows, int64_t mb) {
  recap_tensor t = tensor(RECAP_DTYPE_I32, SHAPE(rows, RECAP_SEQ_BLOCKS + mb), CONTIGUOUS);
  memset(t.data, 0, (size_t)(rows * (RECAP_SEQ_BLOCKS + mb)) * sizeof(int32_t));
  return t;
}

static int32_t *row_of(const recap_tensor *seqs, int64_t r) {
  return (int32_t *)seqs->data + r * seqs->shape[1];
}

/* Row r: LEN, Q_START, Q_LEN and the first `n` block-table columns (the rest -1). */
static void set_row(recap_tensor *seqs, int64_t r, int32_t len, int32_t start, int32_t count,
                    const int32_t *blocks, int64_t n) {
  int32_t *row = row_of(seqs, r);
  row[RECAP_SEQ_LEN] = len;
  row[RECAP_SEQ_Q_START] = start;
  row[RECAP_SEQ_Q_LEN] = count;
  for (int64_t c = 0; c < seqs->shape[1] - RECAP_SEQ_BLOCKS; ++c)
    row[RECAP_SEQ_BLOCKS + c] = c < n ? blocks[c] : -1;
}

/* A random permutation of [0, n) into ids. */
static void shuffled_ids(test_rng *rng, int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ids[i] = (int32_t)i;
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = (int64_t)(test_rng_next(rng) % (uint64_t)(i + 1));
    int32_t t = ids[i];
    ids[i] = ids[j];
    ids[j] = t;
  }
}

/* ---- op calls ---- */

static size_t bytes_of(const recap_tensor *t) {
  return (size_t)numel(t) * esize(t->dtype);
}

static recap_tensor copy_of(const recap_tensor *t) {
  recap_tensor c = *t;
  c.data = track(bytes_of(t));
  memcpy(c.data, t->data, bytes_of(t));
  return c;
}

static recap__op_call kv_write_call(recap_tensor cache, recap_tensor rows, recap_tensor seqs) {
  recap__op_call call = new_call("paged_kv_write");
  add_input(&call, cache);
  add_input(&call, rows);
  add_input(&call, seqs);
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_PTR_EQUAL(call.outputs[0].data, cache.data);
  return call;
}

static void kv_write(recap_tensor cache, recap_tensor rows, recap_tensor seqs) {
  recap__op_call call = kv_write_call(cache, rows, seqs);
  CHECK_OK(recap__op_launch(&call, stream));
}

static recap__op_call attention_call(recap_tensor q, recap_tensor k, recap_tensor v,
                                     recap_tensor seqs, double scale) {
  recap__op_call call = new_call("paged_attention");
  add_input(&call, q);
  add_input(&call, k);
  add_input(&call, v);
  add_input(&call, seqs);
  call.attrs.scale = scale;
  return call;
}

/* paged_attention's output (poisoned before the run). */
static recap_tensor attend(recap_tensor q, recap_tensor k, recap_tensor v, recap_tensor seqs,
                           double scale) {
  recap__op_call call = attention_call(q, k, v, seqs, scale);
  run(&call);
  return call.outputs[0];
}

static void check_same_bytes(const char *what, const void *got, const void *want, size_t bytes) {
  int differs = memcmp(got, want, bytes) != 0;
  if (differs) fprintf(stderr, "\n  %s: bytes differ\n", what);
  CU_ASSERT_FALSE(differs);
}

/* ---- a sequence through the pool equals the contiguous ops ---- */

/* One sequence with `prior` keys already cached and `count` new tokens: paged_kv_write and
 * paged_attention over a pool whose blocks the table visits in shuffled order, against
 * kv_append and causal attention (with len) over a contiguous cache holding the same keys. */
static void single_sequence_case(test_rng *rng, recap_dtype dt, int64_t heads, int64_t kv_heads,
                                 int64_t dh, int64_t bs, int64_t prior, int64_t count,
                                 double scale) {
  const int64_t len = prior + count, mb = (len + bs - 1) / bs + 1, nb = mb + 3, smax = mb * bs;
  int32_t ids[64];
  CU_ASSERT_FATAL(nb <= 64);
  shuffled_ids(rng, ids, nb);
  recap_tensor seqs = seqs_tensor(1, mb);
  set_row(&seqs, 0, (int32_t)len, 0, (int32_t)count, ids, mb);

  recap_tensor pools[2], conts[2], news[2];
  for (int kv = 0; kv < 2; ++kv) {
    pools[kv] = random_tensor(rng, dt, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
    conts[kv] = random_tensor(rng, dt, SHAPE(1, smax, kv_heads, dh), CONTIGUOUS, -2, 2);
    news[kv] = random_tensor(rng, dt, SHAPE(count, kv_heads, dh), CONTIGUOUS, -2, 2);
    /* The prior keys, at the same positions of both caches. */
    const size_t row_bytes = (size_t)(kv_heads * dh) * esize(dt);
    for (int64_t p = 0; p < prior; ++p)
      memcpy((char *)pools[kv].data + (size_t)(ids[p / bs] * bs + p % bs) * row_bytes,
             (const char *)conts[kv].data + (size_t)p * row_bytes, row_bytes);
  }
  recap_tensor q = random_tensor(rng, dt, SHAPE(count, heads, dh), CONTIGUOUS, -1.5, 1.5);

  /* Contiguous: append at `prior`, then attention over [B, Hkv, Sk, Dh] views of the caches
   * with q seen as [1, H, count, Dh]. */
  recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  recap_tensor len_t = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  set(&pos, 0, (double)prior);
  set(&len_t, 0, (double)len);
  recap_tensor kv_views[2];
  for (int kv = 0; kv < 2; ++kv) {
    recap_tensor rows4 = news[kv];
    rows4.ndim = 4;
    rows4.shape[0] = 1, rows4.shape[1] = count, rows4.shape[2] = kv_heads, rows4.shape[3] = dh;
    recap__tensor_set_contiguous(&rows4);
    recap__op_call append = new_call("kv_append");
    add_input(&append, conts[kv]);
    add_input(&append, rows4);
    add_input(&append, pos);
    CHECK_OK(recap__op_infer(&append));
    CHECK_OK(recap__op_launch(&append, stream));
    kv_views[kv] = conts[kv];
    kv_views[kv].shape[1] = kv_heads, kv_views[kv].shape[2] = smax;
    kv_views[kv].strides[1] = dh, kv_views[kv].strides[2] = kv_heads * dh;
  }
  recap_tensor q4 = q;
  q4.ndim = 4;
  q4.shape[0] = 1, q4.shape[1] = heads, q4.shape[2] = count, q4.shape[3] = dh;
  q4.strides[0] = count * heads * dh, q4.strides[1] = dh, q4.strides[2] = heads * dh;
  q4.strides[3] = 1;
  recap__op_call contiguous = new_call("attention");
  add_input(&contiguous, q4);
  add_input(&contiguous, kv_views[0]);
  add_input(&contiguous, kv_views[1]);
  add_input(&contiguous, len_t);
  contiguous.attrs.causal = 1;
  contiguous.attrs.scale = scale;
  run(&contiguous);

  /* Paged. */
  for (int kv = 0; kv < 2; ++kv) kv_write(pools[kv], news[kv], seqs);
  recap_tensor out = attend(q, pools[0], pools[1], seqs, scale);

  /* Every output element (t, h, d) against the contiguous (h, t, d); |v| <= 2 bounds the
   * outputs, so the tolerance is relative to 2. */
  const int64_t n = count * heads * dh;
  double *ref = doubles(n), *mag = doubles(n);
  for (int64_t t = 0; t < count; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dh; ++d) {
        ref[(t * heads + h) * dh + d] = get(&contiguous.outputs[0], (h * count + t) * dh + d);
        mag[(t * heads + h) * dh + d] = 2;
      }
  char what[128];
  snprintf(what, sizeof what, "paged vs contiguous H%lld/%lld Dh%lld BS%lld prior %lld new %lld",
           (long long)heads, (long long)kv_heads, (long long)dh, (long long)bs, (long long)prior,
           (long long)count);
  check(what, &out, ref, mag);
  /* Every key position of the sequence holds the same row in both caches. */
  const size_t row_bytes = (size_t)(kv_heads * dh) * esize(dt);
  for (int kv = 0; kv < 2; ++kv)
    for (int64_t p = 0; p < len; ++p)
      check_same_bytes(
          what, (const char *)pools[kv].data + (size_t)(ids[p / bs] * bs + p % bs) * row_bytes,
          (const char *)conts[kv].data + (size_t)p * row_bytes, row_bytes);
}

static void test_paged_sequence_matches_contiguous_ops(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    recap_dtype t = float_types[dt];
    single_sequence_case(&rng, t, 4, 2, 16, 4, 0, 9, 0);    /* a whole prompt, GQA 2:1 */
    single_sequence_case(&rng, t, 8, 2, 8, 4, 13, 1, 0);    /* decode after 13 keys */
    single_sequence_case(&rng, t, 3, 3, 67, 5, 7, 6, 0.2);  /* a chunk; Dh over one chunk */
    single_sequence_case(&rng, t, 8, 1, 32, 16, 40, 3, 0);  /* MQA, chunk across blocks */
    single_sequence_case(&rng, t, 2, 1, 4, 1, 5, 2, 0);     /* one-row blocks */
    single_sequence_case(&rng, t, 4, 4, 16, 8, 15, 1, 0.5); /* decode at a block's end */
  }
}

/* ---- a packed batch equals each sequence alone ---- */

typedef struct {
  int32_t prior, count; /* keys cached before the step; tokens in it */
} seq_spec;

/* Runs `n` sequences as one packed step of `tokens` tokens (rows in order, every other row an
 * unused slot between them) and each alone, on copies of one pool with disjoint shuffled
 * blocks per sequence: outputs and pools must be identical. */
static void batch_case(test_rng *rng, recap_dtype dt, const seq_spec *specs, int n,
                       int64_t tokens) {
  const int64_t heads = 4, kv_heads = 2, dh = 8, bs = 4, mb = 6, nb = 64;
  int32_t ids[64];
  shuffled_ids(rng, ids, nb);
  recap_tensor kp = random_tensor(rng, dt, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor vp = random_tensor(rng, dt, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor nk = random_tensor(rng, dt, SHAPE(tokens, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor nv = random_tensor(rng, dt, SHAPE(tokens, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor q = random_tensor(rng, dt, SHAPE(tokens, heads, dh), CONTIGUOUS, -1.5, 1.5);
  recap_tensor kp_alone = copy_of(&kp), vp_alone = copy_of(&vp);

  recap_tensor seqs = seqs_tensor(2 * n, mb);
  int32_t start = 0;
  for (int s = 0; s < n; ++s) {
    CU_ASSERT_FATAL(specs[s].prior + specs[s].count <= mb * bs);
    set_row(&seqs, 2 * s, specs[s].prior + specs[s].count, start, specs[s].count, ids + s * mb, mb);
    /* An unused slot, or a sequence that sits this step out (keys, no tokens). */
    set_row(&seqs, 2 * s + 1, s % 2 ? 3 : 0, 0, 0, ids + 60, s % 2 ? 1 : 0);
    start += specs[s].count;
  }
  CU_ASSERT_FATAL(start <= tokens);
  for (int kv = 0; kv < 2; ++kv) kv_write(kv ? vp : kp, kv ? nv : nk, seqs);
  recap_tensor out = attend(q, kp, vp, seqs, 0);

  start = 0;
  for (int s = 0; s < n; ++s) {
    const int64_t count = specs[s].count;
    recap_tensor one = seqs_tensor(1, mb);
    set_row(&one, 0, specs[s].prior + specs[s].count, 0, (int32_t)count, ids + s * mb, mb);
    /* This sequence's tokens, as views into the batch's inputs. */
    recap_tensor q1 = q, nk1 = nk, nv1 = nv;
    q1.shape[0] = nk1.shape[0] = nv1.shape[0] = count;
    q1.data = (char *)q.data + (size_t)(start * heads * dh) * esize(dt);
    nk1.data = (char *)nk.data + (size_t)(start * kv_heads * dh) * esize(dt);
    nv1.data = (char *)nv.data + (size_t)(start * kv_heads * dh) * esize(dt);
    kv_write(kp_alone, nk1, one);
    kv_write(vp_alone, nv1, one);
    recap_tensor alone = attend(q1, kp_alone, vp_alone, one, 0);
    check_same_bytes("batch output vs the sequence alone",
                     (const char *)out.data + (size_t)(start * heads * dh) * esize(dt), alone.data,
                     bytes_of(&alone));
    start += (int32_t)count;
  }
  check_same_bytes("batch K pool vs sequences alone", kp.data, kp_alone.data, bytes_of(&kp));
  check_same_bytes("batch V pool vs sequences alone", vp.data, vp_alone.data, bytes_of(&vp));
  /* The padding tokens' rows are zeros. */
  for (int64_t k = start * heads * dh; k < tokens * heads * dh; ++k)
    CU_ASSERT_EQUAL(get(&out, k), 0);
}

static void test_packed_batch_matches_each_sequence_alone(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  /* Decode rows and prefill chunks mixed; a chunk that starts mid-block; a sequence's first
   * chunk; the last rows of the step padding. */
  static const seq_spec mixed[] = {{7, 1}, {0, 5}, {12, 1}, {3, 6}, {1, 1}, {19, 4}};
  static const seq_spec decode[] = {{1, 1}, {4, 1}, {9, 1}, {23, 1}};
  for (size_t dt = 0; dt < 3; ++dt) {
    batch_case(&rng, float_types[dt], mixed, 6, 18);
    batch_case(&rng, float_types[dt], mixed, 6, 24); /* 6 padding tokens */
    batch_case(&rng, float_types[dt], decode, 4, 4);
    batch_case(&rng, float_types[dt], decode, 4, 8);
  }
}

/* ---- padding and unused rows ---- */

static void test_padding_tokens_write_nothing_and_output_zeros(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  const int64_t nb = 6, bs = 4, kv_heads = 2, dh = 8, heads = 4, tokens = 8;
  for (size_t dt = 0; dt < 3; ++dt) {
    recap_dtype t = float_types[dt];
    recap_tensor pool = random_tensor(&rng, t, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
    recap_tensor rows = random_tensor(&rng, t, SHAPE(tokens, kv_heads, dh), CONTIGUOUS, -2, 2);
    recap_tensor q = random_tensor(&rng, t, SHAPE(tokens, heads, dh), CONTIGUOUS, -1, 1);
    recap_tensor before = copy_of(&pool);
    /* Row 0 owns tokens 0-2 (positions 0-2, block 4), row 1 is unused, row 2 owns tokens 3-4
     * (positions 7-8: block 1 row 3, block 5 row 0); tokens 5-7 are padding. */
    recap_tensor seqs = seqs_tensor(3, 3);
    set_row(&seqs, 0, 3, 0, 3, (const int32_t[]){4}, 1);
    set_row(&seqs, 2, 9, 3, 2, (const int32_t[]){2, 1, 5}, 3);
    kv_write(pool, rows, seqs);
    const size_t row_bytes = (size_t)(kv_heads * dh) * esize(t);
    /* The expected pool: the old one with exactly the five written rows replaced. */
    static const struct {
      int token, block, row;
    } written[] = {{0, 4, 0}, {1, 4, 1}, {2, 4, 2}, {3, 1, 3}, {4, 5, 0}};
    for (size_t w = 0; w < sizeof written / sizeof written[0]; ++w)
      memcpy((char *)before.data + (size_t)(written[w].block * bs + written[w].row) * row_bytes,
             (const char *)rows.data + (size_t)written[w].token * row_bytes, row_bytes);
    check_same_bytes("pool after a step with padding", pool.data, before.data, bytes_of(&pool));

    recap_tensor out = attend(q, pool, pool, seqs, 0);
    for (int64_t k = 5 * heads * dh; k < tokens * heads * dh; ++k) CU_ASSERT_EQUAL(get(&out, k), 0);
    for (int64_t k = 0; k < 5 * heads * dh; ++k) CU_ASSERT(isfinite(get(&out, k)));

    /* All-zero metadata: no row owns a token, nothing is written (zero_meta_writes_nothing),
     * every output is zero. */
    recap_tensor zero = seqs_tensor(3, 3);
    recap_tensor still = copy_of(&pool);
    kv_write(pool, rows, zero);
    check_same_bytes("pool after all-zero metadata", pool.data, still.data, bytes_of(&pool));
    out = attend(q, pool, pool, zero, 0);
    for (int64_t k = 0; k < numel(&out); ++k) CU_ASSERT_EQUAL(get(&out, k), 0);
  }
  CU_ASSERT_TRUE(recap__op_find("paged_kv_write")->zero_meta_writes_nothing);
  CU_ASSERT_FALSE(recap__op_find("kv_append")->zero_meta_writes_nothing);
  CU_ASSERT_FALSE(recap__op_find("paged_attention")->zero_meta_writes_nothing);
}

/* The CUDA kernel's merge counts its key splits in the call's own state and needs it zero at
 * every launch; the host reference holds a call to that: zero state runs (and stays zero),
 * state another call wrote is refused naming the cause. */
static void test_call_state_must_be_zero_at_launch(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  /* Decode at batch 1 over a 64-block table of 16 keys: the CUDA plan splits the keys. */
  const int64_t nb = 64, bs = 16, kv_heads = 2, dh = 8, heads = 4;
  recap_tensor pool =
      random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor q = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(1, heads, dh), CONTIGUOUS, -1, 1);
  recap_tensor seqs = seqs_tensor(1, nb);
  set_row(&seqs, 0, 3, 0, 1, (const int32_t[]){7}, 1);
  recap__op_call call = attention_call(q, pool, pool, seqs, 0);
  CHECK_OK(recap__op_infer(&call));
  const size_t bytes = call.def->call_state_bytes(&call, RECAP_BACKEND_HOST);
  CU_ASSERT_EQUAL_FATAL(bytes, (size_t)kv_heads * sizeof(uint32_t)); /* a count per KV head */
  unsigned char *state = track(bytes);
  memset(state, 0, bytes);
  call.call_state = state;
  call.call_state_bytes = bytes;
  call.outputs[0].data = track((size_t)numel(&call.outputs[0]) * sizeof(float));
  CHECK_OK(recap__op_launch(&call, stream));
  for (size_t i = 0; i < bytes; ++i) CU_ASSERT_EQUAL(state[i], 0);
  /* A kernel that refuses faults the device, as a CUDA trap does, naming the cause. */
  state[bytes - 1] = 1;
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("call state is not zero at the launch (byte 7)");
  recap__host_backend_reset_fault_for_testing();
}

/* ---- seq_positions and seq_last_tokens ---- */

static recap_tensor run_seq_op(const char *op, recap_tensor seqs, int64_t tokens) {
  recap__op_call call = new_call(op);
  add_input(&call, seqs);
  call.attrs.dim = tokens;
  run(&call);
  return call.outputs[0];
}

static void test_seq_positions_and_last_tokens_match_hand_values(void) {
  free_tracked();
  /* Row 0: 3 tokens ending a 7-key sequence; row 1 unused; row 2: one decode token of a
   * 1-key sequence; row 3: 2 tokens at positions 10, 11; row 4 sits the step out. T = 8. */
  recap_tensor seqs = seqs_tensor(5, 2);
  set_row(&seqs, 0, 7, 0, 3, (const int32_t[]){0, 1}, 2);
  set_row(&seqs, 2, 1, 3, 1, (const int32_t[]){2}, 1);
  set_row(&seqs, 3, 12, 4, 2, (const int32_t[]){3, 4}, 2);
  set_row(&seqs, 4, 5, 0, 0, (const int32_t[]){5, 6}, 2);
  recap_tensor pos = run_seq_op("seq_positions", seqs, 8);
  CU_ASSERT_EQUAL(pos.shape[0], 8);
  static const int32_t want_pos[] = {4, 5, 6, 0, 10, 11, 0, 0};
  for (int i = 0; i < 8; ++i) CU_ASSERT_EQUAL(((int32_t *)pos.data)[i], want_pos[i]);
  recap_tensor last = run_seq_op("seq_last_tokens", seqs, 0);
  CU_ASSERT_EQUAL(last.shape[0], 5);
  static const int32_t want_last[] = {2, 0, 3, 5, 0};
  for (int i = 0; i < 5; ++i) CU_ASSERT_EQUAL(((int32_t *)last.data)[i], want_last[i]);
  /* All zero: every position and every last token 0. */
  recap_tensor zero = seqs_tensor(5, 2);
  pos = run_seq_op("seq_positions", zero, 8);
  for (int i = 0; i < 8; ++i) CU_ASSERT_EQUAL(((int32_t *)pos.data)[i], 0);
  last = run_seq_op("seq_last_tokens", zero, 0);
  for (int i = 0; i < 5; ++i) CU_ASSERT_EQUAL(((int32_t *)last.data)[i], 0);
}

/* ---- chunked prefill ---- */

static void test_prompt_in_two_chunks_matches_one_shot(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  const int64_t nb = 8, bs = 4, kv_heads = 2, dh = 16, heads = 4, prompt = 11, first = 6;
  for (size_t dt = 0; dt < 3; ++dt) {
    recap_dtype t = float_types[dt];
    int32_t ids[8];
    shuffled_ids(&rng, ids, nb);
    recap_tensor kp = random_tensor(&rng, t, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
    recap_tensor vp = random_tensor(&rng, t, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
    recap_tensor kp2 = copy_of(&kp), vp2 = copy_of(&vp);
    recap_tensor nk = random_tensor(&rng, t, SHAPE(prompt, kv_heads, dh), CONTIGUOUS, -2, 2);
    recap_tensor nv = random_tensor(&rng, t, SHAPE(prompt, kv_heads, dh), CONTIGUOUS, -2, 2);
    recap_tensor q = random_tensor(&rng, t, SHAPE(prompt, heads, dh), CONTIGUOUS, -1.5, 1.5);

    recap_tensor once = seqs_tensor(1, 4);
    set_row(&once, 0, (int32_t)prompt, 0, (int32_t)prompt, ids, 4);
    kv_write(kp, nk, once);
    kv_write(vp, nv, once);
    recap_tensor whole = attend(q, kp, vp, once, 0);

    const size_t q_row = (size_t)(heads * dh) * esize(t),
                 kv_row = (size_t)(kv_heads * dh) * esize(t);
    for (int chunk = 0; chunk < 2; ++chunk) {
      const int64_t begin = chunk ? first : 0, count = chunk ? prompt - first : first;
      recap_tensor step = seqs_tensor(1, 4);
      set_row(&step, 0, (int32_t)(begin + count), 0, (int32_t)count, ids, 4);
      recap_tensor qc = q, kc = nk, vc = nv;
      qc.shape[0] = kc.shape[0] = vc.shape[0] = count;
      qc.data = (char *)q.data + (size_t)begin * q_row;
      kc.data = (char *)nk.data + (size_t)begin * kv_row;
      vc.data = (char *)nv.data + (size_t)begin * kv_row;
      kv_write(kp2, kc, step);
      kv_write(vp2, vc, step);
      recap_tensor part = attend(qc, kp2, vp2, step, 0);
      check_same_bytes("chunk output vs one shot", part.data,
                       (const char *)whole.data + (size_t)begin * q_row, (size_t)count * q_row);
    }
    check_same_bytes("chunked K pool vs one shot", kp2.data, kp.data, bytes_of(&kp));
    check_same_bytes("chunked V pool vs one shot", vp2.data, vp.data, bytes_of(&vp));
  }
}

/* ---- capture: the metadata is read when the graph replays ---- */

static void test_captured_step_replays_with_new_metadata(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  const int64_t nb = 16, bs = 4, kv_heads = 2, dh = 8, heads = 4, tokens = 6, mb = 5;
  const recap_dtype t = RECAP_DTYPE_F32;
  recap_tensor kp = random_tensor(&rng, t, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor vp = random_tensor(&rng, t, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor kp2 = copy_of(&kp), vp2 = copy_of(&vp);
  recap_tensor nk = random_tensor(&rng, t, SHAPE(tokens, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor nv = random_tensor(&rng, t, SHAPE(tokens, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor q = random_tensor(&rng, t, SHAPE(tokens, heads, dh), CONTIGUOUS, -1, 1);
  recap_tensor seqs = seqs_tensor(3, mb);

  recap__op_call wk = kv_write_call(kp, nk, seqs), wv = kv_write_call(vp, nv, seqs);
  recap__op_call at = attention_call(q, kp, vp, seqs, 0);
  CHECK_OK(recap__op_infer(&at));
  at.outputs[0].data = track(bytes_of(&at.outputs[0]));
  recap__graph_exec *exec = capture_launches((recap__op_call *const[]){&wk, &wv, &at}, 3);

  /* Step 1: a prompt of 4 and a decode token; step 2: two decodes and a new prompt of 3 in
   * other blocks; step 3: nothing. */
  for (int step = 0; step < 3; ++step) {
    memset(seqs.data, 0, bytes_of(&seqs));
    if (step == 0) {
      set_row(&seqs, 0, 4, 0, 4, (const int32_t[]){3}, 1);
      set_row(&seqs, 1, 6, 4, 1, (const int32_t[]){7, 2}, 2);
    } else if (step == 1) {
      set_row(&seqs, 0, 5, 0, 1, (const int32_t[]){3, 9}, 2);
      set_row(&seqs, 1, 7, 1, 1, (const int32_t[]){7, 2}, 2);
      set_row(&seqs, 2, 3, 2, 3, (const int32_t[]){12}, 1);
    }
    for (int64_t k = 0; k < numel(&q); ++k) set(&q, k, draw(&rng, -1, 1));
    CHECK_OK(stream->backend->graph_launch(exec, stream));
    kv_write(kp2, nk, seqs);
    kv_write(vp2, nv, seqs);
    recap_tensor eager = attend(q, kp2, vp2, seqs, 0);
    check_same_bytes("replayed output vs eager", at.outputs[0].data, eager.data, bytes_of(&eager));
    check_same_bytes("replayed K pool vs eager", kp.data, kp2.data, bytes_of(&kp));
    check_same_bytes("replayed V pool vs eager", vp.data, vp2.data, bytes_of(&vp));
  }
  stream->backend->graph_exec_destroy(exec);
}

/* ---- strictness ---- */

/* The valid step the strictness cases break one rule of: MB 4 blocks of BS 4 in a pool of 8;
 * row 0 decodes position 4 (block 1 row 0), row 1 prefills positions 0-2 (block 2), row 2 is
 * unused, tokens 4-5 are padding. */
enum { S_NB = 8, S_BS = 4, S_MB = 4, S_T = 6, S_HKV = 2, S_DH = 8, S_H = 4 };

static recap_tensor strict_seqs(void) {
  recap_tensor seqs = seqs_tensor(3, S_MB);
  set_row(&seqs, 0, 5, 0, 1, (const int32_t[]){0, 1}, 2);
  set_row(&seqs, 1, 3, 1, 3, (const int32_t[]){2}, 1);
  return seqs;
}

typedef struct {
  const char *what;
  int row, column; /* column: a RECAP_SEQ_* field or RECAP_SEQ_BLOCKS + j */
  int32_t value;
  const char *kv_write_error, *attention_error; /* NULL: that op accepts the step */
} strict_case;

static void test_each_metadata_rule_fails_naming_the_row(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  const strict_case cases[] = {
      {"Q_LEN > LEN", 1, RECAP_SEQ_Q_LEN, 4, "row 1: Q_LEN 4 is outside [0, LEN 3]",
       "row 1: Q_LEN 4 is outside"},
      {"negative Q_LEN", 0, RECAP_SEQ_Q_LEN, -1, "row 0: Q_LEN -1 is outside",
       "row 0: Q_LEN -1 is outside"},
      {"negative LEN", 2, RECAP_SEQ_LEN, -2, "row 2: Q_LEN 0 is outside [0, LEN -2]",
       "row 2: Q_LEN 0 is outside"},
      {"a gap between rows", 1, RECAP_SEQ_Q_START, 2, "row 1: Q_START 2, expected 1",
       "row 1: Q_START 2, expected 1"},
      {"first row not at token 0", 0, RECAP_SEQ_Q_START, 1, "row 0: Q_START 1, expected 0",
       "row 0: Q_START 1, expected 0"},
      {"LEN beyond the block table", 0, RECAP_SEQ_LEN, 17, "row 0: LEN 17 exceeds the 16 keys",
       "row 0: LEN 17 exceeds the 16 keys"},
      {"written block not allocated", 0, RECAP_SEQ_BLOCKS + 1, -1,
       "row 0: block-table column 1 (positions 4 to 7) holds block -1",
       "row 0: block-table column 1 (positions 4 to 7) holds block -1"},
      {"read block past the pool", 0, RECAP_SEQ_BLOCKS, S_NB, NULL,
       "row 0: block-table column 0 (positions 0 to 3) holds block 8, outside the cache's 8"},
      {"two rows writing one cache row", 1, RECAP_SEQ_BLOCKS, 1,
       "rows 0 and 1 both write row 0 of block 1", NULL},
  };
  const size_t count = sizeof cases / sizeof cases[0];
  recap_tensor pool =
      random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(S_NB, S_BS, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor rows =
      random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(S_T, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor q = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(S_T, S_H, S_DH), CONTIGUOUS, -1, 1);
  for (size_t c = 0; c < count; ++c) {
    recap_tensor seqs = strict_seqs();
    row_of(&seqs, cases[c].row)[cases[c].column] = cases[c].value;
    recap_tensor before = copy_of(&pool);
    recap__op_call write = kv_write_call(pool, rows, seqs);
    if (cases[c].kv_write_error) {
      CHECK_STATUS(recap__op_launch(&write, stream), RECAP_STATUS_DEVICE_ERROR);
      CHECK_ERROR_MENTIONS("op 'paged_kv_write'");
      CHECK_ERROR_MENTIONS(cases[c].kv_write_error);
      recap__host_backend_reset_fault_for_testing();
      check_same_bytes(cases[c].what, pool.data, before.data, bytes_of(&pool));
    }
    recap__op_call at = attention_call(q, pool, pool, seqs, 0);
    CHECK_OK(recap__op_infer(&at));
    at.outputs[0].data = track(bytes_of(&at.outputs[0]));
    if (cases[c].attention_error) {
      CHECK_STATUS(recap__op_launch(&at, stream), RECAP_STATUS_DEVICE_ERROR);
      CHECK_ERROR_MENTIONS("op 'paged_attention'");
      CHECK_ERROR_MENTIONS(cases[c].attention_error);
      recap__host_backend_reset_fault_for_testing();
    } else {
      CHECK_OK(recap__op_launch(&at, stream));
    }
    if (!cases[c].kv_write_error) CHECK_OK(recap__op_launch(&write, stream));
  }

  /* The same row rules in the token ops; a step whose rows run past T. */
  recap_tensor seqs = strict_seqs();
  row_of(&seqs, 1)[RECAP_SEQ_Q_START] = 2;
  recap__op_call last = new_call("seq_last_tokens");
  add_input(&last, seqs);
  CHECK_OK(recap__op_infer(&last));
  last.outputs[0].data = track(bytes_of(&last.outputs[0]));
  CHECK_STATUS(recap__op_launch(&last, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("row 1: Q_START 2, expected 1");
  recap__host_backend_reset_fault_for_testing();
  /* Without a token count, the tokens must still end by the largest i32 index. */
  seqs = strict_seqs();
  set_row(&seqs, 0, INT32_MAX, 0, INT32_MAX, NULL, 0);
  set_row(&seqs, 1, 3, INT32_MAX, 1, NULL, 0);
  last = new_call("seq_last_tokens");
  add_input(&last, seqs);
  CHECK_OK(recap__op_infer(&last));
  last.outputs[0].data = track(bytes_of(&last.outputs[0]));
  CHECK_STATUS(recap__op_launch(&last, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("row 1: its tokens [2147483647, 2147483648) run past the step's 2147483647");
  recap__host_backend_reset_fault_for_testing();
  recap__op_call positions = new_call("seq_positions");
  add_input(&positions, strict_seqs());
  positions.attrs.dim = 3;
  CHECK_OK(recap__op_infer(&positions));
  positions.outputs[0].data = track(bytes_of(&positions.outputs[0]));
  CHECK_STATUS(recap__op_launch(&positions, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("row 1: its tokens [1, 4) run past the step's 3 tokens");
  recap__host_backend_reset_fault_for_testing();

  /* A row writing one cache row twice: its table names block 1 for columns 0 and 1. */
  seqs = strict_seqs();
  set_row(&seqs, 0, 5, 0, 5, (const int32_t[]){1, 1}, 2);
  set_row(&seqs, 1, 3, 0, 0, (const int32_t[]){2}, 1);
  recap__op_call twice = kv_write_call(pool, rows, seqs);
  CHECK_STATUS(recap__op_launch(&twice, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("rows 0 and 0 both write row 0 of block 1 (block-table columns 0 and 1)");
  recap__host_backend_reset_fault_for_testing();

  /* The output of paged_kv_write must be the pool. */
  recap__op_call elsewhere = kv_write_call(pool, rows, strict_seqs());
  elsewhere.outputs[0].data = track(bytes_of(&pool));
  CHECK_STATUS(recap__op_launch(&elsewhere, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("the cache itself");
  recap__host_backend_reset_fault_for_testing();
}

/* Shapes and dtypes the ops refuse at inference, each naming the op and the input. */
static void test_bad_shapes_fail_at_infer(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  recap_tensor pool =
      random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_NB, S_BS, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor rows =
      random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_T, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor q = random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_T, S_H, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor good = strict_seqs();

  recap_tensor f32_seqs = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(3, 20), CONTIGUOUS, 0, 1);
  recap_tensor narrow = seqs_tensor(3, 0);
  recap_tensor flat = tensor(RECAP_DTYPE_I32, SHAPE(60), CONTIGUOUS);
  recap_tensor padded = tensor(RECAP_DTYPE_I32, SHAPE(3, 20), PADDED);
  const struct {
    recap_tensor seqs;
    const char *error;
  } bad_seqs[] = {
      {f32_seqs, "input 'seqs' has dtype f32"},
      {narrow, "its rows need more than 16 entries"},
      {flat, "expected [Bs, W]"},
      {padded, "input 'seqs' must be contiguous"},
  };
  static const char *const ops[] = {"seq_positions", "seq_last_tokens", "paged_kv_write",
                                    "paged_attention"};
  for (size_t s = 0; s < sizeof bad_seqs / sizeof bad_seqs[0]; ++s)
    for (size_t o = 0; o < 4; ++o) {
      recap__op_call call = new_call(ops[o]);
      if (o == 2) {
        add_input(&call, pool);
        add_input(&call, rows);
      } else if (o == 3) {
        add_input(&call, q);
        add_input(&call, pool);
        add_input(&call, pool);
      }
      add_input(&call, bad_seqs[s].seqs);
      call.attrs.dim = S_T;
      CHECK_STATUS(recap__op_infer(&call), RECAP_STATUS_INVALID_ARGUMENT);
      CHECK_ERROR_MENTIONS(ops[o]);
      CHECK_ERROR_MENTIONS(bad_seqs[s].error);
    }

  recap__op_call positions = new_call("seq_positions");
  add_input(&positions, good);
  CHECK_STATUS(recap__op_infer(&positions), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("attribute 'tokens' is 0");

  recap_tensor wide =
      random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_T, S_HKV + 1, S_DH), CONTIGUOUS, -1, 1);
  recap__op_call write = new_call("paged_kv_write");
  add_input(&write, pool);
  add_input(&write, wide);
  add_input(&write, good);
  CHECK_STATUS(recap__op_infer(&write), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'new' [6, 3, 8] does not match input 'cache' [8, 4, 2, 8]");

  recap_tensor f32_rows =
      random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(S_T, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  write = new_call("paged_kv_write");
  add_input(&write, pool);
  add_input(&write, f32_rows);
  add_input(&write, good);
  CHECK_STATUS(recap__op_infer(&write), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'new' has dtype f32");

  recap_tensor q3 = random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_T, 3, S_DH), CONTIGUOUS, -1, 1);
  recap__op_call at = attention_call(q3, pool, pool, good, 0);
  CHECK_STATUS(recap__op_infer(&at), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'q' has 3 heads, not a multiple of the 2 heads");

  recap_tensor other =
      random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_NB, S_BS + 1, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  at = attention_call(q, pool, other, good, 0);
  CHECK_STATUS(recap__op_infer(&at), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("must have one shape");

  recap_tensor q_dh = random_tensor(&rng, RECAP_DTYPE_F16, SHAPE(S_T, S_H, 4), CONTIGUOUS, -1, 1);
  at = attention_call(q_dh, pool, pool, good, 0);
  CHECK_STATUS(recap__op_infer(&at), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("differ in head_dim");
}

/* ---- paged_rope_kv_write ---- */

/* Rotary frequencies written from the definition (transformers' rope types), in double:
 * theta^(-2i/Dh), and with Llama 3 scaling, wavelengths 2 pi / inv_freq under orig / high kept,
 * over orig / low divided by factor, between them interpolated with s = (orig / wavelength -
 * low) / (high - low). The op computes them in f32 steps; at the positions below (under 40) the
 * difference stays far under the tolerances. */
typedef struct {
  double theta;
  bool llama3;
  double factor, low, high, orig;
} hand_rope;

static double hand_inv_freq(const hand_rope *r, int64_t i, int64_t dh) {
  const double inv = pow(r->theta, -2.0 * (double)i / (double)dh);
  if (!r->llama3) return inv;
  const double wavelen = 2 * M_PI / inv;
  if (wavelen < r->orig / r->high) return inv;
  if (wavelen > r->orig / r->low) return inv / r->factor;
  const double s = (r->orig / wavelen - r->low) / (r->high - r->low);
  return (1 - s) * inv / r->factor + s * inv;
}

static void set_rope_attrs(recap__op_attrs *a, const hand_rope *r) {
  a->rope_theta = r->theta;
  a->rope_llama3 = r->llama3;
  if (!r->llama3) return;
  a->rope_factor = r->factor;
  a->rope_low_freq_factor = r->low;
  a->rope_high_freq_factor = r->high;
  a->rope_original_max = (int64_t)r->orig;
}

/* Head h of token t of a [T, heads, Dh] view rotated at `pos` into ref (and each element's
 * scale, |x1 cos| + |x2 sin|) at ref_at. */
static void hand_rotate(const hand_rope *r, const recap_tensor *x, int64_t t, int64_t h,
                        int64_t pos, double *ref, double *scale, int64_t ref_at) {
  const int64_t dh = x->shape[2], half = dh / 2, base = (t * x->shape[1] + h) * dh;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = hand_inv_freq(r, i, dh) * (double)pos, c = cos(angle), s = sin(angle);
    const double x1 = get(x, base + i), x2 = get(x, base + i + half);
    ref[ref_at + i] = x1 * c - x2 * s;
    ref[ref_at + i + half] = x2 * c + x1 * s;
    scale[ref_at + i] = fabs(x1 * c) + fabs(x2 * s);
    scale[ref_at + i + half] = fabs(x2 * c) + fabs(x1 * s);
  }
}

static recap__op_call rope_kv_call(recap_tensor q, recap_tensor k, recap_tensor v, recap_tensor kc,
                                   recap_tensor vc, recap_tensor seqs, const hand_rope *r) {
  recap__op_call call = new_call("paged_rope_kv_write");
  recap_tensor in[] = {q, k, v, kc, vc, seqs};
  for (int i = 0; i < 6; ++i) add_input(&call, in[i]);
  set_rope_attrs(&call.attrs, r);
  return call;
}

/* Infers, binds a poisoned q output (the pools are the inputs'), runs; returns the rotated q. */
static recap_tensor rope_kv_write(recap_tensor q, recap_tensor k, recap_tensor v, recap_tensor kc,
                                  recap_tensor vc, recap_tensor seqs, const hand_rope *r) {
  recap__op_call call = rope_kv_call(q, k, v, kc, vc, seqs, r);
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_PTR_EQUAL(call.outputs[1].data, kc.data);
  CU_ASSERT_PTR_EQUAL(call.outputs[2].data, vc.data);
  recap_tensor *out = &call.outputs[0];
  out->data = track(bytes_of(out));
  poison(out->dtype, out->data, numel(out));
  CHECK_OK(recap__op_launch(&call, stream));
  return *out;
}

/* A [T, n, Dh] view of columns [col, col + n Dh) of a [T, width] projection, as the spec's
 * split and reshape make q, k and v of one qkv GEMM. */
static recap_tensor heads_view(const recap_tensor *qkv, int64_t col, int64_t n, int64_t dh) {
  recap_tensor t = *qkv;
  t.ndim = 3;
  t.shape[0] = qkv->shape[0], t.shape[1] = n, t.shape[2] = dh;
  t.strides[0] = qkv->strides[0], t.strides[1] = dh, t.strides[2] = 1;
  t.data = (char *)qkv->data + (size_t)col * esize(qkv->dtype);
  return t;
}

/* One step of `n` sequences (specs; a row between each two, unused or sitting the step out)
 * and `tokens` tokens with GQA heads 6 over 2, Dh 16 and blocks of 4 rows: the op against the
 * hand rotation and block addressing, and byte for byte against rope at seq_positions'
 * positions followed by paged_kv_write of K and of V. */
static void rope_kv_case(test_rng *rng, recap_dtype dt, const hand_rope *r, const seq_spec *specs,
                         int n, int64_t tokens) {
  const int64_t heads = 6, kv_heads = 2, dh = 16, bs = 4, mb = 5, nb = 40;
  const int64_t width = (heads + 2 * kv_heads) * dh;
  int32_t ids[40];
  shuffled_ids(rng, ids, nb);
  recap_tensor qkv = random_tensor(rng, dt, SHAPE(tokens, width), CONTIGUOUS, -2, 2);
  recap_tensor q = heads_view(&qkv, 0, heads, dh), k = heads_view(&qkv, heads * dh, kv_heads, dh);
  recap_tensor v = heads_view(&qkv, (heads + kv_heads) * dh, kv_heads, dh);
  recap_tensor kc = random_tensor(rng, dt, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor vc = random_tensor(rng, dt, SHAPE(nb, bs, kv_heads, dh), CONTIGUOUS, -2, 2);
  recap_tensor kc_before = copy_of(&kc), vc_before = copy_of(&vc);
  recap_tensor kc_unfused = copy_of(&kc), vc_unfused = copy_of(&vc);

  recap_tensor seqs = seqs_tensor(2 * n, mb);
  int64_t *pos = track((size_t)tokens * sizeof *pos),
          *block = track((size_t)tokens * sizeof *block);
  bool *owned = track((size_t)tokens * sizeof *owned);
  memset(owned, 0, (size_t)tokens * sizeof *owned);
  int32_t start = 0;
  for (int s = 0; s < n; ++s) {
    const int32_t len = specs[s].prior + specs[s].count;
    CU_ASSERT_FATAL(len <= mb * bs);
    set_row(&seqs, 2 * s, len, start, specs[s].count, ids + s * mb, mb);
    set_row(&seqs, 2 * s + 1, s % 2 ? 3 : 0, 0, 0, ids + 35, s % 2 ? 1 : 0);
    for (int32_t t = 0; t < specs[s].count; ++t) {
      pos[start + t] = specs[s].prior + t;
      block[start + t] = ids[s * mb + pos[start + t] / bs];
      owned[start + t] = true;
    }
    start += specs[s].count;
  }
  CU_ASSERT_FATAL(start <= tokens);

  recap_tensor q_rot = rope_kv_write(q, k, v, kc, vc, seqs, r);

  /* By hand: q of every token (padding at position 0: a copy), K rows rotated and V rows
   * copied to row pos % BS of their block, every other pool row as it was. */
  const int64_t qn = tokens * heads * dh, pn = nb * bs * kv_heads * dh;
  double *q_ref = doubles(qn), *q_scale = doubles(qn);
  double *k_ref = doubles(pn), *k_scale = doubles(pn), *v_ref = doubles(pn);
  for (int64_t e = 0; e < pn; ++e) {
    k_ref[e] = get(&kc_before, e);
    k_scale[e] = fabs(k_ref[e]);
    v_ref[e] = get(&vc_before, e);
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = owned[t] ? pos[t] : 0;
    for (int64_t h = 0; h < heads; ++h)
      hand_rotate(r, &q, t, h, p, q_ref, q_scale, (t * heads + h) * dh);
    if (!owned[t]) continue;
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t at = ((block[t] * bs + p % bs) * kv_heads + h) * dh;
      hand_rotate(r, &k, t, h, p, k_ref, k_scale, at);
      for (int64_t d = 0; d < dh; ++d) v_ref[at + d] = get(&v, (t * kv_heads + h) * dh + d);
    }
  }
  char what[160];
  snprintf(what, sizeof what, "paged_rope_kv_write%s, %d sequences, %lld tokens",
           r->llama3 ? " (llama3)" : "", n, (long long)tokens);
  check(what, &q_rot, q_ref, q_scale);
  check(what, &kc, k_ref, k_scale);
  check_exact(what, &vc, v_ref);

  /* The unfused layer: seq_positions, rope of q and of k, paged_kv_write of K and of V. */
  recap__op_call positions = new_call("seq_positions");
  add_input(&positions, seqs);
  positions.attrs.dim = tokens;
  run(&positions);
  recap_tensor rotated[2];
  for (int x = 0; x < 2; ++x) {
    recap__op_call rope = new_call("rope");
    add_input(&rope, x ? k : q);
    add_input(&rope, positions.outputs[0]);
    set_rope_attrs(&rope.attrs, r);
    run(&rope);
    rotated[x] = rope.outputs[0];
  }
  kv_write(kc_unfused, rotated[1], seqs);
  kv_write(vc_unfused, v, seqs);
  check_same_bytes("fused q vs rope", q_rot.data, rotated[0].data, bytes_of(&q_rot));
  check_same_bytes("fused K pool vs rope + paged_kv_write", kc.data, kc_unfused.data,
                   bytes_of(&kc));
  check_same_bytes("fused V pool vs paged_kv_write", vc.data, vc_unfused.data, bytes_of(&vc));

  /* paged_rope_attention is the two ops: the same pools, and paged_attention over the
   * rotated q (which it keeps in its workspace), byte for byte. */
  recap_tensor kc_fused = copy_of(&kc_before), vc_fused = copy_of(&vc_before);
  recap__op_call fused = new_call("paged_rope_attention");
  const recap_tensor fused_in[] = {q, k, v, kc_fused, vc_fused, seqs};
  for (int i = 0; i < 6; ++i) add_input(&fused, fused_in[i]);
  set_rope_attrs(&fused.attrs, r);
  fused.attrs.scale = 0.3;
  CHECK_OK(recap__op_infer(&fused));
  CU_ASSERT_PTR_EQUAL(fused.outputs[1].data, kc_fused.data);
  CU_ASSERT_PTR_EQUAL(fused.outputs[2].data, vc_fused.data);
  fused.outputs[0].data = track(bytes_of(&fused.outputs[0]));
  poison(dt, fused.outputs[0].data, numel(&fused.outputs[0]));
  fused.workspace_bytes = fused.def->workspace_bytes(&fused, RECAP_BACKEND_HOST);
  CU_ASSERT_EQUAL(fused.workspace_bytes, (bytes_of(&q_rot) + 255) / 256 * 256);
  fused.workspace = track(fused.workspace_bytes);
  CHECK_OK(recap__op_launch(&fused, stream));
  const recap_tensor attention = attend(q_rot, kc, vc, seqs, 0.3);
  check_same_bytes("paged_rope_attention vs paged_attention of the rotated q",
                   fused.outputs[0].data, attention.data, bytes_of(&attention));
  check_same_bytes("paged_rope_attention's K pool", kc_fused.data, kc.data, bytes_of(&kc));
  check_same_bytes("paged_rope_attention's V pool", vc_fused.data, vc.data, bytes_of(&vc));

  /* All-zero metadata: no pool row changes, and q is rotated at position 0 (copied). */
  recap_tensor kc_now = copy_of(&kc), vc_now = copy_of(&vc);
  recap_tensor q_zero = rope_kv_write(q, k, v, kc, vc, seqs_tensor(2 * n, mb), r);
  check_same_bytes("K pool after all-zero metadata", kc.data, kc_now.data, bytes_of(&kc));
  check_same_bytes("V pool after all-zero metadata", vc.data, vc_now.data, bytes_of(&vc));
  double *q_copy = doubles(qn);
  for (int64_t e = 0; e < qn; ++e) q_copy[e] = get(&q, e);
  check_exact("q at all-zero metadata", &q_zero, q_copy);
}

static void test_rope_kv_write_matches_hand_rotation_and_blocks(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  /* theta 10000 at Dh 16: wavelengths 6.3, 20, 63, 199, 628, ...; with original_max_positions
   * 256 and factors 1 and 4 pairs 0-2 are kept, pair 3 interpolated, pairs 4-7 divided by 8. */
  const hand_rope plain = {.theta = 10000}, big = {.theta = 500000};
  const hand_rope llama3 = {
      .theta = 10000, .llama3 = true, .factor = 8, .low = 1, .high = 4, .orig = 256};
  /* Decode rows at block boundaries (position 3 ends block 0, 4 starts block 1), a prefill
   * chunk spanning three blocks from mid-block, a first chunk, a long context. */
  static const seq_spec mixed[] = {{3, 1}, {2, 9}, {4, 1}, {0, 3}, {17, 2}};
  static const seq_spec decode[] = {{11, 1}, {0, 1}, {7, 1}};
  const hand_rope *ropes[] = {&plain, &llama3, &big};
  for (size_t dt = 0; dt < 3; ++dt)
    for (int r = 0; r < 3; ++r) {
      rope_kv_case(&rng, float_types[dt], ropes[r], mixed, 5, 16);
      rope_kv_case(&rng, float_types[dt], ropes[r], mixed, 5, 20); /* 4 padding tokens */
      rope_kv_case(&rng, float_types[dt], ropes[r], decode, 3, 4);
    }
}

/* Refusals at inference (shapes, dtypes, attributes) and at run time (the metadata). */
static void test_rope_kv_write_refuses_bad_inputs(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  const recap_dtype f = RECAP_DTYPE_F32;
  recap_tensor q = random_tensor(&rng, f, SHAPE(S_T, S_H, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor k = random_tensor(&rng, f, SHAPE(S_T, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor v = random_tensor(&rng, f, SHAPE(S_T, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor pool = random_tensor(&rng, f, SHAPE(S_NB, S_BS, S_HKV, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor pool2 = copy_of(&pool);
  const hand_rope plain = {.theta = 10000};
  const struct {
    int input;
    recap_tensor t;
    const char *error;
  } bad[] = {
      {1, random_tensor(&rng, f, SHAPE(S_T, S_HKV + 1, S_DH), CONTIGUOUS, -1, 1),
       "input 'k' [6, 3, 8] does not match input 'k_cache' [8, 4, 2, 8]"},
      {2, random_tensor(&rng, f, SHAPE(S_T, S_HKV, S_DH / 2), CONTIGUOUS, -1, 1),
       "input 'v' [6, 2, 4] does not match input 'k_cache'"},
      {1, random_tensor(&rng, f, SHAPE(S_T - 1, S_HKV, S_DH), CONTIGUOUS, -1, 1),
       "with one T and the caches' Dh 8"},
      {0, random_tensor(&rng, f, SHAPE(S_T, S_H, S_DH + 2), CONTIGUOUS, -1, 1),
       "with one T and the caches' Dh 8"},
      {2, random_tensor(&rng, RECAP_DTYPE_BF16, SHAPE(S_T, S_HKV, S_DH), CONTIGUOUS, -1, 1),
       "input 'v' has dtype bf16"},
      {1, random_tensor(&rng, f, SHAPE(S_T, S_HKV, S_DH), TRANSPOSED, -1, 1), "'k'"},
      {4, random_tensor(&rng, f, SHAPE(S_NB + 1, S_BS, S_HKV, S_DH), CONTIGUOUS, -1, 1),
       "inputs 'k_cache' [8, 4, 2, 8] and 'v_cache' [9, 4, 2, 8] must have one shape"},
      {5, seqs_tensor(3, 0), "input 'seqs' has shape [3, 16]: its rows need more than 16"},
  };
  for (size_t c = 0; c < sizeof bad / sizeof bad[0]; ++c) {
    recap_tensor in[] = {q, k, v, pool, pool2, strict_seqs()};
    in[bad[c].input] = bad[c].t;
    recap__op_call call = rope_kv_call(in[0], in[1], in[2], in[3], in[4], in[5], &plain);
    CHECK_STATUS(recap__op_infer(&call), RECAP_STATUS_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("paged_rope_kv_write");
    CHECK_ERROR_MENTIONS(bad[c].error);
  }
  /* An odd head dim has no halves to rotate. */
  recap_tensor q5 = random_tensor(&rng, f, SHAPE(S_T, S_H, 5), CONTIGUOUS, -1, 1);
  recap_tensor k5 = random_tensor(&rng, f, SHAPE(S_T, S_HKV, 5), CONTIGUOUS, -1, 1);
  recap_tensor p5 = random_tensor(&rng, f, SHAPE(S_NB, S_BS, S_HKV, 5), CONTIGUOUS, -1, 1);
  recap__op_call odd = rope_kv_call(q5, k5, k5, p5, p5, strict_seqs(), &plain);
  CHECK_STATUS(recap__op_infer(&odd), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("odd head dimension");
  /* rope's attribute rules: llama3 needs its four parameters. */
  const hand_rope half_llama3 = {.theta = 10000, .llama3 = true, .factor = 8, .low = 1};
  recap__op_call attrs = rope_kv_call(q, k, v, pool, pool2, strict_seqs(), &half_llama3);
  CHECK_STATUS(recap__op_infer(&attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("attribute 'high_freq_factor' = 0 must be > 0");

  /* At run time, a block table too narrow for the row's length, and a written block outside
   * the pool, fail naming the row, and nothing is written. */
  static const struct {
    int row, column;
    int32_t value;
    const char *error;
  } rows[] = {
      {0, RECAP_SEQ_LEN, 17, "row 0: LEN 17 exceeds the 16 keys that its 4 block-table columns"},
      {0, RECAP_SEQ_BLOCKS + 1, S_NB,
       "row 0: block-table column 1 (positions 4 to 7) holds block 8"},
      {1, RECAP_SEQ_BLOCKS, 1, "rows 0 and 1 both write row 0 of block 1"},
  };
  for (size_t c = 0; c < sizeof rows / sizeof rows[0]; ++c) {
    recap_tensor seqs = strict_seqs();
    row_of(&seqs, rows[c].row)[rows[c].column] = rows[c].value;
    recap_tensor before = copy_of(&pool), before2 = copy_of(&pool2);
    recap__op_call call = rope_kv_call(q, k, v, pool, pool2, seqs, &plain);
    CHECK_OK(recap__op_infer(&call));
    call.outputs[0].data = track(bytes_of(&call.outputs[0]));
    CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
    CHECK_ERROR_MENTIONS("op 'paged_rope_kv_write'");
    CHECK_ERROR_MENTIONS(rows[c].error);
    recap__host_backend_reset_fault_for_testing();
    check_same_bytes("K pool after bad metadata", pool.data, before.data, bytes_of(&pool));
    check_same_bytes("V pool after bad metadata", pool2.data, before2.data, bytes_of(&pool2));
  }
  /* Outputs 1 and 2 are the pools themselves. */
  recap__op_call elsewhere = rope_kv_call(q, k, v, pool, pool2, strict_seqs(), &plain);
  CHECK_OK(recap__op_infer(&elsewhere));
  elsewhere.outputs[0].data = track(bytes_of(&elsewhere.outputs[0]));
  elsewhere.outputs[2].data = track(bytes_of(&pool2));
  CHECK_STATUS(recap__op_launch(&elsewhere, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("the caches themselves");
  recap__host_backend_reset_fault_for_testing();
  /* The contract: outputs 1 and 2 are inputs 3 and 4; zero metadata writes nothing. */
  const recap__op_def *def = recap__op_find("paged_rope_kv_write");
  CU_ASSERT_EQUAL(recap__op_output_input(def, 0), -1);
  CU_ASSERT_EQUAL(recap__op_output_input(def, 1), 3);
  CU_ASSERT_EQUAL(recap__op_output_input(def, 2), 4);
  CU_ASSERT_TRUE(def->zero_meta_writes_nothing);

  /* paged_rope_attention refuses what either part refuses, naming itself: a shape of
   * paged_rope_kv_write's, then attention's groups and scale; and it runs with no workspace
   * for its rotated q only as an error. */
  recap_tensor k3 = random_tensor(&rng, f, SHAPE(S_T, S_HKV + 1, S_DH), CONTIGUOUS, -1, 1);
  recap_tensor pool3 =
      random_tensor(&rng, f, SHAPE(S_NB, S_BS, S_HKV + 1, S_DH), CONTIGUOUS, -1, 1);
  const struct {
    recap_tensor k, pool;
    double scale;
    const char *error;
  } fused_bad[] = {
      {k3, pool, 0, "input 'k' [6, 3, 8] does not match input 'k_cache' [8, 4, 2, 8]"},
      {k3, pool3, 0, "input 'q' has 4 heads, not a multiple of the 3 heads of the caches"},
      {k, pool, INFINITY, "attribute 'scale' must be finite"},
  };
  for (size_t c = 0; c < sizeof fused_bad / sizeof fused_bad[0]; ++c) {
    recap__op_call call = new_call("paged_rope_attention");
    const recap_tensor in[] = {
        q, fused_bad[c].k, fused_bad[c].k, fused_bad[c].pool, fused_bad[c].pool, strict_seqs()};
    for (int i = 0; i < 6; ++i) add_input(&call, in[i]);
    set_rope_attrs(&call.attrs, &plain);
    call.attrs.scale = fused_bad[c].scale;
    CHECK_STATUS(recap__op_infer(&call), RECAP_STATUS_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("op 'paged_rope_attention'");
    CHECK_ERROR_MENTIONS(fused_bad[c].error);
  }
  recap__op_call no_ws = new_call("paged_rope_attention");
  const recap_tensor ok_in[] = {q, k, v, pool, pool2, strict_seqs()};
  for (int i = 0; i < 6; ++i) add_input(&no_ws, ok_in[i]);
  set_rope_attrs(&no_ws.attrs, &plain);
  CHECK_OK(recap__op_infer(&no_ws));
  no_ws.outputs[0].data = track(bytes_of(&no_ws.outputs[0]));
  CHECK_STATUS(recap__op_launch(&no_ws, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("bytes of workspace for its rotated q");
  recap__host_backend_reset_fault_for_testing();
  const recap__op_def *fused_def = recap__op_find("paged_rope_attention");
  CU_ASSERT_EQUAL(recap__op_output_input(fused_def, 1), 3);
  CU_ASSERT_EQUAL(recap__op_output_input(fused_def, 2), 4);
  CU_ASSERT_TRUE(fused_def->zero_meta_writes_nothing);
  /* Attention's reduced axes, on this op's inputs: q's head dim, k_cache's and v_cache's. */
  int input[4], axis[4];
  CU_ASSERT_EQUAL(fused_def->reduced_axes(&no_ws.attrs, input, axis), 4);
  const int want_input[4] = {0, 3, 3, 4}, want_axis[4] = {-1, -1, 1, 1};
  for (int i = 0; i < 4; ++i) {
    CU_ASSERT_EQUAL(input[i], want_input[i]);
    CU_ASSERT_EQUAL(axis[i], want_axis[i]);
  }
}

/* ---- the CUDA grid and workspace, from shapes alone ---- */

/* plan_for's CUDA call state bytes (the split calls' arrival counts). */
static size_t g_cuda_counts;

/* The plan of `tokens` query tokens over `rows` sequence rows of `mb` blocks of `bs` keys. */
static recap__paged_attention_grid plan_over_rows(int64_t tokens, int64_t rows, int64_t heads,
                                                  int64_t kv_heads, int64_t dh, int64_t bs,
                                                  int64_t mb, size_t *cuda_ws, size_t *host_ws) {
  recap__op_call call = new_call("paged_attention");
  call.num_inputs = 4;
  call.inputs[0] = (recap_tensor){NULL, RECAP_DTYPE_BF16, 3, {tokens, heads, dh}, {0}};
  call.inputs[1] = (recap_tensor){NULL, RECAP_DTYPE_BF16, 4, {64, bs, kv_heads, dh}, {0}};
  call.inputs[3] = (recap_tensor){NULL, RECAP_DTYPE_I32, 2, {rows, RECAP_SEQ_BLOCKS + mb}, {0}};
  for (int i = 0; i < 4; ++i) recap__tensor_set_contiguous(&call.inputs[i]);
  call.inputs[2] = call.inputs[1];
  CHECK_OK(recap__op_infer(&call));
  *cuda_ws = call.def->workspace_bytes(&call, RECAP_BACKEND_CUDA);
  *host_ws = call.def->workspace_bytes(&call, RECAP_BACKEND_HOST);
  g_cuda_counts = call.def->call_state_bytes(&call, RECAP_BACKEND_CUDA);
  /* The host takes the same bytes, to check they are zero at each launch. */
  CU_ASSERT_EQUAL(call.def->call_state_bytes(&call, RECAP_BACKEND_HOST), g_cuda_counts);
  return recap__paged_attention_plan(&call);
}

/* The same over 8 sequence rows. */
static recap__paged_attention_grid plan_for(int64_t tokens, int64_t heads, int64_t kv_heads,
                                            int64_t dh, int64_t bs, int64_t mb, size_t *cuda_ws,
                                            size_t *host_ws) {
  return plan_over_rows(tokens, 8, heads, kv_heads, dh, bs, mb, cuda_ws, host_ws);
}

/* A split plan of `tokens` tokens over 8 KV heads of 64 (64 blocks of 16 keys per row) cuts
 * its `heads` query heads into `chunks` CTAs of `per_cta` heads, each counted apart. */
static void expect_group_cut(int64_t tokens, int64_t heads, int64_t per_cta, int64_t chunks) {
  size_t cuda_ws, host_ws;
  const recap__paged_attention_grid g = plan_for(tokens, heads, 8, 64, 16, 64, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, per_cta);
  CU_ASSERT_EQUAL(g.head_chunks, chunks);
  CU_ASSERT(g.splits > 1);
  CU_ASSERT_EQUAL(g_cuda_counts, (size_t)(tokens * 8 * chunks) * sizeof(uint32_t));
}

static void test_split_plan_follows_shapes(void) {
  free_tracked();
  size_t cuda_ws, host_ws;
  /* Decode at batch 1, Llama-8B heads (4 of 128 per KV head), 4096 keys of capacity: two
   * CTAs per KV head serving 2 query heads each; 32 splits of at least 128 keys. */
  recap__paged_attention_grid g = plan_for(1, 32, 8, 128, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 2);
  CU_ASSERT_EQUAL(g.head_chunks, 2);
  CU_ASSERT_EQUAL(g.splits, 32);
  CU_ASSERT_EQUAL(cuda_ws, (size_t)1 * 32 * 32 * (2 + 128) * sizeof(float));
  CU_ASSERT_EQUAL(host_ws, 0);
  CU_ASSERT_EQUAL(g_cuda_counts, 8 * 2 * 4); /* a u32 per (KV head, chunk) */
  /* 16 groups: few, so a split spans at least 64 keys. */
  CU_ASSERT_EQUAL(g.min_keys_per_split, RECAP__PAGED_MIN_KEYS_FEW_GROUPS);
  /* Llama 3.2 1B's heads at batch 1 (4 of 64, 8 (token, KV head) pairs) keep the group. */
  g = plan_for(1, 32, 8, 64, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 4);
  CU_ASSERT_EQUAL(g.head_chunks, 1);
  /* ... but not at batch 2 (16 pairs), nor a group of 7 (Qwen2 0.5B: 4 chunks of 2 heads). */
  g = plan_for(2, 32, 8, 64, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 2);
  CU_ASSERT_EQUAL(g.min_keys_per_split, RECAP__PAGED_MIN_KEYS_PER_SPLIT); /* 32 groups */
  g = plan_for(1, 14, 2, 64, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 2);
  CU_ASSERT_EQUAL(g.head_chunks, 4);
  /* A large decode grid cuts too (64 tokens over 8 KV heads: 1024 CTAs of 2 heads, one split). */
  g = plan_over_rows(64, 64, 32, 8, 64, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 2);
  CU_ASSERT_EQUAL(g.head_chunks, 2);
  CU_ASSERT_EQUAL(g.splits, 1);
  /* Batch 64 (more tokens than the 8 rows: a prefill step): the whole group, 512 CTAs
   * already, two splits. */
  g = plan_for(64, 32, 8, 128, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 4);
  CU_ASSERT_EQUAL(g.splits, 2);
  CU_ASSERT_EQUAL(g_cuda_counts, 64 * 8 * 4);
  /* Long prompt chunk: no split, no workspace, no counts. */
  g = plan_for(2048, 32, 8, 128, 16, 256, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.splits, 1);
  CU_ASSERT_EQUAL(cuda_ws, 0);
  CU_ASSERT_EQUAL(g_cuda_counts, 0);
  /* A short table caps the splits by its keys (3 x 16 keys: one split); the most splits is
   * RECAP__PAGED_MAX_SPLITS. */
  g = plan_for(1, 8, 8, 64, 16, 3, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.heads_per_cta, 1);
  CU_ASSERT_EQUAL(g.splits, 1);
  g = plan_for(1, 8, 8, 64, 16, 4096, &cuda_ws, &host_ws);
  CU_ASSERT_EQUAL(g.splits, RECAP__PAGED_MAX_SPLITS);
  /* Groups at decode: 3 -> 2 chunks of 2 heads; 12 -> 6 chunks, a count per chunk. In a
   * prefill step (16 tokens over the 8 rows): 3 -> 4 heads per CTA; 12 -> chunks of 8. */
  expect_group_cut(4, 24, 2, 2);
  expect_group_cut(4, 96, 2, 6);
  expect_group_cut(16, 24, 4, 1);
  expect_group_cut(16, 96, 8, 2);
}

int main(void) {
  CU_pSuite s = test_add_suite("ops_paged/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_paged_sequence_matches_contiguous_ops);
  CU_ADD_TEST(s, test_packed_batch_matches_each_sequence_alone);
  CU_ADD_TEST(s, test_padding_tokens_write_nothing_and_output_zeros);
  CU_ADD_TEST(s, test_seq_positions_and_last_tokens_match_hand_values);
  CU_ADD_TEST(s, test_prompt_in_two_chunks_matches_one_shot);
  CU_ADD_TEST(s, test_captured_step_replays_with_new_metadata);
  CU_ADD_TEST(s, test_each_metadata_rule_fails_naming_the_row);
  CU_ADD_TEST(s, test_bad_shapes_fail_at_infer);
  CU_ADD_TEST(s, test_rope_kv_write_matches_hand_rotation_and_blocks);
  CU_ADD_TEST(s, test_rope_kv_write_refuses_bad_inputs);
  CU_ADD_TEST(s, test_split_plan_follows_shapes);
  CU_ADD_TEST(s, test_call_state_must_be_zero_at_launch);
  return test_run_all();
}
