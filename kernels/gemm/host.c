/*
 * host.c: the host GEMM behind matmul and linear (the reference the CUDA path is tested
 * against, and what host pipelines run).
 *
 * A cache-blocked loop in the GotoBLAS shape: for each block of NC output columns and MC rows,
 * panels of A (MC x KC) and B (KC x NC) are converted to f32 and packed so that a 4 x 16
 * register-tile kernel streams through them, accumulating in f32 across all of K before one
 * epilogue (alpha, beta * c, bias, activation, residual, rounding to the output dtype) per
 * element.
 *
 * Why not OpenBLAS (measured on this 2-core build machine, f32, one thread): cblas_sgemm was
 * 13 ms for [8 x 4096] x [4096 x 4096] and 2.3 ms for 512^3, this loop 24 ms and 6 ms at -O2.
 * But Debian's static libopenblas.a is built for every CPU (DYNAMIC_ARCH) and adds ~25 MB to
 * each statically linked binary, which the staged GPU test binaries cannot afford, and it
 * would only serve f32 (f16/bf16 still need conversion). An 8-layer 4096-wide MLP step at
 * batch 8 takes ~0.2 s here, well within what the host pipelines need.
 *
 * The micro-kernel is compiled twice (x86-64-v3 with AVX2/FMA, and the baseline) and picked
 * at load time, since staged binaries must run on any x86-64 machine.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/infer.h"
#include "runtime/error.h"
#include "runtime/half.h"

enum {
  MR = 4,   /* micro-tile rows */
  NR = 16,  /* micro-tile columns: two 8-float vectors */
  KC = 256, /* depth of a packed panel: a 4 x 256 A sliver stays in L1 */
  MC = 128, /* rows per block: the packed A block (128 KiB) stays in L2 */
  NC = 512, /* columns per block: the packed B panel is 512 KiB */
};

typedef float vec8 __attribute__((vector_size(32)));

static inline float load_elem(const void *base, recap_dtype dtype, int64_t index) {
  return recap__load_f32(base, dtype, index);
}

/* acc[MR][NR] (row stride ldc) += a_panel[kc][MR] * b_panel[kc][NR]. Loads and stores go
 * through memcpy so no alignment is assumed. The AVX2 clone is chosen by an ifunc resolver
 * that runs during relocation, before ThreadSanitizer's runtime is up: under TSan it would
 * crash every binary at start, so TSan builds use the portable version. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void
micro_kernel(int kc, const float *restrict ap, const float *restrict bp, float *restrict acc,
             int ldc) {
  vec8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  for (int p = 0; p < kc; ++p) {
    vec8 b0, b1;
    memcpy(&b0, bp, sizeof b0);
    memcpy(&b1, bp + 8, sizeof b1);
    c00 += ap[0] * b0;
    c01 += ap[0] * b1;
    c10 += ap[1] * b0;
    c11 += ap[1] * b1;
    c20 += ap[2] * b0;
    c21 += ap[2] * b1;
    c30 += ap[3] * b0;
    c31 += ap[3] * b1;
    ap += MR;
    bp += NR;
  }
  const vec8 tiles[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2; ++h) {
      vec8 t;
      float *dst = acc + (size_t)r * (size_t)ldc + 8 * h;
      memcpy(&t, dst, sizeof t);
      t += tiles[r][h];
      memcpy(dst, &t, sizeof t);
    }
  }
}

/* Packs rows [r0, r0 + rows) x depth [p0, p0 + kc) of a matrix X(r, p) = x[r * rs + p * ps]
 * into slivers of `width` rows: sliver s holds kc groups of `width` floats. Rows past the
 * end are zero, so edge tiles need no special kernel. The loop walks the unit-stride index
 * innermost so reads stay sequential whichever way the operand is stored, and each dtype
 * gets its own loop (the conversion inlined) because packing is most of the work when M is
 * small. */
