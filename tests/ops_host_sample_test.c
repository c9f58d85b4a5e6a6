/*
 * ops_host_sample_test.c: argmax and sample on the host backend, the reference: argmax's ties
 * and NaNs; sample's greedy, unused, NaN and infinite rows; each filter against a hand
 * computation on small vocabularies (ties at a top-k or top-p boundary go to the lower id);
 * the same (seed, OUT_INDEX) giving the same token in any row of any batch; chi-square fits of
 * 10^5 draws per distribution against distributions computed independently (sample_util.h),
 * with fixed seeds so the verdicts never change, and a wrong sampler (top-p keeping one token
 * too many) that the same test must reject; raw logprobs; bad inputs as errors, not crashes.
 * Helpers: ops_host_util.h, sample_util.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops_host_util.h"
#include "tests/sample_util.h"

/* seqs rows of 16 columns: the parameters, reserved columns, no KV blocks (sample reads none). */
enum { WIDTH = RECAP_SEQ_BLOCKS };

/* The p-value under which a chi-square test rejects. */
static const double kRejectBelow = 1e-3;

/* Element k (row-major) of t, stored through runtime/half.h, which keeps NaN and infinities
 * (ops_host_util.h's encoders are for finite values). */
static void put(recap_tensor *t, int64_t k, float v) {
  recap__store_f32(t->data, t->dtype, offset_of(t, k), v);
}

/* logits [rows, vocab] in `dt`, every row `values`. */
static recap_tensor logits_rows(recap_dtype dt, int64_t rows, int64_t vocab, const float *values,
                                layout lay) {
  recap_tensor t = tensor(dt, SHAPE(rows, vocab), lay);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < vocab; ++i) put(&t, r * vocab + i, values[i]);
  return t;
}

static recap_tensor seqs_rows(int64_t rows) {
  recap_tensor t = tensor(RECAP_DTYPE_I32, SHAPE(rows, WIDTH), CONTIGUOUS);
  memset(t.data, 0, (size_t)rows * WIDTH * sizeof(int32_t));
  return t;
}

static int32_t *seqs_row(recap_tensor *seqs, int64_t r) {
  return (int32_t *)seqs->data + r * WIDTH;
}

/* Runs sample (with the logprobs output when asked); the outputs stay in the call. */
static recap__op_call run_sample(recap_tensor logits, recap_tensor seqs, bool logprobs) {
  recap__op_call call = new_call("sample");
  add_input(&call, logits);
  add_input(&call, seqs);
  call.attrs.logprobs = logprobs;
  run(&call);
  CU_ASSERT_EQUAL(call.num_outputs, logprobs ? 2 : 1);
  return call;
}

static const int32_t *tokens_of(const recap__op_call *call) {
  return call->outputs[0].data;
}

/* Draws `n` tokens from one row of logits under `s`, at OUT_INDEX 0..n-1, in one op call (a
 * row per draw: rows are independent); counts[v] gets the draws of token v. */
static void draw_counts(recap_dtype dt, const float *logits, int vocab, const sample_row *s, int n,
                        int64_t *counts) {
  recap_tensor x = logits_rows(dt, n, vocab, logits, CONTIGUOUS);
  recap_tensor seqs = seqs_rows(n);
  for (int r = 0; r < n; ++r) sample_row_write(seqs_row(&seqs, r), WIDTH, s, r);
  recap__op_call call = run_sample(x, seqs, false);
  memset(counts, 0, (size_t)vocab * sizeof *counts);
  int outside = 0;
  for (int r = 0; r < n; ++r) {
    const int32_t t = tokens_of(&call)[r];
    if (t < 0 || t >= vocab)
      ++outside;
    else
      ++counts[t];
  }
  CU_ASSERT_EQUAL(outside, 0);
}

/* The tokens drawn at least once in n draws, as a bit set. */
static unsigned drawn_set(recap_dtype dt, const float *logits, int vocab, const sample_row *s,
                          int n) {
  int64_t counts[32];
  CU_ASSERT_FATAL(vocab <= 32);
  draw_counts(dt, logits, vocab, s, n, counts);
  unsigned set = 0;
  for (int i = 0; i < vocab; ++i)
    if (counts[i] > 0) set |= 1u << i;
  return set;
}

#define BITS(...) bits_of((const int[]){__VA_ARGS__, -1})
static unsigned bits_of(const int *list) {
  unsigned set = 0;
  for (; *list >= 0; ++list) set |= 1u << *list;
  return set;
}

