/*
 * host/sample.c: host reference of argmax and sample (semantics: kernels/cuda_ops.h; the
 * ranking and the draw: kernels/sample.h).
 *
 * A row is walked several times instead of being copied or sorted, so nothing is allocated at
 * run time whatever the vocabulary: one pass finds the top-ranked token; the top-k and top-p
 * thresholds come from radix selection over rank keys, a histogram of at most 2048 bins per
 * digit on the stack, each pass counting only the tokens whose higher digits match those
 * chosen so far; the draw is one pass in index order. Weights and their sums are double.
 */
#include "kernels/sample.h"

#include <math.h>
#include <string.h>

#include "kernels/host/host_ops.h"
#include "kernels/infer.h"
#include "runtime/half.h"

/* One row of logits. */
typedef struct {
  const void *data;
  recap_dtype dtype;
  int64_t offset; /* element offset of the row's first logit */
  int64_t stride; /* elements between consecutive logits */
  int64_t vocab;
} row_view;

static row_view row_of(const recap_tensor *x, int64_t row) {
  return (row_view){.data = x->data,
                    .dtype = x->dtype,
                    .offset = row * x->strides[0],
                    .stride = x->strides[1],
                    .vocab = x->shape[1]};
}

static float logit(const row_view *r, int64_t i) {
  return recap__load_f32(r->data, r->dtype, r->offset + i * r->stride);
}

static uint64_t rank_of(const row_view *r, int64_t i, float x) {
  return recap__sample_rank(recap__sample_order_key(x), i, r->vocab);
}

static uint64_t top_rank(const row_view *r) {
  uint64_t best = rank_of(r, 0, logit(r, 0));
  for (int64_t i = 1; i < r->vocab; ++i) {
    uint64_t c = rank_of(r, i, logit(r, i));
    if (c > best) best = c;
  }
  return best;
}

/* A token's weight exp((x - max) / temperature), 1 for the largest logit itself (so +inf
 * logits, and every logit of an all -inf row, weigh 1 rather than NaN). */
typedef struct {
  double max, temperature;
} tempered;

static double weight(const tempered *t, float x) {
  return (double)x == t->max ? 1.0 : exp(((double)x - t->max) / t->temperature);
}

/* Radix selection: the largest rank key c such that the tokens ranked at or above both c and
 * `floor` weigh at least `target`, each token weighing 1 (t NULL: top-k) or its tempered
 * weight (top-p). Returns a threshold: the tokens whose rank key is >= it are in, the others
 * out. When every token of a digit's chosen bin is in (it holds one token, or exactly the
 * count still wanted), the walk stops there and the threshold is the bin's lowest key. */
static uint64_t select_rank(const row_view *r, const tempered *t, uint64_t floor, double target) {
  enum { BINS = 1 << RECAP__SAMPLE_DIGIT_BITS };
  int shift[RECAP__SAMPLE_MAX_DIGITS], width[RECAP__SAMPLE_MAX_DIGITS];
  const int digits = recap__sample_digits(r->vocab, shift, width);
  uint64_t prefix = 0, mask = 0;
  double above = 0; /* weight of the tokens ranked above every key with this prefix */
  for (int d = 0; d < digits; ++d) {
    const int bins = 1 << width[d];
    double w[BINS];
    int64_t n[BINS];
    memset(w, 0, sizeof w);
    memset(n, 0, sizeof n);
    for (int64_t i = 0; i < r->vocab; ++i) {
      const float x = logit(r, i);
      const uint64_t c = rank_of(r, i, x);
      if (c < floor || (c & mask) != prefix) continue;
      const int b = (int)((c >> shift[d]) & (uint64_t)(bins - 1));
      n[b]++;
      w[b] += t ? weight(t, x) : 1.0;
    }
    /* The tokens matching the prefix exist (the bin chosen last held some), so a bin is
     * chosen. Summed in another order, a bin's sub-bins can fall a hair short of the target
     * the bin itself reached: then the crossing is the bin's last token, and every token of
     * the lowest non-empty sub-bin is in. */
    int chosen = 0;
    bool crossed = false;
    for (int b = bins - 1; b >= 0; --b) {
      if (n[b] == 0) continue;
      chosen = b;
      if (above + w[b] >= target) {
        crossed = true;
        break;
      }
      above += w[b];
    }
    prefix |= (uint64_t)chosen << shift[d];
    mask |= (uint64_t)(bins - 1) << shift[d];
    if (!crossed || n[chosen] == 1 || (!t && above + w[chosen] == target)) break;
  }
  return prefix;
}

