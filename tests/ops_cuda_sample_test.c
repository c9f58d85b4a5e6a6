/*
 * ops_cuda_sample_test.c: argmax and sample on CUDA against the host reference: argmax bit for
 * bit (ties, NaN, infinities, Llama 3's vocabulary of 128256, unaligned rows); sample on random
 * peaked logits in every dtype with every kind of row (unused, greedy, each filter, all of
 * them), the tokens equal but for CDF-boundary rows (f32 weights against the host's double,
 * at most 1 in 10^4 rows) and the raw logprobs close; the same (seed, OUT_INDEX) giving the
 * same token in any batch; chi-square fits of 10^5 GPU draws (sample_util.h); a captured graph
 * replayed with new parameters written between replays; and a row with invalid parameters
 * trapping (in a child process, as the trap kills the context).
 *
 * The CUDA suite is inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"
#include "tests/sample_util.h"

enum { WIDTH = RECAP_SEQ_BLOCKS, LLAMA3_VOCAB = 128256, QWEN2_VOCAB = 151936 };

/* ---- a batch on both sides ---- */

/* logits [rows, vocab] with rows row_stride elements apart, and seqs [rows, WIDTH], each in
 * host memory (the reference's input and the source of the device copy) and device memory. */
typedef struct {
  recap_dtype dtype;
  int64_t rows, vocab, row_stride;
  void *x_host, *x_dev;
  int32_t *seqs_host;
  void *seqs_dev;
} batch;

static batch batch_make(recap_dtype dtype, int64_t rows, int64_t vocab, int64_t row_stride) {
  batch b = {.dtype = dtype, .rows = rows, .vocab = vocab, .row_stride = row_stride};
  const size_t x_bytes = (size_t)(rows * row_stride) * recap_dtype_size(dtype);
  b.x_host = host_alloc(x_bytes);
  memset(b.x_host, 0, x_bytes);
  b.x_dev = dev_alloc(x_bytes);
  b.seqs_host = host_alloc((size_t)rows * WIDTH * sizeof(int32_t));
  memset(b.seqs_host, 0, (size_t)rows * WIDTH * sizeof(int32_t));
  b.seqs_dev = dev_alloc((size_t)rows * WIDTH * sizeof(int32_t));
  return b;
}

static void batch_upload(const batch *b) {
  to_device(b->x_dev, b->x_host, (size_t)(b->rows * b->row_stride) * recap_dtype_size(b->dtype));
  to_device(b->seqs_dev, b->seqs_host, (size_t)b->rows * WIDTH * sizeof(int32_t));
}

static void logit_set(batch *b, int64_t r, int64_t i, float v) {
  recap__store_f32(b->x_host, b->dtype, r * b->row_stride + i, v);
}

static int32_t *seqs_row(batch *b, int64_t r) {
  return b->seqs_host + r * WIDTH;
}

static recap__op_call batch_call(const char *op, const batch *b, bool device, bool logprobs) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  CU_ASSERT_PTR_NOT_NULL_FATAL(call.def);
  call.num_inputs = strcmp(op, "sample") == 0 ? 2 : 1;
  call.inputs[0] = (recap_tensor){.data = device ? b->x_dev : b->x_host,
                                  .dtype = b->dtype,
                                  .ndim = 2,
                                  .shape = {b->rows, b->vocab},
                                  .strides = {b->row_stride, 1}};
  call.inputs[1] = (recap_tensor){.data = device ? b->seqs_dev : (void *)b->seqs_host,
                                  .dtype = RECAP_DTYPE_I32,
                                  .ndim = 2,
                                  .shape = {b->rows, WIDTH},
                                  .strides = {WIDTH, 1}};
  call.attrs.logprobs = logprobs;
  CHECK_OK(recap__op_infer(&call));
  return call;
}