/* Checks that 3000 draws under `s`, with the logits stored in each float dtype, hit exactly
 * the tokens of `want`. The cases keep ties tied in every dtype and put no top-p or min-p
 * boundary within 2% of a token's probability, so f16 and bf16 rounding moves none; each kept
 * token has probability >= 5%, so missing one in 3000 draws would take a broken sampler, not
 * bad luck (the seeds are fixed anyway). */
static void check_support(const char *what, const float *logits, int vocab, const sample_row *s,
                          unsigned want) {
  for (int d = 0; d < 3; ++d) {
    const unsigned got = drawn_set(float_types[d], logits, vocab, s, 3000);
    if (got != want)
      fprintf(stderr, "\n  %s (%s): drew the tokens 0x%x, expected 0x%x", what,
              recap_dtype_name(float_types[d]), got, want);
    CU_ASSERT_EQUAL(got, want);
  }
}

/* log softmax of row `r` of x at token t, in double. */
static double log_softmax_at(const recap_tensor *x, int64_t r, int64_t t) {
  const int64_t vocab = x->shape[1];
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max = fmax(max, get(x, r * vocab + i));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += exp(get(x, r * vocab + i) - max);
  return get(x, r * vocab + t) - max - log(sum);
}

/* The first NaN, else the first largest value, -0 equal to +0. */
static int64_t plain_argmax(const recap_tensor *x, int64_t r) {
  const int64_t vocab = x->shape[1];
  int64_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double v = get(x, r * vocab + i), b = get(x, r * vocab + best);
    if (isnan(b)) break;
    if (isnan(v) || v > b) best = i;
  }
  return best;
}

/* ---- argmax ---- */

static void test_argmax_takes_the_largest_with_ties_to_the_lowest_index(void) {
  free_tracked();
  static const float rows[][5] = {
      {1, 3, 3, 2, 0},           {-0.0f, 0.0f, -1, -2, -3},
      {0.0f, -0.0f, -1, -2, -3}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY},
      {1, NAN, 5, NAN, 2},       {INFINITY, 5, INFINITY, 0, 0},
      {-5, -4, -3, -2, -1},
  };
  static const int32_t want[] = {1, 0, 0, 0, 1, 0, 4};
  enum { R = sizeof rows / sizeof rows[0] };
  for (int d = 0; d < 3; ++d) {
    recap_tensor x = tensor(float_types[d], SHAPE(R, 5), PADDED);
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 5; ++i) put(&x, r * 5 + i, rows[r][i]);
    recap__op_call call = new_call("argmax");
    add_input(&call, x);
    run(&call);
    for (int r = 0; r < R; ++r) {
      if (tokens_of(&call)[r] != want[r])
        fprintf(stderr, "\n  argmax (%s) row %d: %d, expected %d", recap_dtype_name(x.dtype), r,
                tokens_of(&call)[r], want[r]);
      CU_ASSERT_EQUAL(tokens_of(&call)[r], want[r]);
    }
  }
}

/* Random rows, f16 and bf16 full of ties, rows 1023 + 3 elements apart. */
static void test_argmax_random_rows_match_a_plain_loop(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 0; d < 3; ++d) {
    recap_tensor x = random_tensor(&rng, float_types[d], SHAPE(33, 1023), PADDED, -4, 4);
    recap__op_call call = new_call("argmax");
    add_input(&call, x);
    run(&call);
    for (int64_t r = 0; r < 33; ++r) CU_ASSERT_EQUAL(tokens_of(&call)[r], plain_argmax(&x, r));
  }
}

/* ---- sample: rows that draw nothing ---- */

static void test_sample_greedy_rows_take_the_argmax_and_its_raw_logprob(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  enum { R = 8, V = 257 };
  for (int d = 0; d < 3; ++d) {
    recap_tensor x = random_tensor(&rng, float_types[d], SHAPE(R, V), CONTIGUOUS, -6, 6);
    recap_tensor seqs = seqs_rows(R);
    for (int r = 0; r < R; ++r) {
      /* Temperature 0 whatever the filters, or a top-k of one at any temperature. */
      const sample_row s = r % 2 ? (sample_row){.temperature = 0.7f, .top_k = 1, .top_p = 0.3f}
                                 : (sample_row){.temperature = 0, .top_k = 40, .min_p = 0.2f};
      sample_row_write(seqs_row(&seqs, r), WIDTH, &s, r * 11);
    }
    recap__op_call call = run_sample(x, seqs, true);
    const float *lp = call.outputs[1].data;
    for (int r = 0; r < R; ++r) {
      const int64_t want = plain_argmax(&x, r);
      CU_ASSERT_EQUAL(tokens_of(&call)[r], want);
      const double ref = log_softmax_at(&x, r, want);
      CU_ASSERT(fabs(lp[r] - ref) <= 1e-5 * fmax(1, fabs(ref)));
    }
  }
}

