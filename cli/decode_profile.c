/* decode_profile.c: the decode step's device time by op kind and by op name
 * (decode_profile.h). */
#include "cli/decode_profile.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PROFILE_NAMES_SHOWN = 16 };

static int by_time_desc(const void *a, const void *b) {
  const cli_kind_time *x = a, *y = b;
  return (x->ms < y->ms) - (x->ms > y->ms);
}

static int by_name_time_desc(const void *a, const void *b) {
  const cli_name_time *x = a, *y = b;
  return (x->ms < y->ms) - (x->ms > y->ms);
}

/* `name` with every all-digit component ("layers.3.qkv": the 3) written as '*' and the op
 * indices of unnamed ops ("rmsnorm#11") left out: they differ between TP 1's spec and a rank's,
 * which has the collectives in between. */
static void fold_layers(const char *name, char *out, size_t size) {
  size_t n = 0;
  for (const char *p = name; *p && n + 1 < size;) {
    const char *q = p;
    while (*q >= '0' && *q <= '9') q++;
    bool component = q > p && (p == name || p[-1] == '.') && (*q == '.' || *q == '\0');
    bool index =
        q > p && p > name && p[-1] == '#' && (*q == '.' || *q == ']' || *q == ',' || *q == '\0');
    if (index && n > 0) {
      n--; /* the '#' */
      p = q;
    } else if (component) {
      out[n++] = '*';
      p = q;
    } else {
      out[n++] = *p++;
    }
  }
  out[n] = '\0';
}

/* Adds one launch of op `name` (of kind `op`) taking `ms` to its folded name. */
static void add_named_launch(cli_step_profile *sp, const char *name, const char *op, double ms) {
  char folded[sizeof sp->names[0].name];
  fold_layers(name, folded, sizeof folded);
  size_t k = 0;
  while (k < sp->num_names && strcmp(sp->names[k].name, folded) != 0) k++;
  if (k == sp->num_names) {
    sp->names[sp->num_names] = (cli_name_time){.op = op};
    memcpy(sp->names[sp->num_names++].name, folded, sizeof folded);
  }
  sp->names[k].launches++;
  sp->names[k].ms += ms;
}

void cli_step_profile_free(cli_step_profile *sp) {
  free(sp->kinds);
  free(sp->names);
  sp->kinds = NULL;
  sp->names = NULL;
}

/* Adds one launch of `op` taking `ms` to its kind. */
static void add_launch(cli_step_profile *sp, const char *op, double ms) {
  size_t k = 0;
  while (k < sp->num_kinds && strcmp(sp->kinds[k].op, op) != 0) k++;
  if (k == sp->num_kinds) sp->kinds[sp->num_kinds++] = (cli_kind_time){.op = op};
  sp->kinds[k].launches++;
  sp->kinds[k].ms += ms;
}

recap_status cli_step_profile_run(recap_pipeline *eager, const cli_decode_shape *s, int64_t batch,
                                  int64_t context, int64_t need, cli_step_profile *sp) {
  *sp = (cli_step_profile){0};
  recap_pipeline_info info;
  recap_status st = recap_pipeline_info_get(eager, &info);
  if (st != RECAP_OK) return st;
  recap_op_profile *ops = calloc(info.num_ops ? info.num_ops : 1, sizeof *ops);
  sp->kinds = calloc(recap_op_count(), sizeof *sp->kinds);
  sp->names = calloc(info.num_ops ? info.num_ops : 1, sizeof *sp->names);
  if (!ops || !sp->kinds || !sp->names) {
    free(ops);
    cli_step_profile_free(sp);
    return RECAP_STATUS_OUT_OF_MEMORY;
  }
  size_t count = 0;
  st = cli_decode_batch_write(eager, s, batch, context, need);
  if (st == RECAP_OK) st = recap_pipeline_profile(eager, batch, ops, info.num_ops, &count);
  for (size_t o = 0; st == RECAP_OK && o < count; o++) {
    if (ops[o].is_view) continue;
    add_launch(sp, ops[o].op, ops[o].ms);
    add_named_launch(sp, ops[o].name, ops[o].op, ops[o].ms);
    sp->total_ms += ops[o].ms;
    if (strcmp(ops[o].op, "linear") == 0 || strcmp(ops[o].op, "matmul") == 0)
      sp->gemm_ms += ops[o].ms;
  }
  qsort(sp->kinds, sp->num_kinds, sizeof sp->kinds[0], by_time_desc);
  qsort(sp->names, sp->num_names, sizeof sp->names[0], by_name_time_desc);
  free(ops);
  return st;
}

void cli_step_profile_print(const char *prefix, int64_t batch, const cli_step_profile *sp) {
  printf("%s\n%sbatch %" PRId64 ": profiled eager step %.1f us on the device, by op:\n", prefix,
         prefix, batch, sp->total_ms * 1e3);
  printf("%s  %-22s %10s %12s %8s\n", prefix, "op", "launches", "total us", "share");
  for (size_t k = 0; k < sp->num_kinds; k++)
    printf("%s  %-22s %10zu %12.1f %7.1f%%\n", prefix, sp->kinds[k].op, sp->kinds[k].launches,
           sp->kinds[k].ms * 1e3, sp->total_ms > 0 ? 100.0 * sp->kinds[k].ms / sp->total_ms : 0.0);
  printf("%s  by op name (layer numbers folded into *), the %d largest:\n", prefix,
         PROFILE_NAMES_SHOWN);
  for (size_t k = 0; k < sp->num_names && k < PROFILE_NAMES_SHOWN; k++)
    printf("%s  %-34s %-18s %6zu %10.1f %7.1f%%\n", prefix, sp->names[k].name, sp->names[k].op,
           sp->names[k].launches, sp->names[k].ms * 1e3,
           sp->total_ms > 0 ? 100.0 * sp->names[k].ms / sp->total_ms : 0.0);
}

json_t *cli_step_profile_names_json(const cli_step_profile *sp) {
  json_t *names = json_array();
  for (size_t k = 0; names && k < sp->num_names; k++)
    json_array_append_new(
        names, json_pack("{ss ss sI sf}", "name", sp->names[k].name, "op", sp->names[k].op,
                         "launches", (json_int_t)sp->names[k].launches, "ms", sp->names[k].ms));
  return names;
}

json_t *cli_step_profile_kinds_json(const cli_step_profile *sp) {
  json_t *kinds = json_array();
  for (size_t k = 0; kinds && k < sp->num_kinds; k++)
    json_array_append_new(
        kinds, json_pack("{ss sI sf sf}", "op", sp->kinds[k].op, "launches",
                         (json_int_t)sp->kinds[k].launches, "ms", sp->kinds[k].ms, "share",
                         sp->total_ms > 0 ? sp->kinds[k].ms / sp->total_ms : 0.0));
  return kinds;
}

int64_t cli_step_profile_launches(const cli_step_profile *sp, const char *op) {
  for (size_t k = 0; k < sp->num_kinds; k++)
    if (strcmp(sp->kinds[k].op, op) == 0) return (int64_t)sp->kinds[k].launches;
  return 0;
}
