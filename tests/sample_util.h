/*
 * sample_util.h: what the sampling tests (ops_host_sample_test.c, ops_cuda_sample_test.c)
 * share: writing a row of `seqs` (include/recap.h, RECAP_SEQ_*), the distribution a sampling
 * row should draw from, computed independently of the op (a sort, then the filters as
 * transformers' warpers apply them, in long double), and a chi-square goodness-of-fit test.
 *
 *   sample_row row = {.temperature = 0.8f, .top_k = 5, .seed = 7};
 *   sample_row_write(seqs + r * width, &row, out_index);
 *   double p[V];
 *   expected_distribution(logits, V, &row, 0, p);      // 1: top-p keeps one token too many
 *   double pvalue = chi_square_pvalue(counts, p, V, draws, &ok);
 *
 * kSampleCases are the chi-square tests' distributions over kSampleLogits; inverse_cdf is a
 * sampler written from a distribution alone, for draw-for-draw checks and the negative
 * control.
 */
#ifndef RECAP_TESTS_SAMPLE_UTIL_H
#define RECAP_TESTS_SAMPLE_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "include/recap.h"
#include "kernels/sample.h"

/* The sampling parameters of one request (the seqs columns a test sets). */
typedef struct {
  float temperature, top_p, min_p;
  int32_t top_k;
  uint64_t seed;
} sample_row;