/* A row with Q_LEN 0 is an unused slot: -1, logprob 0, and its other columns are not read
 * (not even checked). */
static void test_sample_unused_rows_give_minus_one_unchecked(void) {
  free_tracked();
  static const float logits[] = {0.5f, 2, -1, 1};
  recap_tensor x = logits_rows(RECAP_DTYPE_F32, 3, 4, logits, CONTIGUOUS);
  recap_tensor seqs = seqs_rows(3);
  const sample_row bad = {.temperature = NAN, .top_p = 5, .min_p = -1, .top_k = -3};
  sample_row_write(seqs_row(&seqs, 0), WIDTH, &bad, -7);
  seqs_row(&seqs, 0)[RECAP_SEQ_Q_LEN] = 0;
  const sample_row greedy = {.temperature = 0};
  sample_row_write(seqs_row(&seqs, 1), WIDTH, &greedy, 0);
  /* Row 2 stays all zero: the unused slot recap.h describes. */
  recap__op_call call = run_sample(x, seqs, true);
  const float *lp = call.outputs[1].data;
  CU_ASSERT_EQUAL(tokens_of(&call)[0], -1);
  CU_ASSERT_EQUAL(tokens_of(&call)[1], 1);
  CU_ASSERT_EQUAL(tokens_of(&call)[2], -1);
  CU_ASSERT_EQUAL(lp[0], 0);
  CU_ASSERT_EQUAL(lp[2], 0);
}

/* NaN is the largest logit: a row with one gives its first NaN, whatever its parameters,
 * and a NaN logprob. */
static void test_sample_row_with_nan_gives_its_first_nan(void) {
  free_tracked();
  static const float logits[] = {3, 1, NAN, 9, NAN};
  const sample_row s = {.temperature = 1, .top_p = 0.9f, .top_k = 3, .min_p = 0.1f};
  for (int d = 0; d < 3; ++d) {
    recap_tensor x = logits_rows(float_types[d], 4, 5, logits, CONTIGUOUS);
    recap_tensor seqs = seqs_rows(4);
    for (int r = 0; r < 4; ++r) sample_row_write(seqs_row(&seqs, r), WIDTH, &s, r);
    recap__op_call call = run_sample(x, seqs, true);
    const float *lp = call.outputs[1].data;
    for (int r = 0; r < 4; ++r) {
      CU_ASSERT_EQUAL(tokens_of(&call)[r], 2);
      CU_ASSERT(isnan(lp[r]));
    }
  }
}

/* ---- sample: each filter by hand ---- */

static void test_sample_top_k_keeps_k_tokens_with_ties_to_the_lower_id(void) {
  free_tracked();
  /* Ranked: 1, 2, 3, 5 (four ties at 2, by id), 0, 4, 6. */
  static const float logits[] = {1, 2, 2, 2, 0, 2, -1};
  sample_row s = {.temperature = 1};
  s.top_k = 2, check_support("top_k 2", logits, 7, &s, BITS(1, 2));
  s.top_k = 3, check_support("top_k 3", logits, 7, &s, BITS(1, 2, 3));
  s.top_k = 4, check_support("top_k 4", logits, 7, &s, BITS(1, 2, 3, 5));
  s.top_k = 5, check_support("top_k 5", logits, 7, &s, BITS(0, 1, 2, 3, 5));
  s.top_k = 7, check_support("top_k = V", logits, 7, &s, BITS(0, 1, 2, 3, 4, 5, 6));
  s.top_k = 0, check_support("top_k 0", logits, 7, &s, BITS(0, 1, 2, 3, 4, 5, 6));
}

/* Probabilities 0.5, 0.2, 0.2, 0.1 placed so that id order is not rank order: ranked 2, 1,
 * 3, 0 (1 and 3 tie, 1 first). */
static const float kQuarterLogits[] = {-2.302585093f, -1.609437912f, -0.693147181f, -1.609437912f};