/* The token a sampling row draws (not greedy, no NaN; `max` is the largest logit). */
static int64_t draw(const row_view *r, const recap__sample_params *p, float max) {
  const int64_t vocab = r->vocab;
  const tempered t = {max, p->temperature};
  uint64_t floor = 0; /* rank keys below it are out (top-k, then top-p) */
  if (p->top_k > 0 && p->top_k < vocab) floor = select_rank(r, NULL, 0, (double)p->top_k);
  if (p->top_p > 0 && p->top_p < 1) {
    double kept = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const float x = logit(r, i);
      if (rank_of(r, i, x) >= floor) kept += weight(&t, x);
    }
    const uint64_t top_p_floor = select_rank(r, &t, floor, (double)p->top_p * kept);
    if (top_p_floor > floor) floor = top_p_floor;
  }
  /* min-p: p_i >= MIN_P x max p  <=>  x_i >= max + T ln(MIN_P). */
  const double min_logit =
      p->min_p > 0 ? (double)max + (double)p->temperature * log((double)p->min_p) : -INFINITY;

  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float x = logit(r, i);
    if (rank_of(r, i, x) >= floor && (double)x >= min_logit) total += weight(&t, x);
  }
  const double goal = (double)recap__sample_u53(p->seed, p->out_index) * 0x1p-53 * total;
  /* The running sum ends at `total` > goal; should u x total round up to total itself, the
   * last kept token of positive weight is the one. */
  double run = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float x = logit(r, i);
    if (rank_of(r, i, x) < floor || !((double)x >= min_logit)) continue;
    const double w = weight(&t, x);
    if (w == 0) continue;
    run += w;
    last = i;
    if (run > goal) return i;
  }
  return last;
}

/* log softmax of the raw logits (temperature 1) at token `choice`. */
static double raw_logprob(const row_view *r, float max, int64_t choice) {
  const tempered raw = {max, 1.0};
  double sum = 0;
  for (int64_t i = 0; i < r->vocab; ++i) sum += weight(&raw, logit(r, i));
  const float x = logit(r, choice);
  return ((double)x == (double)max ? 0.0 : (double)x - max) - log(sum);
}

recap_status recap__host_argmax(const recap__op_call *call) {
  RECAP_TRY(recap__host_call_state_check(call));
  const recap_tensor *x = &call->inputs[0];
  int32_t *tokens = call->outputs[0].data;
  for (int64_t row = 0; row < x->shape[0]; ++row) {
    const row_view r = row_of(x, row);
    tokens[row] = (int32_t)recap__sample_rank_index(top_rank(&r), r.vocab);
  }
  return RECAP_OK;
}

static recap__sample_params params_of(const recap_tensor *seqs, int64_t row) {
  return recap__sample_params_read((const int32_t *)seqs->data + row * seqs->strides[0]);
}

recap_status recap__host_sample(const recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *seqs = &call->inputs[1];
  int32_t *tokens = call->outputs[0].data;
  float *logprobs = call->num_outputs > 1 ? call->outputs[1].data : NULL;
  const int64_t rows = x->shape[0];
  RECAP_TRY(recap__host_call_state_check(call));
  /* Every used row is checked before any is written: a fault leaves the outputs alone. */
  for (int64_t row = 0; row < rows; ++row) {
    const recap__sample_params p = params_of(seqs, row);
    const char *why = p.q_len != 0 ? recap__sample_params_error(&p) : NULL;
    if (why)
      return RECAP_OP_FAIL(call,
                           "row %lld of input 'seqs': %s (Q_LEN %d, OUT_INDEX %d, TOP_K %d, "
                           "TEMPERATURE %g, TOP_P %g, MIN_P %g)",
                           (long long)row, why, p.q_len, p.out_index, p.top_k,
                           (double)p.temperature, (double)p.top_p, (double)p.min_p);
  }
  for (int64_t row = 0; row < rows; ++row) {
    const recap__sample_params p = params_of(seqs, row);
    int64_t choice = -1;
    double logprob = 0;
    if (p.q_len != 0) {
      const row_view r = row_of(x, row);
      const uint64_t top = top_rank(&r);
      const uint32_t top_key = (uint32_t)(top >> 32);
      choice = recap__sample_rank_index(top, r.vocab);
      if (top_key == RECAP__SAMPLE_NAN_KEY) {
        logprob = NAN;
      } else {
        const float max = recap__sample_order_value(top_key);
        if (!recap__sample_is_greedy(&p)) choice = draw(&r, &p, max);
        logprob = raw_logprob(&r, max, choice);
      }
    }
    tokens[row] = (int32_t)choice;
    if (logprobs) logprobs[row] = (float)logprob;
  }
  return RECAP_OK;
}
