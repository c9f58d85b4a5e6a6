/*
 * ops_cuda_paged_test.c: the paged serving ops on CUDA against the host reference
 * (ops_cuda_util.h): one step of paged_kv_write (K and V), paged_attention, seq_positions and
 * seq_last_tokens over pools in shuffled block order, for every float dtype and shapes that
 * cover the kernel's paths (decode with many key splits and empty splits, long contexts of
 * 3000 keys, prefill chunks with and without splits, GQA groups 1, 3, 4, 7, 8 and 12, head dims
 * 32 to 256, odd block sizes, strided and unaligned inputs, padding tokens, unused rows); the
 * same step captured once and replayed with different metadata; refusals at launch; and bad
 * metadata trapping the device (in child processes, as a fault kills the CUDA context); and
 * paged_rope_kv_write (RoPE of q and k, K and V into the pools) and paged_rope_attention (that
 * and the attention, one kernel at decode) against the host ops.
 *
 * Pools and seq outputs must match the host bit for bit, attention outputs within the
 * suite's tolerance scaled by sum_j p_j |v_j| (SCALE_ATTENTION). The CUDA suite is inactive on
 * a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "kernels/paged.h"
#include "tests/ops_cuda_util.h"

/* ---- buffers on both sides ---- */

/* Bytes that exist on the host and on the device. */
typedef struct {
  void *host, *dev;
  size_t bytes;
} mirror;

static mirror mirror_new(size_t bytes) {
  mirror m = {host_alloc(bytes), dev_alloc(bytes), bytes};
  memset(m.host, 0, bytes);
  return m;
}

static void mirror_push(const mirror *m) {
  to_device(m->dev, m->host, m->bytes);
}

static void fill_random(test_rng *rng, recap_dtype dtype, void *host, int64_t n, double lo,
                        double hi) {
  for (int64_t i = 0; i < n; ++i)
    recap__store_f32(host, dtype, i, (float)test_rng_uniform(rng, lo, hi));
}

/* ---- one step ---- */

typedef struct {
  int32_t prior, count; /* keys cached before the step; its tokens in the step (0: sits out) */
} seq_spec;

typedef struct {
  recap_dtype dtype;
  int64_t heads, kv_heads, dh, bs, mb, nb, tokens, rows;
  /* q is the head-split view of a fused [T, (H + 2 Hkv) Dh] projection (rows further apart
   * than H Dh), as a transformer's attention block reads it. */
  bool q_in_qkv;
  /* new starts one element into its buffer: its rows are not 16-byte aligned, so
   * paged_kv_write copies element by element. */
  bool new_unaligned;
} paged_dims;

typedef struct {
  paged_dims d;
  mirror kp, vp, nk, nv, q, seqs, out, pos, last;
  int64_t q_row, new_offset; /* q's token stride; new's offset in elements */
  void *ws;
  size_t ws_bytes;
  mirror arrivals; /* the split calls' call state, zeroed */
} step;

static size_t esz(const step *s) {
  return recap_dtype_size(s->d.dtype);
}

static step step_new(test_rng *rng, const paged_dims *d) {
  step s;
  memset(&s, 0, sizeof s);
  s.d = *d;
  const size_t e = recap_dtype_size(d->dtype);
  const int64_t pool = d->nb * d->bs * d->kv_heads * d->dh, rows = d->tokens * d->kv_heads * d->dh;
  s.q_row = d->q_in_qkv ? (d->heads + 2 * d->kv_heads) * d->dh : d->heads * d->dh;
  s.new_offset = d->new_unaligned ? 1 : 0;
  s.kp = mirror_new((size_t)pool * e);
  s.vp = mirror_new((size_t)pool * e);
  s.nk = mirror_new((size_t)(rows + s.new_offset) * e);
  s.nv = mirror_new((size_t)(rows + s.new_offset) * e);
  s.q = mirror_new((size_t)(d->tokens * s.q_row) * e);
  s.seqs = mirror_new((size_t)(d->rows * (RECAP_SEQ_BLOCKS + d->mb)) * sizeof(int32_t));
  s.out = mirror_new((size_t)(d->tokens * d->heads * d->dh) * e);
  s.pos = mirror_new((size_t)d->tokens * sizeof(int32_t));
  s.last = mirror_new((size_t)d->rows * sizeof(int32_t));
  fill_random(rng, d->dtype, s.kp.host, pool, -2, 2);
  fill_random(rng, d->dtype, s.vp.host, pool, -2, 2);
  mirror_push(&s.kp);
  mirror_push(&s.vp);
  return s;
}

/* New random q and K/V rows, and the metadata: `n` sequences in rows 0, 1, ... (then unused
 * rows), tokens packed, each sequence's blocks drawn from one shuffled permutation of the
 * pool so that no two share a block. Pushed to the device. */