static void test_sample_top_p_keeps_the_shortest_run_reaching_top_p(void) {
  free_tracked();
  const float *x = kQuarterLogits;
  sample_row s = {.temperature = 1};
  s.top_p = 0.45f, check_support("top_p 0.45", x, 4, &s, BITS(2));
  s.top_p = 0.65f, check_support("top_p 0.65 (a tie at the boundary)", x, 4, &s, BITS(2, 1));
  s.top_p = 0.75f, check_support("top_p 0.75", x, 4, &s, BITS(2, 1, 3));
  s.top_p = 0.95f, check_support("top_p 0.95", x, 4, &s, BITS(0, 1, 2, 3));
  s.top_p = 1, check_support("top_p 1 (off)", x, 4, &s, BITS(0, 1, 2, 3));
  s.top_p = 0, check_support("top_p 0 (off)", x, 4, &s, BITS(0, 1, 2, 3));
  /* After top-k 3 the kept mass is 0.9: 0.5 / 0.9 = 0.56, then 0.78, then 1. */
  s.top_k = 3;
  s.top_p = 0.7f, check_support("top_k 3, top_p 0.7", x, 4, &s, BITS(2, 1));
  s.top_p = 0.8f, check_support("top_k 3, top_p 0.8", x, 4, &s, BITS(2, 1, 3));
}

static void test_sample_min_p_keeps_tokens_near_the_most_likely(void) {
  free_tracked();
  const float *x = kQuarterLogits;
  sample_row s = {.temperature = 1};
  s.min_p = 0.3f, check_support("min_p 0.3", x, 4, &s, BITS(2, 1, 3));
  s.min_p = 0.5f, check_support("min_p 0.5", x, 4, &s, BITS(2));
  s.min_p = 0.15f, check_support("min_p 0.15", x, 4, &s, BITS(0, 1, 2, 3));
  s.min_p = 1, check_support("min_p 1", x, 4, &s, BITS(2));
  /* Temperature 2: p ~ sqrt(p), ratios to the largest 0.63, 0.63, 0.45. */
  s.temperature = 2;
  s.min_p = 0.5f, check_support("T 2, min_p 0.5", x, 4, &s, BITS(2, 1, 3));
  s.min_p = 0.7f, check_support("T 2, min_p 0.7", x, 4, &s, BITS(2));
  /* After top-p, in the warpers' order: the kept set is the intersection. */
  s.temperature = 1;
  s.top_p = 0.75f, s.min_p = 0.45f, check_support("top_p 0.75, min_p 0.45", x, 4, &s, BITS(2));
  s.top_p = 0.65f, s.min_p = 0.3f, check_support("top_p 0.65, min_p 0.3", x, 4, &s, BITS(2, 1));
}

/* +inf logits share the draw equally (the limit of large logits); an all -inf row is
 * uniform. Their logprobs: -ln 2 and -ln 5. */
