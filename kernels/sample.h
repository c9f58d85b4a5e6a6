/*
 * sample.h: what the host reference (kernels/host/sample.c) and the CUDA kernels
 * (kernels/sample.cu) of argmax and sample share (internal): the order in which a row's tokens
 * are ranked, a row's sampling parameters and their checks, the radix digits both walk, and the
 * row's one random draw. Everything here is a `static inline` function of its arguments,
 * compiled as C11 by the host and as __host__ __device__ by nvcc (as runtime/philox.h), so the
 * two backends rank, check and draw alike:
 *
 *   recap__sample_params p = recap__sample_params_read(seqs_row);
 *   if (p.q_len != 0 && recap__sample_params_error(&p)) ...fault...
 *   uint64_t rank = recap__sample_rank(recap__sample_order_key(logit), index, vocab);
 *   double u = (double)recap__sample_u53(p.seed, p.out_index) * 0x1p-53;
 *
 * Ranking: a token ranks above another when its logit is larger, or equal and its index lower
 * (so every tie, at the top of argmax or at a top-k or top-p boundary, goes to the lowest
 * index). The rank key packs both into 64 bits, larger = ranked higher: the logit's order key
 * in the high word, V - 1 - index in the low word. The order key maps a float's bits so that
 * unsigned order is numeric order, -0 counts as +0, and every NaN maps above +inf: NaN is the
 * largest logit (torch.argmax's rule), and all NaNs tie.
 */
#ifndef RECAP_KERNELS_SAMPLE_H
#define RECAP_KERNELS_SAMPLE_H

#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "include/recap.h"
#include "runtime/philox.h"

#if defined(__CUDACC__)
#define RECAP__SAMPLE_FN __host__ __device__
#else
#define RECAP__SAMPLE_FN
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The order key of a NaN logit: above every number. */
#define RECAP__SAMPLE_NAN_KEY 0xFFFFFFFFu

/* The Philox counter word that sample's draws use (the bytes of "sample"), so that a request
 * whose seed equals the device generator's seed still draws numbers of its own. */
#define RECAP__SAMPLE_PHILOX_OFFSET 0x73616d706c65ull

