/* bucket_plan.c: the plan the engine uses for a spec, rebuilt for `recap plan` and `recap dot`.
 * The engine plans every bucket's IR together (a view or an in-place write is taken only where
 * it works in every bucket), so showing one bucket's own plan could show a view the engine
 * does not take. */
#include <stdlib.h>

#include "engine/cli/cli.h"
#include "engine/fuse.h"
#include "runtime/error.h"

void cli_bucket_plan_free(cli_bucket_plan *bp) {
  recap__plan_destroy(bp->plan);
  for (size_t b = 0; b < bp->count; b++) recap__ir_destroy(bp->irs[b]);
  free(bp->irs);
  *bp = (cli_bucket_plan){0};
}

recap_status cli_bucket_plan_build(recap__spec *spec, bool fuse, cli_bucket_plan *out) {
  *out = (cli_bucket_plan){0};
  size_t n = recap__spec_num_buckets(spec);
  out->irs = calloc(n, sizeof *out->irs);
  if (!out->irs) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu IRs", n);
  recap_status st = RECAP_OK;
  recap__diag diag = {0};
  for (; out->count < n; out->count++) {
    st = recap__ir_build(spec, out->count, &out->irs[out->count], &diag);
    if (st == RECAP_STATUS_SPEC_ERROR) cli_print_diag(spec->file, &diag);
    if (st != RECAP_OK) goto fail;
    /* The same groups in every bucket, as the engine fuses them. */
    if (fuse) RECAP_TRY_GOTO(st, recap__fuse(out->irs[out->count]), fail_built);
  }
  RECAP_TRY_GOTO(st, recap__plan_build_buckets(out->irs, n, NULL, &out->plan), fail);
  recap__diag_free(&diag);
  return RECAP_OK;
fail_built:
  out->count++;
fail:
  recap__diag_free(&diag);
  cli_bucket_plan_free(out);
  return st;
}