static void step_set(test_rng *rng, step *s, const seq_spec *specs, int n) {
  const paged_dims *d = &s->d;
  fill_random(rng, d->dtype, s->q.host, d->tokens * s->q_row, -2, 2);
  fill_random(rng, d->dtype, s->nk.host, d->tokens * d->kv_heads * d->dh + s->new_offset, -2, 2);
  fill_random(rng, d->dtype, s->nv.host, d->tokens * d->kv_heads * d->dh + s->new_offset, -2, 2);
  int32_t *ids = host_alloc((size_t)d->nb * sizeof *ids);
  for (int64_t i = 0; i < d->nb; ++i) ids[i] = (int32_t)i;
  for (int64_t i = d->nb - 1; i > 0; --i) {
    int64_t j = (int64_t)(test_rng_next(rng) % (uint64_t)(i + 1));
    int32_t t = ids[i];
    ids[i] = ids[j];
    ids[j] = t;
  }
  memset(s->seqs.host, 0, s->seqs.bytes);
  CU_ASSERT_FATAL(n <= d->rows);
  int64_t next_id = 0;
  int32_t start = 0;
  for (int r = 0; r < n; ++r) {
    int32_t *row = (int32_t *)s->seqs.host + r * (RECAP_SEQ_BLOCKS + d->mb);
    const int64_t len = specs[r].prior + specs[r].count, used = (len + d->bs - 1) / d->bs;
    CU_ASSERT_FATAL(used <= d->mb && next_id + used <= d->nb);
    row[RECAP_SEQ_LEN] = (int32_t)len;
    row[RECAP_SEQ_Q_START] = specs[r].count ? start : 0;
    row[RECAP_SEQ_Q_LEN] = specs[r].count;
    for (int64_t c = 0; c < d->mb; ++c)
      row[RECAP_SEQ_BLOCKS + c] = c < used ? ids[next_id + c] : -1;
    next_id += used;
    start += specs[r].count;
  }
  CU_ASSERT_FATAL(start <= d->tokens);
  mirror_push(&s->q);
  mirror_push(&s->nk);
  mirror_push(&s->nv);
  mirror_push(&s->seqs);
}

static recap_tensor seqs_tensor(const step *s, bool dev) {
  return (recap_tensor){dev ? s->seqs.dev : s->seqs.host,
                        RECAP_DTYPE_I32,
                        2,
                        {s->d.rows, RECAP_SEQ_BLOCKS + s->d.mb},
                        {RECAP_SEQ_BLOCKS + s->d.mb, 1}};
}

static recap_tensor pool_tensor(const step *s, const mirror *m, bool dev) {
  const paged_dims *d = &s->d;
  recap_tensor t = {dev ? m->dev : m->host, d->dtype, 4, {d->nb, d->bs, d->kv_heads, d->dh}, {0}};
  recap__tensor_set_contiguous(&t);
  return t;
}

/* The step's new K (or V) rows [T, Hkv, Dh]. */
static recap_tensor rows_tensor(const step *s, bool v, bool dev) {
  const paged_dims *d = &s->d;
  const mirror *rows = v ? &s->nv : &s->nk;
  recap_tensor t = {(char *)(dev ? rows->dev : rows->host) + s->new_offset * esz(s),
                    d->dtype,
                    3,
                    {d->tokens, d->kv_heads, d->dh},
                    {0}};
  recap__tensor_set_contiguous(&t);
  return t;
}

/* q [T, H, Dh], rows q_row elements apart. */
static recap_tensor q_tensor(const step *s, bool dev) {
  const paged_dims *d = &s->d;
  return (recap_tensor){
      dev ? s->q.dev : s->q.host, d->dtype, 3, {d->tokens, d->heads, d->dh}, {s->q_row, d->dh, 1}};
}

static recap__op_call kv_write_call(const step *s, bool v, bool dev) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find("paged_kv_write");
  call.num_inputs = 3;
  call.inputs[0] = pool_tensor(s, v ? &s->vp : &s->kp, dev);
  call.inputs[1] = rows_tensor(s, v, dev);
  call.inputs[2] = seqs_tensor(s, dev);
  CHECK_OK(recap__op_infer(&call));
  return call;
}

static recap__op_call attention_call(step *s, bool dev) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find("paged_attention");
  call.num_inputs = 4;
  call.inputs[0] = q_tensor(s, dev);
  call.inputs[1] = pool_tensor(s, &s->kp, dev);
  call.inputs[2] = pool_tensor(s, &s->vp, dev);
  call.inputs[3] = seqs_tensor(s, dev);
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = dev ? s->out.dev : s->out.host;
  if (dev) {
    const size_t need = call.def->workspace_bytes(&call, RECAP_BACKEND_CUDA);
    if (need > s->ws_bytes) {
      s->ws = dev_alloc(need);
      s->ws_bytes = need;
    }
    call.workspace = need ? s->ws : NULL;
    call.workspace_bytes = need;
    const size_t counts = call.def->call_state_bytes(&call, RECAP_BACKEND_CUDA);
    if (counts > s->arrivals.bytes) {
      s->arrivals = mirror_new(counts);
      mirror_push(&s->arrivals);
    }
    call.call_state = counts ? s->arrivals.dev : NULL;
    call.call_state_bytes = counts;
  }
  return call;
}