static inline int32_t f32_bits(float f) {
  int32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* Writes a used row (Q_LEN 1, one token at the end of a 1-key sequence) of `width` >= 10
 * columns; the rest are 0. */
static inline void sample_row_write(int32_t *row, int width, const sample_row *s,
                                    int32_t out_index) {
  memset(row, 0, (size_t)width * sizeof *row);
  row[RECAP_SEQ_LEN] = 1;
  row[RECAP_SEQ_Q_LEN] = 1;
  row[RECAP_SEQ_OUT_INDEX] = out_index;
  row[RECAP_SEQ_SEED_LO] = (int32_t)(uint32_t)s->seed;
  row[RECAP_SEQ_SEED_HI] = (int32_t)(uint32_t)(s->seed >> 32);
  row[RECAP_SEQ_TOP_K] = s->top_k;
  row[RECAP_SEQ_TEMPERATURE] = f32_bits(s->temperature);
  row[RECAP_SEQ_TOP_P] = f32_bits(s->top_p);
  row[RECAP_SEQ_MIN_P] = f32_bits(s->min_p);
}

static const float *sort_logits_;

/* Larger logit first, then lower index. */
static inline int by_rank_(const void *a, const void *b) {
  const int i = *(const int *)a, j = *(const int *)b;
  const float x = sort_logits_[i], y = sort_logits_[j];
  if (x != y) return x > y ? -1 : 1;
  return (i > j) - (i < j);
}

/* p[0..vocab) = the probability of drawing each token under `s` for finite logits (vocab at
 * most 4096): softmax(logits / T), top-k, top-p on the renormalized top-k (keeping
 * `top_p_extra` tokens past the shortest run reaching TOP_P: the negative control's wrong
 * sampler), min-p, renormalized. Computed by sorting, as transformers' warpers do, not as
 * the op does. Returns how many tokens have p > 0. */
static inline int expected_distribution(const float *logits, int vocab, const sample_row *s,
                                        int top_p_extra, double *p) {
  enum { MAX_VOCAB = 4096 };
  int order[MAX_VOCAB];
  long double w[MAX_VOCAB];
  if (vocab > MAX_VOCAB) return 0;
  for (int i = 0; i < vocab; ++i) order[i] = i;
  sort_logits_ = logits;
  qsort(order, (size_t)vocab, sizeof order[0], by_rank_);
  const long double max = logits[order[0]];
  for (int i = 0; i < vocab; ++i) w[i] = expl(((long double)logits[i] - max) / s->temperature);
  int kept = vocab;
  if (s->top_k > 0 && s->top_k < vocab) kept = s->top_k;
  if (s->top_p > 0 && s->top_p < 1) {
    long double mass = 0, run = 0;
    for (int j = 0; j < kept; ++j) mass += w[order[j]];
    int n = kept;
    for (int j = 0; j < kept; ++j) {
      run += w[order[j]];
      if (run >= (long double)s->top_p * mass) {
        n = j + 1;
        break;
      }
    }
    n += top_p_extra;
    if (n < kept) kept = n;
  }
  long double total = 0;
  for (int i = 0; i < vocab; ++i) p[i] = 0;
  for (int j = 0; j < kept; ++j) {
    const int i = order[j];
    if (s->min_p > 0 && w[i] < (long double)s->min_p) continue; /* w[i] = p_i / max p */
    p[i] = (double)w[i];
    total += w[i];
  }
  int support = 0;
  for (int i = 0; i < vocab; ++i) {
    p[i] = (double)((long double)p[i] / total);
    support += p[i] > 0;
  }
  return support;
}

/* The regularized upper incomplete gamma function Q(a, x), by its power series for
 * x < a + 1 and its continued fraction (evaluated by the modified Lentz method) otherwise. */
static inline double upper_gamma_q(double a, double x) {
  if (x <= 0) return 1;
  const double log_front = a * log(x) - x - lgamma(a);
  if (x < a + 1) {
    double term = 1 / a, sum = term;
    for (int n = 1; n < 1000 && fabs(term) > 1e-17 * fabs(sum); ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1 - exp(log_front) * sum;
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, f = d;
  for (int n = 1; n < 1000; ++n) {
    const double an = -n * (n - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    f *= delta;
    if (fabs(delta - 1) < 1e-15) break;
  }
  return exp(log_front) * f;
}

/* Pearson's chi-square test of `counts` (draws observed per token) against probabilities p:
 * the p-value, with (tokens of p > 0) - 1 degrees of freedom. A draw of a token of p == 0
 * gives 0: such a sampler is wrong whatever the rest. Every token of p > 0 must be expected
 * at least 5 times (the test's design; *ok is cleared otherwise). */
static inline double chi_square_pvalue(const int64_t *counts, const double *p, int vocab,
                                       int64_t draws, int *ok) {
  double stat = 0;
  int cells = 0;
  for (int i = 0; i < vocab; ++i) {
    if (p[i] == 0) {
      if (counts[i] > 0) return 0;
      continue;
    }
    const double expected = p[i] * (double)draws;
    if (expected < 5) *ok = 0;
    stat += ((double)counts[i] - expected) * ((double)counts[i] - expected) / expected;
    ++cells;
  }
  if (cells < 2) return 1;
  return upper_gamma_q(0.5 * (cells - 1), 0.5 * stat);
}

/* The distributions of the chi-square tests: twelve logits whose id order is not their rank
 * order, and the parameters of each case (every kept token is expected >= 100 times in
 * SAMPLE_DRAWS draws; no top-p or min-p boundary lies within 1% of a token's probability). */
static const float kSampleLogits[] = {0.7f,  -1.0f, 2.0f,  0.1f, -3.0f, 1.2f,
                                      -0.3f, 1.5f,  -2.0f, 0.5f, 1.0f,  -0.5f};
enum { SAMPLE_VOCAB = 12, SAMPLE_DRAWS = 100000 };
static const struct {
  const char *name;
  sample_row row;
} kSampleCases[] = {
    {"temperature 0.8", {.temperature = 0.8f, .seed = 1}},
    {"top_k 5", {.temperature = 1, .top_k = 5, .seed = 2}},
    {"top_p 0.7", {.temperature = 1.2f, .top_p = 0.7f, .seed = 3}},
    {"min_p 0.1", {.temperature = 0.9f, .min_p = 0.1f, .seed = 4}},
    {"top_k 8, top_p 0.85 (binds), min_p 0.05",
     {.temperature = 1.5f, .top_k = 8, .top_p = 0.85f, .min_p = 0.05f, .seed = 5}},
    {"top_k 8, top_p 0.9, min_p 0.3 (binds)",
     {.temperature = 1.5f, .top_k = 8, .top_p = 0.9f, .min_p = 0.3f, .seed = 6}},
    {"top_k 4 (binds), top_p 0.95, min_p 0.05",
     {.temperature = 2, .top_k = 4, .top_p = 0.95f, .min_p = 0.05f, .seed = 7}},
};
/* The indices in kSampleCases of cases where top-p decides the kept set. */
static const size_t kSampleTopPCases[] = {2, 4};

/* The token an inverse CDF in id order over p gives for the uniform of (seed, OUT_INDEX i)
 * (kernels/sample.h): the draw of a sampler written from the distribution alone. */
static inline int inverse_cdf(const double *p, int vocab, uint64_t seed, int32_t i) {
  const double u = (double)recap__sample_u53(seed, i) * 0x1p-53;
  double run = 0;
  int last = 0;
  for (int t = 0; t < vocab; ++t) {
    if (p[t] == 0) continue;
    run += p[t];
    last = t;
    if (run > u) return t;
  }
  return last;
}

#endif /* RECAP_TESTS_SAMPLE_UTIL_H */