#define PACK_LOOPS(T, CONVERT)                                                       \
  do {                                                                               \
    const T *src = (const T *)x;                                                     \
    for (int s = 0; s < padded; s += width) {                                        \
      float *sliver = dst + (size_t)s * (size_t)kc;                                  \
      if (ps == 1 || rs != 1) {                                                      \
        for (int r = 0; r < width; ++r) {                                            \
          if (s + r >= rows) {                                                       \
            for (int p = 0; p < kc; ++p) sliver[p * width + r] = 0.0f;               \
            continue;                                                                \
          }                                                                          \
          const T *row = src + (r0 + s + r) * rs + p0 * ps;                          \
          for (int p = 0; p < kc; ++p) sliver[p * width + r] = CONVERT(row[p * ps]); \
        }                                                                            \
      } else {                                                                       \
        for (int p = 0; p < kc; ++p) {                                               \
          const T *col = src + (p0 + p) * ps + r0 + s;                               \
          for (int r = 0; r < width; ++r)                                            \
            sliver[p * width + r] = s + r < rows ? CONVERT(col[r]) : 0.0f;           \
        }                                                                            \
      }                                                                              \
    }                                                                                \
  } while (0)

#define PACK_AS_IS(v) (v)

static void pack(const void *x, recap_dtype dtype, int64_t rs, int64_t ps, int64_t r0, int rows,
                 int64_t p0, int kc, int width, float *dst) {
  const int padded = (rows + width - 1) / width * width;
  switch (dtype) {
    case RECAP_DTYPE_F16:
      PACK_LOOPS(uint16_t, recap__f16_to_f32);
      break;
    case RECAP_DTYPE_BF16:
      PACK_LOOPS(uint16_t, recap__bf16_to_f32);
      break;
    default:
      PACK_LOOPS(float, PACK_AS_IS);
      break;
  }
}

typedef struct {
  float *a_block; /* MC x KC */
  float *b_panel; /* KC x NC */
  float *acc;     /* MC x NC */
} scratch;

/* One matrix product of the plan: a, b, c, res (the residual), out already offset to the
 * batch entry. */
static void gemm_2d(const recap__gemm_plan *p, const void *a, const void *b, const void *c,
                    const void *res, void *out, scratch *s) {
  const recap_dtype dt = p->dtype;
  for (int64_t j0 = 0; j0 < p->n; j0 += NC) {
    const int nc = (int)(p->n - j0 < NC ? p->n - j0 : NC);
    const int ncp = (nc + NR - 1) / NR * NR;
    for (int64_t i0 = 0; i0 < p->m; i0 += MC) {
      const int mc = (int)(p->m - i0 < MC ? p->m - i0 : MC);
      const int mcp = (mc + MR - 1) / MR * MR;
      memset(s->acc, 0, sizeof(float) * (size_t)mcp * (size_t)ncp);
      for (int64_t p0 = 0; p0 < p->k; p0 += KC) {
        const int kc = (int)(p->k - p0 < KC ? p->k - p0 : KC);
        /* B(p, j) as X(j, p): rows are output columns. */
        pack(b, dt, p->b_cs, p->b_rs, j0, nc, p0, kc, NR, s->b_panel);
        pack(a, dt, p->a_rs, p->a_cs, i0, mc, p0, kc, MR, s->a_block);
        for (int jr = 0; jr < ncp; jr += NR)
          for (int ir = 0; ir < mcp; ir += MR)
            micro_kernel(kc, s->a_block + (size_t)ir * (size_t)kc,
                         s->b_panel + (size_t)jr * (size_t)kc, s->acc + (size_t)ir * ncp + jr, ncp);
      }
      for (int i = 0; i < mc; ++i) {
        const int64_t row = (i0 + i) * p->n;
        const float *acc = s->acc + (size_t)i * (size_t)ncp;
        for (int j = 0; j < nc; ++j) {
          const int64_t idx = row + j0 + j;
          float v = p->alpha * acc[j];
          if (c) v += p->beta * load_elem(c, dt, idx);
          if (p->bias) v += load_elem(p->bias, dt, j0 + j);
          v = recap__gemm_activate(p->act, v);
          if (res) v += load_elem(res, dt, idx);
          recap__store_f32(out, dt, idx, v);
        }
      }
    }
  }
}