static recap__op_call seq_call(const step *s, const char *op, bool dev) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  call.num_inputs = 1;
  call.inputs[0] = seqs_tensor(s, dev);
  call.attrs.dim = s->d.tokens;
  CHECK_OK(recap__op_infer(&call));
  const bool positions = strcmp(op, "seq_positions") == 0;
  call.outputs[0].data =
      positions ? (dev ? s->pos.dev : s->pos.host) : (dev ? s->last.dev : s->last.host);
  return call;
}

/* The step's five calls on one side, in graph order. */
enum { STEP_CALLS = 5 };
static void step_calls(step *s, bool dev, recap__op_call calls[STEP_CALLS]) {
  calls[0] = kv_write_call(s, false, dev);
  calls[1] = kv_write_call(s, true, dev);
  calls[2] = attention_call(s, dev);
  calls[3] = seq_call(s, "seq_positions", dev);
  calls[4] = seq_call(s, "seq_last_tokens", dev);
}

static void step_run_host(step *s) {
  recap__op_call calls[STEP_CALLS];
  step_calls(s, false, calls);
  memset(s->out.host, 0xFF, s->out.bytes);
  for (int i = 0; i < STEP_CALLS; ++i) CHECK_OK(recap__op_launch(&calls[i], host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
}

static void poison_outputs(const step *s) {
  poison_device(s->out.dev, s->out.bytes);
  poison_device(s->pos.dev, s->pos.bytes);
  poison_device(s->last.dev, s->last.bytes);
}

/* The device's pools and outputs against the host's. */
static void step_compare(step *s, const char *label) {
  const recap_dtype dt = s->d.dtype;
  const mirror *exact[] = {&s->kp, &s->vp, &s->pos, &s->last};
  static const char *const names[] = {"K pool", "V pool", "seq_positions", "seq_last_tokens"};
  char what[200];
  for (int i = 0; i < 4; ++i) {
    void *got = host_alloc(exact[i]->bytes);
    to_host(got, exact[i]->dev, exact[i]->bytes);
    snprintf(what, sizeof what, "%s: %s", label, names[i]);
    const bool is_index = i >= 2;
    compare(what, is_index ? RECAP_DTYPE_I32 : dt,
            (int64_t)(exact[i]->bytes / (is_index ? sizeof(int32_t) : esz(s))), got, exact[i]->host,
            NULL, true);
  }
  /* The split launch left its call state as it found it, for the next launch. */
  if (s->arrivals.bytes) {
    void *counts = host_alloc(s->arrivals.bytes);
    to_host(counts, s->arrivals.dev, s->arrivals.bytes);
    snprintf(what, sizeof what, "%s: paged_attention's arrival counts after the launch", label);
    compare(what, RECAP_DTYPE_I32, (int64_t)(s->arrivals.bytes / sizeof(int32_t)), counts,
            s->arrivals.host, NULL, true);
  }
  recap__op_call host_call = attention_call(s, false);
  op_case c = {.op = "paged_attention", .scale = SCALE_ATTENTION};
  double *scale = make_scale(&c, &host_call, 0);
  void *got = host_alloc(s->out.bytes);
  to_host(got, s->out.dev, s->out.bytes);
  snprintf(what, sizeof what, "%s: paged_attention", label);
  compare(what, dt, (int64_t)(s->out.bytes / esz(s)), got, s->out.host, scale, false);
}

static void step_label(const step *s, const seq_spec *specs, int n, char *label, size_t size) {
  const paged_dims *d = &s->d;
  int w = snprintf(label, size, "H%lld/%lld Dh%lld BS%lld T%lld%s%s seqs", (long long)d->heads,
                   (long long)d->kv_heads, (long long)d->dh, (long long)d->bs, (long long)d->tokens,
                   d->q_in_qkv ? " q-in-qkv" : "", d->new_unaligned ? " new-unaligned" : "");
  for (int i = 0; i < n && w > 0 && (size_t)w < size; ++i)
    w += snprintf(label + w, size - (size_t)w, " %d+%d", specs[i].prior, specs[i].count);
}

/* ---- CUDA against host ---- */

typedef struct {
  paged_dims d; /* dtype filled per run */
  seq_spec specs[6];
  int n;
} paged_case;

static void test_paged_step_matches_host(void) {
  static const paged_case cases[] = {
      /* Decode, Llama-8B heads: 32 splits, a 3000-key context, a 1-key one, an unused row. */
      {{0, 32, 8, 128, 16, 256, 256, 4, 5, false, false},
       {{2999, 1}, {99, 1}, {0, 1}, {700, 1}},
       4},
      /* Decode at batch 1, Llama 3.2 1B's heads: the whole group of 4 per CTA. */
      {{0, 32, 8, 64, 16, 64, 128, 1, 1, false, false}, {{500, 1}}, 1},
      /* Decode, Qwen2 0.5B's heads (7 per KV head: 4 CTAs of 2 heads, the last with one):
       * batch 1 over 700 keys; batch 4 with a padding token and an unused row. */
      {{0, 14, 2, 64, 16, 64, 128, 1, 1, false, false}, {{700, 1}}, 1},
      {{0, 14, 2, 64, 16, 64, 128, 4, 4, false, false}, {{300, 1}, {64, 1}, {1, 1}}, 3},
      /* Decode at batch 1, group 1, Dh 64: 25 splits of 128 keys, the last empty. */
      {{0, 8, 8, 64, 16, 200, 200, 1, 1, false, false}, {{3000, 1}}, 1},
      /* Group 8, lengths on and just past a block boundary, a padding token. */
      {{0, 64, 8, 128, 32, 64, 96, 4, 3, false, false}, {{1500, 1}, {31, 1}, {32, 1}}, 3},
      /* Group 3 (a masked head per CTA), prefill chunks and a decode row, 6 padding tokens. */
      {{0, 12, 4, 64, 8, 32, 64, 64, 4, false, false}, {{0, 37}, {5, 1}, {100, 20}}, 3},
      /* Group 12 (two head chunks), Dh 96, 5-row blocks, q in a fused projection, new
       * unaligned. */
      {{0, 24, 2, 96, 5, 16, 48, 6, 4, true, true}, {{10, 3}, {0, 1}, {61, 1}}, 3},
      /* Dh 256. */
      {{0, 4, 2, 256, 16, 8, 16, 11, 2, false, false}, {{50, 2}, {0, 9}}, 2},
      /* Dh 32 in one-row blocks; a row that sits the step out between two with tokens. */
      {{0, 2, 1, 32, 1, 64, 128, 5, 3, false, false}, {{40, 1}, {7, 0}, {3, 4}}, 3},
      /* A long prefill chunk split in two over its keys. */
      {{0, 8, 2, 128, 16, 32, 40, 304, 2, false, false}, {{100, 300}, {20, 1}}, 2},
  };
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
      test_rng rng;
      test_rng_init(&rng);
      paged_dims d = cases[i].d;
      d.dtype = kFloatTypes[t];
      step s = step_new(&rng, &d);
      step_set(&rng, &s, cases[i].specs, cases[i].n);
      recap__op_call calls[STEP_CALLS];
      step_calls(&s, true, calls);
      poison_outputs(&s);
      for (int c = 0; c < STEP_CALLS; ++c) CHECK_OK(recap__op_launch(&calls[c], cuda_stream));
      CHECK_OK(recap_stream_synchronize(cuda_stream));
      step_run_host(&s);
      char label[256];
      step_label(&s, cases[i].specs, cases[i].n, label, sizeof label);
      step_compare(&s, label);
      release_all();
    }
}

/* The point of reading the metadata in the kernels: one graph, captured once with the
 * metadata all zero, replays steps of any lengths, mixes and block tables. */
static void test_captured_step_replays_with_new_metadata(void) {
  static const seq_spec prompts[] = {{0, 3}, {0, 4}, {0, 1}};
  static const seq_spec decodes[] = {{3, 1}, {4, 1}, {1, 1}, {0, 5}};
  static const seq_spec long_ctx[] = {{700, 1}, {1000, 1}, {0, 1}, {300, 1}, {17, 0}, {60, 3}};
  static const struct {
    const seq_spec *specs;
    int n;
  } steps[] = {{prompts, 3}, {decodes, 4}, {long_ctx, 6}, {NULL, 0}, {decodes, 4}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    test_rng rng;
    test_rng_init(&rng);
    const paged_dims d = {kFloatTypes[t], 32, 8, 128, 16, 64, 200, 8, 6, false, false};
    step s = step_new(&rng, &d);
    step_set(&rng, &s, NULL, 0);
    recap__op_call calls[STEP_CALLS];
    step_calls(&s, true, calls);
    recap__graph *graph = NULL;
    recap__graph_exec *exec = NULL;
    CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
    recap_status st = RECAP_OK;
    for (int c = 0; c < STEP_CALLS && st == RECAP_OK; ++c)
      st = recap__op_launch(&calls[c], cuda_stream);
    recap_status end = recap__capture_end(cuda_stream, &graph);
    CHECK_OK(st);
    CHECK_OK(end);
    CHECK_OK(cuda->graph_instantiate(graph, &exec));
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; ++i) {
      step_set(&rng, &s, steps[i].specs, steps[i].n);
      poison_outputs(&s);
      CHECK_OK(cuda->graph_launch(exec, cuda_stream));
      CHECK_OK(recap_stream_synchronize(cuda_stream));
      step_run_host(&s);
      char label[256];
      int w = snprintf(label, sizeof label, "replay %zu: ", i);
      step_label(&s, steps[i].specs, steps[i].n, label + w, sizeof label - (size_t)w);
      step_compare(&s, label);
    }
    cuda->graph_exec_destroy(exec);
    cuda->graph_destroy(graph);
    release_all();
  }
}