static void test_sample_infinite_logits_share_the_draw(void) {
  free_tracked();
  static const float with_inf[] = {1, INFINITY, 3, INFINITY};
  static const float all_minus_inf[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  const sample_row s = {.temperature = 0.5f, .top_p = 0.9f};
  check_support("+inf logits", with_inf, 4, &s, BITS(1, 3));
  const sample_row plain = {.temperature = 1};
  check_support("all -inf", all_minus_inf, 5, &plain, BITS(0, 1, 2, 3, 4));
  recap_tensor x = logits_rows(RECAP_DTYPE_F32, 1, 4, with_inf, CONTIGUOUS);
  recap_tensor seqs = seqs_rows(1);
  sample_row_write(seqs_row(&seqs, 0), WIDTH, &s, 3);
  recap__op_call call = run_sample(x, seqs, true);
  CU_ASSERT(fabs(((const float *)call.outputs[1].data)[0] + log(2.0)) < 1e-6);
}

/* ---- sample: reproducibility and the distribution ---- */

/* A request is its logits, parameters and (seed, OUT_INDEX); its token must not depend on the
 * batch: its row, the batch size, or the other rows. */
static void test_sample_same_seed_and_out_index_give_the_same_token_in_any_batch(void) {
  free_tracked();
  enum { Q = 40, V = 97 };
  test_rng rng;
  test_rng_init(&rng);
  static float logits[Q][V];
  sample_row req[Q];
  int32_t out_index[Q], alone[Q];
  static const int32_t top_ks[] = {0, 5, 20};
  static const float top_ps[] = {0, 0.5f, 0.9f}, min_ps[] = {0, 0.05f};
  for (int q = 0; q < Q; ++q) {
    for (int i = 0; i < V; ++i) logits[q][i] = (float)test_rng_uniform(&rng, -4, 4);
    req[q] = (sample_row){.temperature = (float)test_rng_uniform(&rng, 0.3, 2),
                          .top_k = top_ks[test_rng_next(&rng) % 3],
                          .top_p = top_ps[test_rng_next(&rng) % 3],
                          .min_p = min_ps[test_rng_next(&rng) % 2],
                          .seed = test_rng_next(&rng)};
    out_index[q] = (int32_t)(test_rng_next(&rng) % 100000);
    recap_tensor x = logits_rows(RECAP_DTYPE_F32, 1, V, logits[q], CONTIGUOUS);
    recap_tensor seqs = seqs_rows(1);
    sample_row_write(seqs_row(&seqs, 0), WIDTH, &req[q], out_index[q]);
    const recap__op_call call = run_sample(x, seqs, false);
    alone[q] = tokens_of(&call)[0];
  }
  static const int sizes[] = {1, 7, 64, 130};
  for (size_t b = 0; b < sizeof sizes / sizeof sizes[0]; ++b) {
    const int rows = sizes[b];
    recap_tensor x = tensor(RECAP_DTYPE_F32, SHAPE(rows, V), CONTIGUOUS);
    recap_tensor seqs = seqs_rows(rows);
    int who[130]; /* the request in each row, -1 for filler */
    for (int r = 0; r < rows; ++r) {
      who[r] = (int)(test_rng_next(&rng) % (Q + Q / 2)) - Q / 2;
      if (who[r] < 0) who[r] = -1;
      const sample_row filler = {.temperature = 1, .seed = test_rng_next(&rng)};
      for (int i = 0; i < V; ++i)
        put(&x, (int64_t)r * V + i,
            who[r] >= 0 ? logits[who[r]][i] : (float)test_rng_uniform(&rng, -4, 4));
      if (who[r] >= 0)
        sample_row_write(seqs_row(&seqs, r), WIDTH, &req[who[r]], out_index[who[r]]);
      else if (test_rng_next(&rng) % 2)
        sample_row_write(seqs_row(&seqs, r), WIDTH, &filler, r);
    }
    recap__op_call call = run_sample(x, seqs, false);
    for (int r = 0; r < rows; ++r)
      if (who[r] >= 0) CU_ASSERT_EQUAL(tokens_of(&call)[r], alone[who[r]]);
  }
  /* And the draw does depend on OUT_INDEX: one request's 50 draws are not all one token. */
  const sample_row plain = {.temperature = 1, .seed = 99};
  const unsigned set = drawn_set(RECAP_DTYPE_F32, kQuarterLogits, 4, &plain, 50);
  CU_ASSERT(set != 0 && (set & (set - 1)) != 0);
}

static void test_sample_draws_fit_the_expected_distributions(void) {
  for (size_t c = 0; c < sizeof kSampleCases / sizeof kSampleCases[0]; ++c) {
    free_tracked();
    const sample_row *s = &kSampleCases[c].row;
    double p[SAMPLE_VOCAB];
    const int support = expected_distribution(kSampleLogits, SAMPLE_VOCAB, s, 0, p);
    int64_t counts[SAMPLE_VOCAB];
    draw_counts(RECAP_DTYPE_F32, kSampleLogits, SAMPLE_VOCAB, s, SAMPLE_DRAWS, counts);
    int ok = 1;
    const double pvalue = chi_square_pvalue(counts, p, SAMPLE_VOCAB, SAMPLE_DRAWS, &ok);
    printf("\n  %-42s %2d tokens kept, chi-square p = %.3g", kSampleCases[c].name, support, pvalue);
    CU_ASSERT(ok);
    CU_ASSERT(support >= 2);
    CU_ASSERT(pvalue >= kRejectBelow);
  }
}

/* The op draws what an inverse CDF over the independently computed distribution draws from
 * the same uniforms, draw for draw (they differ only where u lands within rounding of a CDF
 * step: none expected in 10^5 draws of double sums). */
static void test_sample_draws_match_an_independent_inverse_cdf(void) {
  for (size_t c = 0; c < sizeof kSampleCases / sizeof kSampleCases[0]; ++c) {
    free_tracked();
    const sample_row *s = &kSampleCases[c].row;
    double p[SAMPLE_VOCAB];
    expected_distribution(kSampleLogits, SAMPLE_VOCAB, s, 0, p);
    recap_tensor x =
        logits_rows(RECAP_DTYPE_F32, SAMPLE_DRAWS, SAMPLE_VOCAB, kSampleLogits, CONTIGUOUS);
    recap_tensor seqs = seqs_rows(SAMPLE_DRAWS);
    for (int r = 0; r < SAMPLE_DRAWS; ++r) sample_row_write(seqs_row(&seqs, r), WIDTH, s, r);
    recap__op_call call = run_sample(x, seqs, false);
    int differ = 0;
    for (int r = 0; r < SAMPLE_DRAWS; ++r)
      differ += tokens_of(&call)[r] != inverse_cdf(p, SAMPLE_VOCAB, s->seed, r);
    if (differ)
      fprintf(stderr, "\n  %s: %d of %d draws differ", kSampleCases[c].name, differ, SAMPLE_DRAWS);
    CU_ASSERT(differ <= 1);
  }
}

/* The negative control: a sampler whose top-p keeps one token too many (written here, drawing
 * from the same uniforms) must fail the chi-square test the op passes, and the op's draws must
 * fail against that sampler's distribution. */
static void test_sample_chi_square_rejects_top_p_keeping_one_token_too_many(void) {
  for (size_t k = 0; k < sizeof kSampleTopPCases / sizeof kSampleTopPCases[0]; ++k) {
    free_tracked();
    const sample_row *s = &kSampleCases[kSampleTopPCases[k]].row;
    double right[SAMPLE_VOCAB], wrong[SAMPLE_VOCAB];
    const int kept = expected_distribution(kSampleLogits, SAMPLE_VOCAB, s, 0, right);
    CU_ASSERT_EQUAL(expected_distribution(kSampleLogits, SAMPLE_VOCAB, s, 1, wrong), kept + 1);
    int64_t wrong_counts[SAMPLE_VOCAB] = {0}, op_counts[SAMPLE_VOCAB];
    for (int i = 0; i < SAMPLE_DRAWS; ++i)
      ++wrong_counts[inverse_cdf(wrong, SAMPLE_VOCAB, s->seed, i)];
    draw_counts(RECAP_DTYPE_F32, kSampleLogits, SAMPLE_VOCAB, s, SAMPLE_DRAWS, op_counts);
    int ok = 1;
    const double wrong_vs_right =
        chi_square_pvalue(wrong_counts, right, SAMPLE_VOCAB, SAMPLE_DRAWS, &ok);
    const double op_vs_wrong = chi_square_pvalue(op_counts, wrong, SAMPLE_VOCAB, SAMPLE_DRAWS, &ok);
    const double op_vs_right = chi_square_pvalue(op_counts, right, SAMPLE_VOCAB, SAMPLE_DRAWS, &ok);
    printf(
        "\n  %s: wrong sampler p = %.3g, op against the wrong distribution p = %.3g, op p = %.3g",
        kSampleCases[kSampleTopPCases[k]].name, wrong_vs_right, op_vs_wrong, op_vs_right);
    CU_ASSERT(wrong_vs_right < kRejectBelow);
    CU_ASSERT(op_vs_wrong < kRejectBelow);
    CU_ASSERT(op_vs_right >= kRejectBelow);
  }
}

/* logprobs: log softmax of the raw logits (temperature 1, no filters) at the drawn token. */
static void test_sample_logprobs_are_the_raw_log_softmax_of_the_token(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  enum { R = 16, V = 300 };
  for (int d = 0; d < 3; ++d) {
    recap_tensor x = random_tensor(&rng, float_types[d], SHAPE(R, V), PADDED, -5, 5);
    recap_tensor seqs = seqs_rows(R);
    for (int r = 0; r < R; ++r) {
      const sample_row s = {.temperature = 0.4f + 0.1f * (float)r,
                            .top_k = r % 3 ? 10 : 0,
                            .top_p = r % 4 ? 0.8f : 0,
                            .min_p = r % 5 ? 0.02f : 0,
                            .seed = 1000u + (uint64_t)r};
      sample_row_write(seqs_row(&seqs, r), WIDTH, &s, r);
    }
    recap__op_call call = run_sample(x, seqs, true);
    const float *lp = call.outputs[1].data;
    for (int r = 0; r < R; ++r) {
      const int32_t t = tokens_of(&call)[r];
      CU_ASSERT_FATAL(t >= 0 && t < V);
      const double ref = log_softmax_at(&x, r, t);
      CU_ASSERT(fabs(lp[r] - ref) <= 1e-5 * fmax(1, fabs(ref)));
    }
  }
}

/* ---- bad inputs ---- */

static void expect_infer_error(recap_tensor logits, recap_tensor seqs, const char *mention) {
  recap__op_call call = new_call("sample");
  add_input(&call, logits);
  add_input(&call, seqs);
  CHECK_STATUS(recap__op_infer(&call), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS(mention);
}

static void test_sample_rejects_bad_shapes_and_dtypes(void) {
  free_tracked();
  recap_tensor x = tensor(RECAP_DTYPE_F32, SHAPE(2, 5), CONTIGUOUS);
  recap_tensor seqs = seqs_rows(2);
  expect_infer_error(tensor(RECAP_DTYPE_I32, SHAPE(2, 5), CONTIGUOUS), seqs, "dtype i32");
  expect_infer_error(tensor(RECAP_DTYPE_F32, SHAPE(10), CONTIGUOUS), seqs, "expected [R, V]");
  expect_infer_error(tensor(RECAP_DTYPE_F32, SHAPE(2, 5, 3), CONTIGUOUS), seqs, "[R, V]");
  expect_infer_error(tensor(RECAP_DTYPE_F32, SHAPE(2, 5), TRANSPOSED), seqs, "unit-stride");
  expect_infer_error(x, tensor(RECAP_DTYPE_F32, SHAPE(2, WIDTH), CONTIGUOUS), "expected i32");
  expect_infer_error(x, tensor(RECAP_DTYPE_I32, SHAPE(2, 9), CONTIGUOUS), "W >= 10");
  expect_infer_error(x, seqs_rows(3), "3 rows");
  recap__op_call argmax = new_call("argmax");
  add_input(&argmax, tensor(RECAP_DTYPE_F32, SHAPE(2, 3, 4), CONTIGUOUS));
  CHECK_STATUS(recap__op_infer(&argmax), RECAP_STATUS_INVALID_ARGUMENT);
  /* The attribute decides the outputs. */
  recap__op_call call = new_call("sample");
  add_input(&call, x);
  add_input(&call, seqs);
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.num_outputs, 1);
  call.attrs.logprobs = 1;
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.num_outputs, 2);
  CU_ASSERT_EQUAL(call.outputs[1].dtype, RECAP_DTYPE_F32);
}

