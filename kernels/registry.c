/*
 * registry.c: the table of every op definition, lookup by name, and attribute defaults.
 *
 * Each family file (elementwise.c, reduce.c, shape.c, attention.c, paged.c, sample.c, random.c, and the
 * GEMM half's gemm/ops.c) defines its ops as `const recap__op_def recap__op_<name>`; this table
 * is the one place that lists them, in the order `recap ops` prints them.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/op.h"
#include "runtime/error.h"

extern const recap__op_def recap__op_relu, recap__op_gelu, recap__op_gelu_tanh, recap__op_silu,
    recap__op_sigmoid, recap__op_tanh, recap__op_exp, recap__op_neg, recap__op_scale,
    recap__op_cast;
extern const recap__op_def recap__op_add, recap__op_sub, recap__op_mul, recap__op_div;
extern const recap__op_def recap__op_softmax, recap__op_layernorm, recap__op_rmsnorm, recap__op_sum,
    recap__op_mean;
extern const recap__op_def recap__op_reshape, recap__op_permute, recap__op_transpose,
    recap__op_slice, recap__op_split, recap__op_concat, recap__op_copy, recap__op_fill,
    recap__op_embedding, recap__op_rope;
extern const recap__op_def recap__op_kv_append, recap__op_attention;
extern const recap__op_def recap__op_seq_positions, recap__op_seq_last_tokens,
    recap__op_paged_kv_write, recap__op_paged_rope_kv_write, recap__op_paged_attention,
    recap__op_paged_rope_attention,
    recap__op_decode_advance;
extern const recap__op_def recap__op_argmax, recap__op_sample;
extern const recap__op_def recap__op_random_uniform, recap__op_random_normal;
extern const recap__op_def recap__op_matmul, recap__op_linear;
extern const recap__op_def recap__op_all_reduce, recap__op_all_gather, recap__op_reduce_scatter,
    recap__op_broadcast;
extern const recap__op_def recap__op_expr;

static const recap__op_def *const registry[] = {
    &recap__op_matmul,
    &recap__op_linear,

    &recap__op_relu,
    &recap__op_gelu,
    &recap__op_gelu_tanh,
    &recap__op_silu,
    &recap__op_sigmoid,
    &recap__op_tanh,
    &recap__op_exp,
    &recap__op_neg,
    &recap__op_scale,
    &recap__op_cast,

    &recap__op_add,
    &recap__op_sub,
    &recap__op_mul,
    &recap__op_div,
    &recap__op_expr,

    &recap__op_softmax,
    &recap__op_layernorm,
    &recap__op_rmsnorm,
    &recap__op_sum,
    &recap__op_mean,

    &recap__op_reshape,
    &recap__op_permute,
    &recap__op_transpose,
    &recap__op_slice,
    &recap__op_split,
    &recap__op_concat,
    &recap__op_copy,
    &recap__op_fill,
    &recap__op_embedding,
    &recap__op_rope,

    &recap__op_kv_append,
    &recap__op_attention,

    &recap__op_seq_positions,
    &recap__op_seq_last_tokens,
    &recap__op_paged_kv_write,
    &recap__op_paged_rope_kv_write,
    &recap__op_paged_attention,
    &recap__op_paged_rope_attention,
    &recap__op_decode_advance,
    &recap__op_argmax,
    &recap__op_sample,

    &recap__op_random_uniform,
    &recap__op_random_normal,

    &recap__op_all_reduce,
    &recap__op_all_gather,
    &recap__op_reduce_scatter,
    &recap__op_broadcast,
};

enum { REGISTRY_SIZE = sizeof registry / sizeof registry[0] };

const recap__op_def *const *recap__op_list(size_t *count) {
  if (count) *count = REGISTRY_SIZE;
  return registry;
}

/* Levenshtein distance, capped: enough to suggest "softmax" for "sofmax". */
static size_t edit_distance(const char *a, const char *b) {
  enum { CAP = 64 };
  size_t la = strlen(a), lb = strlen(b);
  if (la >= CAP || lb >= CAP) return CAP;
  size_t row[CAP + 1];
  for (size_t j = 0; j <= lb; ++j) row[j] = j;
  for (size_t i = 1; i <= la; ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; ++j) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

const recap__op_def *recap__op_find(const char *name) {
  if (!name) {
    RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "no op name given");
    return NULL;
  }
  for (size_t i = 0; i < REGISTRY_SIZE; ++i)
    if (strcmp(registry[i]->name, name) == 0) return registry[i];

  /* Suggest names within a third of the name's length in edits (at least 2), or that
   * contain it or are contained in it ("norm" -> layernorm, rmsnorm). */
  char close[256] = "";
  size_t used = 0;
  size_t limit = strlen(name) / 3 > 2 ? strlen(name) / 3 : 2;
  for (size_t i = 0; i < REGISTRY_SIZE; ++i) {
    const char *candidate = registry[i]->name;
    bool near = edit_distance(name, candidate) <= limit ||
                (name[0] && (strstr(candidate, name) || strstr(name, candidate)));
    if (!near) continue;
    int w = snprintf(close + used, sizeof close - used, "%s'%s'", used ? ", " : "", candidate);
    if (w < 0 || (size_t)w >= sizeof close - used) break;
    used += (size_t)w;
  }
  if (used)
    RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
               "unknown op '%s' (did you mean %s? `recap ops` "
               "lists all)",
               name, close);
  else
    RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown op '%s' (`recap ops` lists all)", name);
  return NULL;
}

void recap__op_attrs_set_defaults(const recap__op_def *def, recap__op_attrs *attrs) {
  if (!def || !attrs || !def->attrs) return;
  for (const recap__attr_def *a = def->attrs; a->name; ++a) {
    if (a->required) continue;
    char *field = (char *)attrs + a->offset;
    switch (a->kind) {
      case RECAP_ATTR_FLOAT:
        *(double *)field = a->default_value;
        break;
      case RECAP_ATTR_INT:
        *(int64_t *)field = (int64_t)a->default_value;
        break;
      case RECAP_ATTR_BOOL:
        *(int *)field = a->default_value != 0;
        break;
      case RECAP_ATTR_ACTIVATION:
        *(recap__activation *)field = (recap__activation)a->default_value;
        break;
      case RECAP_ATTR_DTYPE:
        *(recap_dtype *)field = (recap_dtype)a->default_value;
        break;
      case RECAP_ATTR_INT_LIST:
      case RECAP_ATTR_EXPR:
        break;
    }
  }
}