/* The device workspace and zeroed call state the op asks for (its row slices at few rows). */
static void bind_slices_state(recap__op_call *call) {
  call->workspace_bytes = call->def->workspace_bytes(call, RECAP_BACKEND_CUDA);
  call->workspace = call->workspace_bytes ? dev_alloc(call->workspace_bytes) : NULL;
  call->call_state_bytes = call->def->call_state_bytes(call, RECAP_BACKEND_CUDA);
  call->call_state = call->call_state_bytes ? dev_alloc(call->call_state_bytes) : NULL;
  if (call->call_state)
    CHECK_OK(cuda->memset_async(call->call_state, 0, call->call_state_bytes, cuda_stream));
}

/* After a launch completed: the call state is zero again, as the next launch needs it. */
static void expect_state_zero(const recap__op_call *call) {
  if (!call->call_state_bytes) return;
  unsigned char *state = host_alloc(call->call_state_bytes);
  to_host(state, call->call_state, call->call_state_bytes);
  size_t nonzero = 0;
  for (size_t i = 0; i < call->call_state_bytes; ++i) nonzero += state[i] != 0;
  CU_ASSERT_EQUAL(nonzero, 0);
}

/* Results of one run: tokens, and logprobs when asked for (else NULL). */
typedef struct {
  int32_t *tokens;
  float *logprobs;
} results;

/* Runs op on the device (outputs poisoned first: 0x7F bytes, neither -1 nor a token id of
 * these tests) and copies the results back. */