/* The CUDA kernel cuts each of few rows into slices of at least 4096 logits (Llama 3's 128256:
 * 31 at one row, 16 at 8, 2 at 63), up to 32; at 64 rows or under 8192 logits it does not. Its
 * workspace holds each slice's u64 top rank, its call state a u32 arrival count per row, which
 * the host reference takes too and checks is zero at the launch. */
static void test_few_rows_ask_for_the_slices_state(void) {
  free_tracked();
  static const struct {
    int64_t rows, vocab;
    int slices;
  } cases[] = {{1, 128256, 31}, {8, 128256, 16}, {63, 128256, 2}, {64, 128256, 1},
               {1, 8191, 1},    {1, 8192, 2},    {1, 1 << 20, 32}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    const char *ops[] = {"argmax", "sample"};
    for (int o = 0; o < 2; ++o) {
      recap__op_call call = new_call(ops[o]);
      add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(cases[c].rows, cases[c].vocab), CONTIGUOUS));
      if (o == 1) add_input(&call, seqs_rows(cases[c].rows));
      CHECK_OK(recap__op_infer(&call));
      const size_t ws = cases[c].slices > 1 ? (size_t)(cases[c].rows * cases[c].slices * 8) : 0;
      const size_t counts = cases[c].slices > 1 ? (size_t)(cases[c].rows * 4) : 0;
      CU_ASSERT_EQUAL(call.def->workspace_bytes(&call, RECAP_BACKEND_CUDA), ws);
      CU_ASSERT_EQUAL(call.def->workspace_bytes(&call, RECAP_BACKEND_HOST), 0);
      CU_ASSERT_EQUAL(call.def->call_state_bytes(&call, RECAP_BACKEND_CUDA), counts);
      CU_ASSERT_EQUAL(call.def->call_state_bytes(&call, RECAP_BACKEND_HOST), counts);
    }
  }
  /* Slices are whole multiples of 64 logits that cover the row. */
  CU_ASSERT_EQUAL(recap__sample_slice_len(128256, 31), 4160);
  CU_ASSERT(recap__sample_slice_len(128256, 31) * 30 < 128256);
  CU_ASSERT_EQUAL(recap__sample_slice_len(100, 1), 128);

  /* A call state another call wrote is refused, naming the op. */
  recap__op_call call = new_call("argmax");
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(1, 8192), CONTIGUOUS));
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = track(sizeof(int32_t));
  uint32_t count = 1;
  call.call_state = &count;
  call.call_state_bytes = sizeof count;
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("op 'argmax': its call state is not zero");
  recap__host_backend_reset_fault_for_testing();
  count = 0;
  run(&call);
}