/* ---- paged_rope_kv_write ---- */

/* The step's fused RoPE and pool writes: q, K and V rows into q_rot (the `out` buffer) and
 * the pools; theta 10000, or Llama 3.2's scaling (theta 500000, factor 32, 1, 4, 8192). */
static recap__op_call rope_call(step *s, const char *op, bool dev, bool llama3) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  call.num_inputs = 6;
  call.inputs[0] = q_tensor(s, dev);
  call.inputs[1] = rows_tensor(s, false, dev);
  call.inputs[2] = rows_tensor(s, true, dev);
  call.inputs[3] = pool_tensor(s, &s->kp, dev);
  call.inputs[4] = pool_tensor(s, &s->vp, dev);
  call.inputs[5] = seqs_tensor(s, dev);
  call.attrs.rope_theta = llama3 ? 500000.0 : 10000.0;
  if (llama3) {
    call.attrs.rope_llama3 = 1;
    call.attrs.rope_factor = 32;
    call.attrs.rope_low_freq_factor = 1;
    call.attrs.rope_high_freq_factor = 4;
    call.attrs.rope_original_max = 8192;
  }
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = dev ? s->out.dev : s->out.host;
  return call;
}

static recap__op_call rope_kv_call(step *s, bool dev, bool llama3) {
  return rope_call(s, "paged_rope_kv_write", dev, llama3);
}