static inline RECAP__SAMPLE_FN uint32_t recap__sample_order_key(float x) {
  if (x != x) return RECAP__SAMPLE_NAN_KEY;
  if (x == 0.0f) x = 0.0f; /* -0 ties with +0 */
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The logit of an order key (not RECAP__SAMPLE_NAN_KEY). */
static inline RECAP__SAMPLE_FN float recap__sample_order_value(uint32_t key) {
  uint32_t u = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Token `index` of a row of `vocab` tokens with order key `key`. */
static inline RECAP__SAMPLE_FN uint64_t recap__sample_rank(uint32_t key, int64_t index,
                                                           int64_t vocab) {
  return ((uint64_t)key << 32) | (uint64_t)(vocab - 1 - index);
}

/* The token index a rank key names. */
static inline RECAP__SAMPLE_FN int64_t recap__sample_rank_index(uint64_t rank, int64_t vocab) {
  return vocab - 1 - (int64_t)(rank & 0xFFFFFFFFu);
}

/* Radix selection over rank keys walks digits from the high bits down: the order key in three
 * digits of 11, 11 and 10 bits, then the index word's significant bits (those of V - 1) in
 * digits of at most 11 bits. Fills shift[d] and width[d]; returns how many digits. */
enum { RECAP__SAMPLE_DIGIT_BITS = 11, RECAP__SAMPLE_MAX_DIGITS = 6 };

static inline RECAP__SAMPLE_FN int recap__sample_digits(int64_t vocab,
                                                        int shift[RECAP__SAMPLE_MAX_DIGITS],
                                                        int width[RECAP__SAMPLE_MAX_DIGITS]) {
  int n = 0;
  shift[n] = 53, width[n++] = 11;
  shift[n] = 42, width[n++] = 11;
  shift[n] = 32, width[n++] = 10;
  int top = 0;
  while (top < 32 && ((uint64_t)(vocab - 1) >> top) != 0) ++top;
  while (top > 0) {
    int w = top < RECAP__SAMPLE_DIGIT_BITS ? top : RECAP__SAMPLE_DIGIT_BITS;
    top -= w;
    shift[n] = top, width[n++] = w;
  }
  return n;
}

/* One row of `seqs` as sample reads it (include/recap.h, RECAP_SEQ_*). */
typedef struct {
  int32_t q_len, out_index, top_k;
  uint64_t seed;
  float temperature, top_p, min_p;
} recap__sample_params;

static inline RECAP__SAMPLE_FN float recap__sample_f32_of(int32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* `row` points at the row's first column; columns are contiguous. */
static inline RECAP__SAMPLE_FN recap__sample_params recap__sample_params_read(const int32_t *row) {
  recap__sample_params p;
  p.q_len = row[RECAP_SEQ_Q_LEN];
  p.out_index = row[RECAP_SEQ_OUT_INDEX];
  p.top_k = row[RECAP_SEQ_TOP_K];
  p.seed = (uint64_t)(uint32_t)row[RECAP_SEQ_SEED_LO] |
           ((uint64_t)(uint32_t)row[RECAP_SEQ_SEED_HI] << 32);
  p.temperature = recap__sample_f32_of(row[RECAP_SEQ_TEMPERATURE]);
  p.top_p = recap__sample_f32_of(row[RECAP_SEQ_TOP_P]);
  p.min_p = recap__sample_f32_of(row[RECAP_SEQ_MIN_P]);
  return p;
}

/* NULL when a used row's parameters are valid, else which one is not (a static string). Rows
 * with Q_LEN == 0 are unused slots and are never checked. */
static inline RECAP__SAMPLE_FN const char *recap__sample_params_error(
    const recap__sample_params *p) {
  if (p->q_len < 0) return "Q_LEN is negative";
  if (p->out_index < 0) return "OUT_INDEX is negative";
  if (p->top_k < 0) return "TOP_K is negative";
  if (!(p->temperature >= 0.0f && p->temperature <= FLT_MAX))
    return "TEMPERATURE is negative, infinite or NaN";
  if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) return "TOP_P is outside [0, 1] or NaN";
  if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return "MIN_P is outside [0, 1] or NaN";
  return NULL;
}

/* Greedy rows take the top-ranked token: temperature 0, or a top-k of one. */
static inline RECAP__SAMPLE_FN bool recap__sample_is_greedy(const recap__sample_params *p) {
  return p->temperature == 0.0f || p->top_k == 1;
}

/* The row's uniform draw as a 53-bit integer u53 (u = u53 / 2^53 in [0, 1)): Philox4x32-10
 * keyed by the request's seed, counter block OUT_INDEX, counter word
 * RECAP__SAMPLE_PHILOX_OFFSET; the top 32 bits of word 0 then the top 21 of word 1. Nothing
 * about the batch (row, size, other rows) enters, so a request's token is the same in any
 * batch. */
static inline RECAP__SAMPLE_FN uint64_t recap__sample_u53(uint64_t seed, int32_t out_index) {
  recap__philox4x32 w =
      recap__philox_draw(seed, RECAP__SAMPLE_PHILOX_OFFSET, (uint64_t)(uint32_t)out_index);
  return ((uint64_t)w.v[0] << 21) | (w.v[1] >> 11);
}

/* The CUDA kernel's slices of a row. One block per row reads its logits from memory alone (a
 * Llama 3 row of f32 logits took one block 19 us on an H200, a tenth of the copy bandwidth), so
 * a batch of few rows cuts each row into slices of at least RECAP__SAMPLE_SLICE_MIN logits, up
 * to about RECAP__SAMPLE_TARGET_BLOCKS blocks in all: each slice finds its top-ranked token, and
 * the row's last slice to finish takes the best of them and goes on alone over the row, then in
 * the L2. Slices are whole multiples of RECAP__SAMPLE_SLICE_ALIGN logits (16-byte loads).
 * 1: one block per row, no workspace, no call state. */
enum {
  RECAP__SAMPLE_SLICE_MIN = 4096,
  RECAP__SAMPLE_MAX_SLICES = 32,
  RECAP__SAMPLE_TARGET_BLOCKS = 128,
  RECAP__SAMPLE_SLICE_ALIGN = 64
};

static inline int recap__sample_slices(int64_t rows, int64_t vocab) {
  if (rows <= 0 || rows >= RECAP__SAMPLE_TARGET_BLOCKS / 2) return 1;
  int64_t slices = RECAP__SAMPLE_TARGET_BLOCKS / rows;
  if (slices > vocab / RECAP__SAMPLE_SLICE_MIN) slices = vocab / RECAP__SAMPLE_SLICE_MIN;
  if (slices > RECAP__SAMPLE_MAX_SLICES) slices = RECAP__SAMPLE_MAX_SLICES;
  return slices > 1 ? (int)slices : 1;
}

/* Logits per slice of a row of `vocab` cut in `slices`. */
static inline RECAP__SAMPLE_FN int64_t recap__sample_slice_len(int64_t vocab, int slices) {
  const int64_t per = (vocab + slices - 1) / slices;
  return (per + RECAP__SAMPLE_SLICE_ALIGN - 1) / RECAP__SAMPLE_SLICE_ALIGN *
         RECAP__SAMPLE_SLICE_ALIGN;
}

#ifdef __cplusplus
}
#endif

#endif