/* A used row with invalid parameters is a device fault naming the row and the column; no
 * output is written (the check runs before any row is). */
static void test_sample_bad_parameters_fault_and_write_nothing(void) {
  free_tracked();
  static const float logits[] = {1, 2, 3};
  static const struct {
    sample_row row;
    int32_t out_index, q_len;
    const char *mention;
  } bad[] = {
      {{.temperature = -1}, 0, 1, "TEMPERATURE"},
      {{.temperature = INFINITY}, 0, 1, "TEMPERATURE"},
      {{.temperature = NAN}, 0, 1, "TEMPERATURE"},
      {{.temperature = 1, .top_p = 1.5f}, 0, 1, "TOP_P"},
      {{.temperature = 1, .top_p = -0.1f}, 0, 1, "TOP_P"},
      {{.temperature = 1, .top_p = NAN}, 0, 1, "TOP_P"},
      {{.temperature = 1, .min_p = 2}, 0, 1, "MIN_P"},
      {{.temperature = 1, .min_p = NAN}, 0, 1, "MIN_P"},
      {{.temperature = 1, .top_k = -1}, 0, 1, "TOP_K"},
      {{.temperature = 0}, -1, 1, "OUT_INDEX"},
      {{.temperature = 0}, 0, -2, "Q_LEN"},
  };
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; ++b) {
    recap_tensor x = logits_rows(RECAP_DTYPE_F32, 2, 3, logits, CONTIGUOUS);
    recap_tensor seqs = seqs_rows(2);
    const sample_row good = {.temperature = 1};
    sample_row_write(seqs_row(&seqs, 0), WIDTH, &good, 0);
    sample_row_write(seqs_row(&seqs, 1), WIDTH, &bad[b].row, bad[b].out_index);
    seqs_row(&seqs, 1)[RECAP_SEQ_Q_LEN] = bad[b].q_len;
    recap__op_call call = new_call("sample");
    add_input(&call, x);
    add_input(&call, seqs);
    CHECK_OK(recap__op_infer(&call));
    int32_t tokens[2] = {-99, -99};
    call.outputs[0].data = tokens;
    CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
    CHECK_ERROR_MENTIONS("row 1 of input 'seqs'");
    CHECK_ERROR_MENTIONS(bad[b].mention);
    recap__host_backend_reset_fault_for_testing();
    CU_ASSERT(tokens[0] == -99 && tokens[1] == -99);
  }
}