/* Per element of rows of dh (host values after a rotation): |o_i| + |o_{i+half}| of its pair,
 * at least (|x_i| + |x_{i+half}|) / sqrt(2) of the pair rotated, as a rotation keeps the
 * pair's norm; twice that bounds what an ulp of cos or sin moves an element. */
static double *pair_scale(recap_dtype dtype, const void *host, int64_t n, int64_t dh) {
  double *s = host_alloc((size_t)n * sizeof *s);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = k % dh, row = k - i, i0 = i < dh / 2 ? i : i - dh / 2;
    s[k] = 2 * (fabs(recap__load_f32(host, dtype, row + i0)) +
                fabs(recap__load_f32(host, dtype, row + i0 + dh / 2)));
  }
  return s;
}

/* A rotating op (paged_rope_kv_write, paged_rope_attention) on one step: its CUDA call, whose
 * outputs 1 and 2 must be the pools themselves, then its host call, each run to completion; the
 * CUDA output poisoned and the host one filled with 0xFF first, so that an element either side
 * leaves unwritten shows. Returns the host call. */
static recap__op_call run_both_sides(step *s, recap__op_call (*make)(step *, bool, bool),
                                     bool llama3) {
  recap__op_call dev = make(s, true, llama3);
  CU_ASSERT_PTR_EQUAL(dev.outputs[1].data, s->kp.dev);
  CU_ASSERT_PTR_EQUAL(dev.outputs[2].data, s->vp.dev);
  poison_device(s->out.dev, s->out.bytes);
  CHECK_OK(recap__op_launch(&dev, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  recap__op_call host = make(s, false, llama3);
  memset(s->out.host, 0xFF, s->out.bytes);
  CHECK_OK(recap__op_launch(&host, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
  return host;
}

/* One of the step's buffers, back from the device, against the host op's: within an ulp of cos
 * and sin per pair (pair_scale) where it was rotated, else byte for byte. */
static void compare_rotated(const step *s, const mirror *m, const char *what, bool rotated) {
  void *back = host_alloc(m->bytes);
  to_host(back, m->dev, m->bytes);
  const int64_t n = (int64_t)(m->bytes / esz(s));
  compare(what, s->d.dtype, n, back, m->host,
          rotated ? pair_scale(s->d.dtype, m->host, n, s->d.dh) : NULL, !rotated);
}

/* The CUDA op against the host op on one step: q_rot and the K pool within the tolerance
 * (the rotation is the host's bit for bit, inv_freq too, computed on the host at launch; cos
 * and sin may differ by an ulp where CUDA's sincos rounds differently), the V pool byte for byte.
 * Cases: Llama 3.2 1B's heads at decode, GQA groups 3 and 12, prefill chunks across blocks, padding
 * tokens, an unused row, q inside a fused projection and rows not 16-byte aligned (the scalar V
 * path). */
static void test_rope_kv_write_matches_host(void) {
  static const paged_case cases[] = {
      {{0, 32, 8, 64, 16, 64, 256, 4, 5, true, false}, {{700, 1}, {15, 1}, {16, 1}, {0, 1}}, 4},
      {{0, 12, 4, 64, 8, 32, 64, 64, 4, false, false}, {{0, 37}, {5, 1}, {100, 20}}, 3},
      {{0, 24, 2, 96, 5, 16, 48, 6, 4, true, true}, {{10, 3}, {0, 1}, {61, 1}}, 3},
      {{0, 8, 2, 128, 16, 32, 40, 304, 2, false, false}, {{100, 300}, {20, 1}}, 2},
  };
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
      for (int llama3 = 0; llama3 < 2; ++llama3) {
        test_rng rng;
        test_rng_init(&rng);
        paged_dims d = cases[i].d;
        d.dtype = kFloatTypes[t];
        step s = step_new(&rng, &d);
        step_set(&rng, &s, cases[i].specs, cases[i].n);
        run_both_sides(&s, rope_kv_call, llama3);

        char label[256], what[300];
        step_label(&s, cases[i].specs, cases[i].n, label, sizeof label);
        const mirror *got[] = {&s.out, &s.kp, &s.vp};
        static const char *const names[] = {"q_rot", "K pool", "V pool"};
        for (int m = 0; m < 3; ++m) {
          snprintf(what, sizeof what, "%s%s: paged_rope_kv_write %s", label,
                   llama3 ? " llama3" : "", names[m]);
          compare_rotated(&s, got[m], what, m < 2);
        }
        release_all();
      }
}

/* ---- paged_rope_attention ---- */

/* The fused op on one side, with its workspace (the rotated q, then the splits' partials) and
 * zeroed call state. */
static recap__op_call rope_attention_call(step *s, bool dev, bool llama3) {
  recap__op_call call = rope_call(s, "paged_rope_attention", dev, llama3);
  const recap_backend_kind backend = dev ? RECAP_BACKEND_CUDA : RECAP_BACKEND_HOST;
  call.workspace_bytes = call.def->workspace_bytes(&call, backend);
  call.workspace = dev ? dev_alloc(call.workspace_bytes) : host_alloc(call.workspace_bytes);
  call.call_state_bytes = call.def->call_state_bytes(&call, backend);
  if (call.call_state_bytes) {
    mirror counts = mirror_new(call.call_state_bytes);
    mirror_push(&counts);
    call.call_state = dev ? counts.dev : counts.host;
    if (dev) s->arrivals = counts;
  }
  return call;
}

/* The CUDA op against the host op on one step. Decode-shaped steps (at most one token per
 * row of seqs) run as one kernel when q, k and v are 16-byte vectors: Llama 3.2 1B's heads at
 * batch 1 (the whole group per CTA), Qwen2 0.5B's (7 heads per KV head) with a sequence's
 * first token, a padding token and an unused row, the 8B's over 3000 keys with q inside a
 * fused projection, Dh 256, and a row with three tokens in a decode-shaped step (keys the step
 * itself adds, read from k and v), and a grid of 640 CTAs. Rows not 16-byte aligned and
 * prefill chunks take the two kernels. The pools as paged_rope_kv_write's test holds them (V byte
 * for byte, K within an ulp of cos and sin), the attention within the suite's tolerance scaled by
 * sum_j p_j |v_j| over the host's rotated q; the split calls' counts back at zero. */
static void test_rope_attention_matches_host(void) {
  static const paged_case cases[] = {
      {{0, 32, 8, 64, 16, 64, 128, 1, 1, false, false}, {{500, 1}}, 1},
      {{0, 14, 2, 64, 16, 64, 128, 4, 5, false, false}, {{300, 1}, {0, 1}, {1, 1}}, 3},
      {{0, 32, 8, 128, 16, 256, 256, 4, 5, true, false}, {{2999, 1}, {99, 1}, {0, 1}, {700, 1}}, 4},
      {{0, 4, 2, 256, 16, 8, 16, 2, 2, false, false}, {{50, 1}, {0, 1}}, 2},
      {{0, 16, 4, 128, 16, 16, 32, 4, 4, false, false}, {{10, 3}, {40, 1}}, 2},
      /* Llama 3.2 1B's heads at batch 8 over 513 keys: 640 CTAs, where the launcher may take
       * the two kernels when the fused one's registers cost the grid a wave. */
      {{0, 32, 8, 64, 16, 40, 320, 8, 8, false, false},
       {{512, 1}, {512, 1}, {512, 1}, {512, 1}, {512, 1}, {512, 1}},
       6},
      {{0, 24, 2, 96, 5, 16, 48, 3, 4, true, true}, {{10, 1}, {0, 1}, {61, 1}}, 3},
      {{0, 12, 4, 64, 8, 32, 64, 64, 4, false, false}, {{0, 37}, {5, 1}, {100, 20}}, 3},
  };
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
      const bool llama3 = i % 2 == 0;
      test_rng rng;
      test_rng_init(&rng);
      paged_dims d = cases[i].d;
      d.dtype = kFloatTypes[t];
      step s = step_new(&rng, &d);
      step_set(&rng, &s, cases[i].specs, cases[i].n);
      recap__op_call host = run_both_sides(&s, rope_attention_call, llama3);

      char label[256], what[300];
      step_label(&s, cases[i].specs, cases[i].n, label, sizeof label);
      const mirror *pools[] = {&s.kp, &s.vp};
      static const char *const names[] = {"K pool", "V pool"};
      for (int m = 0; m < 2; ++m) {
        snprintf(what, sizeof what, "%s%s: paged_rope_attention %s", label, llama3 ? " llama3" : "",
                 names[m]);
        compare_rotated(&s, pools[m], what, m == 0);
      }
      if (s.arrivals.bytes) {
        void *counts = host_alloc(s.arrivals.bytes);
        to_host(counts, s.arrivals.dev, s.arrivals.bytes);
        snprintf(what, sizeof what, "%s: paged_rope_attention's arrival counts", label);
        compare(what, RECAP_DTYPE_I32, (int64_t)(s.arrivals.bytes / sizeof(int32_t)), counts,
                s.arrivals.host, NULL, true);
      }
      recap__op_call rope_part, attention_part;
      recap__paged_rope_attention_parts(&host, &rope_part, &attention_part);
      op_case c = {.op = "paged_attention", .scale = SCALE_ATTENTION};
      double *scale = make_scale(&c, &attention_part, 0);
      void *got = host_alloc(s.out.bytes);
      to_host(got, s.out.dev, s.out.bytes);
      snprintf(what, sizeof what, "%s%s: paged_rope_attention", label, llama3 ? " llama3" : "");
      compare(what, d.dtype, (int64_t)(s.out.bytes / esz(&s)), got, s.out.host, scale, false);
      release_all();
    }
}

/* What the CUDA launcher refuses before launching anything. */
static void test_launch_refusals_name_the_reason(void) {
  test_rng rng;
  test_rng_init(&rng);
  /* Decode at batch 1 splits its keys: no workspace is a refusal, not a wrong result. */
  const paged_dims d = {RECAP_DTYPE_BF16, 8, 2, 64, 16, 32, 40, 1, 1, false, false};
  step s = step_new(&rng, &d);
  static const seq_spec one[] = {{10, 1}};
  step_set(&rng, &s, one, 1);
  recap__op_call call = attention_call(&s, true);
  CU_ASSERT(call.workspace_bytes > 0);
  call.workspace = NULL;
  call.workspace_bytes = 0;
  CHECK_STATUS(recap__op_launch(&call, cuda_stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("need a workspace of");
  /* Nor is no call state (the splits' arrival counts). */
  call = attention_call(&s, true);
  CU_ASSERT(call.call_state_bytes > 0);
  call.call_state = NULL;
  CHECK_STATUS(recap__op_launch(&call, cuda_stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("bytes of call state");
  release_all();

  /* A head dim the 16-byte vectors do not fill (bf16: a multiple of 8), and one past 256. */
  static const int64_t dims[] = {20, 264};
  for (size_t i = 0; i < 2; ++i) {
    const paged_dims odd = {RECAP_DTYPE_BF16, 2, 1, dims[i], 4, 4, 8, 2, 1, false, false};
    step o = step_new(&rng, &odd);
    static const seq_spec two[] = {{0, 2}};
    step_set(&rng, &o, two, 1);
    recap__op_call oc = attention_call(&o, true);
    CHECK_STATUS(recap__op_launch(&oc, cuda_stream), RECAP_STATUS_NOT_SUPPORTED);
    CHECK_ERROR_MENTIONS("16-byte vectors");
    release_all();
  }

  /* paged_rope_kv_write takes its inv_freqs with its parameters, as many as the attention
   * kernel's head dims need: a head dim past 256 is refused. */
  const paged_dims wide = {RECAP_DTYPE_BF16, 2, 1, 264, 4, 4, 8, 2, 1, false, false};
  step w = step_new(&rng, &wide);
  static const seq_spec both[] = {{0, 2}};
  step_set(&rng, &w, both, 1);
  recap__op_call wc = rope_kv_call(&w, true, false);
  CHECK_STATUS(recap__op_launch(&wc, cuda_stream), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("head dim of at most 256");
  release_all();

  /* paged_rope_kv_write writes its pools in place: outputs elsewhere are refused. */
  step r = step_new(&rng, &d);
  step_set(&rng, &r, one, 1);
  recap__op_call rc = rope_kv_call(&r, true, false);
  rc.outputs[2].data = r.kp.dev;
  CHECK_STATUS(recap__op_launch(&rc, cuda_stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("the caches themselves");
  release_all();
}

/* ---- device faults on bad metadata (child processes) ---- */

/* Copies n bytes to a new device buffer; NULL on failure (the child reports it). */
static void *child_upload(const void *src, size_t n) {
  void *p = NULL;
  if (cuda->mem_alloc(0, n, &p) != RECAP_OK) return NULL;
  if (cuda->memcpy_async(p, src, n, cuda_stream) != RECAP_OK) return NULL;
  return p;
}

/* The bad rows, one per rule; pools of 8 blocks of 4 rows, MB 4 (16 keys), T 2. */
static const struct {
  const char *rule, *op;
  int32_t len, count, block0, block1;
} kFaults[] = {
    {"written block not allocated", "paged_kv_write", 2, 2, -1, -1},
    {"LEN beyond the block table", "paged_kv_write", 17, 1, 0, 1},
    {"read block past the pool", "paged_attention", 6, 1, 8, 0},
    {"Q_LEN > LEN", "paged_attention", 1, 2, 0, -1},
    {"negative Q_LEN", "seq_positions", 3, -1, 0, -1},
};
enum { F_NB = 8, F_BS = 4, F_MB = 4, F_T = 2, F_DH = 8 };

/* In the child: runs fault `index` on CUDA; exit 0 only when the launch succeeds and the
 * synchronize reports a sticky device fault. */
static int run_fault_child(int index) {
  if (index < 0 || index >= (int)(sizeof kFaults / sizeof kFaults[0]) || cuda_suite_init() != 0) {
    fprintf(stderr, "child: no such fault or no CUDA stream: %s\n", recap_last_error());
    return 2;
  }
  static float data[F_NB * F_BS * F_DH];
  for (size_t i = 0; i < sizeof data / sizeof data[0]; ++i) data[i] = 0.25f * (float)(i % 7);
  int32_t seqs[RECAP_SEQ_BLOCKS + F_MB] = {0};
  seqs[RECAP_SEQ_LEN] = kFaults[index].len;
  seqs[RECAP_SEQ_Q_LEN] = kFaults[index].count;
  seqs[RECAP_SEQ_BLOCKS] = kFaults[index].block0;
  seqs[RECAP_SEQ_BLOCKS + 1] = kFaults[index].block1;
  seqs[RECAP_SEQ_BLOCKS + 2] = seqs[RECAP_SEQ_BLOCKS + 3] = -1;
  const recap_tensor pool = {child_upload(data, sizeof data),
                             RECAP_DTYPE_F32,
                             4,
                             {F_NB, F_BS, 1, F_DH},
                             {F_BS * F_DH, F_DH, F_DH, 1}};
  const recap_tensor rows = {child_upload(data, F_T * F_DH * sizeof(float)),
                             RECAP_DTYPE_F32,
                             3,
                             {F_T, 1, F_DH},
                             {F_DH, F_DH, 1}};
  const recap_tensor meta = {child_upload(seqs, sizeof seqs),
                             RECAP_DTYPE_I32,
                             2,
                             {1, RECAP_SEQ_BLOCKS + F_MB},
                             {RECAP_SEQ_BLOCKS + F_MB, 1}};
  if (!pool.data || !rows.data || !meta.data) return 2;
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(kFaults[index].op);
  if (!call.def) return 2;
  if (strcmp(kFaults[index].op, "paged_kv_write") == 0) {
    call.num_inputs = 3;
    call.inputs[0] = pool;
    call.inputs[1] = rows;
    call.inputs[2] = meta;
  } else if (strcmp(kFaults[index].op, "paged_attention") == 0) {
    call.num_inputs = 4;
    call.inputs[0] = rows; /* q [T, 1, Dh]: one head, one KV head */
    call.inputs[1] = call.inputs[2] = pool;
    call.inputs[3] = meta;
  } else {
    call.num_inputs = 1;
    call.inputs[0] = meta;
    call.attrs.dim = F_T;
  }
  if (recap__op_infer(&call) != RECAP_OK) {
    fprintf(stderr, "child: infer failed: %s\n", recap_last_error());
    return 2;
  }
  if (recap__op_output_input(call.def, 0) == 0) {
    call.outputs[0].data = call.inputs[0].data;
  } else if (cuda->mem_alloc(0, 256 * sizeof(float), &call.outputs[0].data) != RECAP_OK) {
    return 2;
  }
  call.workspace_bytes =
      call.def->workspace_bytes ? call.def->workspace_bytes(&call, RECAP_BACKEND_CUDA) : 0;
  if (call.workspace_bytes && cuda->mem_alloc(0, call.workspace_bytes, &call.workspace) != RECAP_OK)
    return 2;
  recap_status launched = recap__op_launch(&call, cuda_stream);
  recap_status synced = recap_stream_synchronize(cuda_stream);
  printf("child %s (%s): launch %s, synchronize %s\n", kFaults[index].op, kFaults[index].rule,
         recap_status_name(launched), recap_status_name(synced));
  return launched == RECAP_OK && synced == RECAP_STATUS_DEVICE_ERROR ? 0 : 1;
}

static void test_bad_metadata_faults_the_device(void) {
  for (size_t i = 0; i < sizeof kFaults / sizeof kFaults[0]; ++i) {
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
      char index[16];
      snprintf(index, sizeof index, "%zu", i);
      char *child_argv[] = {"ops_cuda_paged_test", "--fault", index, NULL};
      execv("/proc/self/exe", child_argv);
      _exit(127);
    }
    int wstatus = 0;
    CU_ASSERT_EQUAL_FATAL(waitpid(pid, &wstatus, 0), pid);
    bool faulted = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (!faulted)
      fprintf(stderr, "\n  %s on %s: child %s %d\n", kFaults[i].op, kFaults[i].rule,
              WIFEXITED(wstatus) ? "exited with" : "killed by signal",
              WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
    CU_ASSERT_TRUE(faulted);
  }
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--fault") == 0) return run_fault_child(atoi(argv[2]));
  CU_pSuite gpu =
      test_add_cuda_suite("ops_cuda_paged/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_paged_step_matches_host);
  CU_ADD_TEST(gpu, test_captured_step_replays_with_new_metadata);
  CU_ADD_TEST(gpu, test_rope_kv_write_matches_host);
  CU_ADD_TEST(gpu, test_rope_attention_matches_host);
  CU_ADD_TEST(gpu, test_launch_refusals_name_the_reason);
  CU_ADD_TEST(gpu, test_bad_metadata_faults_the_device);
  return test_run_all();
}