static results run_device(const char *op, const batch *b, bool logprobs) {
  recap__op_call call = batch_call(op, b, true, logprobs);
  bind_slices_state(&call);
  results res = {host_alloc((size_t)b->rows * sizeof(int32_t)),
                 logprobs ? host_alloc((size_t)b->rows * sizeof(float)) : NULL};
  for (int o = 0; o < call.num_outputs; ++o) {
    call.outputs[o].data = dev_alloc((size_t)b->rows * 4);
    CHECK_OK(cuda->memset_async(call.outputs[o].data, 0x7F, (size_t)b->rows * 4, cuda_stream));
  }
  CHECK_OK(recap__op_launch(&call, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  expect_state_zero(&call);
  to_host(res.tokens, call.outputs[0].data, (size_t)b->rows * 4);
  if (logprobs) to_host(res.logprobs, call.outputs[1].data, (size_t)b->rows * 4);
  return res;
}

static results run_host(const char *op, const batch *b, bool logprobs) {
  recap__op_call call = batch_call(op, b, false, logprobs);
  results res = {host_alloc((size_t)b->rows * sizeof(int32_t)),
                 logprobs ? host_alloc((size_t)b->rows * sizeof(float)) : NULL};
  call.outputs[0].data = res.tokens;
  if (logprobs) call.outputs[1].data = res.logprobs;
  CHECK_OK(recap__op_launch(&call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
  return res;
}

/* Roughly a language model's logits: a bell of width ~1.5 around 0 and, per row, a few dozen
 * tokens lifted by 4 to 12, so that top-p keeps from one to hundreds of tokens. */
static void fill_peaked(batch *b, test_rng *rng) {
  for (int64_t r = 0; r < b->rows; ++r) {
    for (int64_t i = 0; i < b->vocab; ++i) {
      const double bell = test_rng_uniform(rng, -1, 1) + test_rng_uniform(rng, -1, 1) +
                          test_rng_uniform(rng, -1, 1);
      logit_set(b, r, i, (float)(1.5 * bell));
    }
    const int lifted = 1 + (int)(test_rng_next(rng) % 40);
    for (int k = 0; k < lifted; ++k) {
      const int64_t i = (int64_t)(test_rng_next(rng) % (uint64_t)b->vocab);
      logit_set(b, r, i, (float)test_rng_uniform(rng, 4, 12));
    }
  }
}

/* A random row of every kind: unused, greedy by temperature or by top-k 1, plain, each filter
 * alone, all together, nearly greedy, filters off by their "off" values. */
static void random_row(int32_t *row, test_rng *rng, int64_t vocab) {
  sample_row s = {.temperature = (float)test_rng_uniform(rng, 0.3, 1.6),
                  .seed = test_rng_next(rng)};
  const int32_t out_index = (int32_t)(test_rng_next(rng) % 1000000);
  switch (test_rng_next(rng) % 10) {
    case 0:
      memset(row, 0, WIDTH * sizeof *row);
      return;
    case 1:
      s.temperature = 0, s.top_p = 0.5f;
      break;
    case 2:
      s.top_k = 1;
      break;
    case 3:
      break;
    case 4:
      s.top_k = 1 + (int32_t)(test_rng_next(rng) % 100);
      break;
    case 5:
      s.top_p = (float)test_rng_uniform(rng, 0.3, 0.99);
      break;
    case 6:
      s.min_p = (float)test_rng_uniform(rng, 0.01, 0.3);
      break;
    case 7:
      s.top_k = 2 + (int32_t)(test_rng_next(rng) % 200);
      s.top_p = (float)test_rng_uniform(rng, 0.5, 0.99);
      s.min_p = (float)test_rng_uniform(rng, 0.01, 0.2);
      break;
    case 8:
      s.temperature = 1e-3f, s.top_p = 0.9f;
      break;
    default:
      s.top_k = (int32_t)vocab + 5, s.top_p = 1, s.min_p = 0;
      break;
  }
  sample_row_write(row, WIDTH, &s, out_index);
}

/* ---- argmax ---- */

static void test_argmax_matches_host_exactly(void) {
  test_rng rng;
  test_rng_init(&rng);
  static const struct {
    int64_t rows, vocab, pad;
  } shapes[] = {
      {64, LLAMA3_VOCAB, 0}, {1, LLAMA3_VOCAB, 0}, {7, 1023, 3},  {300, 50, 0},  {5, 1, 0},
      {3, QWEN2_VOCAB, 0},   {2, 100003, 5},       {20, 8192, 0}, {3, 100003, 4}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      batch b = batch_make(kFloatTypes[t], shapes[s].rows, shapes[s].vocab,
                           shapes[s].vocab + shapes[s].pad);
      for (int64_t r = 0; r < b.rows; ++r) {
        for (int64_t i = 0; i < b.vocab; ++i)
          logit_set(&b, r, i, (float)test_rng_uniform(&rng, -8, 8));
        /* Row kinds: ties at the top, a NaN, +inf twice, -0 against +0 at the top. */
        const int64_t i = (int64_t)(test_rng_next(&rng) % (uint64_t)b.vocab);
        const int64_t j = b.vocab - 1 - i;
        switch (r % 5) {
          case 1:
            logit_set(&b, r, i, 20), logit_set(&b, r, j, 20);
            break;
          case 2:
            logit_set(&b, r, i, NAN);
            break;
          case 3:
            logit_set(&b, r, i, INFINITY), logit_set(&b, r, j, INFINITY);
            break;
          case 4:
            for (int64_t k = 0; k < b.vocab; ++k) logit_set(&b, r, k, -1);
            logit_set(&b, r, i, -0.0f), logit_set(&b, r, j, 0.0f);
            break;
        }
      }
      batch_upload(&b);
      const results dev = run_device("argmax", &b, false), ref = run_host("argmax", &b, false);
      compare("argmax", RECAP_DTYPE_I32, b.rows, dev.tokens, ref.tokens, NULL, true);
      release_all();
    }
}

/* argmax through the public single-op API at 2 rows of Llama 3's vocabulary: the first launch
 * allocates the op's workspace and call state (its row slices) on the device, a captured graph
 * replays with them, and every launch finds the hand's tokens (a count left over from one
 * launch would leave the next one's outputs unwritten: they are poisoned before each). */
static void test_argmax_single_op_gets_its_state_on_the_device(void) {
  batch b = batch_make(RECAP_DTYPE_F32, 2, LLAMA3_VOCAB, LLAMA3_VOCAB);
  logit_set(&b, 0, 77777, 3);
  logit_set(&b, 1, 5, 2), logit_set(&b, 1, 128000, 2); /* a tie, to the lower id */
  batch_upload(&b);
  int32_t *out = dev_alloc(2 * sizeof(int32_t)), tokens[2];
  recap_tensor in = {.data = b.x_dev,
                     .dtype = RECAP_DTYPE_F32,
                     .ndim = 2,
                     .shape = {2, LLAMA3_VOCAB},
                     .strides = {LLAMA3_VOCAB, 1}};
  recap_tensor res = {.data = out};
  recap_op_args args = {.inputs = &in, .num_inputs = 1, .outputs = &res, .num_outputs = 1};
  recap_op *op = NULL;
  CHECK_OK(recap_op_create("argmax", &args, &op));
  recap_graph *g = NULL;
  for (int launch = 0; launch < 4; ++launch) {
    CHECK_OK(cuda->memset_async(out, 0x7F, sizeof tokens, cuda_stream));
    if (launch < 2) {
      CHECK_OK(recap_op_launch(op, cuda_stream));
    } else {
      if (!g) {
        CHECK_OK(recap_graph_create(&g));
        CHECK_OK(recap_graph_capture_begin(g, cuda_stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
        CHECK_OK(recap_op_launch(op, cuda_stream));
        CHECK_OK(recap_graph_capture_end(g));
      }
      CHECK_OK(recap_graph_replay(g, cuda_stream));
    }
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    to_host(tokens, out, sizeof tokens);
    CU_ASSERT_EQUAL(tokens[0], 77777);
    CU_ASSERT_EQUAL(tokens[1], 5);
  }
  CHECK_OK(recap_graph_destroy(g));
  recap_op_destroy(op);
  release_all();
}

/* ---- sample against the host ---- */

/* Rows of every kind on random peaked logits, in every dtype and shape: Llama 3's vocabulary
 * in aligned rows, unaligned rows (the kernel's element-wise loads), many short rows (the
 * statistics of boundary rows), one token, a few. Tokens must be equal but for at most 1 in
 * 10^4 rows overall; logprobs of equal tokens within 1e-4 (f32 sums of up to 128256 terms). */
static void test_sample_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  static const struct {
    int64_t rows, vocab, pad;
  } shapes[] = {
      {64, LLAMA3_VOCAB, 0}, {37, 4099, 3},       {10000, 64, 0}, {5, 1, 0},     {3, 7, 1},
      {1, LLAMA3_VOCAB, 0},  {6, QWEN2_VOCAB, 0}, {2, 100003, 5}, {40, 8192, 0}, {2, 100003, 4}};
  int64_t rows_compared = 0, differ = 0;
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      batch b = batch_make(kFloatTypes[t], shapes[s].rows, shapes[s].vocab,
                           shapes[s].vocab + shapes[s].pad);
      fill_peaked(&b, &rng);
      for (int64_t r = 0; r < b.rows; ++r) random_row(seqs_row(&b, r), &rng, b.vocab);
      batch_upload(&b);
      const bool logprobs = s % 2 == 0;
      const results dev = run_device("sample", &b, logprobs);
      const results ref = run_host("sample", &b, logprobs);
      int64_t lp_bad = 0;
      for (int64_t r = 0; r < b.rows; ++r) {
        ++rows_compared;
        if (dev.tokens[r] != ref.tokens[r]) {
          const int32_t *row = seqs_row(&b, r);
          if (differ < 10)
            fprintf(stderr,
                    "\n  sample [%s, %lld x %lld] row %lld: cuda %d, host %d (TOP_K %d, "
                    "TEMPERATURE %g, TOP_P %g, MIN_P %g)",
                    recap_dtype_name(b.dtype), (long long)b.rows, (long long)b.vocab, (long long)r,
                    dev.tokens[r], ref.tokens[r], row[RECAP_SEQ_TOP_K],
                    (double)recap__sample_f32_of(row[RECAP_SEQ_TEMPERATURE]),
                    (double)recap__sample_f32_of(row[RECAP_SEQ_TOP_P]),
                    (double)recap__sample_f32_of(row[RECAP_SEQ_MIN_P]));
          ++differ;
          CU_ASSERT(dev.tokens[r] >= -1 && dev.tokens[r] < b.vocab);
        } else if (logprobs) {
          const double h = ref.logprobs[r], d = dev.logprobs[r];
          if (!(fabs(d - h) <= 1e-4 * fmax(1, fabs(h)))) {
            if (lp_bad < 5)
              fprintf(stderr, "\n  sample logprob [%s] row %lld: cuda %.9g, host %.9g",
                      recap_dtype_name(b.dtype), (long long)r, d, h);
            ++lp_bad;
          }
        }
      }
      CU_ASSERT_EQUAL(lp_bad, 0);
      release_all();
    }
  printf("\n  %lld of %lld rows drew another token than the host", (long long)differ,
         (long long)rows_compared);
  CU_ASSERT(differ * 10000 <= rows_compared);
}

/* ---- reproducibility ---- */

/* A request (its logits, parameters, seed and OUT_INDEX) alone in a batch of one, then among
 * other requests in batches of 7, 64 and 130 rows at other positions: the same token. */
static void test_sample_same_seed_and_out_index_give_the_same_token_in_any_batch(void) {
  enum { Q = 24, V = 5000 };
  test_rng rng;
  test_rng_init(&rng);
  batch requests = batch_make(RECAP_DTYPE_BF16, Q, V, V);
  fill_peaked(&requests, &rng);
  for (int q = 0; q < Q; ++q) {
    random_row(seqs_row(&requests, q), &rng, V);
    seqs_row(&requests, q)[RECAP_SEQ_Q_LEN] = 1; /* no unused rows among the requests */
    if (recap__sample_f32_of(seqs_row(&requests, q)[RECAP_SEQ_TEMPERATURE]) == 0)
      seqs_row(&requests, q)[RECAP_SEQ_TEMPERATURE] = f32_bits(1.0f);
  }
  int32_t alone[Q];
  for (int q = 0; q < Q; ++q) {
    batch one = batch_make(RECAP_DTYPE_BF16, 1, V, V);
    memcpy(one.x_host, (uint16_t *)requests.x_host + (int64_t)q * V, (size_t)V * 2);
    memcpy(one.seqs_host, seqs_row(&requests, q), WIDTH * sizeof(int32_t));
    batch_upload(&one);
    alone[q] = run_device("sample", &one, false).tokens[0];
  }
  static const int sizes[] = {7, 64, 130};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    batch b = batch_make(RECAP_DTYPE_BF16, sizes[s], V, V);
    fill_peaked(&b, &rng);
    int who[130];
    for (int r = 0; r < b.rows; ++r) {
      random_row(seqs_row(&b, r), &rng, V);
      who[r] = (int)(test_rng_next(&rng) % (2 * Q)) - Q; /* half the rows hold a request */
      if (who[r] < 0) continue;
      memcpy((uint16_t *)b.x_host + (int64_t)r * V,
             (uint16_t *)requests.x_host + (int64_t)who[r] * V, (size_t)V * 2);
      memcpy(seqs_row(&b, r), seqs_row(&requests, who[r]), WIDTH * sizeof(int32_t));
    }
    batch_upload(&b);
    const results got = run_device("sample", &b, false);
    for (int r = 0; r < b.rows; ++r)
      if (who[r] >= 0) CU_ASSERT_EQUAL(got.tokens[r], alone[who[r]]);
  }
  release_all();
}

/* ---- the distribution ---- */

/* 10^5 GPU draws per case: the chi-square test passes (p >= 1e-3), the draws match an inverse
 * CDF over the independently computed distribution but for at most 1 in 10^4 (f32 weights at
 * CDF steps), and a sampler keeping one token too many in top-p is rejected against them. */
static void test_sample_gpu_draws_fit_the_expected_distributions(void) {
  for (size_t c = 0; c < sizeof kSampleCases / sizeof kSampleCases[0]; ++c) {
    const sample_row *s = &kSampleCases[c].row;
    batch b = batch_make(RECAP_DTYPE_F32, SAMPLE_DRAWS, SAMPLE_VOCAB, SAMPLE_VOCAB);
    for (int r = 0; r < SAMPLE_DRAWS; ++r) {
      memcpy((float *)b.x_host + (int64_t)r * SAMPLE_VOCAB, kSampleLogits, sizeof kSampleLogits);
      sample_row_write(seqs_row(&b, r), WIDTH, s, r);
    }
    batch_upload(&b);
    const results got = run_device("sample", &b, false);
    double p[SAMPLE_VOCAB], wrong[SAMPLE_VOCAB];
    expected_distribution(kSampleLogits, SAMPLE_VOCAB, s, 0, p);
    int64_t counts[SAMPLE_VOCAB] = {0};
    int differ = 0, outside = 0;
    for (int r = 0; r < SAMPLE_DRAWS; ++r) {
      const int32_t tok = got.tokens[r];
      if (tok < 0 || tok >= SAMPLE_VOCAB) {
        ++outside;
        continue;
      }
      ++counts[tok];
      differ += tok != inverse_cdf(p, SAMPLE_VOCAB, s->seed, r);
    }
    int ok = 1;
    const double pvalue = chi_square_pvalue(counts, p, SAMPLE_VOCAB, SAMPLE_DRAWS, &ok);
    printf("\n  %-42s chi-square p = %.3g, %d draws off the inverse CDF", kSampleCases[c].name,
           pvalue, differ);
    CU_ASSERT_EQUAL(outside, 0);
    CU_ASSERT(ok);
    CU_ASSERT(pvalue >= 1e-3);
    CU_ASSERT(differ * 10000 <= SAMPLE_DRAWS);
    for (size_t k = 0; k < sizeof kSampleTopPCases / sizeof kSampleTopPCases[0]; ++k)
      if (kSampleTopPCases[k] == c) {
        expected_distribution(kSampleLogits, SAMPLE_VOCAB, s, 1, wrong);
        CU_ASSERT(chi_square_pvalue(counts, wrong, SAMPLE_VOCAB, SAMPLE_DRAWS, &ok) < 1e-3);
      }
    release_all();
  }
}

/* ---- capture ---- */

/* sample captured once (Llama 3's vocabulary, bf16, logprobs), replayed: the eager tokens and
 * logprobs bit for bit; then new parameters written to device memory between replays (every
 * OUT_INDEX advanced, a row made unused, one made greedy) are what the next replay uses. */
static void graph_replays_read_parameters_at_run_time(int64_t rows) {
  test_rng rng;
  test_rng_init(&rng);
  batch b = batch_make(RECAP_DTYPE_BF16, rows, LLAMA3_VOCAB, LLAMA3_VOCAB);
  fill_peaked(&b, &rng);
  for (int64_t r = 0; r < b.rows; ++r) random_row(seqs_row(&b, r), &rng, b.vocab);
  batch_upload(&b);
  recap__op_call call = batch_call("sample", &b, true, true);
  bind_slices_state(&call);
  void *out[2];
  for (int o = 0; o < 2; ++o) call.outputs[o].data = out[o] = dev_alloc((size_t)b.rows * 4);
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  const recap_status launched = recap__op_launch(&call, cuda_stream);
  const recap_status ended = recap__capture_end(cuda_stream, &graph);
  CHECK_OK(launched);
  CHECK_OK(ended);
  CHECK_OK(cuda->graph_instantiate(graph, &exec));
  const size_t bytes = (size_t)b.rows * 4;
  int32_t *tokens = host_alloc(bytes);
  float *logprobs = host_alloc(bytes);
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      for (int64_t r = 0; r < b.rows; ++r) seqs_row(&b, r)[RECAP_SEQ_OUT_INDEX] += 1;
      memset(seqs_row(&b, 3 * step), 0, WIDTH * sizeof(int32_t));
      seqs_row(&b, 3 * step + 1)[RECAP_SEQ_TEMPERATURE] = 0;
      seqs_row(&b, 3 * step + 1)[RECAP_SEQ_Q_LEN] = 1;
      batch_upload(&b);
    }
    for (int o = 0; o < 2; ++o) CHECK_OK(cuda->memset_async(out[o], 0x7F, bytes, cuda_stream));
    CHECK_OK(cuda->graph_launch(exec, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    expect_state_zero(&call);
    to_host(tokens, out[0], bytes);
    to_host(logprobs, out[1], bytes);
    const results eager = run_device("sample", &b, true);
    CU_ASSERT_EQUAL(memcmp(tokens, eager.tokens, bytes), 0);
    CU_ASSERT_EQUAL(memcmp(logprobs, eager.logprobs, bytes), 0);
    if (step > 0) CU_ASSERT_EQUAL(tokens[3 * step], -1);
    const results ref = run_host("sample", &b, false);
    int differ = 0;
    for (int64_t r = 0; r < b.rows; ++r) differ += tokens[r] != ref.tokens[r];
    CU_ASSERT(differ <= 1);
  }
  cuda->graph_exec_destroy(exec);
  cuda->graph_destroy(graph);
  release_all();
}

/* 64 rows (one block each) and 8 (16 slices a row, their counts reset by every replay). */
static void test_sample_graph_replays_read_parameters_at_run_time(void) {
  graph_replays_read_parameters_at_run_time(64);
  graph_replays_read_parameters_at_run_time(8);
}

/* ---- a row with invalid parameters (child process) ---- */

/* Copies n bytes to a new device buffer; NULL on failure (the child reports it). */
static void *child_upload(const void *src, size_t n) {
  void *p = NULL;
  if (cuda->mem_alloc(0, n, &p) != RECAP_OK) return NULL;
  if (cuda->memcpy_async(p, src, n, cuda_stream) != RECAP_OK) return NULL;
  return p;
}

/* In the child (no CUnit there): one used row with TEMPERATURE -1 must trap: the launch
 * succeeds and the synchronize reports a device fault. Exit 0 only then. */
static int run_fault_child(void) {
  if (cuda_suite_init() != 0) return 2;
  static const float logits[2][8] = {{1, 2, 3}, {3, 2, 1}};
  int32_t seqs[2][WIDTH];
  const sample_row good = {.temperature = 1}, bad = {.temperature = -1};
  sample_row_write(seqs[0], WIDTH, &good, 0);
  sample_row_write(seqs[1], WIDTH, &bad, 0);
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find("sample");
  call.num_inputs = 2;
  call.inputs[0] =
      (recap_tensor){child_upload(logits, sizeof logits), RECAP_DTYPE_F32, 2, {2, 8}, {8, 1}};
  call.inputs[1] =
      (recap_tensor){child_upload(seqs, sizeof seqs), RECAP_DTYPE_I32, 2, {2, WIDTH}, {WIDTH, 1}};
  if (!call.def || !call.inputs[0].data || !call.inputs[1].data) return 2;
  if (recap__op_infer(&call) != RECAP_OK) {
    fprintf(stderr, "child: infer failed: %s\n", recap_last_error());
    return 2;
  }
  if (cuda->mem_alloc(0, 2 * sizeof(int32_t), &call.outputs[0].data) != RECAP_OK) return 2;
  const recap_status launched = recap__op_launch(&call, cuda_stream);
  const recap_status synced = recap_stream_synchronize(cuda_stream);
  printf("child sample: launch %s, synchronize %s\n", recap_status_name(launched),
         recap_status_name(synced));
  return launched == RECAP_OK && synced == RECAP_STATUS_DEVICE_ERROR ? 0 : 1;
}

static void test_sample_invalid_parameters_trap(void) {
  fflush(NULL);
  const pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (pid == 0) {
    char *child_argv[] = {"ops_cuda_sample_test", "--fault", NULL};
    execv("/proc/self/exe", child_argv);
    _exit(127);
  }
  int wstatus = 0;
  CU_ASSERT_EQUAL_FATAL(waitpid(pid, &wstatus, 0), pid);
  CU_ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--fault") == 0) return run_fault_child();
  CU_pSuite gpu =
      test_add_cuda_suite("ops_cuda_sample/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_argmax_matches_host_exactly);
  CU_ADD_TEST(gpu, test_argmax_single_op_gets_its_state_on_the_device);
  CU_ADD_TEST(gpu, test_sample_matches_host);
  CU_ADD_TEST(gpu, test_sample_same_seed_and_out_index_give_the_same_token_in_any_batch);
  CU_ADD_TEST(gpu, test_sample_gpu_draws_fit_the_expected_distributions);
  CU_ADD_TEST(gpu, test_sample_graph_replays_read_parameters_at_run_time);
  CU_ADD_TEST(gpu, test_sample_invalid_parameters_trap);
  return test_run_all();
}