void recap__gemm_prologue_host(const recap__gemm_plan *p, void *dst) {
  const recap_dtype dt = p->dtype;
  for (int64_t i = 0; i < p->m; ++i) {
    const int64_t row = i * p->a_rs;
    if (p->prologue == RECAP__GEMM_PROLOGUE_RMS_NORM) {
      /* kernels/host/reduce.c's rmsnorm, element for element. */
      double sq = 0;
      for (int64_t j = 0; j < p->k; ++j) {
        const double v = load_elem(p->a, dt, row + j);
        sq += v * v;
      }
      const double inv = 1.0 / sqrt(sq / (double)p->k + p->eps);
      for (int64_t j = 0; j < p->k; ++j) {
        const double v = load_elem(p->a, dt, row + j) * inv * load_elem(p->norm_weight, dt, j);
        recap__store_f32(dst, dt, i * p->k + j, (float)v);
      }
    } else {
      /* The expression act(gate) * up in f32, as the expr op evaluates it. */
      for (int64_t j = 0; j < p->k; ++j) {
        const float g = load_elem(p->a, dt, row + j),
                    u = load_elem(p->a, dt, row + p->up_offset + j);
        recap__store_f32(dst, dt, i * p->k + j, recap__gemm_activate(p->glu, g) * u);
      }
    }
  }
}

void recap__gemm_gated_host(const recap__gemm_plan *p, const void *product, void *out) {
  const recap_dtype dt = p->dtype;
  const int64_t half = p->n / 2;
  for (int64_t i = 0; i < p->m; ++i)
    for (int64_t j = 0; j < half; ++j) {
      /* The expression act(gate) * up in f32, as the expr op evaluates it. */
      const float g = load_elem(product, dt, i * p->n + j),
                  u = load_elem(product, dt, i * p->n + half + j);
      recap__store_f32(out, dt, i * half + j, recap__gemm_activate(p->gated, g) * u);
    }
}

recap_status recap__gemm_run_host(const recap__op_call *call) {
  recap__gemm_plan p;
  RECAP_TRY(recap__gemm_plan_make(call, &p));
  bool bound = p.a && p.b && p.out;
  for (int i = 2; i < call->num_inputs; ++i) bound = bound && call->inputs[i].data;
  if (!bound) return RECAP_OP_FAIL(call, "tensors are not bound to memory");
  void *prologue = NULL;
  if (p.prologue != RECAP__GEMM_PROLOGUE_NONE) {
    /* P(x) first, then the plain product from it. */
    prologue = malloc((size_t)(p.m * p.k) * recap_dtype_size(p.dtype) + 1);
    if (!prologue)
      return recap__error_context(
          RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for the GEMM's prologue"),
          "op '%s': ", call->def->name);
    recap__gemm_prologue_host(&p, prologue);
    p.a = prologue;
    p.a_rs = p.k;
    p.a_cs = 1;
    p.prologue = RECAP__GEMM_PROLOGUE_NONE;
  }
  /* A gated output: the product [m, 2F] first (each element rounded to the dtype, as the
   * unfolded linear wrote it), then its halves paired into out. */
  void *product = NULL, *out = p.out;
  if (p.gated != RECAP_ACT_NONE) {
    product = malloc((size_t)(p.m * p.n) * recap_dtype_size(p.dtype) + 1);
    if (!product) {
      free(prologue);
      return recap__error_context(
          RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for the GEMM's gated product"),
          "op '%s': ", call->def->name);
    }
    p.out = product;
  }
  scratch s = {
      .a_block = malloc(sizeof(float) * MC * KC),
      .b_panel = malloc(sizeof(float) * KC * NC),
      .acc = malloc(sizeof(float) * MC * NC),
  };
  recap_status st = RECAP_OK;
  if (!s.a_block || !s.b_panel || !s.acc) {
    st = recap__error_context(
        RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for the GEMM's packing buffers"),
        "op '%s': ", call->def->name);
    goto done;
  }
  const size_t es = recap_dtype_size(p.dtype);
  for (int64_t ob = 0; ob < p.batch[0]; ++ob) {
    for (int64_t ib = 0; ib < p.batch[1]; ++ib) {
      const int64_t ao = ob * p.a_bs[0] + ib * p.a_bs[1];
      const int64_t bo = ob * p.b_bs[0] + ib * p.b_bs[1];
      const int64_t oo = ob * p.out_bs[0] + ib * p.out_bs[1];
      gemm_2d(&p, (const char *)p.a + ao * (int64_t)es, (const char *)p.b + bo * (int64_t)es,
              p.c ? (const char *)p.c + oo * (int64_t)es : NULL,
              p.residual ? (const char *)p.residual + oo * (int64_t)es : NULL,
              (char *)p.out + oo * (int64_t)es, &s);
    }
  }
  if (product) recap__gemm_gated_host(&p, product, out);
done:
  free(product);
  free(prologue);
  free(s.acc);
  free(s.b_panel);
  free(s.a_block);
  return st;
}