int main(void) {
  CU_pSuite s = test_add_suite("ops_sample/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_argmax_takes_the_largest_with_ties_to_the_lowest_index);
  CU_ADD_TEST(s, test_argmax_random_rows_match_a_plain_loop);
  CU_ADD_TEST(s, test_sample_greedy_rows_take_the_argmax_and_its_raw_logprob);
  CU_ADD_TEST(s, test_sample_unused_rows_give_minus_one_unchecked);
  CU_ADD_TEST(s, test_sample_row_with_nan_gives_its_first_nan);
  CU_ADD_TEST(s, test_sample_top_k_keeps_k_tokens_with_ties_to_the_lower_id);
  CU_ADD_TEST(s, test_sample_top_p_keeps_the_shortest_run_reaching_top_p);
  CU_ADD_TEST(s, test_sample_min_p_keeps_tokens_near_the_most_likely);
  CU_ADD_TEST(s, test_sample_infinite_logits_share_the_draw);
  CU_ADD_TEST(s, test_sample_same_seed_and_out_index_give_the_same_token_in_any_batch);
  CU_ADD_TEST(s, test_sample_draws_fit_the_expected_distributions);
  CU_ADD_TEST(s, test_sample_draws_match_an_independent_inverse_cdf);
  CU_ADD_TEST(s, test_sample_chi_square_rejects_top_p_keeping_one_token_too_many);
  CU_ADD_TEST(s, test_sample_logprobs_are_the_raw_log_softmax_of_the_token);
  CU_ADD_TEST(s, test_sample_rejects_bad_shapes_and_dtypes);
  CU_ADD_TEST(s, test_few_rows_ask_for_the_slices_state);
  CU_ADD_TEST(s, test_sample_bad_parameters_fault_and_write_nothing);
  return test_run_all();
}
